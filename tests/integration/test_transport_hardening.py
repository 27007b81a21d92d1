"""Issue 9, the HTTP edge and the wire: event ids from clients, encoding failures, initialize that
creates nothing, small protocol edges real clients meet, and HTTP edges (items 9, 16, 19, 20, 25)."""

import contextlib
import json
import logging
import re
import socket
from pathlib import Path

import httpx
import pytest
import trio

from executor_mcp.codec import JsonObject
from executor_mcp.protocol.mcp import Tool
from executor_mcp.storage.records import SessionMeta
from executor_mcp.toolserver.registry import RegisteredTool, ToolContext, ToolRegistry
from tests.conftest import ServerUnderTest, start_server
from tests.mcp_http import BOTH, envelope, initialize_body, open_session, post, sse_messages
from tests.process import run_cli
from tests.sdk import connect, execute, text_of
from tests.tools import call_body, text_result

LISTEN_BOUND = 1.0  # how long a quiet listen stream is watched to see it stays open and silent


def _nested(depth: int) -> object:
    value: object = []
    for _ in range(depth):
        value = [value]
    return value


def awkward_tools(_: SessionMeta) -> ToolRegistry:
    """Tools whose results cannot go on the wire, after an optional delay (to drop the POST first)."""

    async def not_a_number(arguments: JsonObject, context: ToolContext) -> JsonObject:
        await trio.sleep(float(arguments.get("delay", 0)))
        return {**text_result("nan"), "structuredContent": {"value": float("nan")}}

    async def too_deep(arguments: JsonObject, context: ToolContext) -> JsonObject:
        return {**text_result("deep"), "structuredContent": {"value": _nested(5000)}}

    async def echo(arguments: JsonObject, context: ToolContext) -> JsonObject:
        await trio.sleep(float(arguments.get("delay", 0)))
        return text_result(str(arguments.get("text")))

    schema: JsonObject = {"type": "object"}
    return ToolRegistry(
        [
            RegisteredTool(Tool("nan", "A result with NaN in it.", schema), not_a_number),
            RegisteredTool(Tool("deep", "A result nested 5000 levels deep.", schema), too_deep),
            RegisteredTool(Tool("echo", "Answers its text.", schema), echo),
        ]
    )


@pytest.fixture
async def awkward(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, tools=awkward_tools)


def listen_headers(session_id: str, **extra: str | bytes) -> dict[str, str | bytes]:
    return {"accept": "text/event-stream", "mcp-session-id": session_id, **extra}


async def drop_after_priming(url: str, body: JsonObject, session_id: str) -> str:
    """POST a tools/call over a raw socket and hang up once the priming event arrived (the call goes on
    without a reader); the priming event's id."""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    payload = json.dumps(body).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: {BOTH}\r\nContent-Type: application/json\r\n"
        f"Mcp-Session-Id: {session_id}\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    received = b""
    with trio.fail_after(10):
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            await stream.send_all(head.encode() + payload)
            while (found := re.search(rb"\nid: (\S+)\ndata: \n\n", received)) is None:
                chunk = await stream.receive_some(65536)
                assert chunk, received
                received += chunk
    return found.group(1).decode()


async def replay(http: httpx.AsyncClient, url: str, session_id: str, **extra: str | bytes) -> str:
    """The body of a GET that replays undelivered streams (it ends with `: replay-complete`)."""
    with trio.fail_after(10):
        response = await http.get(url, headers=listen_headers(session_id, **extra))
    assert response.status_code == 200
    assert response.text.endswith(": replay-complete\n\n"), response.text
    return response.text


async def assert_quiet_listen_stream(http: httpx.AsyncClient, url: str, session_id: str, **extra: str | bytes) -> None:
    """A GET with nothing to replay opens the listen stream and stays open (no error, no data)."""
    with trio.move_on_after(LISTEN_BOUND) as waited:
        async with (
            http.stream("GET", url, headers=listen_headers(session_id, **extra)) as response,
            contextlib.aclosing(response.aiter_bytes()) as chunks,
        ):
            assert response.status_code == 200
            async for chunk in chunks:
                raise AssertionError(f"unexpected data on a fresh listen stream: {chunk!r}")
    assert waited.cancelled_caught


# Item 9: a client's Last-Event-ID is validated before it is used as a storage key.


@pytest.mark.parametrize(
    "last_event_id",
    [
        "a" * 600 + ":0000000000000001",
        ("é" * 300 + ":0000000000000002").encode("latin-1"),
        "garbage",
        ":",
        "x:zzzzzzzzzzzzzzzz",
    ],
)
async def test_a_malformed_last_event_id_replays_what_is_known(
    awkward: ServerUnderTest, http: httpx.AsyncClient, last_event_id: str | bytes
) -> None:
    session_id = await open_session(http, awkward.url)
    await drop_after_priming(awkward.url, call_body(7, "echo", text="kept", delay=0.3), session_id)
    await trio.sleep(1.0)  # the call finishes and its stream is written down
    text = await replay(http, awkward.url, session_id, **{"last-event-id": last_event_id})
    assert [m["result"]["content"][0]["text"] for m in sse_messages(text) if "id" in m] == ["kept"]
    # Delivered; with nothing left, the same id gets a fresh listen stream.
    await assert_quiet_listen_stream(http, awkward.url, session_id, **{"last-event-id": last_event_id})


# Item 16: the discover id, the priming event, the port-in-use message.


async def test_server_discover_404_carries_the_request_id(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    body = {"jsonrpc": "2.0", "id": "probe-7", "method": "server/discover", "params": {}}
    response = await post(http, server.url, body)
    assert envelope(response) == (404, -32601, "Method not found")
    assert response.json()["id"] == "probe-7"
    refused = await post(http, server.url, body, **{"mcp-protocol-version": "2026-07-28"})
    assert envelope(refused)[:2] == (400, -32602)
    assert refused.json()["id"] == "probe-7"


async def test_the_sdk_sees_no_unknown_priming_event(server: ServerUnderTest, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="mcp"):
        async with connect(server.url, mode="legacy") as (client, _):
            result = await execute(client, "return 6 * 7")
    assert "42" in text_of(result)
    assert not [record for record in caplog.records if "Unknown SSE event" in record.getMessage()]


async def test_a_primed_stream_is_still_resumed_by_its_priming_id(
    awkward: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    session_id = await open_session(http, awkward.url)
    priming_id = await drop_after_priming(awkward.url, call_body(3, "echo", text="resumed", delay=0.5), session_id)
    with trio.fail_after(10):
        resumed = await http.get(awkward.url, headers=listen_headers(session_id, **{"last-event-id": priming_id}))
    answers = [m for m in sse_messages(resumed.text) if "id" in m]
    assert [(m["id"], m["result"]["content"][0]["text"]) for m in answers] == [(3, "resumed")]


async def test_port_in_use_says_so(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with trio.fail_after(60):
            done = await run_cli("serve", "--port", str(port), "--data-dir", str(tmp_path / "data"))
    stderr = done.stderr.decode()
    assert done.returncode == 1
    assert "address already in use" in stderr.lower(), stderr
    assert "sub-exception" not in stderr


# Item 19: every request gets exactly one answer, and nothing unencodable is sent or stored.


async def test_a_result_nested_350_deep_is_answered(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, server.url)
    code = "let v = []; for (let i = 0; i < 350; i++) v = [v]; return v;"
    with trio.fail_after(30):
        response = await post(http, server.url, call_body(1, "execute", code=code), session_id)
    answers = [m for m in sse_messages(response.text) if "id" in m]
    assert len(answers) == 1
    assert answers[0]["id"] == 1
    assert "result" in answers[0] or answers[0]["error"]["code"] == -32603
    await assert_quiet_listen_stream(http, server.url, session_id)


@pytest.mark.parametrize("tool", ["nan", "deep"])
async def test_an_unencodable_result_is_a_32603_answer(
    awkward: ServerUnderTest, http: httpx.AsyncClient, tool: str
) -> None:
    session_id = await open_session(http, awkward.url)
    with trio.fail_after(10):
        response = await post(http, awkward.url, call_body(5, tool), session_id)
    assert "NaN" not in response.text
    answers = [m for m in sse_messages(response.text) if "id" in m]
    assert [(m["id"], m["error"]["code"]) for m in answers] == [(5, -32603)]
    await assert_quiet_listen_stream(http, awkward.url, session_id)


async def test_an_unencodable_answer_is_stored_as_its_error(awkward: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, awkward.url)
    await drop_after_priming(awkward.url, call_body(9, "nan", delay=0.3), session_id)
    await trio.sleep(1.0)
    text = await replay(http, awkward.url, session_id)
    assert [(m["id"], m["error"]["code"]) for m in sse_messages(text) if "id" in m] == [(9, -32603)]
    # Delivered once: never a poisoned stream that every later GET replays.
    await assert_quiet_listen_stream(http, awkward.url, session_id)


LONE = "\ud800"
REPLACED = "\ufffd"  # what a lone surrogate becomes on the way out


@pytest.mark.parametrize(
    ("body", "expected_ids"),
    [
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": LONE}}, [1]),
        ({**call_body(2, "skills"), "params": {"name": "skills", "arguments": {"name": LONE}}}, [2]),
        (call_body(3, "resume", executionId=LONE), [3]),
        (call_body(LONE, "skills"), [REPLACED]),
        (
            [{"jsonrpc": "2.0", "id": LONE, "method": "ping"}, {"jsonrpc": "2.0", "id": 4, "method": "ping"}],
            ["\ufffd", 4],
        ),
    ],
)
async def test_lone_surrogates_in_requests_still_get_one_answer_each(
    server: ServerUnderTest, http: httpx.AsyncClient, body: object, expected_ids: list[object]
) -> None:
    session_id = await open_session(http, server.url)
    with trio.fail_after(30):
        response = await post(http, server.url, body, session_id)  # json.dumps escapes the surrogate
    assert response.status_code == 200
    if response.headers["content-type"].startswith("text/event-stream"):
        answers = [m for m in sse_messages(response.text) if "id" in m]
    else:
        answers = response.json() if isinstance(body, list) else [response.json()]
    assert sorted(map(str, (m["id"] for m in answers))) == sorted(map(str, expected_ids))
    await assert_quiet_listen_stream(http, server.url, session_id)


# Item 20: a bad initialize is refused before anything is created.


def session_files(data_dir: Path) -> list[Path]:
    return sorted(path for path in data_dir.rglob("*") if path.name.endswith(".mdb") and "sessions" in path.parts)


@pytest.mark.parametrize(
    "change",
    [
        lambda params: params["clientInfo"].update(name=LONE),
        lambda params: params["clientInfo"].update(version="1" + LONE),
        lambda params: params.update(capabilities={"x": _nested(500)}),
        lambda params: params.update(capabilities={LONE: {}}),
    ],
    ids=["name", "version", "deep-capabilities", "capability-key"],
)
async def test_an_unstorable_initialize_is_400_and_creates_nothing(
    server: ServerUnderTest, http: httpx.AsyncClient, data_dir: Path, change
) -> None:
    await open_session(http, server.url)
    before = session_files(data_dir)
    body = initialize_body(request_id=11)
    change(body["params"])
    response = await post(http, server.url, body)
    assert response.status_code == 400
    assert "mcp-session-id" not in response.headers
    answer = response.json()
    assert (answer["id"], answer["error"]["code"], answer["error"]["message"]) == (11, -32602, "Invalid params")
    assert answer["error"]["data"]
    assert session_files(data_dir) == before


async def test_a_hostile_initialize_gets_a_small_answer(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    """Thousands of problems under a huge key: a few are reported, with the key shortened in their paths."""
    body = initialize_body(request_id=12)
    body["params"]["capabilities"] = {"k" * 100_000: ["\ud800"] * 2000}
    response = await post(http, server.url, body)
    assert response.status_code == 400
    problems = response.json()["error"]["data"]
    assert len(problems) == 10
    assert len(response.content) < 5_000
    assert problems[0] == f"Text is not valid Unicode (a lone surrogate) @ $.params.capabilities.{'k' * 40}...[0]"


# Item 25: HTTP edges.


async def test_an_unpackaged_static_file_is_not_found(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    for method in ("OPTIONS", "GET"):
        for name in ("x", "..%2Fconsole.py", "%2E%2E%2F%2E%2E%2Fapp.py"):
            response = await http.request(method, server.running.url + "/static/" + name)
            assert envelope(response) == (404, -32000, "Not Found")
    assert (await http.options(server.running.url + "/static/console.css")).status_code == 404


async def test_a_console_page_answers_options_like_any_route_without_it(
    server: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    pages = ("/", "/approvals", "/approvals/exec_x", "/integrations", "/integrations/x", "/connections")
    for path in (*pages, "/policies", "/sessions", "/signin", "/signout"):
        response = await http.options(server.running.url + path)
        assert envelope(response) == (405, -32001, "Method not allowed"), path


async def test_q_zero_is_not_acceptable(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    refused = "Not Acceptable: Client must accept both application/json and text/event-stream"
    for accept in ("application/json;q=0, text/event-stream;q=0", "application/json, text/event-stream; q=0.0"):
        response = await post(http, server.url, initialize_body(), accept=accept)
        assert envelope(response) == (406, -32000, refused)
    weighted = await post(http, server.url, initialize_body(), accept="application/json;q=0.5, text/event-stream")
    assert weighted.status_code == 200


def _raw_post(port: int, extra: str = "") -> bytes:
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: 1000\r\n{extra}\r\n"
    ).encode()


async def _answer_then_close(port: int, request: bytes, bound: float) -> tuple[bytes, float]:
    """Send `request` (headers only), read until the server closes; fails past `bound` seconds."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        started = trio.current_time()
        received = b""
        with trio.fail_after(bound):
            while chunk := await stream.receive_some(65536):
                received += chunk
        return received, trio.current_time() - started


@pytest.fixture
def port(server: ServerUnderTest) -> int:
    return int(server.running.url.rsplit(":", 1)[1])


async def test_an_early_answer_closes_a_connection_whose_body_stalls(server: ServerUnderTest, port: int) -> None:
    # Refused on its headers (no Accept) before the body: answered, and the connection is not kept.
    received, _ = await _answer_then_close(port, _raw_post(port), bound=5)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 406")
    assert b"\r\nconnection: close" in head.lower()  # so no client reuses it
    assert json.loads(body)["error"]["code"] == -32000


@pytest.mark.slow
async def test_a_stalled_body_times_out_with_an_envelope(server: ServerUnderTest, port: int) -> None:
    received, elapsed = await _answer_then_close(port, _raw_post(port, f"Accept: {BOTH}\r\n"), bound=30)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    answer = json.loads(body)
    assert answer["error"] == {"code": -32000, "message": "Request Timeout: the body did not arrive within 10 seconds"}
    assert 5 < elapsed < 30


@pytest.mark.slow
async def test_a_stalled_policies_body_times_out_too(server: ServerUnderTest, port: int) -> None:
    stalled = (
        f"POST /api/policies HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n{"
    ).encode()
    received, elapsed = await _answer_then_close(port, stalled, bound=30)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert json.loads(body) == {"error": "Request Timeout: the body did not arrive within 10 seconds"}
    assert 5 < elapsed < 30


async def test_malformed_http_is_refused_and_closed(server: ServerUnderTest, port: int) -> None:
    """h11 refuses what is not HTTP before any request exists; the body is empty by design (decisions)."""
    received, _ = await _answer_then_close(port, b"NOT HTTP\r\n\r\n", bound=5)
    assert received.startswith(b"HTTP/1.1 400")
