"""What one answer costs on the wire: a JSON answer is one write; a `tools/call` stream one when the call
answers within the priming hold (`transport/streaming.py`), else two (the head with the priming event, then
the answer); and the answer of a stream arrives with the end of its body, so a client that stops reading
there keeps its connection (`transport/last_write.py`)."""

import json

import httpx
import trio

from executor_mcp.transport.streaming import PRIMING_HOLD_SECONDS
from tests.conftest import ServerUnderTest
from tests.mcp_http import open_session

EXECUTE = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "execute", "arguments": {"code": "return 6*7"}},
}
SLOW = f"await new Promise((r) => setTimeout(r, {int(PRIMING_HOLD_SECONDS * 1000) * 6})); return 'slow'"


def _request(port: int, body: dict, session_id: str) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"accept: application/json, text/event-stream\r\nmcp-session-id: {session_id}\r\n"
        f"mcp-protocol-version: 2025-06-18\r\ncontent-length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


async def _reads_until(stream: trio.SocketStream, end: bytes) -> list[bytes]:
    """Every `receive_some` result until the bytes received end with `end`."""
    reads: list[bytes] = []
    with trio.fail_after(30):
        while not b"".join(reads).endswith(end):
            chunk = await stream.receive_some(1 << 16)
            assert chunk, f"the server closed the connection after {b''.join(reads)!r}"
            reads.append(chunk)
    return reads


async def test_a_tool_call_stream_ends_in_the_write_that_carries_its_answer(
    server: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    session_id = await open_session(http, server.url)
    port = int(server.running.url.rsplit(":", 1)[1])
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    whole = 0
    async with stream:
        for _ in range(5):  # and the connection serves the next call
            await stream.send_all(_request(port, EXECUTE, session_id))
            reads = await _reads_until(stream, b"\r\n0\r\n\r\n")
            answering = [chunk for chunk in reads if b'"id":7' in chunk]
            assert len(answering) == 1
            assert answering[0].endswith(b"\r\n0\r\n\r\n")  # the answer, then the end, as one write
            assert b'"text":"42"' in answering[0]
            assert reads[0].startswith(b"HTTP/1.1 200")
            assert b"data: \n\n" in reads[0]  # the head came with the priming event
            whole += b'"id":7' in reads[0]  # and, the call answering within the hold, with the answer
    assert whole > 0  # one write in all (not for every call: a loaded machine may take longer than the hold)


async def test_a_call_slower_than_the_priming_hold_is_primed_before_it_answers(
    server: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    session_id = await open_session(http, server.url)
    port = int(server.running.url.rsplit(":", 1)[1])
    slow = {**EXECUTE, "params": {"name": "execute", "arguments": {"code": SLOW}}}
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(_request(port, slow, session_id))
        with trio.fail_after(30):
            first = await stream.receive_some(1 << 16)
        assert first.startswith(b"HTTP/1.1 200")
        assert b"data: \n\n" in first  # primed, so a dropped connection could resume it
        assert b'"id":7' not in first
        reads = await _reads_until(stream, b"\r\n0\r\n\r\n")
        assert b'"text":"slow"' in b"".join(reads)


async def test_a_json_answer_is_one_write(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    session_id = await open_session(http, server.url)
    port = int(server.running.url.rsplit(":", 1)[1])
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(_request(port, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, session_id))
        with trio.fail_after(30):
            first = await stream.receive_some(1 << 16)
    head, _, body = first.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(body) == {"jsonrpc": "2.0", "id": 3, "result": {}}
