"""The catalog sandboxed code reaches through `tools.<path>(args)`.

Two kinds of path. Built-ins (`search`, `describe.tool`, `executor.integrations.list`) answer with
raw values and throw in the sandbox on bad arguments, with upstream's exact messages. Everything else
is a tool of an integration, addressed by its static id (`executor.coreTools.integrations.list`), and
answers `{ok: true, data}` or `{ok: false, error: {code, message, ...}}`: expected failures are values
the code can inspect, never exceptions.
"""

import logging
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.addresses import parse_tool_address
from executor_mcp.integrations.service import Integrations
from executor_mcp.integrations.views import EMPTY_VIEW, ToolEntry, View, narrowed
from executor_mcp.policies.toolkits import ToolkitScope
from executor_mcp.protocol.errors import Refusal
from executor_mcp.ratelimits.model import KEY_SEPARATOR
from executor_mcp.records.integration_errors import ArgumentsRefused, IntegrationError
from executor_mcp.storage.interfaces import StoreUnavailable
from executor_mcp.storage.records import Owner as Principal
from executor_mcp.tools import search as ranking
from executor_mcp.tools.approval import pass_policy
from executor_mcp.tools.context import CallContext
from executor_mcp.tools.errors import ToolArgumentsError, ToolFailure, ToolThrow
from executor_mcp.tools.rates import Rates
from executor_mcp.tools.typescript import describe_types
from executor_mcp.turns import Turns

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 12
MAX_SUGGESTIONS = 5
# Paths and integration queries arrive from sandboxed code; past these they are refused before any work.
MAX_PATH_LENGTH = 500
MAX_INTEGRATIONS_QUERY_LENGTH = 200
# From this many tools on, a catalog is indexed and searched in a worker thread, where a search's worst case
# (short words that every tool holds, about 10 µs per tool) cannot hold up the event loop; below it, the
# worst case costs less than a thread hop is worth.
THREADED_SEARCH_ENTRIES = 200
# Callers whose search index (and toolkit endpoints whose narrowed view) is kept; another's first use builds its own.
SEARCH_INDEX_CACHE = 64

Handler = Callable[[Any, CallContext], Awaitable[Any]]
Validator = Callable[[Any, CallContext], None]


@attrs.frozen
class StaticTool:
    """A tool with a fixed id, provided by the server itself."""

    id: str
    integration: str
    name: str
    description: str
    input_schema: JsonObject
    output_schema: JsonObject
    handler: Handler
    requires_approval: bool = False
    approval_description: str | None = None  # what the human is asked, instead of "Approve <id>?"
    validate: Validator | None = None  # checked before any approval is asked, so a doomed call costs no human
    read_only: bool = False  # changes nothing anywhere: a toolkit's `read` level shows it


def core_tool(
    group: str,
    name: str,
    description: str,
    properties: JsonObject,
    required: list[str],
    output: JsonObject,
    handler: Handler,
    validate: Validator | None = None,
    *,
    gated: bool = False,
    read_only: bool = False,
) -> StaticTool:
    """A tool `executor.coreTools.<group>.<name>` of the built-in integration, its input an object of
    `properties`; a gated one's `validate` runs before its approval is asked."""
    return StaticTool(
        id=f"executor.coreTools.{group}.{name}",
        integration="executor",
        name=f"{group}.{name}",
        description=description,
        input_schema={"type": "object", "properties": properties, "required": required},
        output_schema=output,
        handler=handler,
        requires_approval=gated,
        validate=validate,
        read_only=read_only,
    )


@attrs.frozen
class Integration:
    slug: str
    name: str
    description: str
    kind: str
    tools: tuple[StaticTool, ...]
    can_remove: bool = False
    can_refresh: bool = False


@attrs.frozen
class _Builtin:
    description: str
    input_typescript: str
    output_typescript: str


_BUILTINS = {
    "search": _Builtin(
        "Search the tool catalog by keywords, optionally within one integration (namespace).",
        "{ query?: string; namespace?: string; limit?: number; offset?: number }",
        "{ items: Array<{ path: string; name: string; description?: string; integration: string; score: number }>; "
        "total: number; hasMore: boolean; nextOffset: number | null }",
    ),
    "describe.tool": _Builtin(
        "Describe one tool: its TypeScript input and output types.",
        "{ path: string }",
        "{ path: string; name: string; description?: string; inputTypeScript?: string; outputTypeScript: string; "
        "typeScriptDefinitions: { [k: string]: string; } }",
    ),
    "executor.integrations.list": _Builtin(
        "List the integrations whose tools this catalog holds.",
        "{ query?: string; limit?: number; offset?: number }",
        "{ items: Array<{ id: string; name: string; description?: string; kind: string; canRemove: boolean; "
        "canRefresh: boolean; toolCount: number }>; total: number; hasMore: boolean; nextOffset: number | null }",
    ),
}


class Catalog:
    """The server's own integrations (static tools) and, with `connected`, each caller's connected ones.

    A caller's catalog is the static tools plus its view of its org's integrations: one search index per
    view, built on first use and dropped when the view changes (an integration or connection changed). On a
    toolkit's endpoint (`scope`) the catalog is narrowed to what the toolkit shows: a tool it does not show is not
    found, listed, described or suggested, exactly as a tool that does not exist.
    """

    def __init__(
        self, integrations: list[Integration], connected: Integrations | None = None, rates: Rates | None = None
    ) -> None:
        """`rates`: the tool-call rate limits every call is counted against (None: none)."""
        self.integrations = integrations
        self._connected = connected
        self._rates = rates
        self._tools = {tool.id: tool for integration in integrations for tool in integration.tools}
        self._static_entries = [
            ranking.Entry(path=tool.id, name=tool.name, integration=tool.integration, description=tool.description)
            for tool in self._tools.values()
        ]
        self._static = _Searchable(self._static_entries)
        self._searchables: OrderedDict[tuple[str, str, str], tuple[View, _Searchable]] = OrderedDict()
        self._narrowed: OrderedDict[tuple[str, str, str], tuple[View, ToolkitScope, View]] = OrderedDict()
        # One search (or the indexing) in a worker thread at a time, and each account waits for its own turn
        # first: a flood of searches queues behind its own author, and another account's search waits for at
        # most the one running and one more of the flood's.
        self._threaded = trio.CapacityLimiter(1)
        self._turns = Turns(self._threaded)

    def tool(self, path: str, scope: ToolkitScope | None = None) -> StaticTool | None:
        """The static tool at `path`, if the caller's endpoint shows it."""
        tool = self._tools.get(path.removeprefix("tools."))
        if tool is None or (scope is not None and not scope.shows(tool.id, tool.read_only)):
            return None
        return tool

    async def invoke(self, path: str, args: Any, context: CallContext) -> Any:
        """Run `tools.<path>(args)`: a built-in's raw value, or a tool's `{ok, ...}` result.

        A tool call passes its policy first: `block` is a `tool_blocked` value, `require_approval` (or the
        tool's own annotation, unless a rule approves) waits at the approval gate after the arguments
        were validated, so a call that cannot succeed never costs a human's attention. The shared database out
        of reach (its policies, say) is a `database_unavailable` value the code may retry, never a defect.
        """
        try:
            return await self._invoke(path, args, context)
        except StoreUnavailable as exc:
            log.warning("tool call %s answered database_unavailable: %s", path, exc)
            return _failure("database_unavailable", Refusal.STORE_UNAVAILABLE.value.message)

    async def _invoke(self, path: str, args: Any, context: CallContext) -> Any:
        principal, scope = context.principal, context.scope
        match path:
            case "search":
                return await self._search(args, principal, scope)
            case "describe.tool":
                return await self._describe(args, principal, scope)
            case "executor.integrations.list":
                return await self._list_integrations(args, principal, scope)
        tool = self.tool(path, scope)
        if tool is not None:
            return await self._call_static(tool, args, context)
        entry = await self._connected_tool(path, principal, scope)
        if entry is not None:
            return await self._call_connected(entry, args, context)
        suggested = await self._suggest(path, principal, scope)
        return _failure("tool_not_found", f"Tool not found: {path}", {"path": path, **suggested})

    async def _call_static(self, tool: StaticTool, args: Any, context: CallContext) -> JsonObject:
        try:
            if tool.validate is not None:
                tool.validate(args, context)
        except ToolArgumentsError as exc:
            return _failure("invalid_tool_arguments", str(exc), {"issues": exc.issues} if exc.issues else None)
        except (ToolFailure, IntegrationError) as failure:  # expected failures, answered as values
            return _failure(failure.code, failure.message)
        limited = await self._rate_limited(context, None)
        if limited is not None:
            return limited
        blocked = await self._pass_policy(tool.id, tool.requires_approval, tool.approval_description, args, context)
        if blocked is not None:
            return blocked
        try:
            return {"ok": True, "data": await tool.handler(args, context)}
        except (ToolFailure, IntegrationError) as failure:  # expected failures, answered as values
            return _failure(failure.code, failure.message)

    async def _call_connected(self, entry: ToolEntry, args: Any, context: CallContext) -> JsonObject:
        assert self._connected is not None
        try:
            self._connected.kind(entry.integration).check_arguments(entry.tool, args)
        except ArgumentsRefused as refused:
            return _failure(refused.code, str(refused))
        limited = await self._rate_limited(context, connection_key(entry))
        if limited is not None:
            return limited
        blocked = await self._pass_policy(
            entry.tool_id, entry.tool.requires_approval, entry.tool.approval_description, args, context
        )
        return blocked or await self._connected.invoke(entry, args)

    async def _rate_limited(self, context: CallContext, connection: str | None) -> JsonObject | None:
        """The `rate_limited` value when the call is over a limit, checked before its policy: a call that could
        not run yet never costs a human's attention."""
        return None if self._rates is None else await self._rates.check(context.principal, connection)

    async def _pass_policy(
        self, tool_id: str, requires_approval: bool, description: str | None, args: Any, context: CallContext
    ) -> JsonObject | None:
        """None once the call may run (approved, or asked and accepted); a `tool_blocked` value otherwise.
        A declined approval throws in the sandbox (`ToolThrow`, from the gate)."""
        if await pass_policy(context, tool_id, requires_approval, description, args):
            return None
        return _failure("tool_blocked", f"Tool blocked by policy: {tool_id}")

    async def approval_annotation(self, tool_id: str, principal: Principal) -> bool | None:
        """Whether the tool `tool_id` names for this caller asks for approval by default (the annotation a
        call's policy decision starts from), or None when the caller reaches no such tool."""
        tool = self.tool(tool_id)
        if tool is not None:
            return tool.requires_approval
        entry = await self._connected_tool(tool_id, principal, None)
        return entry.tool.requires_approval if entry is not None else None

    async def connected_slugs(self, principal: Principal, scope: ToolkitScope | None = None) -> list[str]:
        """The integrations the caller has a connection to (what the execute description lists); on a toolkit's
        endpoint, those it shows a tool of."""
        if self._connected is None:
            return []
        if scope is not None:
            return sorted({entry.integration.slug for entry in (await self._view(principal, scope)).entries})
        return await self._connected.connected_integrations(principal)

    async def _view(self, principal: Principal, scope: ToolkitScope | None = None) -> View:
        view = await self._connected.view(principal) if self._connected is not None else EMPTY_VIEW
        return view if scope is None else self._narrow(view, principal, scope)

    def _narrow(self, view: View, principal: Principal, scope: ToolkitScope) -> View:
        """`view` as the toolkit shows it, kept while neither the view nor the toolkit changes."""
        key = (principal.org_id or "", principal.account_id, scope.slug)
        known = self._narrowed.get(key)
        if known is not None and known[0] is view and known[1] == scope:
            self._narrowed.move_to_end(key)
            return known[2]
        connected = self._connected
        assert connected is not None or not view.entries
        kept = narrowed(
            view,
            lambda entry: (
                connected is not None
                and scope.shows(entry.tool_id, connected.kind(entry.integration).read_only(entry.tool))
            ),
        )
        self._narrowed[key] = (view, scope, kept)
        while len(self._narrowed) > SEARCH_INDEX_CACHE:
            self._narrowed.popitem(last=False)
        return kept

    async def _connected_tool(self, path: str, principal: Principal, scope: ToolkitScope | None) -> ToolEntry | None:
        address = parse_tool_address(path) if len(path) <= MAX_PATH_LENGTH else None
        if address is None or self._connected is None:
            return None
        return (await self._view(principal, scope)).tool(address)

    async def _searchable(self, principal: Principal, scope: ToolkitScope | None) -> "_Searchable":
        """The caller's index: the static one when it reaches no connected tool, else its view's; on a toolkit's
        endpoint, only what the toolkit shows."""
        view = await self._view(principal, scope)
        if not view.entries and scope is None:
            return self._static
        key = (principal.org_id or "", principal.account_id, "" if scope is None else scope.slug)
        known = self._searchables.get(key)
        if known is not None and known[0] is view:
            self._searchables.move_to_end(key)
            return known[1]
        connected = [
            ranking.Entry(
                path=entry.tool_id,
                name=entry.tool.name,
                integration=entry.integration.slug,
                description=entry.tool.description,
            )
            for entry in view.entries
        ]
        static = self._static_entries
        if scope is not None:
            static = [entry for entry in static if self.tool(entry.path, scope) is not None]
        searchable = _Searchable([*static, *connected])
        self._searchables[key] = (view, searchable)
        while len(self._searchables) > SEARCH_INDEX_CACHE:
            self._searchables.popitem(last=False)
        return searchable

    # -- built-ins ----------------------------------------------------------------------------------

    async def _search(self, args: Any, principal: Principal, scope: ToolkitScope | None) -> JsonObject:
        args = _options(args, "tools.search", "{ query?: string; namespace?: string; limit?: number; offset?: number }")
        query, namespace = args.get("query"), args.get("namespace")
        if query is not None and not isinstance(query, str):
            raise ToolThrow("tools.search query must be a string when provided")
        if namespace is not None and not isinstance(namespace, str):
            raise ToolThrow("tools.search namespace must be a string when provided")
        limit, offset = _paging("tools.search", args)
        try:
            page = await self._ranked(principal, scope, query or "", namespace, limit, offset)
        except ranking.QueryTooLarge as refused:
            raise ToolThrow(f"tools.search {refused}") from None
        items = [
            {
                "path": entry.path,
                "name": entry.name,
                **({"description": entry.description} if entry.description else {}),
                "integration": entry.integration,
                "score": score,
            }
            for entry, score in page.items
        ]
        return {"items": items, "total": page.total, "hasMore": page.has_more, "nextOffset": page.next_offset}

    async def _describe(self, args: Any, principal: Principal, scope: ToolkitScope | None) -> JsonObject:
        if not isinstance(args, dict):
            raise ToolThrow("tools.describe.tool expects an object: { path: string }")
        if "includeSchemas" in args:
            raise ToolThrow("tools.describe.tool no longer accepts includeSchemas")
        path = args.get("path")
        if not isinstance(path, str) or not path:
            raise ToolThrow("describe.tool requires a path")
        if len(path) > MAX_PATH_LENGTH:
            raise ToolThrow(f"tools.describe.tool path must be at most {MAX_PATH_LENGTH} characters (got {len(path)})")
        path = path.removeprefix("tools.")
        builtin = _BUILTINS.get(path)
        if builtin is not None:
            return {
                "path": path,
                "name": path,
                "description": builtin.description,
                "inputTypeScript": builtin.input_typescript,
                "outputTypeScript": builtin.output_typescript,
                "typeScriptDefinitions": {},
            }
        tool = self.tool(path, scope)
        entry = None if tool is not None else await self._connected_tool(path, principal, scope)
        if entry is not None:
            return describe_connected(entry, await self._view(principal, scope))
        if tool is None:
            error: JsonObject = {"code": "tool_not_found", "message": f"Tool not found: {path}"}
            error.update(await self._suggest(path, principal, scope))
            return {"path": path, "name": path, "error": error}
        described: JsonObject = {"path": tool.id, "name": tool.name, "description": tool.description}
        described.update(describe_types(tool.input_schema, tool.output_schema))
        return described

    async def _list_integrations(self, args: Any, principal: Principal, scope: ToolkitScope | None) -> JsonObject:
        args = _options(args, "tools.executor.integrations.list", "{ query?: string; limit?: number; offset?: number }")
        query = args.get("query")
        limit, offset = _paging("tools.executor.integrations.list", args)
        if isinstance(query, str) and len(query) > MAX_INTEGRATIONS_QUERY_LENGTH:
            raise ToolThrow(
                "tools.executor.integrations.list query must be at most "
                f"{MAX_INTEGRATIONS_QUERY_LENGTH} characters (got {len(query)})"
            )
        wanted = ranking.normalize(query) if isinstance(query, str) and query.strip() else None
        summaries = await self.summaries(principal, scope)
        matching = [
            summary
            for summary in summaries
            if wanted is None or wanted in ranking.normalize(f"{summary['id']} {summary['name']}")
        ]
        page = matching[offset : offset + limit]
        consumed = offset + len(page)
        has_more = consumed < len(matching)
        return {
            "items": page,
            "total": len(matching),
            "hasMore": has_more,
            "nextOffset": consumed if has_more else None,
        }

    async def summaries(self, principal: Principal, scope: ToolkitScope | None = None) -> list[JsonObject]:
        """Every integration the caller's catalog holds, built-in first, with its tool count (every tool
        at every connection the caller sees, as search enumerates them); on a toolkit's endpoint, the
        integrations it shows a tool of, counting those."""
        view = await self._view(principal, scope)
        static = [
            _summary(i.slug, i.name, i.description, i.kind, i.can_remove, i.can_refresh, count)
            for i in self.integrations
            if (count := sum(1 for tool in i.tools if self.tool(tool.id, scope) is not None)) or scope is None
        ]
        connected = [
            _summary(r.slug, r.name, r.description, r.kind, True, r.can_refresh, view.tool_count(r.slug))
            for r in view.integrations
        ]
        return static + connected

    async def _suggest(self, path: str, principal: Principal, scope: ToolkitScope | None) -> JsonObject:
        """Up to five likely paths: the leaf name searched within the first segment, else everywhere.

        A path too large to be a tool's (or whose leaf is past the search bounds) gets no suggestions.
        """
        if len(path) > MAX_PATH_LENGTH:
            return {}
        address = parse_tool_address(path)
        if address is not None:
            siblings = (await self._view(principal, scope)).connection_tools(address)
            if siblings:
                leaf = address.tool.lower()
                near = [e for e in siblings if leaf in e.tool.name.lower() or leaf in e.tool.description.lower()]
                return {"suggestions": [entry.tool_id for entry in (near or siblings)[:MAX_SUGGESTIONS]]}
        segments = path.removeprefix("tools.").split(".")
        leaf = segments[-1]
        found: list[tuple[ranking.Entry, int]] = []
        for namespace in (segments[0], None):
            try:
                found = (await self._ranked(principal, scope, leaf, namespace, MAX_SUGGESTIONS, 0)).items
            except ranking.QueryTooLarge:
                continue
            if found:
                break
        return {"suggestions": [entry.path for entry, _ in found]} if found else {}

    async def _ranked(
        self,
        principal: Principal,
        scope: ToolkitScope | None,
        query: str,
        namespace: str | None,
        limit: int,
        offset: int,
    ) -> ranking.Page:
        """One search on the caller's index; large catalogs are indexed and searched in a worker thread."""
        searchable = await self._searchable(principal, scope)
        if not searchable.threaded:
            return (await searchable.index(self._threaded)).search(query, namespace, limit, offset)
        ranking.check_query(query, namespace)  # a refusal needs no thread
        index = await searchable.index(self._threaded)
        async with self._turns.turn(principal):
            return await trio.to_thread.run_sync(index.search, query, namespace, limit, offset)


class _Searchable:
    """A catalog's entries and their search index, built once on first use."""

    def __init__(self, entries: list[ranking.Entry]) -> None:
        self.entries = entries
        self.threaded = len(entries) >= THREADED_SEARCH_ENTRIES
        self._index: ranking.SearchIndex | None = None
        self._indexing = trio.Lock()

    async def index(self, threads: trio.CapacityLimiter) -> ranking.SearchIndex:
        if self._index is None:
            async with self._indexing:
                if self._index is None:
                    if self.threaded:
                        async with threads:
                            self._index = await trio.to_thread.run_sync(ranking.SearchIndex, self.entries)
                    else:
                        self._index = ranking.SearchIndex(self.entries)
        return self._index


def _summary(
    slug: str, name: str, description: str, kind: str, can_remove: bool, can_refresh: bool, count: int
) -> JsonObject:
    summary: JsonObject = {"id": slug, "name": name}
    if description and description not in (slug, name):
        summary["description"] = description
    summary.update(kind=kind, canRemove=can_remove, canRefresh=can_refresh, toolCount=count)
    return summary


def connection_key(entry: ToolEntry) -> str:
    """The connection a tool is called at, as its per-connection rate limit counts it (one connection of one
    owner: a user connection is its account's)."""
    connection = entry.connection
    return KEY_SEPARATOR.join((connection.integration, connection.owner, connection.account_id or "", connection.name))


def describe_connected(entry: ToolEntry, view: View) -> JsonObject:
    """`describe.tool` of a connected tool: its compact TypeScript, with the `$defs` its types reference."""
    tool = entry.tool
    described: JsonObject = {"path": entry.tool_id, "name": tool.name, "description": tool.description}
    defs = view.defs.get(entry.source_hash, {})
    described.update(describe_types(tool.input_schema, tool.output_schema, defs))
    return described


def _options(args: Any, tool: str, shape: str) -> JsonObject:
    """A built-in's optional options object; anything but an object (or nothing) throws."""
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise ToolThrow(f"{tool} expects an object: {shape}")
    return args


def _paging(tool: str, args: JsonObject) -> tuple[int, int]:
    limit, offset = args.get("limit"), args.get("offset")
    if limit is not None and (not _is_number(limit) or limit <= 0):
        raise ToolThrow(f"{tool} limit must be a positive number when provided")
    if offset is not None and (not _is_number(offset) or offset < 0):
        raise ToolThrow(f"{tool} offset must be a non-negative number when provided")
    return (
        max(1, math.floor(limit)) if limit is not None else DEFAULT_LIMIT,
        math.floor(offset) if offset is not None else 0,
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _failure(code: str, message: str, details: JsonObject | None = None) -> JsonObject:
    error: JsonObject = {"code": code, "message": message}
    if details:
        error["details"] = details
    return {"ok": False, "error": error}
