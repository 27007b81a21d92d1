"""hypercorn writes what one response message produces in one socket write, and joins messages on request.

hypercorn 0.18 writes each HTTP/1.1 event on its own: the head, every body chunk, and the `0\r\n\r\n`
that ends a streamed body. Two things follow. A client that stops reading once it has its answer (as MCP
clients do with a `tools/call` event stream) usually reads the last chunk before the end has arrived,
so its HTTP stack sees an unfinished body and drops the connection, and the next call pays for a new one
on both sides (measured with `../shared/bench/mcp-bench.mjs`: a new connection for nearly every call,
against two for 300 calls to upstream, whose server writes them together). And every write wakes the
client: a JSON answer took three, a `tools/call` stream four.

So, on HTTP/1.1 connections, the bytes hypercorn produces while handling one ASGI message are written
together (a final body chunk goes out with the end of the body), and a message the app marks with
`JOIN_NEXT` is written with the next one (the exchange marks a head whose first body chunk follows at
once). A JSON answer is one write; a `tools/call` stream two (head with priming event, answer with end).
Held bytes are written when the body ends (before hypercorn makes the connection ready for the next
request), before any other event of the connection (a close, say), and when the app is done.

hypercorn is pinned; `install` refuses any other version (this leans on how it hands events to its
protocol), and the server then works as before, one write per event.
"""

import importlib.metadata
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from hypercorn.events import Event, RawData
from hypercorn.protocol.events import EndBody
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import HTTPStream

log = logging.getLogger(__name__)

SUPPORTED_HYPERCORN = "0.18.0"
# An ASGI message key of ours: write this message's bytes together with the next message's.
JOIN_NEXT = "executor_mcp.join_next"


class _JoinedWrites:
    """A connection's send, holding written bytes while asked to, and writing them first otherwise."""

    def __init__(self, send: Callable[[Event], Awaitable[None]]) -> None:
        self._send = send
        self._held = bytearray()
        self.holding = False

    async def __call__(self, event: Event) -> None:
        if isinstance(event, RawData) and self.holding:
            self._held += event.data
            return
        if isinstance(event, RawData) and self._held:
            event = RawData(data=bytes(self._held) + event.data)
            self._held.clear()
        else:
            await self.flush()
        await self._send(event)

    async def flush(self) -> None:
        if self._held:
            data = bytes(self._held)
            self._held.clear()
            await self._send(RawData(data=data))


def install() -> bool:
    """Wrap hypercorn's HTTP/1.1 response sending, once; False (and a warning) on an unknown hypercorn."""
    if getattr(HTTPStream.app_send, "_executor_joined", False):
        return True
    version = importlib.metadata.version("hypercorn")
    if version != SUPPORTED_HYPERCORN:
        log.warning("hypercorn %s: response bytes are written event by event", version)
        return False
    app_send, stream_send = HTTPStream.app_send, H11Protocol.stream_send

    async def joined_app_send(self: HTTPStream, message: Any) -> None:
        writes = _writes_of(self)
        if writes is None:
            await app_send(self, message)
            return
        writes.holding = True
        try:
            await app_send(self, message)
        finally:
            writes.holding = False
        if message is None or not message.get(JOIN_NEXT):
            await writes.flush()

    async def flushing_stream_send(self: H11Protocol, event: Any) -> None:
        # The body is done: its bytes go out now, before hypercorn recycles the connection for the next
        # request (whose reader must not start before this write, or the idle timer is re-armed after it).
        await stream_send(self, event)
        if isinstance(event, EndBody) and isinstance(self.send, _JoinedWrites):
            await self.send.flush()

    joined_app_send._executor_joined = True  # type: ignore[attr-defined]
    HTTPStream.app_send = joined_app_send  # type: ignore[method-assign]
    H11Protocol.stream_send = flushing_stream_send  # type: ignore[method-assign]
    return True


def _writes_of(stream: HTTPStream) -> _JoinedWrites | None:
    """The joined writes of the HTTP/1.1 connection the stream answers on (made on first use)."""
    protocol = getattr(stream.send, "__self__", None)
    if not isinstance(protocol, H11Protocol):
        return None
    if not isinstance(protocol.send, _JoinedWrites):
        protocol.send = _JoinedWrites(protocol.send)
    return protocol.send
