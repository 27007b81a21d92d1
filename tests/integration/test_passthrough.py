"""Passthrough mode end to end: a real server, the official client on `/mcp?mode=passthrough`, a real local
upstream behind an OpenAPI integration and its connection. `search` finds and types the tools, `invoke` calls
them through the same engine, policies and approvals as `execute`."""

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
import trio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitResult

from tests.conftest import ServerUnderTest, start_server
from tests.integration.test_integrations_e2e import SECRET, add_orders, shop
from tests.sdk import PRODUCT_TOOLS, connect, execution_id, resume, text_of
from tests.upstream import Upstream, start_upstream

GET_ORDER = "orders.org.myMainKey.orders.getOrder"
PASSTHROUGH_TOOLS = ["search", "invoke", "resume"]


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, allow_local_network=True)


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    return await start_upstream(nursery, shop)


@pytest.fixture
async def orders(executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient) -> None:
    await add_orders(http, executor, upstream)


@pytest.fixture
async def passthrough(executor: ServerUnderTest) -> Any:
    async with connect(executor.url + "?mode=passthrough", mode="legacy") as (connected, _):
        yield connected


async def invoke(client: Client, path: str, args: Any = None) -> Any:
    arguments: dict[str, Any] = {"path": path}
    if args is not None:
        arguments["args"] = args
    return await client.call_tool("invoke", arguments)


async def invoked(client: Client, path: str, args: Any = None) -> Any:
    """The tool's own answer, as `return await tools.<path>(args)` would give it."""
    result = await invoke(client, path, args)
    assert not result.is_error, text_of(result)
    assert result.structured_content["status"] == "completed"
    return result.structured_content["result"]


async def executed(client: Client, code: str) -> Any:
    result = await client.call_tool("execute", {"code": code})
    assert not result.is_error, text_of(result)
    return result.structured_content["result"]


async def add_policy(http: httpx.AsyncClient, executor: ServerUnderTest, pattern: str, action: str) -> None:
    body = {"owner": "org", "pattern": pattern, "action": action}
    assert (await http.post(executor.running.url + "/api/policies", json=body)).status_code == 200


# -- what is listed -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("?mode=passthrough", PASSTHROUGH_TOOLS),
        ("?mode=passthrough&elicitation_mode=native", ["search", "invoke"]),
        ("", PRODUCT_TOOLS),
        ("?mode=Passthrough", PRODUCT_TOOLS),
        ("?mode=execute", PRODUCT_TOOLS),
        ("?mode=", PRODUCT_TOOLS),
    ],
)
async def test_the_mode_decides_the_tools_and_anything_unknown_is_the_execute_mode(
    executor: ServerUnderTest, query: str, names: list[str]
) -> None:
    async with connect(executor.url + query, mode="legacy") as (client, _):
        assert [tool.name for tool in (await client.list_tools()).tools] == names


async def test_execute_and_skills_are_not_tools_of_a_passthrough_session(passthrough: Client) -> None:
    for name, arguments in (("execute", {"code": "return 1"}), ("skills", {})):
        with pytest.raises(MCPError) as refused:
            await passthrough.call_tool(name, arguments)
        assert (refused.value.error.code, refused.value.error.message) == (-32602, f"Tool {name} not found")


async def test_the_search_description_lists_connected_integrations(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, passthrough: Client
) -> None:
    (search, invoke_tool, resume_tool) = (await passthrough.list_tools()).tools
    assert "## Available integrations" not in search.description
    assert "`invoke({ path, args })`" in search.description
    assert "search" in invoke_tool.description
    assert resume_tool.description.startswith("Resume a paused invoke")
    await add_orders(http, executor, upstream)
    async with connect(executor.url + "?mode=passthrough", mode="legacy") as (after, _):
        (search, *_) = (await after.list_tools()).tools
        assert "\n- `orders`" in search.description.split("## Available integrations", 1)[1]


# -- search ---------------------------------------------------------------------------------------


async def test_search_gives_each_match_its_input_type_and_the_named_types_it_uses(
    orders: None, passthrough: Client
) -> None:
    result = await passthrough.call_tool("search", {"namespace": "orders", "query": "order"})
    assert not result.is_error, text_of(result)
    found = result.structured_content
    assert json.loads(text_of(result)) == found
    matches = {item["path"]: item for item in found["items"]}
    get_order = matches[GET_ORDER]
    assert get_order["description"] == "Fetch one order by id."
    assert get_order["integration"] == "orders"
    assert get_order["inputTypeScript"] == (
        '{ orderId: string; include?: ("items" | "customer")[]; "X-Trace"?: string; session?: string; }'
    )
    assert "inputDefinitions" not in get_order  # its input names no type (its output's Order is not needed)
    assert found["total"] == 3
    assert found["hasMore"] is False


async def test_search_pages_and_describes_one_tool_by_its_path(orders: None, passthrough: Client) -> None:
    first = (await passthrough.call_tool("search", {"namespace": "orders", "query": "", "limit": 2})).structured_content
    assert len(first["items"]) == 2
    assert first["nextOffset"] == 2
    rest = await passthrough.call_tool("search", {"namespace": "orders", "query": "", "offset": first["nextOffset"]})
    assert [item["path"] for item in first["items"] + rest.structured_content["items"]] == sorted(
        f"orders.org.myMainKey.orders.{name}" for name in ("createOrder", "getOrder", "getOrderInvoice")
    )
    described = await passthrough.call_tool("search", {"path": "tools." + GET_ORDER})
    assert not described.is_error
    assert described.structured_content["outputTypeScript"] == (
        "{ ok: true; data: Order; http?: ToolHttpMeta } | { ok: false; error: ToolError }"
    )
    assert described.structured_content["typeScriptDefinitions"]["Order"].startswith("{ id: string;")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"path": GET_ORDER, "query": "order"}, "Error: Give either path (to describe one tool) or query (to search)."),
        ({"query": 7}, "Error: tools.search query must be a string when provided"),
        ({"query": "order", "limit": 0}, "Error: tools.search limit must be a positive number when provided"),
    ],
)
async def test_bad_search_arguments_are_tool_errors(
    orders: None, passthrough: Client, arguments: dict, message: str
) -> None:
    result = await passthrough.call_tool("search", arguments)
    assert result.is_error
    assert text_of(result) == message


async def test_describing_an_unknown_path_is_tool_not_found_with_suggestions(orders: None, passthrough: Client) -> None:
    result = await passthrough.call_tool("search", {"path": "orders.org.myMainKey.orders.getOrdr"})
    assert result.is_error
    assert result.structured_content["error"]["code"] == "tool_not_found"
    assert GET_ORDER in result.structured_content["error"]["suggestions"]


async def test_a_page_of_long_types_is_shown_whole_and_paging_reaches_every_match(
    executor: ServerUnderTest, http: httpx.AsyncClient, passthrough: Client
) -> None:
    fields = {
        f"field{index}": {"type": "string", "enum": [f"value-{index}-{n}" for n in range(8)]} for index in range(8)
    }
    body = {"content": {"application/json": {"schema": {"type": "object", "properties": fields}}}}
    operations = {
        f"/widgets{index}": {
            "post": {
                "operationId": f"makeWidget{index}",
                "requestBody": body,
                "responses": {"200": {"description": "ok"}},
            }
        }
        for index in range(60)
    }
    spec = {"openapi": "3.0.3", "info": {"title": "Widgets", "version": "1"}, "paths": operations}
    added = await http.post(
        executor.running.url + "/api/openapi/specs",
        json={"spec": {"kind": "blob", "value": json.dumps(spec)}, "slug": "widgets"},
    )
    assert added.status_code == 200, added.text
    connection = {"owner": "org", "name": "main", "integration": "widgets", "template": "none"}
    assert (await http.post(executor.running.url + "/api/connections", json=connection)).status_code == 200
    paths: list[str] = []
    offset: int | None = 0
    for _ in range(10):
        page = await passthrough.call_tool(
            "search", {"namespace": "widgets", "query": "", "limit": 50, "offset": offset}
        )
        assert json.loads(text_of(page)) == page.structured_content  # never cut mid-JSON
        items = page.structured_content["items"]
        assert 0 < len(items) < 50  # each match's type is long: fewer than asked fit, the rest are the next page
        assert all("inputTypeScript" in item for item in items)
        paths += [item["path"] for item in items]
        offset = page.structured_content["nextOffset"]
        if offset is None:
            break
    assert len(paths) == len(set(paths)) == 60


# -- invoke ---------------------------------------------------------------------------------------


async def test_invoke_calls_the_tool_with_the_connection_credential(
    orders: None, upstream: Upstream, passthrough: Client
) -> None:
    result = await invoke(passthrough, GET_ORDER, {"orderId": "a b/c", "include": ["items"], "X-Trace": "t1"})
    assert not result.is_error, text_of(result)
    called = result.structured_content["result"]
    assert called["ok"] is True
    assert called["data"] == {"id": "a%20b%2Fc", "status": "shipped"}
    assert called["http"]["status"] == 200
    assert json.loads(text_of(result)) == called  # execute's completion text: the result, indented JSON
    (request,) = upstream.calls("/orders")
    assert request.path == "/orders/a%20b%2Fc"
    assert request.query == "include=items"
    assert request.headers["x-api-key"] == SECRET
    assert request.headers["x-trace"] == "t1"
    assert SECRET not in text_of(result)


async def test_invoke_reaches_the_executors_own_tools_with_or_without_the_tools_prefix(passthrough: Client) -> None:
    for path in ("executor.coreTools.integrations.list", "tools.executor.coreTools.integrations.list"):
        listed = await invoked(passthrough, path)
        assert listed["ok"] is True
        assert [item["slug"] for item in listed["data"]["integrations"]] == ["executor"]


async def test_invoke_answers_what_execute_answers(
    orders: None, executor: ServerUnderTest, upstream: Upstream, passthrough: Client
) -> None:
    async with connect(executor.url, mode="legacy") as (client, _):
        for path, args in (
            ("orders.org.myMainKey.orders.nope", {}),  # no such tool
            ("nowhere.org.main.tool", None),  # no such integration
            (GET_ORDER, {"orderId": "2", "doesNotExist": 1}),  # refused before anything is sent
        ):
            argument = "" if args is None else json.dumps(args)
            expected = await executed(client, f"return await tools.{path}({argument});")
            assert await invoked(passthrough, path, args) == expected
            assert expected["ok"] is False
    assert upstream.calls("/orders") == []


async def test_unknown_tools_are_tool_not_found_with_suggestions(orders: None, passthrough: Client) -> None:
    answer = await invoked(passthrough, "orders.org.myMainKey.orders.fetchOrder", {"orderId": "1"})
    assert answer["error"]["code"] == "tool_not_found"
    assert answer["error"]["message"] == "Tool not found: orders.org.myMainKey.orders.fetchOrder"
    assert GET_ORDER in answer["error"]["details"]["suggestions"]


@pytest.mark.parametrize(
    "path",
    [
        'a"]);while(1);//',
        '"]); while (true) {} //',
        "search",
        "describe.tool",
        "orders.team.main.getOrder",
        "orders.org.main",
        "orders.org.my-key.getOrder",
        "orders.org.main.get order",
        "orders.org.main.orders..getOrder",
        "",
        "tools.",
        "x" * 600,
    ],
)
async def test_a_path_of_no_tool_shape_is_refused_before_anything_runs(passthrough: Client, path: str) -> None:
    result = await invoke(passthrough, path, {})
    assert result.is_error
    assert text_of(result).startswith("Error: Invalid tool path ")
    assert "`<integration>.<owner>.<connection>.<tool>`" in text_of(result)
    assert result.structured_content is None  # refused here: no execution ran


async def test_hostile_text_in_a_path_or_the_arguments_stays_data(
    orders: None, upstream: Upstream, passthrough: Client
) -> None:
    hostile = 'x"]);globalThis.pwned=1;while(true){};//'
    answer = await invoked(passthrough, f"orders.org.myMainKey.{hostile}", {})
    assert answer["error"]["code"] == "tool_not_found"
    assert answer["error"]["message"] == f"Tool not found: orders.org.myMainKey.{hostile}"
    order_id = '"));while(1);//\u2028`${1}`'
    called = await invoked(passthrough, GET_ORDER, {"orderId": order_id})
    assert called["ok"] is True
    (request,) = upstream.calls("/orders")
    assert unquote(request.path) == "/orders/" + order_id
    # A `__proto__` key is an argument like any other (an object literal would have made it a prototype).
    refused = await invoked(passthrough, GET_ORDER, {"orderId": "1", "__proto__": {"polluted": True}})
    assert refused["error"]["code"] == "invalid_tool_arguments"
    assert "__proto__" in refused["error"]["message"]


@pytest.mark.parametrize(
    ("arguments", "field", "expected"),
    [({}, "path", "string"), ({"path": 7}, "path", "string"), ({"path": GET_ORDER, "args": "{}"}, "args", "object")],
)
async def test_invoke_arguments_of_the_wrong_type_are_input_validation_errors(
    passthrough: Client, arguments: dict, field: str, expected: str
) -> None:
    result = await passthrough.call_tool("invoke", arguments)
    assert result.is_error
    text = text_of(result)
    assert text.startswith("MCP error -32602: Input validation error: Invalid arguments for tool invoke: ")
    (issue,) = json.loads(text.split(": ", 3)[3])
    assert (issue["path"], issue["expected"]) == ([field], expected)


# -- policies and approvals -----------------------------------------------------------------------


async def test_require_approval_pauses_an_invoke_and_resume_runs_it_exactly_once(
    orders: None, executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, passthrough: Client
) -> None:
    await add_policy(http, executor, GET_ORDER, "require_approval")
    paused = await invoke(passthrough, GET_ORDER, {"orderId": "7"})
    assert text_of(paused).startswith(f"Execution paused: Approve {GET_ORDER}? (matched policy: {GET_ORDER})")
    assert upstream.calls("/orders") == []
    execution = execution_id(paused)
    resumed = await passthrough.call_tool("resume", {"executionId": execution, "action": "accept"})
    assert resumed.structured_content["result"]["data"] == {"id": "7", "status": "shipped"}
    again = await passthrough.call_tool("resume", {"executionId": execution, "action": "accept"})
    assert again.structured_content == resumed.structured_content  # replayed, not run again
    assert len(upstream.calls("/orders")) == 1


async def test_an_unknown_pause_tells_a_passthrough_session_to_invoke_again(passthrough: Client) -> None:
    unknown = "exec_00000000-0000-4000-8000-000000000000"
    answer = await passthrough.call_tool("resume", {"executionId": unknown, "action": "accept"})
    assert answer.is_error
    assert answer.structured_content["status"] == "execution_not_found"
    assert "call the invoke tool again with the same path and args" in text_of(answer)
    assert "execute" not in text_of(answer)


async def test_a_declined_invoke_never_reaches_the_upstream(
    orders: None, executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, passthrough: Client
) -> None:
    await add_policy(http, executor, "orders.*", "require_approval")
    paused = await invoke(passthrough, GET_ORDER, {"orderId": "7"})
    declined = await passthrough.call_tool("resume", {"executionId": execution_id(paused), "action": "decline"})
    assert declined.is_error
    assert text_of(declined) == (
        f'Error: Tool "{GET_ORDER}" requires approval but the request was declined by the user.'
    )
    assert upstream.calls("/orders") == []


async def test_block_refuses_an_invoke_as_it_refuses_execute(
    orders: None, executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, passthrough: Client
) -> None:
    await add_policy(http, executor, "orders.org.*", "block")
    assert await invoked(passthrough, GET_ORDER, {"orderId": "7"}) == {
        "ok": False,
        "error": {"code": "tool_blocked", "message": f"Tool blocked by policy: {GET_ORDER}"},
    }
    assert upstream.calls("/orders") == []


async def test_native_elicitation_asks_inline_for_a_gated_invoke(
    orders: None, executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    await add_policy(http, executor, GET_ORDER, "require_approval")
    asked: list[str] = []

    async def answer(context, params) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={})

    url = executor.url + "?mode=passthrough&elicitation_mode=native"
    async with connect(url, mode="legacy", elicitation_callback=answer) as (client, _):
        called = await invoked(client, GET_ORDER, {"orderId": "9"})
    assert called["data"] == {"id": "9", "status": "shipped"}
    (message,) = asked
    assert message.startswith(f"Approve {GET_ORDER}?")
    assert len(upstream.calls("/orders")) == 1


# -- the mode lasts ---------------------------------------------------------------------------------


async def test_the_mode_survives_a_restart(nursery: trio.Nursery, data_dir: Path) -> None:
    first = await start_server(nursery, data_dir)
    async with connect(first.url + "?mode=passthrough", mode="legacy") as (client, recorder):
        initialized = client.session.initialize_result
        session_id = recorder.session_id
        assert session_id is not None
        assert initialized is not None
        await first.stop()
        second = await start_server(nursery, data_dir)
        async with resume(second.url, session_id, initialized) as restored:
            assert [tool.name for tool in (await restored.list_tools()).tools] == PASSTHROUGH_TOOLS
            listed = await restored.call_tool("invoke", {"path": "executor.coreTools.integrations.list"})
            assert listed.structured_content["result"]["ok"] is True
        await second.stop()
