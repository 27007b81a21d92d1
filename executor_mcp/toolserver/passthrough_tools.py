"""Passthrough mode (`/mcp?mode=passthrough`): the tools `search` and `invoke` instead of `execute` and `skills`.

For clients that would rather call catalog tools one by one than write code. Nothing here finds, decides or
calls a tool by itself: `search` answers what the sandbox's `tools.search` and `tools.describe.tool` answer,
and `invoke` runs, through the same execution engine, the one-line program `execute` would run for the call.
So policies, approval pauses, `block`, native elicitation, browser approvals, `resume`, exactly-once and the
rendering of the result are execute's own, not a copy of them.

The caller's path and arguments reach that program only as JSON string literals, and the path is first
checked against the address grammar or the static tool ids: no text from the caller is spliced into code.
"""

import json
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from executor_mcp.codec import JsonObject
from executor_mcp.execution.results import MAX_TEXT, truncate
from executor_mcp.execution.texts import inventory_block
from executor_mcp.integrations.addresses import MAX_CONNECTION_NAME, parse_tool_address, valid_slug
from executor_mcp.policies.service import Policies
from executor_mcp.policies.toolkit_service import Toolkits
from executor_mcp.protocol.mcp import Tool
from executor_mcp.protocol.results import text_result
from executor_mcp.storage.records import SessionMeta
from executor_mcp.tools.approval import Approval, Interaction
from executor_mcp.tools.catalog import MAX_PATH_LENGTH, Catalog
from executor_mcp.tools.context import CallContext
from executor_mcp.tools.errors import ToolThrow
from executor_mcp.toolserver.arguments import invalid, type_issue
from executor_mcp.toolserver.registry import RegisteredTool, ToolContext

SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"
SEARCH_LIMIT = 10
MAX_SEARCH_LIMIT = 50
# Per search match: its description, and its input type with the named types that type uses. Past these
# they are cut with results.py's `[truncated N chars]` marker (or the named types left out); `search({ path })`
# gives them whole.
MAX_ITEM_DESCRIPTION = 1_000
MAX_ITEM_TYPES = 2_000
SEARCH_FIELDS = ("query", "namespace", "limit", "offset")
# A search answers no more matches than its text shows whole (execute cuts text at `MAX_TEXT`); the rest are
# the next page. The margin is for the page's own fields around the matches.
SEARCH_TEXT_BUDGET = MAX_TEXT - 1_000
ITEM_INDENT = 4  # a match's lines in the indented page, inside `items`

RunCode = Callable[[str, ToolContext], Awaitable[JsonObject]]

SEARCH_DESCRIPTION = "\n".join(
    [
        "Search the catalog of tools you can call with `invoke`: the tools of the integrations (APIs and other "
        "sources) connected to this executor, and the executor's own tools.",
        "Each match gives its `path`, its `description` and `inputTypeScript`, the TypeScript type of the `args` "
        "`invoke` takes for it (absent when it takes none), with the named types it uses in `inputDefinitions`, "
        "so you can call `invoke({ path, args })` right away.",
        '`search({ query: "create issue" })` ranks tools by keywords; `search({ namespace: "<integration>", '
        'query: "" })` lists every tool of one integration. At most 50 matches a call (10 by default, fewer when '
        "their types are long): page with `limit` and `offset` (the answer's `nextOffset`).",
        "`search({ path })` describes one tool fully: its input and output types and every named type they use. "
        "Use it when a match's types end in `[truncated N chars]` or name a type its `inputDefinitions` lack.",
    ]
)
INVOKE_DESCRIPTION = "\n".join(
    [
        'Call one catalog tool: `invoke({ path: "<path>", args: { ... } })`. Find the path and the type of '
        "`args` with `search` first; guessing a path fails.",
        "A path is `<integration>.<owner>.<connection>.<tool>` as `search` gives it (owner `org` or `user`), or one "
        "of the executor's own tools such as `executor.coreTools.integrations.list`.",
        "The result is the tool's `{ ok: true, data }` or `{ ok: false, error: { code, message } }`. Tool "
        "policies apply: a call may be blocked, or pause for the user's approval, in which case the result says "
        "`Execution paused` with an `executionId`: ask the user, then call `resume` with it.",
    ]
)
RESUME_DESCRIPTION = (
    "Resume a paused invoke using the executionId it returned.\n"
    "This connection explicitly allows model-side resume via elicitation_mode=model."
)
BROWSER_RESUME_DESCRIPTION = (
    "Request user approval to resume a paused invoke.\n"
    "Call this with the executionId returned by invoke. If the user has not approved in the browser yet, tell "
    "them to open the returned approval URL. If they have approved, this returns the resumed invoke result.\n"
    "This connection does not allow the model to choose accept, decline, cancel, or content."
)

SEARCH = Tool(
    name="search",
    description=SEARCH_DESCRIPTION,
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": 'Keywords, e.g. "create issue". "" with a namespace lists all.'},
            "namespace": {"type": "string", "description": 'Only the tools of this integration, e.g. "github".'},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT, "default": SEARCH_LIMIT},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
            "path": {"type": "string", "description": "Describe this one tool fully instead of searching."},
        },
        "$schema": SCHEMA_DIALECT,
    },
)
INVOKE = Tool(
    name="invoke",
    description=INVOKE_DESCRIPTION,
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The tool's path, as search gives it"},
            "args": {"type": "object", "description": "The tool's arguments, of its inputTypeScript type"},
        },
        "required": ["path"],
        "$schema": SCHEMA_DIALECT,
    },
)

_CONNECTION = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")
_WORD = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")


class InvalidPath(ValueError):
    """A path that names no tool by its shape alone; the message says what a path looks like."""


def checked_path(raw: str, is_static: Callable[[str], bool]) -> str:
    """The catalog path `raw` names (without `tools.`): a static tool id, or a tool address whose integration is
    a slug, owner `org` or `user`, connection an identifier, and tool name dot-separated non-empty printable
    words. Whether a tool is there is the catalog's to answer (`tool_not_found`, as for execute)."""
    path = raw.removeprefix("tools.")
    if len(raw) <= MAX_PATH_LENGTH and (is_static(path) or _is_address(path)):
        return path
    shown = json.dumps(raw[:100] + ("..." if len(raw) > 100 else ""), ensure_ascii=False)
    raise InvalidPath(
        f"Invalid tool path {shown}: a path is `<integration>.<owner>.<connection>.<tool>` with owner `org` or "
        "`user`, as search gives it (optionally after `tools.`), or one of the executor's own tools such as "
        "`executor.coreTools.integrations.list`. Find paths with the search tool."
    )


def _is_address(path: str) -> bool:
    address = parse_tool_address(path)
    return (
        address is not None
        and valid_slug(address.integration)
        and len(address.connection) <= MAX_CONNECTION_NAME
        and _CONNECTION.fullmatch(address.connection) is not None
        and all(word and word.isprintable() and not any(c.isspace() for c in word) for word in address.tool.split("."))
    )


def invoke_program(path: str, args: JsonObject | None) -> str:
    """What `execute` runs for `tools.<path>(args)`. The proxy resolves `tools["a.b"]` to the same path as
    `tools.a.b` (and, unlike property access, even when a segment is `then`); `JSON.parse` keeps every key of
    the arguments as data (an object literal would turn a `__proto__` key into a prototype)."""
    argument = "" if args is None else f"JSON.parse({_js_string(json.dumps(args, separators=(',', ':')))})"
    return f"return await tools[{_js_string(path)}]({argument});"


def _js_string(text: str) -> str:
    """A JavaScript string literal of `text`: ASCII-only JSON, so no line separator or quote can end it."""
    return json.dumps(text, ensure_ascii=True)


def search_arguments(arguments: JsonObject) -> JsonObject:
    """`tools.search`'s options, with passthrough's own default and cap on the number of matches. Anything
    that is not a number is passed on, for the built-in to refuse in its own words."""
    options = {field: arguments[field] for field in SEARCH_FIELDS if field in arguments}
    limit = options.get("limit", SEARCH_LIMIT)
    if isinstance(limit, int | float) and not isinstance(limit, bool) and limit > MAX_SEARCH_LIMIT:
        limit = MAX_SEARCH_LIMIT
    return {**options, "limit": limit}


def shortened_page(found: JsonObject, matches: list[JsonObject], start: Any) -> JsonObject:
    """`tools.search`'s page holding only the first `matches` (those that fit the text budget), its paging
    moved back to go on right after them. `start` is the offset the built-in took (and floored)."""
    consumed = math.floor(start) + len(matches)
    has_more = consumed < found["total"]
    return {**found, "items": matches, "hasMore": has_more, "nextOffset": consumed if has_more else None}


def search_match(item: JsonObject, described: JsonObject) -> JsonObject:
    """A search match with what `invoke` needs: its input type and the named types that type uses, bounded."""
    match = dict(item)
    if isinstance(item.get("description"), str):
        match["description"] = truncate(item["description"], MAX_ITEM_DESCRIPTION)
    text = described.get("inputTypeScript")
    if not isinstance(text, str):
        return match
    match["inputTypeScript"] = truncate(text, MAX_ITEM_TYPES)
    if len(text) <= MAX_ITEM_TYPES:
        definitions = input_definitions(text, described.get("typeScriptDefinitions") or {})
        size = len(text) + sum(len(name) + len(body) for name, body in definitions.items())
        if definitions and size <= MAX_ITEM_TYPES:
            match["inputDefinitions"] = definitions
    return match


def input_definitions(text: str, definitions: JsonObject) -> dict[str, str]:
    """The named types `text` uses, directly or through one another, in the order first met. A word that
    happens to equal a type's name (a property key) brings that type along too: harmless, and never a miss."""
    reached: dict[str, str] = {}
    pending = [text]
    while pending:
        for word in _WORD.findall(pending.pop()):
            body = definitions.get(word)
            if isinstance(body, str) and word not in reached:
                reached[word] = body
                pending.append(body)
    return reached


@attrs.frozen
class PassthroughTools:
    """`search` and `invoke`, as handlers over the catalog. `run_code` is `execute`'s own execution of a program
    in the session."""

    run_code: RunCode
    catalog: Catalog
    policies: Policies
    toolkits: Toolkits

    def registered(self) -> tuple[RegisteredTool, ...]:
        return (RegisteredTool(SEARCH, self.search, listing=self.search_listing), RegisteredTool(INVOKE, self.invoke))

    async def search(self, arguments: JsonObject, context: ToolContext) -> JsonObject:
        owner, resource = context.session.owner, context.session.resource
        scope = await self.toolkits.current(owner, resource)
        call = CallContext(principal=owner, policies=self.policies, gate=_never_gated, scope=scope)
        try:
            if "path" in arguments:
                mixed = [field for field in SEARCH_FIELDS if field in arguments]
                if mixed:
                    return _error(f"Give either path (to describe one tool) or {', '.join(mixed)} (to search).")
                described = await self.catalog.invoke("describe.tool", {"path": arguments["path"]}, call)
                return _answer(described, failed="error" in described)
            options = search_arguments(arguments)
            found = await self.catalog.invoke("search", options, call)
            matches: list[JsonObject] = []
            used = 0
            for item in found["items"]:
                match = search_match(item, await self.catalog.invoke("describe.tool", {"path": item["path"]}, call))
                shown = _shown(match)
                used += len(shown) + ITEM_INDENT * (shown.count("\n") + 1) + 2  # nested, and `,\n`
                if matches and used > SEARCH_TEXT_BUDGET:
                    break
                matches.append(match)
        except ToolThrow as refused:
            return _error(str(refused))
        return _answer(shortened_page(found, matches, start=options.get("offset", 0)))

    async def search_listing(self, meta: SessionMeta) -> Tool:
        scope = await self.toolkits.current(meta.owner, meta.resource)
        block = inventory_block(await self.catalog.connected_slugs(meta.owner, scope))
        return SEARCH if block is None else attrs.evolve(SEARCH, description=f"{SEARCH_DESCRIPTION}\n\n{block}")

    async def invoke(self, arguments: JsonObject, context: ToolContext) -> JsonObject:
        path, args = arguments.get("path"), arguments.get("args")
        issues = []
        if not isinstance(path, str):
            issues.append(type_issue("path", path))
        if args is not None and not isinstance(args, dict):
            issues.append(type_issue("args", args, expected="object"))
        if issues:
            return invalid("invoke", issues)
        assert isinstance(path, str)
        try:
            checked = checked_path(path, lambda candidate: self.catalog.tool(candidate) is not None)
        except InvalidPath as refused:
            return _error(str(refused))
        return await self.run_code(invoke_program(checked, args), context)


async def _never_gated(interaction: Interaction) -> Approval:
    """The gate of search's catalog calls, which only search and describe: neither calls a tool, so neither
    ever reaches a gate; if one did, nothing would be approved."""
    raise ToolThrow(f'Tool "{interaction.address}" cannot be approved from search.')


def _shown(value: Any) -> str:
    """A value as execute shows a returned one: indented JSON."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def _answer(value: JsonObject, *, failed: bool = False) -> JsonObject:
    """As execute shows a returned object: indented JSON text (capped like execute's), the value itself
    structured."""
    return text_result(truncate(_shown(value)), value, error=failed)


def _error(message: str) -> JsonObject:
    return text_result(f"Error: {message}", error=True)
