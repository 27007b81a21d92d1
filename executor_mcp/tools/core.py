"""The static integration `executor`, whose `coreTools` govern the executor itself.

Paths are `tools.executor.coreTools.<name>`: `integrations.list`, and `policies.list|create|update|
remove` (and, with the catalog's integrations, `connected.py`'s and `oauth.py`'s). The mutating policy tools
carry `requiresApproval`: they pause for a human even when no policy asks for it, so code injected into an
agent cannot quietly write `approve *`.

They act as the session's owner with the org-admin role of the bearer that opened the session: a
non-admin's change of an org rule fails (`policy_forbidden`) before any approval is asked.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.handoff import HandoffBook, Handoffs
from executor_mcp.integrations.service import Integrations
from executor_mcp.policies.model import RuleOwner
from executor_mcp.policies.service import (
    PolicyError,
    PolicyForbidden,
    PolicyNotFound,
    describe,
    may_change,
    parse_change,
    parse_new,
    parse_owner,
)
from executor_mcp.records.integrations import BUILT_IN, BUILT_IN_DESCRIPTION, BUILT_IN_NAME, BUILT_IN_SLUG
from executor_mcp.tools.catalog import Catalog, Integration, StaticTool, core_tool
from executor_mcp.tools.connected import ConnectedTools
from executor_mcp.tools.context import CallContext
from executor_mcp.tools.errors import ToolArgumentsError, ToolFailure
from executor_mcp.tools.oauth import oauth_tools
from executor_mcp.tools.rates import Rates

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


_POLICY = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "owner": {"type": "string", "enum": ["org", "user"]},
        "pattern": {"type": "string"},
        "action": {"type": "string", "enum": ["approve", "require_approval", "block"]},
        "position": {"type": "string"},
    },
    "required": ["id", "owner", "pattern", "action", "position"],
}
_OWNER = {"type": "string", "enum": ["org", "user"]}
_ACTION = {"type": "string", "enum": ["approve", "require_approval", "block"]}


def _arguments(args: Any) -> JsonObject:
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise ToolArgumentsError("Tool arguments did not match the input schema.", ["expected an object"])
    return args


def _checked(check) -> Any:
    try:
        return check()
    except PolicyError as exc:
        raise ToolArgumentsError(str(exc)) from None


def _validate_create(args: Any, context: CallContext) -> None:
    values = _arguments(args)
    _allowed(context, _checked(lambda: parse_new(values))[0])


def _validate_update(args: Any, context: CallContext) -> None:
    values = _arguments(args)
    _require_id(values)
    _allowed(context, _checked(lambda: parse_change(values))[0])


def _validate_remove(args: Any, context: CallContext) -> None:
    values = _arguments(args)
    _require_id(values)
    _allowed(context, _checked(lambda: parse_owner(values.get("owner"))))


def _allowed(context: CallContext, owner: RuleOwner) -> None:
    with _policy_failures():
        may_change(context.principal, owner)


def _require_id(values: JsonObject) -> None:
    if not isinstance(values.get("id"), str):
        raise ToolArgumentsError("Tool arguments did not match the input schema.", ["id: expected a string"])


def _public(policy: JsonObject) -> JsonObject:
    return {key: policy[key] for key in ("id", "owner", "pattern", "action", "position")}


async def _list_policies(_: Any, context: CallContext) -> JsonObject:
    records = await context.policies.list(context.principal)
    return {"policies": [_public(describe(record)) for record in records]}


async def _create_policy(args: Any, context: CallContext) -> JsonObject:
    with _policy_failures():
        record = await context.policies.create(context.principal, *parse_new(_arguments(args)))
    return _public(describe(record))


async def _update_policy(args: Any, context: CallContext) -> JsonObject:
    values = _arguments(args)
    owner, change = parse_change(values)
    with _policy_failures():
        record = await context.policies.update(context.principal, values["id"], owner, **change)
    return _public(describe(record))


async def _remove_policy(args: Any, context: CallContext) -> JsonObject:
    values = _arguments(args)
    with _policy_failures():
        await context.policies.remove(context.principal, values["id"], parse_owner(values.get("owner")))
    return {"removed": True}


@contextmanager
def _policy_failures() -> Iterator[None]:
    try:
        yield
    except PolicyNotFound as exc:
        raise ToolFailure("policy_not_found", str(exc)) from None
    except PolicyForbidden as exc:
        raise ToolFailure("policy_forbidden", str(exc)) from None
    except PolicyError as exc:
        raise ToolFailure("policy_refused", str(exc)) from None


POLICY_TOOLS = (
    core_tool(
        "policies",
        "list",
        "List the tool policies that apply to you, in evaluation order.",
        {},
        [],
        {"type": "object", "properties": {"policies": {"type": "array", "items": _POLICY}}, "required": ["policies"]},
        _list_policies,
        read_only=True,
    ),
    core_tool(
        "policies",
        "create",
        "Create a tool policy. Patterns match tool ids such as `integration.owner.connection.tool`.",
        {"owner": _OWNER, "pattern": {"type": "string"}, "action": _ACTION, "position": {"type": "string"}},
        ["owner", "pattern", "action"],
        _POLICY,
        _create_policy,
        _validate_create,
        gated=True,
    ),
    core_tool(
        "policies",
        "update",
        "Change a tool policy's pattern, action or position.",
        {
            "id": {"type": "string"},
            "owner": _OWNER,
            "pattern": {"type": "string"},
            "action": _ACTION,
            "position": {"type": "string"},
        },
        ["id", "owner"],
        _POLICY,
        _update_policy,
        _validate_update,
        gated=True,
    ),
    core_tool(
        "policies",
        "remove",
        "Remove a tool policy.",
        {"id": {"type": "string"}, "owner": _OWNER},
        ["id", "owner"],
        {"type": "object", "properties": {"removed": {"type": "boolean"}}, "required": ["removed"]},
        _remove_policy,
        _validate_remove,
        gated=True,
    ),
)


def build_catalog(
    connected: Integrations | None = None, handoffs: Handoffs | None = None, rates: Rates | None = None
) -> Catalog:
    """The catalog every session's code sees: the executor's own core tools and, with `connected`, the
    tools for adding specs and managing connections, and every caller's connected integrations. `handoffs`
    is where `connections.createHandoff` issues its links (the server passes the book its connect page
    serves; without one, links are relative and served by nothing)."""
    if handoffs is None:
        handoffs = Handoffs(HandoffBook(), lambda: "")
    catalog: Catalog | None = None

    async def list_integrations(_: Any, context: CallContext) -> JsonObject:
        assert catalog is not None
        return {
            "integrations": [
                {
                    "slug": summary["id"],
                    "description": summary.get("description", summary["name"]),
                    "kind": summary["kind"],
                    "canRemove": summary["canRemove"],
                    "canRefresh": summary["canRefresh"],
                }
                for summary in await catalog.summaries(context.principal, context.scope)
            ]
        }

    executor = Integration(
        slug=BUILT_IN_SLUG,
        name=BUILT_IN_NAME,
        description=BUILT_IN_DESCRIPTION,
        kind=BUILT_IN,
        tools=(
            StaticTool(
                id="executor.coreTools.integrations.list",
                read_only=True,
                integration="executor",
                name="integrations.list",
                description="List the integrations available to this executor.",
                input_schema={"type": "object", "properties": {}},
                output_schema=INTEGRATION_LIST_SCHEMA,
                handler=list_integrations,
            ),
            *POLICY_TOOLS,
            *(ConnectedTools(connected, handoffs).tools() if connected is not None else ()),
            *(oauth_tools(connected) if connected is not None else ()),
        ),
    )
    catalog = Catalog([executor], connected, rates)
    return catalog
