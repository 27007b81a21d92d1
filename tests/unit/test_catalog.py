"""The catalog behind `tools.<path>(args)`: built-ins with upstream's exact messages, and static tools
answering `{ok, data}` or `{ok: false, error}` (contract §4)."""

from typing import Any

import attrs
import pytest
import trio
import trio.testing

from executor_mcp.storage.records import Owner
from executor_mcp.tools.catalog import (
    MAX_INTEGRATIONS_QUERY_LENGTH,
    MAX_PATH_LENGTH,
    THREADED_SEARCH_ENTRIES,
    Catalog,
    Integration,
    StaticTool,
)
from executor_mcp.tools.context import CallContext
from executor_mcp.tools.core import build_catalog
from executor_mcp.tools.errors import ToolThrow
from executor_mcp.tools.search import MAX_NAMESPACE_LENGTH, MAX_QUERY_LENGTH, MAX_QUERY_WORDS, Entry, SearchIndex
from executor_mcp.tools.typescript import TOOL_DEFINITIONS

CORE_TOOL = "executor.coreTools.integrations.list"
SEARCH_SHAPE = "{ query?: string; namespace?: string; limit?: number; offset?: number }"


async def echo(args: Any, context: CallContext) -> Any:
    return {"received": args}


def demo_catalog() -> Catalog:
    def tool(name: str) -> StaticTool:
        return StaticTool(
            id=f"demo.{name}",
            integration="demo",
            name=name,
            description=f"Demo {name} tool",
            input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            output_schema={"type": "object", "properties": {"received": {}}},
            handler=echo,
        )

    tools = (tool("alpha"), tool("beta"), tool("gamma"))
    demo = Integration(slug="demo", name="Demo", description="Demo tools", kind="static", tools=tools)
    return Catalog([*build_catalog().integrations, demo])


# -- search --------------------------------------------------------------------------------------------


async def test_search_finds_the_core_integrations_tool(context: CallContext) -> None:
    found = await build_catalog().invoke("search", {"query": "integrations"}, context)
    item, *others = found["items"]
    assert item["path"] == CORE_TOOL
    assert item["name"] == "integrations.list"
    assert item["integration"] == "executor"
    assert item["description"] == "List the integrations available to this executor."
    assert all(other["score"] < item["score"] for other in others)
    assert (found["total"], found["hasMore"], found["nextOffset"]) == (1 + len(others), False, None)


@pytest.mark.parametrize("args", [None, {}, {"query": "   "}])
async def test_search_without_a_query_or_namespace_is_empty(args: Any, context: CallContext) -> None:
    assert await build_catalog().invoke("search", args, context) == {
        "items": [],
        "total": 0,
        "hasMore": False,
        "nextOffset": None,
    }


async def test_search_enumeration_reconciles_with_the_integrations_tool_count(context: CallContext) -> None:
    catalog = demo_catalog()
    listed = await catalog.invoke("executor.integrations.list", {}, context)
    for integration in listed["items"]:
        enumerated = await catalog.invoke("search", {"query": "", "namespace": integration["id"]}, context)
        assert enumerated["total"] == integration["toolCount"]
        assert all(item["score"] == 0 for item in enumerated["items"])


async def test_search_pages_with_floored_limit_and_offset(context: CallContext) -> None:
    catalog = demo_catalog()
    first = await catalog.invoke("search", {"query": "", "namespace": "demo", "limit": 2.9}, context)
    assert [item["path"] for item in first["items"]] == ["demo.alpha", "demo.beta"]
    assert (first["total"], first["hasMore"], first["nextOffset"]) == (3, True, 2)
    rest = await catalog.invoke("search", {"query": "", "namespace": "demo", "limit": 2, "offset": 2.5}, context)
    assert [item["path"] for item in rest["items"]] == ["demo.gamma"]
    assert (rest["hasMore"], rest["nextOffset"]) == (False, None)


async def test_search_default_limit_is_twelve(context: CallContext) -> None:
    def numbered(index: int) -> StaticTool:
        return StaticTool(f"many.t{index:02}", "many", f"t{index:02}", "Numbered", {}, {}, echo)

    many = Integration("many", "Many", "Many tools", "static", tuple(numbered(i) for i in range(15)))
    page = await Catalog([many]).invoke("search", {"query": "", "namespace": "many"}, context)
    assert len(page["items"]) == 12
    assert (page["total"], page["hasMore"], page["nextOffset"]) == (15, True, 12)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("integrations", f"tools.search expects an object: {SEARCH_SHAPE}"),
        (["integrations"], f"tools.search expects an object: {SEARCH_SHAPE}"),
        ({"query": 5}, "tools.search query must be a string when provided"),
        ({"query": "x", "namespace": ["executor"]}, "tools.search namespace must be a string when provided"),
        ({"query": "x", "limit": 0}, "tools.search limit must be a positive number when provided"),
        ({"query": "x", "limit": "5"}, "tools.search limit must be a positive number when provided"),
        ({"query": "x", "limit": True}, "tools.search limit must be a positive number when provided"),
        ({"query": "x", "offset": -1}, "tools.search offset must be a non-negative number when provided"),
        ({"query": "x", "offset": "0"}, "tools.search offset must be a non-negative number when provided"),
    ],
)
async def test_search_rejects_bad_arguments_with_upstreams_messages(
    args: Any, message: str, context: CallContext
) -> None:
    with pytest.raises(ToolThrow) as raised:
        await build_catalog().invoke("search", args, context)
    assert str(raised.value) == message


# -- describe.tool -------------------------------------------------------------------------------------


async def test_describe_the_core_tool(context: CallContext) -> None:
    described = await build_catalog().invoke("describe.tool", {"path": CORE_TOOL}, context)
    assert described["path"] == CORE_TOOL
    assert described["name"] == "integrations.list"
    assert described["description"] == "List the integrations available to this executor."
    assert "inputTypeScript" not in described
    output = described["outputTypeScript"]
    assert output.startswith("{ ok: true; data: { integrations: { slug: string; description: string; ")
    assert output.endswith("; }[]; }; http?: ToolHttpMeta } | { ok: false; error: ToolError }")
    definitions = described["typeScriptDefinitions"]
    assert definitions == TOOL_DEFINITIONS
    assert list(definitions) == ["ToolError", "ToolHttpMeta", "ToolFile"]


async def test_describe_accepts_the_tools_prefix_and_shows_declared_input(context: CallContext) -> None:
    described = await demo_catalog().invoke("describe.tool", {"path": "tools.demo.alpha"}, context)
    assert described["path"] == "demo.alpha"
    assert described["inputTypeScript"] == "{ text: string; }"
    assert described["outputTypeScript"] == (
        "{ ok: true; data: { received?: unknown; }; http?: ToolHttpMeta } | { ok: false; error: ToolError }"
    )


@pytest.mark.parametrize("path", ["search", "tools.search"])
async def test_describe_a_builtin(path: str, context: CallContext) -> None:
    described = await build_catalog().invoke("describe.tool", {"path": path}, context)
    assert described["path"] == described["name"] == "search"
    assert described["description"]
    assert described["inputTypeScript"] == SEARCH_SHAPE
    assert described["outputTypeScript"].startswith("{ items: Array<{ path: string; name: string;")
    assert "ok: true" not in described["outputTypeScript"]


@pytest.mark.parametrize("path", ["describe.tool", "executor.integrations.list"])
async def test_every_builtin_is_described(path: str, context: CallContext) -> None:
    described = await build_catalog().invoke("describe.tool", {"path": path}, context)
    assert described["path"] == path
    assert "error" not in described
    assert described["outputTypeScript"]


async def test_describe_an_unknown_path_suggests_near_paths(context: CallContext) -> None:
    described = await build_catalog().invoke("describe.tool", {"path": "executor.coreTools.integration.list"}, context)
    suggestions = described["error"].pop("suggestions")
    assert described == {
        "path": "executor.coreTools.integration.list",
        "name": "executor.coreTools.integration.list",
        "error": {"code": "tool_not_found", "message": "Tool not found: executor.coreTools.integration.list"},
    }
    assert suggestions[0] == CORE_TOOL
    assert len(suggestions) <= 5


async def test_describe_an_unknown_path_without_anything_near(context: CallContext) -> None:
    described = await build_catalog().invoke("describe.tool", {"path": "nothing.here"}, context)
    assert described["error"] == {"code": "tool_not_found", "message": "Tool not found: nothing.here"}


async def test_suggestions_are_at_most_five(context: CallContext) -> None:
    def listing(index: int) -> StaticTool:
        return StaticTool(f"wide.t{index}.list", "wide", f"t{index}.list", "List things", {}, {}, echo)

    wide = Integration("wide", "Wide", "Many listings", "static", tuple(listing(i) for i in range(8)))
    described = await Catalog([wide]).invoke("describe.tool", {"path": "wide.missing.list"}, context)
    assert len(described["error"]["suggestions"]) == 5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (None, "tools.describe.tool expects an object: { path: string }"),
        ("executor.coreTools.integrations.list", "tools.describe.tool expects an object: { path: string }"),
        ({}, "describe.tool requires a path"),
        ({"path": ""}, "describe.tool requires a path"),
        ({"path": 5}, "describe.tool requires a path"),
        ({"path": CORE_TOOL, "includeSchemas": True}, "tools.describe.tool no longer accepts includeSchemas"),
    ],
)
async def test_describe_rejects_bad_arguments_with_upstreams_messages(
    args: Any, message: str, context: CallContext
) -> None:
    with pytest.raises(ToolThrow) as raised:
        await build_catalog().invoke("describe.tool", args, context)
    assert str(raised.value) == message


# -- executor.integrations.list ------------------------------------------------------------------------


@pytest.mark.parametrize("args", [None, {}])
async def test_integrations_list_describes_the_executor(args: Any, context: CallContext) -> None:
    listed = await build_catalog().invoke("executor.integrations.list", args, context)
    assert listed == {
        "items": [
            {
                "id": "executor",
                "name": "Executor",
                "description": "The executor's own tools: its integrations and, with policies, its governance.",
                "kind": "built-in",
                "canRemove": False,
                "canRefresh": False,
                "toolCount": 5,
            }
        ],
        "total": 1,
        "hasMore": False,
        "nextOffset": None,
    }


async def test_integrations_list_filters_by_query_and_pages(context: CallContext) -> None:
    catalog = demo_catalog()
    assert [
        item["id"] for item in (await catalog.invoke("executor.integrations.list", {"query": "dem"}, context))["items"]
    ] == ["demo"]
    assert (await catalog.invoke("executor.integrations.list", {"query": "zzz"}, context))["total"] == 0
    first = await catalog.invoke("executor.integrations.list", {"limit": 1}, context)
    assert [item["id"] for item in first["items"]] == ["executor"]
    assert (first["total"], first["hasMore"], first["nextOffset"]) == (2, True, 1)
    second = await catalog.invoke("executor.integrations.list", {"limit": 1, "offset": 1}, context)
    assert [(item["id"], item["toolCount"]) for item in second["items"]] == [("demo", 3)]
    assert (second["hasMore"], second["nextOffset"]) == (False, None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            "executor",
            "tools.executor.integrations.list expects an object: { query?: string; limit?: number; offset?: number }",
        ),
        ({"limit": 0}, "tools.executor.integrations.list limit must be a positive number when provided"),
        ({"offset": -1}, "tools.executor.integrations.list offset must be a non-negative number when provided"),
    ],
)
async def test_integrations_list_rejects_bad_arguments_with_upstreams_messages(
    args: Any, message: str, context: CallContext
) -> None:
    with pytest.raises(ToolThrow) as raised:
        await build_catalog().invoke("executor.integrations.list", args, context)
    assert str(raised.value) == message


# -- static tools --------------------------------------------------------------------------------------


async def test_core_integrations_list_answers_ok_data(context: CallContext) -> None:
    answer = await build_catalog().invoke(CORE_TOOL, {}, context)
    assert answer == {
        "ok": True,
        "data": {
            "integrations": [
                {
                    "slug": "executor",
                    "description": "The executor's own tools: its integrations and, with policies, its governance.",
                    "kind": "built-in",
                    "canRemove": False,
                    "canRefresh": False,
                }
            ]
        },
    }


async def test_a_static_tool_receives_its_arguments_and_is_wrapped(context: CallContext) -> None:
    assert await demo_catalog().invoke("demo.beta", {"text": "hi"}, context) == {
        "ok": True,
        "data": {"received": {"text": "hi"}},
    }


async def test_unknown_path_is_a_tool_not_found_value(context: CallContext) -> None:
    answer = await build_catalog().invoke("nothing.here", {}, context)
    assert answer == {
        "ok": False,
        "error": {
            "code": "tool_not_found",
            "message": "Tool not found: nothing.here",
            "details": {"path": "nothing.here"},
        },
    }


async def test_unknown_path_near_a_tool_carries_suggestions(context: CallContext) -> None:
    answer = await build_catalog().invoke("executor.coreTools.integration.list", {}, context)
    suggestions = answer["error"]["details"].pop("suggestions")
    assert answer == {
        "ok": False,
        "error": {
            "code": "tool_not_found",
            "message": "Tool not found: executor.coreTools.integration.list",
            "details": {"path": "executor.coreTools.integration.list"},
        },
    }
    assert suggestions[0] == CORE_TOOL


# -- bounds on what sandboxed code sends (issue 9, item 17) ---------------------------------------------


@pytest.mark.parametrize(
    ("path", "args", "message"),
    [
        (
            "search",
            {"query": "zz " * 100_000},
            f"tools.search query must be at most {MAX_QUERY_LENGTH} characters (got 300000)",
        ),
        (
            "search",
            {"query": "list " * (MAX_QUERY_WORDS + 1)},
            f"tools.search query must be at most {MAX_QUERY_WORDS} words (got {MAX_QUERY_WORDS + 1})",
        ),
        (
            "search",
            {"query": "", "namespace": "n" * (MAX_NAMESPACE_LENGTH + 1)},
            f"tools.search namespace must be at most {MAX_NAMESPACE_LENGTH} characters "
            f"(got {MAX_NAMESPACE_LENGTH + 1})",
        ),
        (
            "describe.tool",
            {"path": "p" * (MAX_PATH_LENGTH + 1)},
            f"tools.describe.tool path must be at most {MAX_PATH_LENGTH} characters (got {MAX_PATH_LENGTH + 1})",
        ),
        (
            "executor.integrations.list",
            {"query": "q" * (MAX_INTEGRATIONS_QUERY_LENGTH + 1)},
            "tools.executor.integrations.list query must be at most "
            f"{MAX_INTEGRATIONS_QUERY_LENGTH} characters (got {MAX_INTEGRATIONS_QUERY_LENGTH + 1})",
        ),
    ],
)
async def test_oversized_arguments_throw_a_message_naming_the_bound(
    path: str, args: Any, message: str, context: CallContext
) -> None:
    with pytest.raises(ToolThrow) as raised:
        await demo_catalog().invoke(path, args, context)
    assert str(raised.value) == message


async def test_arguments_at_the_bounds_are_served(context: CallContext) -> None:
    catalog = demo_catalog()
    query = " ".join(["demo", "alpha", *["tool"] * (MAX_QUERY_WORDS - 2)])
    found = await catalog.invoke("search", {"query": query, "namespace": "demo"}, context)
    assert found["items"][0]["path"] == "demo.alpha"
    described = await catalog.invoke("describe.tool", {"path": "demo." + "x" * (MAX_PATH_LENGTH - 5)}, context)
    assert described["error"]["code"] == "tool_not_found"
    listed = await catalog.invoke("executor.integrations.list", {"query": "d" * MAX_INTEGRATIONS_QUERY_LENGTH}, context)
    assert listed["total"] == 0


async def test_a_path_past_the_bounds_is_not_found_without_suggestions(context: CallContext) -> None:
    catalog = demo_catalog()
    huge = "demo." + "alphaBeta" * 100_000
    answer = await catalog.invoke(huge, {}, context)
    assert answer["error"]["code"] == "tool_not_found"
    assert answer["error"]["details"] == {"path": huge}
    many_words = "demo." + "alpha_beta_" * 20  # within the path bound, past the search's word bound
    assert "suggestions" not in (await catalog.invoke("describe.tool", {"path": many_words}, context))["error"]
    near = await catalog.invoke("describe.tool", {"path": "demo.alphaa"}, context)
    assert near["error"]["suggestions"] == ["demo.alpha"]


# -- large catalogs ------------------------------------------------------------------------------------


def large_catalog(size: int) -> Catalog:
    verbs, nouns = ["get", "list", "create", "update", "delete"], ["issue", "repo", "team", "user", "hook", "run"]

    def numbered(index: int) -> StaticTool:
        verb, noun = verbs[index % len(verbs)], nouns[index // len(verbs) % len(nouns)]
        name = f"{noun}s.{verb}{noun.capitalize()}{index}"
        return StaticTool(f"big.{name}", "big", name, f"{verb.capitalize()} a {noun} of the account", {}, {}, echo)

    return Catalog([Integration("big", "Big", "Many tools", "openapi", tuple(numbered(i) for i in range(size)))])


async def test_a_large_catalog_is_searched_off_the_event_loop(context: CallContext) -> None:
    size = 4_000  # large enough that five of its costliest searches take far longer than a tick
    assert size >= THREADED_SEARCH_ENTRIES
    catalog = large_catalog(size)
    costly = {"query": " ".join("aeiounrst" * 3), "limit": 50}  # short words that nearly every entry holds
    warm = await catalog.invoke("search", costly, context)  # builds the index
    assert warm["total"] == size
    entries = [(tool.id, tool.name, tool.integration, tool.description) for tool in catalog.integrations[0].tools]
    expected = SearchIndex([Entry(*fields) for fields in entries]).search(costly["query"], None, 50, 0)
    assert [(item["path"], item["score"]) for item in warm["items"]] == [
        (entry.path, points) for entry, points in expected.items
    ]

    ticks_while_searching = 0
    searching, done = False, trio.Event()

    async def ticker() -> None:
        nonlocal ticks_while_searching
        while not done.is_set():
            await trio.sleep(0.001)
            if searching and not done.is_set():
                ticks_while_searching += 1

    async def search() -> None:
        nonlocal searching
        searching = True
        for _ in range(5):
            await catalog.invoke("search", costly, context)
        done.set()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            nursery.start_soon(search)
    assert ticks_while_searching >= 2  # the loop kept running other tasks; inline, it could not tick at all


async def test_a_flood_of_searches_waits_behind_its_own_author(context: CallContext) -> None:
    catalog = large_catalog(2_000)
    costly = {"query": " ".join("aeiounrst" * 3)}
    await catalog.invoke("search", costly, context)  # builds the index
    flooder = attrs.evolve(context, principal=Owner(account_id="flooder", org_id="acme"))
    neighbour = attrs.evolve(context, principal=Owner(account_id="neighbour", org_id="acme"))
    flood_done = 0
    done_when_neighbour_answered: int | None = None

    async def flood() -> None:
        nonlocal flood_done
        await catalog.invoke("search", costly, flooder)
        flood_done += 1

    async def neighbour_search() -> None:
        nonlocal done_when_neighbour_answered
        found = await catalog.invoke("search", {"query": "delete hook"}, neighbour)
        assert found["total"] > 0
        done_when_neighbour_answered = flood_done

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(flood)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(neighbour_search)
    assert flood_done == 8
    # Behind the one running and at most one more of the flood's; in one shared queue it would wait for all 8.
    assert done_when_neighbour_answered is not None
    assert done_when_neighbour_answered <= 2
    assert not catalog._turns._queues  # a queue lives only while someone waits in it
