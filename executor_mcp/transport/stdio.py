"""`executor-mcp stdio`: one MCP client on standard input and output, served by the very app HTTP clients are.

Desktop clients that only speak stdio start the server themselves and talk newline-delimited JSON-RPC on its
pipes. Rather than a second protocol stack, each line becomes one POST to `/mcp` on the same ASGI app, in
process and without a socket: authentication (the local principal), the era of the request, sessions,
policies, durable pauses and every refusal are the HTTP ones, and what the app answers (a JSON body, or the
data of an event stream's events) goes out as lines. The one session a 2025 client opens is named on its
requests as HTTP clients name theirs; a 2026 request gets the routing headers its own body implies (on a pipe
the body is the only truth). A request's own messages (progress, an inline approval question) come on its
answer's stream, as over HTTP; the session's GET stream is not opened (nothing is left on it for a client that
never disconnects mid-answer, and an open one would hold the runtime up).

Lines are bounded (`MAX_LINE_BYTES`; a longer one is answered with a parse error and skipped, never
buffered), requests in flight are bounded (`MAX_IN_FLIGHT`; reading waits beyond it), and writes of whole
lines are serialized. `initialize` is served before the next line is read, so that what follows it names its
session. The end of input ends the bridge; the server's shutdown then answers what is still in flight.
"""

import io
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any, cast

import attrs
import trio

from executor_mcp.codec import dumps
from executor_mcp.protocol.errors import MAX_BODY_BYTES, Code
from executor_mcp.protocol.jsonrpc import encode_message, error_response
from executor_mcp.protocol.stateless import (
    META_VERSION,
    METHOD_HEADER,
    NAME_HEADER,
    NAMED,
    SESSION_HEADER,
    VERSION_HEADER,
)
from executor_mcp.transport import headers as rules
from executor_mcp.transport.asgi import AsgiApp
from executor_mcp.transport.discovery import MCP_PATH

log = logging.getLogger(__name__)

# What the bridge says it listens on (the browser guard checks a request's Host against it); nothing listens.
STDIO_URL = "http://localhost"
MAX_LINE_BYTES = MAX_BODY_BYTES
TOO_LONG = dumps(
    encode_message(error_response(None, Code.PARSE_ERROR, "Parse error: a message is longer than the limit"))
)
MAX_IN_FLIGHT = 64
READ_CHUNK = 64 * 1024
# After the server's shutdown answered what was in flight, how long those answers get to be written.
WRITE_GRACE_SECONDS = 2.0


class Pipe:
    """Standard input and output as trio sees them: reads and writes run in worker threads, which a
    cancellation abandons (a blocked read of a terminal must not hold the server's shutdown)."""

    def __init__(self) -> None:
        # A binary standard stream is a `BufferedReader`; typeshed says only `BinaryIO`, which has no `read1`.
        self._reader = cast(io.BufferedReader, sys.stdin.buffer)
        self._writer = sys.stdout.buffer

    async def read(self) -> bytes:
        return await trio.to_thread.run_sync(self._reader.read1, READ_CHUNK, abandon_on_cancel=True)

    async def write(self, data: bytes) -> None:
        def _write() -> None:
            self._writer.write(data)
            self._writer.flush()

        await trio.to_thread.run_sync(_write, abandon_on_cancel=True)


@attrs.define
class _Reply:
    """What one POST answered: its status and headers, and the messages its body carried."""

    status: int = 0
    headers: dict[str, str] = attrs.Factory(dict)
    lines: list[bytes] = attrs.Factory(list)  # kept only when asked for (an `initialize`'s)


class StdioBridge:
    def __init__(self, pipe: Pipe, query: bytes = b"", path: str = MCP_PATH) -> None:
        self._pipe = pipe
        self._query = query  # the URL modes (`elicitation_mode`, `mode`) the command line chose
        self._path = path  # the endpoint: `/mcp`, or the toolkit's `--toolkit` named
        self._write_lock = trio.Lock()
        self._in_flight = trio.Semaphore(MAX_IN_FLIGHT)
        self._idle = trio.Event()  # nothing in flight
        self._idle.set()
        self._session_id: str | None = None
        self._version: str | None = None
        self._closed = False  # the output went away: nothing more is written
        self.ended = trio.Event()  # the input ended

    async def front(self, app: AsgiApp, shutdown_trigger: Callable[[], Awaitable[None]], *, task_status) -> None:
        """Serve `app` until the server shuts down (in `app.serve`'s place of hypercorn)."""
        async with trio.open_nursery() as nursery:
            task_status.started([STDIO_URL])
            nursery.start_soon(self._serve_input, app, nursery)
            await shutdown_trigger()
            with trio.move_on_after(WRITE_GRACE_SECONDS):
                await self._idle.wait()
            nursery.cancel_scope.cancel()

    async def _serve_input(self, app: AsgiApp, nursery: trio.Nursery) -> None:
        pending = bytearray()
        skipping = False  # inside a line that was too long: drop bytes up to its end
        try:
            while chunk := await self._pipe.read():
                pending += chunk
                while (end := pending.find(b"\n")) >= 0:
                    line, pending = bytes(pending[:end]), pending[end + 1 :]
                    if skipping:
                        skipping = False
                    elif len(line) > MAX_LINE_BYTES:
                        await self._write(TOO_LONG)
                    elif line.strip():
                        await self._line(app, nursery, line)
                if len(pending) > MAX_LINE_BYTES:
                    if not skipping:
                        await self._write(TOO_LONG)
                    pending.clear()
                    skipping = True
            if pending.strip() and not skipping:
                await self._line(app, nursery, bytes(pending))
        finally:
            self.ended.set()

    async def _line(self, app: AsgiApp, nursery: trio.Nursery, line: bytes) -> None:
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
            message = None  # the app answers it: the same parse error an HTTP client gets
        if isinstance(message, dict) and message.get("method") == "initialize":
            await self._initialize(app, line)
            return
        await self._in_flight.acquire()
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        nursery.start_soon(self._post_released, app, line, message)

    async def _post_released(self, app: AsgiApp, line: bytes, message: Any) -> None:
        try:
            await self._post(app, line, self._headers(message))
        finally:
            self._in_flight.release()
            if self._in_flight.value == MAX_IN_FLIGHT:
                self._idle.set()

    async def _initialize(self, app: AsgiApp, line: bytes) -> None:
        """Served alone, before the next line is read: the session it opens is the one what follows names."""
        reply = await self._post(app, line, self._headers(None, session=False), keep=True)
        session_id = reply.headers.get(SESSION_HEADER)
        if reply.status != 200 or not session_id or not reply.lines:
            return
        try:
            result = json.loads(reply.lines[0]).get("result")
        except (ValueError, AttributeError):
            return
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        self._session_id, self._version = session_id, version if isinstance(version, str) else None

    def _headers(self, message: Any, *, session: bool = True) -> dict[str, str]:
        headers = {"content-type": rules.JSON, "accept": f"{rules.JSON}, {rules.EVENT_STREAM}", "host": "localhost"}
        params = message.get("params") if isinstance(message, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        version = meta.get(META_VERSION) if isinstance(meta, dict) else None
        if isinstance(version, str) and isinstance(params, dict) and isinstance(message.get("method"), str):
            # A 2026 request: the headers HTTP would have carried, from its own body.
            method = message["method"]
            headers.update({VERSION_HEADER: version, METHOD_HEADER: method})
            named = params.get(NAMED[method]) if method in NAMED else None
            if isinstance(named, str):
                headers[NAME_HEADER] = named
            return headers
        if session and self._session_id is not None:
            headers[SESSION_HEADER] = self._session_id
            if self._version is not None:
                headers[VERSION_HEADER] = self._version
        return headers

    async def _post(self, app: AsgiApp, body: bytes, headers: dict[str, str], *, keep: bool = False) -> _Reply:
        reply = _Reply()
        events = _EventLines()

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                reply.status = message["status"]
                reply.headers = {name.decode().lower(): value.decode() for name, value in message["headers"]}
                events.streamed = reply.headers.get("content-type", "").startswith(rules.EVENT_STREAM)
                return
            for line in events.feed(message.get("body", b""), final=not message.get("more_body", False)):
                if keep:
                    reply.lines.append(line)
                await self._write(line)

        await app(_scope("POST", self._path, headers, self._query), _body_then_wait(body), send)
        return reply

    async def _write(self, line: bytes) -> None:
        if self._closed:
            return
        async with self._write_lock:
            try:
                await self._pipe.write(line + b"\n")
            except (BrokenPipeError, ValueError, OSError):
                self._closed = True  # the client is gone; its answers have nowhere to go
                log.info("standard output closed; answers are no longer written")


class _EventLines:
    """A response body as the JSON-RPC messages it carries, one line each: a JSON body is one message (or a
    batch); an event stream's events carry one each in their data (its priming event and comments, none)."""

    def __init__(self) -> None:
        self.streamed = False
        self._buffer = bytearray()

    def feed(self, chunk: bytes, *, final: bool) -> list[bytes]:
        self._buffer += chunk
        if not self.streamed:
            if not final:
                return []
            body = bytes(self._buffer).strip()
            self._buffer.clear()
            return [body.replace(b"\n", b"")] if body else []
        lines = []
        while (end := self._buffer.find(b"\n\n")) >= 0:
            event, self._buffer = bytes(self._buffer[:end]), self._buffer[end + 2 :]
            data = b"\n".join(field[5:].lstrip(b" ") for field in event.split(b"\n") if field.startswith(b"data:"))
            if data.strip():
                lines.append(data.replace(b"\n", b""))
        return lines


def _scope(method: str, path: str, headers: dict[str, str], query: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()],
        "client": ("127.0.0.1", 0),
        "server": ("localhost", 0),
    }


def _body_then_wait(body: bytes) -> Callable[[], Awaitable[dict[str, Any]]]:
    """The ASGI `receive` of a request whose client never leaves mid-answer: the body, then nothing (the end of
    the input ends every exchange with the server's shutdown, not with a disconnect)."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    return receive
