"""One HTTP exchange on the bare ASGI messages: what `/mcp` is served on, without a web framework.

Every agent call is a POST to `/mcp`, and on these machines Quart's share of one (its request and
context objects, routing, hooks, a second task per request, one more body message) is about a third of
what hypercorn's own work costs. The MCP endpoint needs none of that, so `Edge` sends `/mcp` here and
every other path to the Quart app, and this module keeps the rules a Quart route had:

- the body is bounded in size and in time (`Refused` 413 and 408), and is read by a task that also
  watches for the client leaving: a disconnect cancels the exchange, its handler and its event stream
  alike, as quart-trio does;
- the last write of a response is shielded, so that hypercorn's close of a connection whose client still
  owes body bytes is not itself cancelled (which would leave the socket open);
- `decide_finish` is the one decision of a response's `Connection: close` (body still owed) and its CORS
  headers, for the Quart routes too.
"""

import contextlib
import urllib.parse
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs
import trio

from executor_mcp.protocol.errors import Refusal, Refused
from executor_mcp.protocol.http import HeaderLookup
from executor_mcp.transport import headers as rules
from executor_mcp.transport.browser import BrowserGuard
from executor_mcp.transport.last_write import JOIN_NEXT

AsgiApp = Callable[[Any, Any, Any], Any]
_NO_BODY_STATUSES = frozenset({204, 304})


class RequestHeaders(Mapping[str, str]):
    """Request headers by lower-case name; a repeated header reads as its first value (as in werkzeug)."""

    __slots__ = ("_values", "repeated")

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        values: dict[str, str] = {}
        repeated: set[str] = set()
        for name, value in raw:
            key = name.decode("latin-1").lower()
            if key in values:
                repeated.add(key)
            values.setdefault(key, value.decode("latin-1"))
        self._values = values
        self.repeated = frozenset(repeated)  # names sent more than once (2026 routing headers must not be)

    def __getitem__(self, name: str) -> str:
        return self._values[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


class LastChunk(bytes):
    """A streamed body's final chunk, sent as the body's last message (written with the end of the body,
    see `last_write.py`) instead of being followed by an empty one: a client that stops reading once it
    has its answer then finds the body complete, and keeps the connection."""


@attrs.define
class Answer:
    """A response before it is sent: bytes get a `Content-Length`; an async iterator is streamed."""

    status: int
    body: bytes | AsyncGenerator[bytes, None] = b""
    headers: dict[str, str] = attrs.Factory(dict)
    first_chunk_at_once: bool = False  # a streamed body's first chunk is ready now: written with the head
    # Called once the exchange is over, sent or not: a streamed body's generator that never started (the
    # client left while the head was going out) runs no `finally`, so what must follow its end goes here.
    over: Callable[[], None] | None = None


@attrs.frozen
class Finish:
    """What every response's headers get, for `/mcp` and the Quart routes alike.

    `close`: the client still owes body bytes, which must not be read as a next request. `cors`: the
    CORS headers to add where the response has none of its own (an allowed origin, echoed, replaces any
    `*`), or None when no `Access-Control-*` header may go out at all (console pages, and `--auth none`
    without an allowed `Origin`)."""

    close: bool
    cors: dict[str, str] | None
    vary_origin: bool

    def apply(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        if self.cors is None:
            completed = [(name, value) for name, value in headers if not name.lower().startswith(_CORS_PREFIX)]
        else:
            replaced = {ALLOW_ORIGIN.lower()} if self.vary_origin else set()
            completed = [(name, value) for name, value in headers if name.lower() not in replaced]
            present = {name.lower() for name, _ in completed}
            completed += [(name, value) for name, value in self.cors.items() if name.lower() not in present]
        if self.close:
            completed = [(name, value) for name, value in completed if name.lower() != "connection"]
            completed.append(("Connection", "close"))
        if self.vary_origin:
            completed.append(("Vary", "Origin"))
        return completed


ALLOW_ORIGIN = "Access-Control-Allow-Origin"
_CORS_PREFIX = "access-control-"


def decide_finish(guard: BrowserGuard, request: HeaderLookup, *, body_owed: bool, console: bool) -> Finish:
    allowed = None if console else guard.cors_origin(request)
    if allowed is None:
        return Finish(body_owed, None, vary_origin=False)
    if allowed == "*":
        return Finish(body_owed, dict(rules.CORS), vary_origin=False)
    return Finish(body_owed, {**rules.CORS, ALLOW_ORIGIN: allowed}, vary_origin=True)


def declares_body(headers: HeaderLookup) -> bool:
    return headers.get("content-length", "0") != "0" or "transfer-encoding" in headers


class Exchange:
    """One request and its response, on the ASGI messages of one HTTP request."""

    def __init__(self, scope: Any, receive: Any, send: Any, *, body_limit: int, body_seconds: float) -> None:
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.headers = RequestHeaders(scope["headers"])
        self._query: bytes = scope.get("query_string", b"")
        self._receive = receive
        self._send = send
        self._limit = body_limit
        self._seconds = body_seconds
        self._body = bytearray()  # one buffer: a body sent as millions of tiny chunks costs no more
        self._too_large = False
        self._arrived = trio.Event()
        self.received = False  # the client sent its whole body

    def query(self, name: str) -> str | None:
        """The first value of a query parameter, as a framework's `args.get` gives it."""
        for key, value in urllib.parse.parse_qsl(self._query.decode("latin-1"), keep_blank_values=True):
            if key == name:
                return value
        return None

    async def body(self) -> bytes:
        """The whole body, once it has arrived within its bounds."""
        if not self._arrived.is_set():  # most bodies came with their headers
            with trio.move_on_after(self._seconds):
                await self._arrived.wait()
        if self._too_large:
            raise Refused(Refusal.BODY_TOO_LARGE)
        if not self._arrived.is_set():
            raise Refused(Refusal.BODY_TIMEOUT)
        body = bytes(self._body)
        self._body = bytearray()  # not kept for the life of the exchange (a stream's, say)
        return body

    async def serve(self, handle: Callable[["Exchange"], Any], finishing: Callable[["Exchange"], Finish]) -> None:
        """Run `handle` (which returns the `Answer`) and send what it answers; a disconnect cancels both."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch, nursery.cancel_scope)
            answer: Answer = await handle(self)
            try:
                await self._respond(answer, finishing(self).apply(list(answer.headers.items())))
            finally:
                if answer.over is not None:
                    answer.over()
            nursery.cancel_scope.cancel()

    @property
    def body_owed(self) -> bool:
        return declares_body(self.headers) and not self.received

    async def _watch(self, exchange: trio.CancelScope) -> None:
        """Read the body as it comes (keeping at most `body_limit` bytes), then wait for the client to leave."""
        while True:
            message = await self._receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                if not self._too_large:
                    if len(self._body) + len(chunk) > self._limit:
                        self._too_large = True
                        self._body = bytearray()
                        self._arrived.set()
                    else:
                        self._body += chunk
                if not message.get("more_body", False):
                    self.received = True
                    self._arrived.set()
            elif message["type"] == "http.disconnect":
                exchange.cancel()
                return

    async def _respond(self, answer: Answer, header_list: list[tuple[str, str]]) -> None:
        headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in header_list]
        streamed = not isinstance(answer.body, bytes)
        if isinstance(answer.body, bytes) and answer.status not in _NO_BODY_STATUSES:
            headers.append((b"content-length", str(len(answer.body)).encode()))
        start = {"type": "http.response.start", "status": answer.status, "headers": headers}
        if not streamed or answer.first_chunk_at_once:
            start[JOIN_NEXT] = True
        await self._send(start)
        if isinstance(answer.body, bytes):
            await self._send_last(answer.body)
            return
        ended = False
        async with contextlib.aclosing(answer.body) as chunks:  # a disconnect can leave it suspended at a yield
            async for chunk in chunks:
                if ended:
                    continue  # nothing goes out after the end
                if isinstance(chunk, LastChunk):
                    await _let_a_departure_arrive()
                    await self._send_last(bytes(chunk))
                    ended = True
                else:
                    await self._send({"type": "http.response.body", "body": chunk, "more_body": True})
        if not ended:
            await self._send_last(b"")

    async def _send_last(self, body: bytes) -> None:
        with trio.CancelScope(shield=True):
            await self._send({"type": "http.response.body", "body": body, "more_body": False})


_DEPARTURE_TURNS = 3


async def _let_a_departure_arrive() -> None:
    """Before the last chunk: give a disconnect already queued on the socket the few scheduler turns it
    takes (the connection's reader, then our watcher) to cancel the exchange. Best effort: it narrows the
    window in which an answer goes to a client that has left, it cannot close it (nothing can, short of
    the client's acknowledgement).

    The last chunk and the end of the body go out in one write, after which the stream counts as
    delivered; a client that left meanwhile (its `FIN` not read yet) would have it written to a dead
    socket and lost. Cancelled here instead, the stream's generator is closed at its last `yield`, so the
    stream is kept for a GET (at-least-once)."""
    for _ in range(_DEPARTURE_TURNS):
        await trio.lowlevel.checkpoint()


@attrs.define
class Edge:
    """The server's ASGI app: `path` and the paths under `path + "/toolkits/"` served by `handle` on a bare
    `Exchange`, everything else by `fallback`."""

    path: str
    handle: Callable[[Exchange], Any]
    guard: BrowserGuard
    fallback: AsgiApp
    body_limit: int
    body_seconds: float

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and (scope["path"] == self.path or scope["path"].startswith(self._toolkits)):
            exchange = Exchange(scope, receive, send, body_limit=self.body_limit, body_seconds=self.body_seconds)
            await exchange.serve(self.handle, self._finish)
        else:
            await self.fallback(scope, receive, send)

    @property
    def _toolkits(self) -> str:
        return self.path + "/toolkits/"

    def _finish(self, exchange: Exchange) -> Finish:
        return decide_finish(self.guard, exchange.headers, body_owed=exchange.body_owed, console=False)
