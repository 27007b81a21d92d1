"""Requests in flight when their session ends are answered with JSON-RPC errors, never dropped."""

import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import trio
from mcp import MCPError

from executor_mcp.sessions.session import MAX_KEPT_IN_MEMORY
from tests.conftest import ServerUnderTest, start_server
from tests.mcp_http import envelope, headers, initialize_body, open_session, post, sse_messages
from tests.sdk import connect
from tests.tools import Probe, call_body, probe_tools

TERMINATED = "Session timed out, please reconnect"
RESTARTING = "MCP session is restarting, please retry"


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
async def probed(nursery: trio.Nursery, data_dir: Path, probe: Probe) -> ServerUnderTest:
    return await start_server(nursery, data_dir, tools=probe_tools(probe), shutdown_grace=0.2)


async def _call_in_background(
    nursery: trio.Nursery, http: httpx.AsyncClient, url: str, session_id: str, body: dict
) -> trio.MemoryReceiveChannel[httpx.Response]:
    """POST `body` in a task; the response (body read) arrives on the returned channel."""
    send, receive = trio.open_memory_channel[httpx.Response](1)

    async def run() -> None:
        response = await http.post(url, content=json.dumps(body), headers=headers(session_id))
        await send.send(response)

    nursery.start_soon(run)
    return receive


async def test_tool_call_is_answered_on_an_event_stream(probed: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, probed.url)
    response = await post(http, probed.url, call_body(5, "echo", text="hi"), session_id)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert sse_messages(response.text) == [
        {"jsonrpc": "2.0", "id": 5, "result": {"content": [{"type": "text", "text": "hi"}], "isError": False}}
    ]


async def test_unknown_tool_is_a_jsonrpc_error(probed: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, probed.url)
    response = await post(http, probed.url, call_body(1, "nope"), session_id)
    assert sse_messages(response.text) == [
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "Tool nope not found"}}
    ]


async def test_delete_mid_call_answers_the_call_with_an_error(
    probed: ServerUnderTest, probe: Probe, http: httpx.AsyncClient, nursery: trio.Nursery
) -> None:
    session_id = await open_session(http, probed.url)
    answers = await _call_in_background(nursery, http, probed.url, session_id, call_body("slow", "wait"))
    await probe.started.wait()
    deleted = await http.delete(probed.url, headers={"mcp-session-id": session_id})
    assert deleted.status_code == 200
    with trio.fail_after(5):
        response = await answers.receive()
    assert response.status_code == 200
    assert sse_messages(response.text) == [
        {"jsonrpc": "2.0", "id": "slow", "error": {"code": -32001, "message": TERMINATED}}
    ]
    assert probe.cancelled.is_set()
    await _until_wiped(http, probed.url, session_id)


async def _until_wiped(http: httpx.AsyncClient, url: str, session_id: str) -> None:
    """Teardown answers "timed out" until the wipe is done, and is done within 3 s (PRODUCT decision 5)."""
    with trio.fail_after(3):
        while True:
            after = await post(http, url, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session_id)
            status, code, message = envelope(after)
            assert (status, code) == (404, -32001)
            if message == "Session not found":
                return
            assert message == TERMINATED
            await trio.sleep(0.01)


async def test_sdk_sees_termination_mid_call_as_an_error(
    probed: ServerUnderTest, probe: Probe, http: httpx.AsyncClient, nursery: trio.Nursery
) -> None:
    async with connect(probed.url, mode="legacy") as (client, recorder):
        assert recorder.session_id is not None

        async def terminate_once_started() -> None:
            await probe.started.wait()
            await http.delete(probed.url, headers={"mcp-session-id": recorder.session_id})

        nursery.start_soon(terminate_once_started)
        with trio.fail_after(10), pytest.raises(MCPError) as caught:
            await client.call_tool("wait", {})
    assert caught.value.error.code == -32001
    assert caught.value.error.message == TERMINATED


async def test_shutdown_mid_call_answers_restarting_and_the_session_survives(
    probed: ServerUnderTest, probe: Probe, http: httpx.AsyncClient, nursery: trio.Nursery, data_dir: Path
) -> None:
    session_id = await open_session(http, probed.url)
    answers = await _call_in_background(nursery, http, probed.url, session_id, call_body(9, "wait"))
    await probe.started.wait()
    with trio.fail_after(10):
        await probed.stop()
        response = await answers.receive()
    assert sse_messages(response.text) == [
        {"jsonrpc": "2.0", "id": 9, "error": {"code": -32001, "message": RESTARTING}}
    ]
    assert probe.cancelled.is_set()

    restarted = await start_server(nursery, data_dir)
    again = await post(http, restarted.url, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session_id)
    assert again.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}


async def test_shutdown_lets_calls_finish_within_grace_and_refuses_new_work(
    nursery: trio.Nursery, data_dir: Path, probe: Probe, http: httpx.AsyncClient
) -> None:
    server = await start_server(nursery, data_dir, tools=probe_tools(probe), shutdown_grace=30)
    session_id = await open_session(http, server.url)
    answers = await _call_in_background(nursery, http, server.url, session_id, call_body(3, "wait"))
    await probe.started.wait()
    server.running.stop.set()
    await trio.sleep(0.05)  # let the shutdown trigger start draining

    refused = await post(http, server.url, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session_id)
    assert envelope(refused) == (503, -32001, RESTARTING)
    assert refused.headers["retry-after"] == "2"
    fresh = await post(http, server.url, initialize_body())
    assert envelope(fresh) == (503, -32001, RESTARTING)

    probe.release.set()
    with trio.fail_after(10):
        response = await answers.receive()
        await server.done.wait()
    assert sse_messages(response.text)[0]["result"]["content"][0]["text"] == "released"
    assert not probe.cancelled.is_set()


async def test_a_dropped_call_keeps_running_and_is_delivered_on_the_next_get(
    probed: ServerUnderTest, probe: Probe, http: httpx.AsyncClient
) -> None:
    """At-least-once: the client leaves mid-call, the work goes on, a later GET replays the answer."""
    session_id = await open_session(http, probed.url)
    with trio.move_on_after(0.5):
        await post(http, probed.url, call_body("kept", "wait"), session_id)
    assert probe.started.is_set()
    probe.release.set()
    await trio.sleep(0.2)
    assert not probe.cancelled.is_set()

    listen = {"accept": "text/event-stream", "mcp-session-id": session_id}
    with trio.fail_after(5):
        replay = await http.get(probed.url, headers=listen)
    assert replay.text.endswith(": replay-complete\n\n")
    answers = [m for m in sse_messages(replay.text) if "id" in m]
    assert answers == [
        {
            "jsonrpc": "2.0",
            "id": "kept",
            "result": {"content": [{"type": "text", "text": "released"}], "isError": False},
        }
    ]
    assert re.search(r"^id: [0-9a-f]{32}:0000000000000002$", replay.text, re.M)
    # Delivered now: the next listen stream has nothing to replay and stays open.
    with trio.move_on_after(0.5) as waited:
        async with http.stream("GET", probed.url, headers=listen) as quiet:
            assert quiet.status_code == 200
            async for _ in quiet.aiter_bytes():
                raise AssertionError("nothing should be replayed twice")
    assert waited.cancelled_caught


async def test_tool_calls_are_primed_and_numbered(probed: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, probed.url)
    response = await post(http, probed.url, call_body(1, "echo", text="hi"), session_id)
    frames = [frame for frame in response.text.split("\n\n") if frame]
    # The priming event is an id with empty data: no event name, no message (MCP's priming event).
    stream_id = frames[0].split("\n")[0].removeprefix("id: ").rsplit(":", 1)[0]
    assert frames[0] == f"id: {stream_id}:0000000000000001\ndata: "
    assert frames[1].startswith(f"event: message\nid: {stream_id}:0000000000000002\n")


async def test_colliding_request_ids_are_routed_per_stream(probed: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, probed.url)
    results: dict[str, list[dict]] = {}

    async def call(text: str, delay: float) -> None:
        response = await post(http, probed.url, call_body(1, "echo", text=text, delay=delay), session_id)
        results[text] = sse_messages(response.text)

    async with trio.open_nursery() as calls:
        calls.start_soon(call, "slow", 0.3)
        calls.start_soon(call, "fast", 0.0)
    for text in ("slow", "fast"):
        assert [m["result"]["content"][0]["text"] for m in results[text]] == [text]
        assert results[text][0]["id"] == 1


@pytest.mark.slow
async def _hang_up_once_running(url: str, session_id: str, body: dict) -> None:
    """POST a call on a raw connection and close it as soon as the priming event shows the call runs."""
    where = urlsplit(url)
    payload = json.dumps(body).encode()
    head = "".join(f"{name}: {value}\r\n" for name, value in headers(session_id).items())
    request = f"POST {where.path} HTTP/1.1\r\nHost: {where.netloc}\r\n{head}Content-Length: {len(payload)}\r\n\r\n"
    stream = await trio.open_tcp_stream(where.hostname, where.port)
    async with stream:
        await stream.send_all(request.encode() + payload)
        received = b""
        with trio.move_on_after(10):
            while b"\nid: " not in received:
                received += await stream.receive_some(4096)
        assert b"\nid: " in received, received


async def test_many_dropped_calls_are_all_replayed(probed: ServerUnderTest, http: httpx.AsyncClient) -> None:
    """More undelivered streams than a session keeps in memory: the rest come back from the session file."""
    session_id = await open_session(http, probed.url)
    dropped = [f"dropped-{index}" for index in range(MAX_KEPT_IN_MEMORY + 4)]
    for request_id in dropped:
        await _hang_up_once_running(probed.url, session_id, call_body(request_id, "echo", text=request_id, delay=0.2))
    listen = {"accept": "text/event-stream", "mcp-session-id": session_id}
    answered: dict[str, str] = {}
    # Each GET replays (and acknowledges) what has finished and been written down, then closes; with
    # nothing to replay it would listen instead, so a GET that does not close soon is given up.
    for _ in range(30):
        if len(answered) == len(dropped):
            break
        await trio.sleep(0.5)
        with trio.move_on_after(3):
            replay = await http.get(probed.url, headers=listen)
            answered.update(
                {m["id"]: m["result"]["content"][0]["text"] for m in sse_messages(replay.text) if "id" in m}
            )
    assert answered == {request_id: request_id for request_id in dropped}
