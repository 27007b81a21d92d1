"""The static integration `executor`, whose `coreTools` govern the executor itself.

Paths are `tools.executor.coreTools.<name>`. This capability provides `integrations.list`; the policy
tools (`policies.list|create|update|remove`, gated by approval) arrive with the policies capability.
"""

from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.tools.catalog import Catalog, Integration, StaticTool

INTEGRATION_LIST_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "integrations": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "slug": {"type": "string"},
                    "description": {"type": "string"},
                    "kind": {"type": "string"},
                    "canRemove": {"type": "boolean"},
                    "canRefresh": {"type": "boolean"},
                },
                "required": ["slug", "description", "kind", "canRemove", "canRefresh"],
            },
        }
    },
    "required": ["integrations"],
}


def build_catalog() -> Catalog:
    """The catalog every session's code sees: today, the executor's own core tools."""
    integrations: list[Integration] = []

    async def list_integrations(_: Any) -> JsonObject:
        return {
            "integrations": [
                {
                    "slug": integration.slug,
                    "description": integration.description,
                    "kind": integration.kind,
                    "canRemove": integration.can_remove,
                    "canRefresh": integration.can_refresh,
                }
                for integration in integrations
            ]
        }

    integrations.append(
        Integration(
            slug="executor",
            name="Executor",
            description="The executor's own tools: its integrations and, with policies, its governance.",
            kind="static",
            tools=(
                StaticTool(
                    id="executor.coreTools.integrations.list",
                    integration="executor",
                    name="integrations.list",
                    description="List the integrations available to this executor.",
                    input_schema={"type": "object", "properties": {}},
                    output_schema=INTEGRATION_LIST_SCHEMA,
                    handler=list_integrations,
                ),
            ),
        )
    )
    return Catalog(integrations)
