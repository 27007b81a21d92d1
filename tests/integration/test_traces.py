"""Traces end to end: a real server with `--otlp-endpoint` pointing at an OTLP/HTTP receiver the test starts, the
official client sending W3C trace context, code calling an OpenAPI tool on a real upstream. The spans arrive with
the right parent/child links (client → request → MCP method → execution → tool call → outbound request), the
upstream gets the trace context of the outbound span, a 2026 request's `_meta` trace context is honoured, and no
span holds an argument, a result, a credential or a session id. Without `--otlp-endpoint` nothing is sent."""

import json
from pathlib import Path

import httpx
import trio

from tests.conftest import ServerUnderTest, start_server
from tests.integration.test_integrations_e2e import SECRET, add_orders, shop
from tests.integration.test_stateless_wire import call_body, send
from tests.mcp_http import open_session, post, sse_messages
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan, start_otlp_receiver
from tests.process import command
from tests.upstream import Upstream, start_upstream

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
ORDER_ID = "order-arg-7f3e9c"  # an argument value: it must reach the upstream and no span
PATH_TEXT = "pathText5c1e"  # a path that names no tool: text the code chose, kept out of every span
CODE = (
    f"await tools.nowhere.{PATH_TEXT}({{}});"
    f' const r = await tools.orders.org.myMainKey.orders.getOrder({{ orderId: "{ORDER_ID}" }}); return r.data;'
)
WAIT = 20.0


async def spans_of(receiver: OtlpReceiver, trace_id: str, count: int) -> list[ReceivedSpan]:
    with trio.fail_after(WAIT):
        while True:
            found = [span for span in receiver.spans() if span.trace_id == trace_id]
            if len(found) >= count:
                return found
            await trio.sleep(0.1)


def named(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    (found,) = [span for span in spans if span.name == name]
    return found


async def traced_world(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> tuple[ServerUnderTest, Upstream, OtlpReceiver]:
    receiver = await start_otlp_receiver(nursery)
    server = await start_server(nursery, data_dir, allow_local_network=True, otlp_endpoint=receiver.endpoint)
    upstream = await start_upstream(nursery, shop)
    await add_orders(http, server, upstream)
    return server, upstream, receiver


async def call_tool(http: httpx.AsyncClient, url: str, session_id: str, **extra: str) -> dict:
    body = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "execute", "arguments": {"code": CODE}},
    }
    answer = await post(http, url, body, session_id, **extra)
    (message,) = [m for m in sse_messages(answer.text) if m.get("id") == 2]
    return message


async def test_a_tool_call_is_one_trace_from_the_client_to_the_upstream(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    server, upstream, receiver = await traced_world(nursery, data_dir, http)
    session_id = await open_session(http, server.url)
    message = await call_tool(http, server.url, session_id, traceparent=TRACEPARENT)
    assert message["result"]["structuredContent"]["result"]["id"] == ORDER_ID

    spans = await spans_of(receiver, CLIENT_TRACE, 6)
    request = next(span for span in spans if span.kind == "server" and span.parent_span_id == CLIENT_SPAN)
    method = named(spans, "tools/call execute")
    execution = named(spans, "execution")
    tool = named(spans, "tool orders.org.myMainKey.orders.getOrder")
    outbound = named(spans, "GET")
    assert request.name == "POST /mcp"
    assert (method.parent_span_id, execution.parent_span_id) == (request.span_id, method.span_id)
    assert (tool.parent_span_id, outbound.parent_span_id) == (execution.span_id, tool.span_id)
    assert (tool.kind, outbound.kind) == ("internal", "client")
    assert tool.attributes["executor.integration"] == "orders"
    assert tool.attributes["executor.tool.outcome"] == "ok"
    assert outbound.attributes["http.response.status_code"] == 200
    assert request.resource["service.name"] == "executor-mcp"

    (reached,) = upstream.calls(f"/orders/{ORDER_ID}")
    assert reached.headers["traceparent"].split("-")[1:3] == [CLIENT_TRACE, outbound.span_id]
    everything = receiver.raw()
    assert named(spans, "tool call").attributes["executor.tool.outcome"] == "tool_not_found"
    for secret in (SECRET, ORDER_ID, session_id, CODE, PATH_TEXT):
        assert secret.encode() not in everything


async def test_a_2026_requests_meta_names_its_parent(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    server, _, receiver = await traced_world(nursery, data_dir, http)
    message = call_body(1, "execute", {"code": "return 6 * 7"})
    message["params"]["_meta"]["traceparent"] = TRACEPARENT
    answer = await send(http, server.url, message)
    assert answer.status_code == 200, answer.text
    spans = await spans_of(receiver, CLIENT_TRACE, 2)
    method = named(spans, "tools/call execute")
    assert method.parent_span_id == CLIENT_SPAN
    assert named(spans, "execution").parent_span_id == method.span_id


async def test_without_an_endpoint_nothing_is_traced_or_sent(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    receiver = await start_otlp_receiver(nursery)
    server = await start_server(nursery, data_dir, allow_local_network=True)
    upstream = await start_upstream(nursery, shop)
    await add_orders(http, server, upstream)
    await call_tool(http, server.url, await open_session(http, server.url), traceparent=TRACEPARENT)
    (reached,) = upstream.calls(f"/orders/{ORDER_ID}")
    assert "traceparent" not in reached.headers
    await trio.sleep(1.5)
    assert receiver.upstream.received == []


async def test_over_stdio_a_requests_meta_names_its_parent(nursery: trio.Nursery, tmp_path: Path) -> None:
    """`executor-mcp stdio` has no headers: a request's `_meta` carries its trace context, and its spans reach the
    receiver before the process exits (the last export runs at shutdown)."""
    receiver = await start_otlp_receiver(nursery)
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "execute", "arguments": {"code": "return 6 * 7"}, "_meta": {"traceparent": TRACEPARENT}},
    }
    lines = [initialize, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call]
    with trio.fail_after(WAIT):
        done = await trio.run_process(
            command("stdio", "--data-dir", str(tmp_path), "--otlp-endpoint", receiver.endpoint),
            stdin=b"".join(json.dumps(line).encode() + b"\n" for line in lines),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    spans = await spans_of(receiver, CLIENT_TRACE, 2)
    method = named(spans, "tools/call execute")
    assert method.parent_span_id == CLIENT_SPAN
    assert named(spans, "execution").parent_span_id == method.span_id
