"""Where a session's answers go: one `Stream` per POST, one `Listener` per GET.

Responses are routed per stream, never by JSON-RPC id across the session: two concurrent POSTs that
reuse an id each get their own answer. A stream is an append-only log of numbered events (the SSE
event ids are `<stream id>:<seq as 16 hex digits>`), read by cursor: the POST that opened it reads it
live, and if that connection drops, a later GET can pick the same log up after the last event id the
client saw. It ends when every request it carries has been answered, by the tool server or by a
refusal from the session's exit handling.
"""

import contextlib
import math
import uuid

import attrs
import trio

from executor_mcp.codec import dumps
from executor_mcp.protocol.errors import Refused
from executor_mcp.protocol.jsonrpc import (
    ErrorResponse,
    Message,
    Request,
    RequestId,
    Response,
    encode,
    error_response,
)

# A detached stream keeps at most this many events for replay, and this many bytes of them; the newest
# is always kept. While its POST still reads it, nothing is dropped: that reader gets every event.
MAX_EVENTS = 64
MAX_EVENT_BYTES = 2 * 1024 * 1024


@attrs.frozen
class Event:
    seq: int
    message: Message


class Stream:
    """The outbound side of one POST: its requests' notifications and answers, then the end."""

    def __init__(self, expected: int, priming: Message | None = None) -> None:
        self.id = uuid.uuid4().hex
        self.events: list[Event] = []
        self.primed = priming is not None
        self.refused: Refused | None = None
        self._pending = expected
        self._seq = 0
        self._sizes: dict[int, int] | None = None  # encoded sizes, measured once the stream is detached
        self._changed = trio.Event()
        if priming is not None:
            self._append(priming)

    @property
    def finished(self) -> bool:
        return not self._pending

    def send(self, message: Message) -> None:
        if self._pending:
            self._append(message)

    def answer(self, response: Response | ErrorResponse) -> None:
        self.send(response)
        self._settle_one()

    def refuse(self, request_id: RequestId, refused: Refused) -> None:
        """Answer one request with a session-level refusal, in the form a started stream can carry."""
        self.refused = self.refused or refused
        self.send(error_response(request_id, int(refused.envelope.code), refused.message))
        self._settle_one()

    def detach(self) -> None:
        """Its POST reader left: from now on only the replay caps' worth of events is kept."""
        if self._sizes is None:
            self._sizes = {}
            self._trim()

    async def read(self, after: int) -> list[Event]:
        """The events after `after`, waiting for one if there is none yet; [] once finished and read."""
        while True:
            fresh = [event for event in self.events if event.seq > after]
            if fresh or self.finished:
                return fresh
            changed = self._changed
            await changed.wait()

    def _append(self, message: Message) -> None:
        self._seq += 1
        self.events.append(Event(self._seq, message))
        if self._sizes is not None:
            self._trim()
        self._wake()

    def _trim(self) -> None:
        assert self._sizes is not None
        for event in self.events:
            if event.seq not in self._sizes:
                self._sizes[event.seq] = len(dumps(encode(event.message)))
        while len(self.events) > 1 and (
            len(self.events) > MAX_EVENTS or sum(self._sizes[e.seq] for e in self.events) > MAX_EVENT_BYTES
        ):
            del self._sizes[self.events.pop(0).seq]

    def _settle_one(self) -> None:
        self._pending -= 1
        if not self._pending:
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


@attrs.define(eq=False)
class Call:
    """One request in flight on a session: the worker's cancel scope and the stream it answers on."""

    request: Request
    stream: Stream
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)


@attrs.frozen
class Comment:
    """An SSE comment line: visible on the wire, ignored by clients' message parsers."""

    text: str


class Listener:
    """The GET listen stream of a session: server-initiated messages until closed or superseded."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[Message | Comment](math.inf)

    def send(self, item: Message | Comment) -> None:
        # A message for a listener that already went away is dropped, as when there is no listener.
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            self._send.send_nowait(item)

    def close(self, comment: str | None = None) -> None:
        if comment is not None:
            self.send(Comment(comment))
        self._send.close()

    async def receive(self) -> Message | Comment | None:
        """The next item, or None once the listener has been closed and drained."""
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            return None
