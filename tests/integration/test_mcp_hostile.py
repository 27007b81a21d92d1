"""Hostile MCP servers cost only their own discovery or call: garbage answers, an event that never ends, a
listing that pages forever. A raw ASGI server on hypercorn plays each."""

import json
from functools import partial
from typing import Any

import hypercorn.trio
import pytest
import trio
from hypercorn.config import Config

from executor_mcp.config import Settings
from executor_mcp.integrations.kinds import Discovery
from executor_mcp.integrations.mcp.kind import McpKind
from executor_mcp.integrations.mcp.protocol import MAX_PAGES
from executor_mcp.outbound.client import Outbound, OutboundSettings
from executor_mcp.records.integration_errors import DiscoveryFailed
from tests.mcp_support import mcp_connection, mcp_integration
from tests.upstream import read_body, serve_lifespan

MAX_BYTES = 20_000


async def hostile(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await serve_lifespan(receive, send)
        return
    body = await read_body(receive)
    path = scope["path"]
    if path == "/sse" and scope["method"] == "GET":
        # A legacy SSE stream whose message endpoint is not a URL at all.
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"event: endpoint\ndata: http://[not-a-host/messages\n\n"})
        return
    if path == "/garbage":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": b"<html>not mcp</html>"})
        return
    message = json.loads(body) if body else {}
    if "id" not in message:
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    if message["method"] == "initialize":
        result: Any = {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "h", "version": "0"}}
    elif path == "/endless":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: ", "more_body": True})
        for _ in range(10_000):
            await send({"type": "http.response.body", "body": b"x" * 1000, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    elif path in ("/deep", "/nan"):
        # JSON Python's parser gives up on (nesting past its recursion limit), or that is not JSON (NaN).
        schema = "[" * 100_000 + "]" * 100_000 if path == "/deep" else "NaN"
        tools = '{"tools":[{"name":"t","inputSchema":{"default":' + schema + "}}]}"
        answer = f'{{"jsonrpc":"2.0","id":{message["id"]},"result":{tools}}}'.encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer})
        return
    else:  # /paging: a fresh cursor on every page, forever
        cursor = int((message.get("params") or {}).get("cursor") or 0)
        result = {"tools": [{"name": f"tool {cursor}"}], "nextCursor": str(cursor + 1)}
    answer = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture
async def base(nursery: trio.Nursery) -> str:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = config.errorlog = None
    return (await nursery.start(partial(hypercorn.trio.serve, hostile, config)))[0]


def discovery(endpoint: str, transport: str = "streamable-http") -> Discovery:
    config = {"transport": "remote", "endpoint": endpoint, "remoteTransport": transport}
    return Discovery(mcp_integration("h", config), mcp_connection("h"), {})


async def discover(endpoint: str, transport: str = "streamable-http") -> bytes:
    settings = OutboundSettings.of(Settings(allow_local_network=True, integration_max_response_bytes=MAX_BYTES))
    async with Outbound(settings) as outbound:
        kind = McpKind(outbound, max_source_bytes=1_000_000)
        try:
            with trio.fail_after(10):
                return await kind.discover(discovery(endpoint, transport))
        finally:
            await kind.aclose()


async def test_garbage_is_a_failed_discovery(base: str) -> None:
    with pytest.raises(DiscoveryFailed) as failed:
        await discover(base + "/garbage")
    assert "Could not connect to the MCP server at http://127.0.0.1" in failed.value.message


async def test_an_event_that_never_ends_is_cut_at_the_cap(base: str) -> None:
    with pytest.raises(DiscoveryFailed) as failed:
        await discover(base + "/endless")
    assert f"larger than {MAX_BYTES} bytes" in failed.value.message


async def test_a_listing_that_pages_forever_stops_at_the_page_bound(base: str) -> None:
    listed = json.loads(await discover(base + "/paging"))
    assert len(listed["tools"]) == MAX_PAGES


@pytest.mark.parametrize("path", ["/deep", "/nan"])
async def test_json_python_cannot_take_or_give_back_is_a_failed_discovery(base: str, path: str) -> None:
    settings = OutboundSettings.of(Settings(allow_local_network=True, integration_max_response_bytes=1_000_000))
    async with Outbound(settings) as outbound:
        kind = McpKind(outbound, max_source_bytes=1_000_000)
        with trio.fail_after(10), pytest.raises(DiscoveryFailed) as failed:
            await kind.discover(discovery(base + path))
        await kind.aclose()
    assert "not JSON" in failed.value.message


async def test_a_legacy_sse_endpoint_event_that_is_not_a_url_is_a_failed_discovery(base: str) -> None:
    with pytest.raises(DiscoveryFailed) as failed:
        await discover(base + "/sse", "sse")
    assert "Could not connect to the MCP server at http://127.0.0.1" in failed.value.message
    assert "endpoint" in failed.value.message
