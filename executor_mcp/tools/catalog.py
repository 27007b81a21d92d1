"""The catalog sandboxed code reaches through `tools.<path>(args)`.

Two kinds of path. Built-ins (`search`, `describe.tool`, `executor.integrations.list`) answer with
raw values and throw in the sandbox on bad arguments, with upstream's exact messages. Everything else
is a tool of an integration, addressed by its static id (`executor.coreTools.integrations.list`), and
answers `{ok: true, data}` or `{ok: false, error: {code, message, ...}}`: expected failures are values
the code can inspect, never exceptions.
"""

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from executor_mcp.codec import JsonObject
from executor_mcp.policies.model import Action
from executor_mcp.storage.records import Owner as Principal
from executor_mcp.tools import search as ranking
from executor_mcp.tools.context import CallContext, Interaction, approval_message
from executor_mcp.tools.errors import ToolArgumentsError, ToolFailure, ToolThrow
from executor_mcp.tools.typescript import describe_types

DEFAULT_LIMIT = 12
MAX_SUGGESTIONS = 5
# Paths and integration queries arrive from sandboxed code; past these they are refused before any work.
MAX_PATH_LENGTH = 500
MAX_INTEGRATIONS_QUERY_LENGTH = 200
# From this many tools on, a catalog is indexed and searched in a worker thread, where a search's worst case
# (short words that every tool holds, about 10 µs per tool) cannot hold up the event loop; below it, the
# worst case costs less than a thread hop is worth.
THREADED_SEARCH_ENTRIES = 200

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
    validate: Validator | None = None  # checked before any approval is asked, so a doomed call costs no human


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
    def __init__(self, integrations: list[Integration]) -> None:
        self.integrations = integrations
        self._tools = {tool.id: tool for integration in integrations for tool in integration.tools}
        self._entries = [
            ranking.Entry(path=tool.id, name=tool.name, integration=tool.integration, description=tool.description)
            for tool in self._tools.values()
        ]
        self._integration_texts = [ranking.normalize(f"{i.slug} {i.name}") for i in integrations]
        self._index: ranking.SearchIndex | None = None
        self._indexing = trio.Lock()
        # One search (or the indexing) in a worker thread at a time, and each account waits for its own turn
        # first: a flood of searches queues behind its own author, and another account's search waits for at
        # most the one running and one more of the flood's.
        self._threaded = trio.CapacityLimiter(1)
        self._turns: dict[Principal, _Turns] = {}

    def tool(self, path: str) -> StaticTool | None:
        return self._tools.get(path.removeprefix("tools."))

    async def invoke(self, path: str, args: Any, context: CallContext) -> Any:
        """Run `tools.<path>(args)`: a built-in's raw value, or a tool's `{ok, ...}` result.

        A tool call passes its policy first: `block` is a `tool_blocked` value, `require_approval` (or the
        tool's own annotation, unless a rule approves) waits at the approval gate after the arguments
        were validated.
        """
        match path:
            case "search":
                return await self._search(args, context.principal)
            case "describe.tool":
                return await self._describe(args, context.principal)
            case "executor.integrations.list":
                return self._list_integrations(args)
        tool = self.tool(path)
        if tool is None:
            return _failure(
                "tool_not_found",
                f"Tool not found: {path}",
                {"path": path, **await self._suggest(path, context.principal)},
            )
        if tool.validate is not None:
            try:
                tool.validate(args, context)
            except ToolArgumentsError as exc:
                return _failure("invalid_tool_arguments", str(exc), {"issues": exc.issues} if exc.issues else None)
            except ToolFailure as failure:
                return _failure(failure.code, failure.message)
        decision = await context.policies.decide(context.principal, tool.id, tool.requires_approval)
        if decision.action is Action.BLOCK:
            return _failure("tool_blocked", f"Tool blocked by policy: {tool.id}")
        if decision.action is Action.REQUIRE_APPROVAL:
            pattern = decision.rule.pattern if decision.rule is not None else None
            await context.gate(Interaction(tool.id, approval_message(tool.id, args, pattern), args))
        try:
            return {"ok": True, "data": await tool.handler(args, context)}
        except ToolFailure as failure:
            return _failure(failure.code, failure.message)

    # -- built-ins ----------------------------------------------------------------------------------

    async def _search(self, args: Any, principal: Principal) -> JsonObject:
        args = _options(args, "tools.search", "{ query?: string; namespace?: string; limit?: number; offset?: number }")
        query, namespace = args.get("query"), args.get("namespace")
        if query is not None and not isinstance(query, str):
            raise ToolThrow("tools.search query must be a string when provided")
        if namespace is not None and not isinstance(namespace, str):
            raise ToolThrow("tools.search namespace must be a string when provided")
        limit, offset = _paging("tools.search", args)
        try:
            page = await self._ranked(principal, query or "", namespace, limit, offset)
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

    async def _describe(self, args: Any, principal: Principal) -> JsonObject:
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
        tool = self.tool(path)
        if tool is None:
            error: JsonObject = {"code": "tool_not_found", "message": f"Tool not found: {path}"}
            error.update(await self._suggest(path, principal))
            return {"path": path, "name": path, "error": error}
        described: JsonObject = {"path": tool.id, "name": tool.name, "description": tool.description}
        described.update(describe_types(tool.input_schema, tool.output_schema))
        return described

    def _list_integrations(self, args: Any) -> JsonObject:
        args = _options(args, "tools.executor.integrations.list", "{ query?: string; limit?: number; offset?: number }")
        query = args.get("query")
        limit, offset = _paging("tools.executor.integrations.list", args)
        if isinstance(query, str) and len(query) > MAX_INTEGRATIONS_QUERY_LENGTH:
            raise ToolThrow(
                "tools.executor.integrations.list query must be at most "
                f"{MAX_INTEGRATIONS_QUERY_LENGTH} characters (got {len(query)})"
            )
        wanted = ranking.normalize(query) if isinstance(query, str) and query.strip() else None
        matching = [
            integration
            for integration, text in zip(self.integrations, self._integration_texts, strict=True)
            if wanted is None or wanted in text
        ]
        page = matching[offset : offset + limit]
        consumed = offset + len(page)
        has_more = consumed < len(matching)
        items = [
            {
                "id": integration.slug,
                "name": integration.name,
                "description": integration.description,
                "kind": integration.kind,
                "canRemove": integration.can_remove,
                "canRefresh": integration.can_refresh,
                "toolCount": len(integration.tools),
            }
            for integration in page
        ]
        return {
            "items": items,
            "total": len(matching),
            "hasMore": has_more,
            "nextOffset": consumed if has_more else None,
        }

    async def _suggest(self, path: str, principal: Principal) -> JsonObject:
        """Up to five likely paths: the leaf name searched within the first segment, else everywhere.

        A path too large to be a tool's (or whose leaf is past the search bounds) gets no suggestions.
        """
        if len(path) > MAX_PATH_LENGTH:
            return {}
        segments = path.removeprefix("tools.").split(".")
        leaf = segments[-1]
        found: list[tuple[ranking.Entry, int]] = []
        for namespace in (segments[0], None):
            try:
                found = (await self._ranked(principal, leaf, namespace, MAX_SUGGESTIONS, 0)).items
            except ranking.QueryTooLarge:
                continue
            if found:
                break
        return {"suggestions": [entry.path for entry, _ in found]} if found else {}

    async def _ranked(
        self, principal: Principal, query: str, namespace: str | None, limit: int, offset: int
    ) -> ranking.Page:
        """One search on the catalog's index, built on first use; large catalogs work in a worker thread."""
        threaded = len(self._entries) >= THREADED_SEARCH_ENTRIES
        if self._index is None:
            async with self._indexing:
                if self._index is None:
                    if threaded:
                        async with self._threaded:
                            self._index = await trio.to_thread.run_sync(ranking.SearchIndex, self._entries)
                    else:
                        self._index = ranking.SearchIndex(self._entries)
        index = self._index
        if not threaded:
            return index.search(query, namespace, limit, offset)
        ranking.check_query(query, namespace)  # a refusal needs no thread
        async with self._turn(principal), self._threaded:
            return await trio.to_thread.run_sync(index.search, query, namespace, limit, offset)

    @asynccontextmanager
    async def _turn(self, principal: Principal) -> AsyncIterator[None]:
        """The account's turn at the search thread; its queue exists only while someone waits in it."""
        turns = self._turns.setdefault(principal, _Turns())
        turns.waiting += 1
        try:
            async with turns.lock:
                yield
        finally:
            turns.waiting -= 1
            if not turns.waiting:
                del self._turns[principal]


@attrs.define
class _Turns:
    lock: trio.Lock = attrs.Factory(trio.Lock)
    waiting: int = 0


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
