"""Every transport-level row of upstream §1.6 that applies without auth, against the real server."""

import json

import httpx
import pytest

from tests.conftest import ServerUnderTest
from tests.mcp_http import BOTH, envelope, headers, initialize_body, open_session, post

NEVER_MINTED = "0" * 64


async def test_initialize_mints_a_64_hex_session(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    response = await post(http, server.url, initialize_body(version="2025-03-26"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    session_id = response.headers["mcp-session-id"]
    assert len(session_id) == 64
    assert all(c in "0123456789abcdef" for c in session_id)
    body = response.json()
    assert body["id"] == 1
    assert body["result"]["protocolVersion"] == "2025-03-26"
    assert body["result"]["serverInfo"]["name"] == "executor"
    assert body["result"]["capabilities"] == {"tools": {"listChanged": True}}
    # `--auth none`: no `*` CORS (PRODUCT "Browser safety"); bearer auth keeps it (test_auth.py).
    assert "access-control-allow-origin" not in response.headers


@pytest.mark.parametrize(("requested", "answered"), [("2025-11-25", "2025-11-25"), ("1999-01-01", "2025-11-25")])
async def test_initialize_echoes_supported_versions_else_newest(
    server: ServerUnderTest, http: httpx.AsyncClient, requested: str, answered: str
) -> None:
    response = await post(http, server.url, initialize_body(version=requested))
    assert response.json()["result"]["protocolVersion"] == answered


async def test_two_sessions_get_distinct_ids(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    first = await open_session(http, server.url)
    second = await open_session(http, server.url)
    assert first != second


async def test_notifications_only_are_accepted_with_202(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, server.url)
    response = await post(http, server.url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session_id)
    assert response.status_code == 202
    assert response.content == b""
    assert "content-type" not in response.headers


async def test_ping_and_batches(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, server.url)
    single = await post(http, server.url, {"jsonrpc": "2.0", "id": 0, "method": "ping"}, session_id)
    assert single.json() == {"jsonrpc": "2.0", "id": 0, "result": {}}
    batch = [
        {"jsonrpc": "2.0", "id": "a", "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "b", "method": "tools/list"},
    ]
    answered = await post(http, server.url, batch, session_id)
    assert answered.status_code == 200
    by_id = {message["id"]: message for message in answered.json()}
    assert set(by_id) == {"a", "b"}
    assert by_id["a"] == {"jsonrpc": "2.0", "id": "a", "result": {}}
    assert [tool["name"] for tool in by_id["b"]["result"]["tools"]] == ["execute", "skills", "resume"]


async def test_unknown_method_is_a_jsonrpc_error(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, server.url)
    response = await post(http, server.url, {"jsonrpc": "2.0", "id": 7, "method": "no/such"}, session_id)
    assert response.status_code == 200
    assert response.json() == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": "Method not found"}}


async def test_initialize_with_bad_params_opens_nothing(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    body = initialize_body()
    body["params"]["protocolVersion"] = 20250618
    response = await post(http, server.url, body)
    assert "mcp-session-id" not in response.headers
    error = response.json()["error"]
    assert error["code"] == -32602
    assert any("expected str" in line for line in error["data"])


@pytest.mark.parametrize(
    ("request_headers", "status", "code", "message"),
    [
        (
            headers(accept="application/json"),
            406,
            -32000,
            "Not Acceptable: Client must accept both application/json and text/event-stream",
        ),
        (
            headers(accept="text/event-stream"),
            406,
            -32000,
            "Not Acceptable: Client must accept both application/json and text/event-stream",
        ),
        (
            {"accept": BOTH, "content-type": "text/plain"},
            415,
            -32000,
            "Unsupported Media Type: Content-Type must be application/json",
        ),
    ],
)
async def test_post_header_refusals(
    server: ServerUnderTest,
    http: httpx.AsyncClient,
    request_headers: dict[str, str],
    status: int,
    code: int,
    message: str,
) -> None:
    response = await http.post(server.url, content=json.dumps(initialize_body()), headers=request_headers)
    assert envelope(response) == (status, code, message)


async def test_body_over_4_mib_is_413(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    padding = "x" * (4 * 1024 * 1024)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": padding}})
    response = await http.post(server.url, content=body, headers=headers())
    assert envelope(response) == (413, -32000, "Request body too large. Maximum size is 4194304 bytes")


# The server answers and closes while httpx still holds the rest of the body in its generator.
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object AsyncIteratorByteStream"
    ":pytest.PytestUnraisableExceptionWarning"
)
async def test_chunked_body_over_4_mib_is_413(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    async def chunks():
        for _ in range(5):
            yield b" " * (1024 * 1024)

    body = chunks()
    try:
        response = await http.post(server.url, content=body, headers=headers())
    finally:
        await body.aclose()  # what the server never read is closed here, not by the garbage collector
    assert envelope(response) == (413, -32000, "Request body too large. Maximum size is 4194304 bytes")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "Parse error: Invalid JSON"),
        (b"\xff\xfe\x00garbage", "Parse error: Invalid JSON"),
        (b"[" * 100_000, "Parse error: Invalid JSON"),
        (b'{"hello": "world"}', "Parse error: Invalid JSON-RPC message"),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}', "Parse error: Invalid JSON-RPC message"),
        (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', "Parse error: Invalid JSON-RPC message"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}', "Parse error: Invalid JSON-RPC message"),
        (b"[]", "Parse error: Invalid JSON-RPC message"),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}, 5]', "Parse error: Invalid JSON-RPC message"),
        (b"42", "Parse error: Invalid JSON-RPC message"),
    ],
)
async def test_malformed_bodies_are_400_parse_errors(
    server: ServerUnderTest, http: httpx.AsyncClient, raw: bytes, message: str
) -> None:
    response = await http.post(server.url, content=raw, headers=headers())
    assert envelope(response) == (400, -32700, message)


async def test_request_without_session_id_is_400(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    response = await post(http, server.url, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert envelope(response) == (400, -32000, "Bad Request: Mcp-Session-Id header is required")


async def test_initialize_with_session_id_is_400(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, server.url)
    response = await post(http, server.url, initialize_body(), session_id)
    assert envelope(response) == (
        400,
        -32600,
        "Invalid Request: Initialization requests must not include a sessionId",
    )


async def test_initialize_inside_a_batch_is_400(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    batch = [initialize_body(), {"jsonrpc": "2.0", "id": 2, "method": "ping"}]
    response = await post(http, server.url, batch)
    assert envelope(response) == (400, -32600, "Invalid Request: Only one initialization request is allowed")


async def test_unknown_session_id_is_404(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    response = await post(http, server.url, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, NEVER_MINTED)
    assert envelope(response) == (404, -32001, "Session not found")


@pytest.mark.parametrize("session_id", ["x" * 4000, "not-a-session", "A" * 64, "0" * 63])
async def test_malformed_session_ids_are_404(server: ServerUnderTest, http: httpx.AsyncClient, session_id: str) -> None:
    response = await post(http, server.url, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session_id)
    assert envelope(response) == (404, -32001, "Session not found")


async def test_server_discover_is_a_2026_method(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    """A 2025 request (no 2026 version header, no `_meta` claim) of `server/discover` is not a method of its era;
    a 2026 one is served, or refused by the 2026 checks (here: no `_meta`)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}
    assert envelope(await post(http, server.url, body)) == (404, -32601, "Method not found")
    modern = await post(http, server.url, body, **{"mcp-protocol-version": "2026-07-28", "mcp-method": body["method"]})
    assert envelope(modern)[:2] == (400, -32602)


async def test_unsupported_protocol_version_header_is_400(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, server.url)
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    response = await post(http, server.url, body, session_id, **{"mcp-protocol-version": "2024-01-01"})
    assert envelope(response) == (
        400,
        -32000,
        "Bad Request: Unsupported protocol version: 2024-01-01 "
        "(supported versions: 2025-11-25, 2025-06-18, 2025-03-26)",
    )


@pytest.mark.parametrize("method", ["PUT", "PATCH", "HEAD"])
async def test_other_methods_are_405(server: ServerUnderTest, http: httpx.AsyncClient, method: str) -> None:
    response = await http.request(method, server.url)
    assert response.status_code == 405
    if method != "HEAD":
        assert envelope(response) == (405, -32001, "Method not allowed")


async def test_preflight(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    origin = server.running.url  # the server's own origin, allowed with `--auth none`
    response = await http.options(server.url, headers={"origin": origin})
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == origin
    assert response.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
    allowed = {h.strip() for h in response.headers["access-control-allow-headers"].split(",")}
    assert {"mcp-session-id", "mcp-protocol-version", "last-event-id", "authorization", "content-type"} <= allowed
    assert "mcp-session-id" in response.headers["access-control-expose-headers"]


async def test_get_rules(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    wrong_accept = await http.get(server.url, headers={"accept": "application/json"})
    assert envelope(wrong_accept) == (406, -32000, "Not Acceptable: Client must accept text/event-stream")
    no_session = await http.get(server.url, headers={"accept": "text/event-stream"})
    assert envelope(no_session) == (400, -32000, "Bad Request: Mcp-Session-Id header is required")
    unknown = await http.get(server.url, headers={"accept": "text/event-stream", "mcp-session-id": NEVER_MINTED})
    assert envelope(unknown) == (404, -32001, "Session not found")


async def test_delete_without_session_id_is_200(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    response = await http.delete(server.url)
    assert response.status_code == 200
    assert response.content == b""
    assert "content-type" not in response.headers


async def test_delete_then_404(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, server.url)
    deleted = await http.delete(server.url, headers={"mcp-session-id": session_id})
    assert deleted.status_code == 200
    after = await post(http, server.url, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session_id)
    status, code, message = envelope(after)
    assert (status, code) == (404, -32001)
    assert message in {"Session timed out, please reconnect", "Session not found"}
    again = await http.delete(server.url, headers={"mcp-session-id": session_id})
    assert again.status_code == 404


async def test_unknown_path_is_an_envelope(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    response = await http.get(server.url.removesuffix("/mcp") + "/nope")
    assert envelope(response) == (404, -32000, "Not Found")


async def test_a_large_batch_gets_every_answer(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    """More answers than a resumable stream keeps for replay: a reader that is still there loses none."""
    session_id = await open_session(http, server.url)
    batch = [{"jsonrpc": "2.0", "id": index, "method": "ping"} for index in range(100)]
    answered = await post(http, server.url, batch, session_id)
    assert sorted(message["id"] for message in answered.json()) == list(range(100))
