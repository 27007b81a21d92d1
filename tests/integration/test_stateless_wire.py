"""MCP 2026-07-28 on the wire, with raw httpx against the real server: each row of the spec's ladder as status,
code and echoed id; the POST shapes 2026 refuses; no GET or DELETE; the result shapes; a slow call answered as
an event stream with no event ids; and a client leaving mid-call cancelling it (its later upstream request is
never made)."""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from executor_mcp.transport import stateless as stateless_transport
from tests.auth_support import mint
from tests.conftest import ServerUnderTest, jwt_server, start_server
from tests.integration.test_passthrough import GET_ORDER
from tests.integration.test_passthrough import orders as orders
from tests.integration.test_passthrough import upstream as upstream
from tests.mcp_http import BOTH, envelope, sse_messages
from tests.sdk import PRODUCT_TOOLS
from tests.upstream import Upstream

MODERN = "2026-07-28"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
FORM = {"elicitation": {"form": {}}}


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, allow_local_network=True)


def meta(capabilities: dict[str, Any] | None = None, version: str = MODERN) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": capabilities or {},
        "io.modelcontextprotocol/clientInfo": {"name": "wire-tests", "version": "0"},
    }


def body(request_id: Any, method: str, params: dict[str, Any] | None = None, **meta_options: Any) -> dict[str, Any]:
    """A 2026 request: `params` with the `_meta` a conforming client adds to every request."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {**(params or {}), "_meta": meta(**meta_options)},
    }


def call_body(request_id: Any, name: str, arguments: dict[str, Any], **meta_options: Any) -> dict[str, Any]:
    return body(request_id, "tools/call", {"name": name, "arguments": arguments}, **meta_options)


def routing(message: dict[str, Any], version: str = MODERN) -> dict[str, str]:
    """The headers a conforming client sends with `message`: Accept, the version and the routing headers."""
    sent = {"accept": BOTH, "content-type": "application/json", "mcp-protocol-version": version}
    if "method" in message:
        sent["mcp-method"] = message["method"]
        name = (message.get("params") or {}).get("name")
        if message["method"] == "tools/call" and isinstance(name, str):
            sent["mcp-name"] = name
    return sent


async def send(
    http: httpx.AsyncClient, url: str, message: Any, headers: Any = None, **overrides: str | None
) -> httpx.Response:
    """POST `message` with `headers` (by default its conforming ones), `overrides` replacing (or, None,
    removing) some of them."""
    sent = dict(routing(message) if headers is None else headers)
    for name, value in overrides.items():
        name = name.replace("_", "-")
        if value is None:
            sent.pop(name, None)
        else:
            sent[name] = value
    return await http.post(url, content=json.dumps(message), headers=sent)


def error_of(response: httpx.Response) -> tuple[int, int, Any]:
    """(status, code, id) of a 2026 error answer."""
    status, code, _ = envelope(response)
    return status, code, response.json()["id"]


def result_of(response: httpx.Response, request_id: Any) -> dict[str, Any]:
    """The result of a JSON answer to `request_id`."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    answer = response.json()
    assert answer["id"] == request_id
    return answer["result"]


async def execute(http: httpx.AsyncClient, url: str, code: str, request_id: Any = 1) -> dict[str, Any]:
    return result_of(await send(http, url, call_body(request_id, "execute", {"code": code})), request_id)


# -- the ladder, row by row ----------------------------------------------------------------------------


async def test_row_1_a_foreign_origin(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    answer = await send(http, executor.url, body(1, "tools/list"), origin="http://evil.example")
    assert envelope(answer)[0] == 403


async def test_row_2_a_request_with_no_bearer(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    server = await jwt_server(nursery, data_dir, tmp_path)
    answer = await send(http, server.url, body(2, "tools/list"))
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Bearer ")
    served = await send(http, server.url, body(2, "tools/list"), authorization=f"Bearer {mint()}")
    assert result_of(served, 2)["resultType"] == "complete"


async def test_row_3_accept_must_list_both_media_types(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    answer = await send(http, executor.url, body(3, "tools/list"), accept="application/json")
    assert envelope(answer)[0] == 406


async def test_row_4_a_body_that_is_not_json(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    headers = routing({"method": "tools/list"})
    assert error_of(await http.post(executor.url, content=b"{not json", headers=headers)) == (400, -32700, None)


async def test_row_5_a_batch_is_refused_with_no_id(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    batch = [body(1, "tools/list"), body(2, "tools/list")]
    answer = await send(http, executor.url, batch, routing(batch[0]))
    assert error_of(answer) == (400, -32600, None)
    assert "batch" in answer.json()["error"]["message"]


async def test_row_5_a_posted_response_is_refused_with_no_id(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    response = {"jsonrpc": "2.0", "id": 1, "result": {"_meta": meta()}}
    assert error_of(await send(http, executor.url, response, routing({}))) == (400, -32600, None)


async def test_row_6_a_notification_is_acknowledged_and_dropped(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    notification = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "_meta": meta()}}
    answer = await send(http, executor.url, notification)
    assert (answer.status_code, answer.content) == (202, b"")
    assert "content-type" not in answer.headers
    assert "mcp-session-id" not in answer.headers


@pytest.mark.parametrize(
    "broken",
    [
        lambda params: params.pop("_meta"),
        lambda params: params["_meta"].pop("io.modelcontextprotocol/protocolVersion"),
        lambda params: params["_meta"].pop("io.modelcontextprotocol/clientCapabilities"),
    ],
    ids=["no _meta", "no protocolVersion", "no clientCapabilities"],
)
async def test_row_7_meta_without_version_or_capabilities(
    executor: ServerUnderTest, http: httpx.AsyncClient, broken: Any
) -> None:
    message = body("seven", "tools/list")
    broken(message["params"])
    assert error_of(await send(http, executor.url, message)) == (400, -32602, "seven")


async def test_row_7_client_info_is_optional(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    message = body(7, "tools/list")
    del message["params"]["_meta"]["io.modelcontextprotocol/clientInfo"]
    assert result_of(await send(http, executor.url, message), 7)["resultType"] == "complete"


@pytest.mark.parametrize(
    "overrides",
    [
        {"mcp_protocol_version": None},
        {"mcp_method": None},
        {"mcp_name": None},
        {"mcp_protocol_version": "2026-07-29"},
        {"mcp_method": "TOOLS/CALL"},
        {"mcp_name": "skills"},
        {"mcp_name": "=?base64?not base64?="},
        {"mcp_name": "=?base64?c2tpbGxz?="},  # "skills", encoded: decoded before it is compared
    ],
    ids=lambda overrides: repr(overrides),
)
async def test_row_8_routing_headers_missing_mismatched_or_undecodable(
    executor: ServerUnderTest, http: httpx.AsyncClient, overrides: dict[str, str | None]
) -> None:
    """Without a version header, the body's own `_meta` claim keeps the request in 2026 (and so -32020)."""
    message = call_body(8, "execute", {"code": "return 1"})
    assert error_of(await send(http, executor.url, message, **overrides)) == (400, -32020, 8)


@pytest.mark.parametrize("name", ["mcp-protocol-version", "mcp-method", "mcp-name"])
async def test_row_8_a_repeated_routing_header(executor: ServerUnderTest, http: httpx.AsyncClient, name: str) -> None:
    message = call_body(8, "execute", {"code": "return 1"})
    headers = list(routing(message).items())
    headers.append((name, dict(headers)[name]))  # the same value twice is still twice
    answer = await http.post(executor.url, content=json.dumps(message), headers=headers)
    assert error_of(answer) == (400, -32020, 8)
    assert answer.json()["error"]["message"] == f"Header mismatch: {name} is sent more than once"


async def test_row_8_the_base64_form_is_decoded(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    """(Surrounding whitespace never reaches the server over HTTP/1.1, whose parsers strip it: its trimming is
    a unit test's.)"""
    message = call_body(8, "execute", {"code": "return 8"})
    answer = await send(http, executor.url, message, mcp_name="=?base64?ZXhlY3V0ZQ==?=")
    assert result_of(answer, 8)["structuredContent"]["result"] == 8


async def test_row_8_comes_before_row_9(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    message = body(9, "tools/list", version="v999.0.0")
    assert error_of(await send(http, executor.url, message)) == (400, -32020, 9)


async def test_row_9_an_unsupported_version(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    message = body(9, "tools/list", version="v999.0.0")
    answer = await send(http, executor.url, message, routing(message, "v999.0.0"))
    assert error_of(answer) == (400, -32022, 9)
    assert answer.json()["error"]["data"] == {"supported": [MODERN], "requested": "v999.0.0"}
    assert "mcp-session-id" not in answer.headers


@pytest.mark.parametrize("method", ["initialize", "ping", "resources/list", "subscriptions/listen", "tasks/list"])
async def test_row_10_a_method_not_served(executor: ServerUnderTest, http: httpx.AsyncClient, method: str) -> None:
    """Method names are era-scoped: a 2026 `initialize` or `ping` is not a method (and opens no session)."""
    answer = await send(http, executor.url, body(10, method))
    assert error_of(answer) == (404, -32601, 10)
    assert "mcp-session-id" not in answer.headers


async def test_row_11_an_unknown_tool(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    answer = await send(http, executor.url, call_body(11, "nope", {}))
    assert error_of(answer) == (400, -32602, 11)
    assert answer.json()["error"]["message"] == "Tool nope not found"


async def test_row_12_native_mode_without_form_elicitation(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    answer = await send(http, executor.url + "?elicitation_mode=native", call_body(12, "execute", {"code": "return 1"}))
    assert error_of(answer) == (400, -32021, 12)
    assert answer.json()["error"]["data"] == {"requiredCapabilities": FORM}


# -- no GET, no DELETE ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_get_and_delete_are_not_2026_methods(
    executor: ServerUnderTest, http: httpx.AsyncClient, method: str
) -> None:
    answer = await http.request(method, executor.url, headers={"accept": BOTH, "mcp-protocol-version": MODERN})
    assert answer.status_code == 405
    assert answer.headers["allow"] == "POST"


# -- result shapes -------------------------------------------------------------------------------------


async def test_discover(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    result = result_of(await send(http, executor.url, body("d", "server/discover")), "d")
    assert result["supportedVersions"] == [MODERN]
    assert result["capabilities"] == {"tools": {}}
    assert (result["resultType"], result["ttlMs"], result["cacheScope"]) == ("complete", 3_600_000, "public")
    assert result["_meta"][SERVER_INFO_KEY]["name"] == "executor"


async def test_tools_list_is_complete_and_privately_cacheable(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    answer = await send(http, executor.url, body("l", "tools/list"))
    result = result_of(answer, "l")
    assert [tool["name"] for tool in result["tools"]] == PRODUCT_TOOLS
    assert (result["resultType"], result["ttlMs"], result["cacheScope"]) == ("complete", 30_000, "private")
    assert result["_meta"][SERVER_INFO_KEY]["name"] == "executor"
    assert "mcp-session-id" not in answer.headers


async def test_a_tool_result_is_complete(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    result = await execute(http, executor.url, "return 6*7", "c")
    assert result["resultType"] == "complete"
    assert result["structuredContent"]["result"] == 42
    assert "ttlMs" not in result  # a tool result is not a cacheable one
    assert SERVER_INFO_KEY in result["_meta"]


# -- streams and cancellation --------------------------------------------------------------------------

SLEEP_THEN_ORDER = (
    "await new Promise((resolve) => setTimeout(resolve, {ms})); return await tools.{path}({{ orderId: {order} }});"
)


def sleep_then_order(ms: int, order: str) -> str:
    """Code that waits `ms`, then makes one upstream request the upstream records (its path names `order`)."""
    return SLEEP_THEN_ORDER.format(ms=ms, path=GET_ORDER, order=json.dumps(order))


@pytest.fixture
def quick_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call still running after 0.2 s is answered as a stream, keep-alives every 0.3 s (the server runs on
    the test's loop: the endpoint reads both when it answers)."""
    monkeypatch.setattr(stateless_transport, "COMMIT_SECONDS", 0.2)
    monkeypatch.setattr(stateless_transport, "STREAM_KEEPALIVE_SECONDS", 0.3)


async def test_a_slow_call_is_answered_as_a_stream_with_no_event_ids(
    orders: None, quick_commit: None, executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    message = call_body("slow", "execute", {"code": sleep_then_order(1500, "s")})
    answer = await send(http, executor.url, message)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert answer.headers["x-accel-buffering"] == "no"
    lines = answer.text.split("\n")
    assert not [line for line in lines if line.startswith(("id:", "retry:"))]
    assert ": keepalive" in lines  # the stream stayed alive while the code slept
    (final,) = sse_messages(answer.text)
    assert final["id"] == "slow"
    assert final["result"]["resultType"] == "complete"
    assert final["result"]["structuredContent"]["result"]["data"] == {"id": "s", "status": "shipped"}
    assert [call.path for call in upstream.calls("/orders")] == ["/orders/s"]


async def then_a_later_call_completes(http: httpx.AsyncClient, url: str, upstream: Upstream) -> None:
    """The cancellation's witness: a call that sleeps twice as long as the left one, and makes its own upstream
    request. Had the left call gone on, its request would have come first; only this one's may arrive."""
    answer = await send(http, url, call_body("later", "execute", {"code": sleep_then_order(3000, "later")}))
    messages = (
        sse_messages(answer.text) if answer.headers["content-type"].startswith("text/event-stream") else [answer.json()]
    )
    assert messages[-1]["result"]["structuredContent"]["result"]["data"]["id"] == "later"
    assert [call.path for call in upstream.calls("/orders")] == ["/orders/later"]


async def test_a_client_leaving_a_stream_cancels_the_call(
    orders: None, quick_commit: None, executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    message = call_body("left", "execute", {"code": sleep_then_order(1500, "left")})
    with trio.fail_after(10):
        async with http.stream("POST", executor.url, content=json.dumps(message), headers=routing(message)) as answer:
            assert answer.headers["content-type"].startswith("text/event-stream")
        # Leaving the block closes the connection with the code still asleep.
    await then_a_later_call_completes(http, executor.url, upstream)


async def test_a_client_leaving_before_the_answer_starts_cancels_the_call(
    orders: None, executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    """Within the 15 s a call may take and still be answered as JSON, nothing has been sent yet."""
    message = call_body("left", "execute", {"code": sleep_then_order(1500, "left")})
    with trio.move_on_after(0.5) as waited:
        await send(http, executor.url, message)
    assert waited.cancelled_caught
    await then_a_later_call_completes(http, executor.url, upstream)
