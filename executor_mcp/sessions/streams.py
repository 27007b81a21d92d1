"""Where a session's answers go: one `Stream` per POST, one `Listener` per GET.

Responses are routed per stream, never by JSON-RPC id across the session: two concurrent POSTs that
reuse an id each get their own answer. A stream is an append-only log of numbered events (the SSE
event ids are `<stream id>:<seq as 16 hex digits>`), read by cursor: the POST that opened it reads it
live, and if that connection drops, a later GET can pick the same log up after the last event id the
client saw. It ends when every request it carries has been answered, by the tool server or by a
refusal from the session's exit handling.

A message is serialized once, when it enters a stream or a listener: readers, the replay caps and the
session file only ever see bytes that encoded. An answer that cannot be encoded is replaced by a
-32603 error for the same request, so the request still gets exactly one answer; any other message
that cannot be encoded is dropped (and logged), since nothing waits on it.
"""

import contextlib
import logging
import math
import uuid

import attrs
import trio

from executor_mcp.protocol.errors import Code, Refused
from executor_mcp.protocol.jsonrpc import (
    ErrorResponse,
    Message,
    Request,
    RequestId,
    Response,
    Unencodable,
    error_response,
    serialize,
)

log = logging.getLogger(__name__)

# A detached stream keeps at most this many events for replay, and this many bytes of them; the newest
# is always kept. While its POST still reads it, nothing is dropped: that reader gets every event.
MAX_EVENTS = 64
MAX_EVENT_BYTES = 2 * 1024 * 1024
UNENCODABLE_ANSWER = "Internal error: the result cannot be encoded as JSON"


@attrs.frozen
class StreamEvent:
    """One event of a stream, as sent: the priming event's payload is empty. Only the bytes are kept."""

    seq: int
    payload: bytes
    answer: bool = False  # a response or an error response (what a JSON answer collects)
    error_code: int | None = None  # an error response's code (a 2026 JSON answer's status follows it)


def encoded(message: Message) -> bytes | None:
    """The message's bytes; an unencodable answer becomes a -32603 error, anything else None (dropped)."""
    try:
        return serialize(message)
    except Unencodable as exc:
        if not isinstance(message, Response | ErrorResponse):
            log.warning("dropped an outgoing %s that cannot be encoded (%s)", type(message).__name__, exc)
            return None
        log.warning("answer to request %r cannot be encoded (%s); answering -32603", message.id, exc)
        return serialize(error_response(message.id, Code.INTERNAL_ERROR, UNENCODABLE_ANSWER))


class Stream:
    """The outbound side of one POST: its requests' notifications and answers, then the end."""

    def __init__(self, expected: int, priming: bytes | None = None) -> None:
        self.id = uuid.uuid4().hex
        self.events: list[StreamEvent] = []
        self.refused: Refused | None = None
        self._pending = expected
        self._seq = 0
        self._detached = False
        self._changed = trio.Event()
        if priming is not None:
            self._append(priming, answer=False)

    @property
    def finished(self) -> bool:
        return not self._pending

    def send(self, message: Message) -> None:
        if self._pending and (payload := encoded(message)) is not None:
            code = message.error.code if isinstance(message, ErrorResponse) else None
            self._append(payload, answer=isinstance(message, Response | ErrorResponse), error_code=code)

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
        if not self._detached:
            self._detached = True
            self._trim()

    async def read(self, after: int) -> list[StreamEvent]:
        """The events after `after`, waiting for one if there is none yet; [] once finished and read."""
        while True:
            fresh = [event for event in self.events if event.seq > after]
            if fresh or self.finished:
                return fresh
            changed = self._changed
            await changed.wait()

    def _append(self, payload: bytes, *, answer: bool, error_code: int | None = None) -> None:
        self._seq += 1
        self.events.append(StreamEvent(self._seq, payload, answer, error_code))
        if self._detached:
            self._trim()
        self._wake()

    def _trim(self) -> None:
        while len(self.events) > 1 and (
            len(self.events) > MAX_EVENTS or sum(len(e.payload) for e in self.events) > MAX_EVENT_BYTES
        ):
            self.events.pop(0)

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
        self._send, self._receive = trio.open_memory_channel[bytes | Comment](math.inf)

    def send(self, item: Message | Comment) -> None:
        queued = item if isinstance(item, Comment) else encoded(item)
        if queued is None:
            return
        # A message for a listener that already went away is dropped, as when there is no listener.
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            self._send.send_nowait(queued)

    def close(self, comment: str | None = None) -> None:
        if comment is not None:
            self.send(Comment(comment))
        self._send.close()

    async def receive(self) -> bytes | Comment | None:
        """The next item (a message's bytes, or a comment), or None once closed and drained."""
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            return None
