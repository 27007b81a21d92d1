"""The MCP surface every entry point shares beside the generic add and configure (HTTP `/api/mcp/*`,
`executor.mcp.*` core tools, the CLI): show and remove MCP servers, and probe an endpoint before adding one.

Adding never dials (a dead endpoint registers fine); each connection lists the server's tools when it is
made. Probing dials without any connection's credential, through `Outbound`'s guard, bounded in time.
"""

from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.access import org_of
from executor_mcp.integrations.mcp.kind import McpKind
from executor_mcp.integrations.mcp.registration import connection_config
from executor_mcp.integrations.openapi.auth import describe_methods
from executor_mcp.integrations.service import Integrations
from executor_mcp.integrations.validation import check_known
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import MCP, IntegrationRecord
from executor_mcp.storage.records import Owner as Principal

PROBE_FIELDS = frozenset({"endpoint", "headers", "remoteTransport"})


class McpServers:
    def __init__(self, integrations: Integrations) -> None:
        self._integrations = integrations
        kind = integrations.kind_named(MCP)
        assert isinstance(kind, McpKind), "the MCP kind is assembled with the integrations service"
        self._kind = kind

    async def get(self, principal: Principal, slug: str) -> IntegrationRecord | None:
        record = await self._integrations.integration(principal, slug)
        return record if record.kind == MCP else None

    async def remove(self, principal: Principal, slug: str) -> None:
        await self._integrations.integration(principal, slug, MCP)
        await self._integrations.remove(principal, slug)

    async def probe(self, principal: Principal, body: Any) -> JsonObject:
        org_of(principal)
        if not isinstance(body, dict):
            raise InvalidInput("Expected a JSON object")
        check_known(body, PROBE_FIELDS)
        config, _ = connection_config(body, stdio_allowed=False)
        return await self._kind.probe(config["endpoint"], config.get("headers", {}), config["remoteTransport"])


def server_json(record: IntegrationRecord, *, admin: bool) -> JsonObject:
    """An MCP server as the API shows it. Static header and env values are shown to admins only (they may be
    what the operator keeps out of members' sight); members see their names."""
    config = dict(record.config)
    if not admin:
        for field in ("headers", "queryParams", "env"):
            if isinstance(config.get(field), dict):
                config[field] = {name: "***" for name in config[field]}
    return {
        "slug": record.slug,
        "name": record.name,
        "description": record.description,
        "kind": record.kind,
        "canRemove": True,
        "canRefresh": record.can_refresh,
        "config": config,
        "authenticationTemplate": describe_methods(record.auth_methods),
    }
