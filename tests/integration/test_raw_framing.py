"""Raw HTTP/1.1 that h11 cannot frame: one connection's failure closes that connection, never the server.

The server runs in the test's nursery, so an exception escaping a connection task would end the test
with it: each test below would fail on the crash even before its own assertions. Every connection is
half-closed once its bytes are sent (a body that promised more ends there) and read to its end under a
deadline, so a hang fails too.
"""

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from tests.conftest import ServerUnderTest, jwt_server, start_server
from tests.mcp_http import headers, initialize_body

# What one connection may take to be answered and closed.
CONNECTION_BOUND = 15
# A graceful stop with nothing in flight: the HTTP grace (2 s) and the rest of the shutdown.
STOP_BOUND = 20
FUZZ_INPUTS = 300
FUZZ_SEED = 25
PARALLEL = 8
ROUTES = [
    "/mcp",
    "/healthz",
    "/readyz",
    "/metrics",
    "/api/policies",
    "/api/integrations",
    "/api/connections",
    "/api/audit",
    "/",
    "/approvals",
    "/.well-known/oauth-protected-resource",
    "/connect/x",
    "/nowhere",
]
UNFRAMED_BODY = b'{"x": 1}' * 12
STATUS_LINE = re.compile(rb"^HTTP/1\.1 (\d{3})")


async def exchange(port: int, raw: bytes) -> bytes:
    """Send `raw` on a new connection, half-close it, and read until the server closes it."""
    received = bytearray()
    with trio.fail_after(CONNECTION_BOUND):
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            try:
                await stream.send_all(raw)
                await stream.send_eof()
                while chunk := await stream.receive_some(65536):
                    received += chunk
            except trio.BrokenResourceError:
                pass  # the server closed on us mid-send: that is an answer too
    return bytes(received)


def head(method: str, path: str, port: int, *lines: str) -> bytes:
    return "\r\n".join([f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *lines, "", ""]).encode()


def port_of(server: ServerUnderTest) -> int:
    return httpx.URL(server.url).port or 0


async def assert_still_serves(server: ServerUnderTest) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await http.get(server.url.removesuffix("/mcp") + "/healthz")).status_code == 200
        response = await http.post(server.url, content=json.dumps(initialize_body()), headers=headers())
        assert response.status_code in (200, 401), response.text


@pytest.fixture
async def open_server(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir)


@pytest.mark.parametrize("auth", ["none", "jwt"])
@pytest.mark.parametrize("method", ["GET", "POST", "DELETE", "TRACE"])
async def test_a_body_without_length_closes_its_connection_only(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, auth: str, method: str
) -> None:
    # The report: a correct request line and Host, `Connection: close`, then ~100 bytes of body with no
    # length. Within 2-7 such connections the process used to exit (trio.BusyResourceError).
    server = await (jwt_server(nursery, data_dir, tmp_path) if auth == "jwt" else start_server(nursery, data_dir))
    port = port_of(server)
    for _ in range(20):
        answer = await exchange(port, head(method, "/mcp", port, "Connection: close") + UNFRAMED_BODY)
        assert STATUS_LINE.match(answer), answer
    await assert_still_serves(server)


async def test_an_unsupported_transfer_encoding_gets_the_envelope(open_server: ServerUnderTest) -> None:
    port = port_of(open_server)
    for path in ("/mcp", "/api/policies", "/healthz"):
        answer = await exchange(port, head("POST", path, port, "Transfer-Encoding: gzip") + b"abc")
        status, _, body = answer.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 501 "), answer
        assert b"content-type: application/json" in status.lower()
        assert json.loads(body) == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": "Not Implemented: unsupported Transfer-Encoding (only chunked is supported)",
            },
        }


async def test_a_malformed_request_line_gets_the_envelope_without_echoing_it(open_server: ServerUnderTest) -> None:
    answer = await exchange(port_of(open_server), b"GET /mcp\x00<script> HTTP/9.9\r\n\r\n")
    status, _, body = answer.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 400 "), answer
    assert json.loads(body)["error"] == {"code": -32600, "message": "Bad Request: malformed HTTP request"}
    assert b"script" not in answer


def malformed_requests(port: int, rng: random.Random) -> Iterator[bytes]:
    """Requests broken in the ways h11 and the app have to survive, over every route, drawn by `rng`."""
    breakages = [
        lambda m, p: head(m, p, port, "Connection: close") + UNFRAMED_BODY,
        lambda m, p: head(m, p, port) + UNFRAMED_BODY,
        lambda m, p: head(m, p, port, "Transfer-Encoding: gzip") + b"abc",
        lambda m, p: head(m, p, port, "Transfer-Encoding: chunked") + b"zz\r\nabc\r\n0\r\n\r\n",
        lambda m, p: head(m, p, port, "Transfer-Encoding: chunked") + b"5\r\nab",
        lambda m, p: head(m, p, port, "Content-Length: 5", "Content-Length: 7") + b"abcdefg",
        lambda m, p: head(m, p, port, "Content-Length: -1") + b"x",
        lambda m, p: head(m, p, port, "Content-Length: abc") + b"x",
        lambda m, p: head(m, p, port, "Content-Length: 100") + b"short",
        lambda m, p: head(m, p, port, "Content-Length: 2", "Transfer-Encoding: chunked") + b"0\r\n\r\n",
        lambda m, p: head(m, p, port, "Content-Type: application/json", "Content-Length: 3") + b"{{{" + b"GARBAGE",
        lambda m, p: head(m, p, port, "X-Bad\x00Header: 1"),
        lambda m, p: head(m, p, port, " leading-space: 1"),
        lambda m, p: head(m, p, port, "NoColonHere"),
        lambda m, p: head(m, p, port, "X-Big: " + "a" * 70_000),
        lambda m, p: head(m, p, port, "Expect: 100-continue", "Content-Length: 10"),
        lambda m, p: f"{m} {p} HTTP/1.0\r\n\r\n".encode() + UNFRAMED_BODY,
        lambda m, p: f"{m} {p} HTTP/1.1\r\n\r\n".encode(),  # no Host
        lambda m, p: f"{m} {p}\r\n\r\n".encode(),
        lambda m, p: f"{m} {p} HTTP/1.1\n\n".encode(),
        lambda m, p: f"{m} http://evil.example{p} HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
        lambda m, p: f"{m} {p}\xff\xfe HTTP/1.1\r\n\r\n".encode("latin-1"),
        lambda m, p: head(m, p, port, "Content-Length: 2") + b"{}" + head(m, p, port) + UNFRAMED_BODY,
        lambda m, p: head(m, p, port, "Upgrade: websocket", "Connection: Upgrade") + UNFRAMED_BODY,
        lambda m, p: head(m, p, port, "Upgrade: h2c", "Connection: Upgrade, HTTP2-Settings") + UNFRAMED_BODY,
        lambda m, p: b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(rng.randrange(256) for _ in range(40)),
        lambda m, p: bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))),
        lambda m, p: head(m, p, port)[: rng.randrange(1, 30)],
    ]
    methods = ["GET", "POST", "DELETE", "TRACE", "PUT", "OPTIONS", "HEAD", "PATCH", "G\x01T"]
    for _ in range(FUZZ_INPUTS):
        yield rng.choice(breakages)(rng.choice(methods), rng.choice(ROUTES))


@pytest.mark.parametrize("auth", ["none", "jwt"])
async def test_hundreds_of_malformed_requests_on_every_route_leave_the_server_serving(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, auth: str
) -> None:
    server = await (jwt_server(nursery, data_dir, tmp_path) if auth == "jwt" else start_server(nursery, data_dir))
    port = port_of(server)
    inputs = list(malformed_requests(port, random.Random(FUZZ_SEED)))
    statuses: list[int] = []
    unanswered: list[bytes] = []
    limiter = trio.CapacityLimiter(PARALLEL)

    async def one(raw: bytes) -> None:
        async with limiter:
            answer = await exchange(port, raw)
        if (found := STATUS_LINE.match(answer)) is None:
            unanswered.append(raw)  # closed without a response: allowed for bytes that are no request at all
            return
        status = int(found.group(1))
        statuses.append(status)
        if status >= 500:
            _, _, body = answer.partition(b"\r\n\r\n")
            assert status in (501, 503), (raw[:200], answer[:400])
            assert json.loads(body.split(b"\r\n\r\n")[0])["jsonrpc"] == "2.0", answer

    async with trio.open_nursery() as fuzzing:
        for raw in inputs:
            fuzzing.start_soon(one, raw)
    assert len(statuses) + len(unanswered) == FUZZ_INPUTS
    assert len(statuses) > FUZZ_INPUTS // 2  # most inputs are requests h11 reads far enough to answer
    await assert_still_serves(server)
    with trio.fail_after(STOP_BOUND):  # and no connection it was sent holds up a graceful stop
        await server.stop()


async def test_http2_is_not_spoken_and_holds_up_no_stop(open_server: ServerUnderTest) -> None:
    # hypercorn switched `Upgrade: h2c` connections to HTTP/2, and a stop then waited on one forever.
    port = port_of(open_server)
    upgrade = head("GET", "/healthz", port, "Upgrade: h2c", "Connection: Upgrade, HTTP2-Settings", "HTTP2-Settings: ")
    answer = await exchange(port, upgrade + UNFRAMED_BODY)
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert b" 101 " not in answer
    preface = await exchange(port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    assert STATUS_LINE.match(preface), preface
    with trio.fail_after(STOP_BOUND):
        await open_server.stop()
