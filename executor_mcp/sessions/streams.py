"""Where a session's answers go: one `Stream` per POST, one `Listener` per GET.

Responses are routed per stream, never by JSON-RPC id across the session: two concurrent POSTs that
reuse an id each get their own answer. A stream is an unbounded in-memory channel that the transport
drains; it ends when every request it carries has been answered, either by the tool server or by a
refusal from the session's exit handling.
"""

import contextlib
import math

import attrs
import trio

from executor_mcp.protocol.errors import Refused
from executor_mcp.protocol.jsonrpc import ErrorResponse, Message, Request, RequestId, Response, error_response


class Stream:
    """The outbound side of one POST: its requests' notifications and answers, then the end."""

    def __init__(self, expected: int) -> None:
        self._send, self._receive = trio.open_memory_channel[Message](math.inf)
        self._pending = expected
        self.refused: Refused | None = None

    def send(self, message: Message) -> None:
        if self._pending:
            # A broken channel means the client went away and the request is being abandoned.
            with contextlib.suppress(trio.BrokenResourceError):
                self._send.send_nowait(message)

    def answer(self, response: Response | ErrorResponse) -> None:
        self.send(response)
        self._settle_one()

    def refuse(self, request_id: RequestId, refused: Refused) -> None:
        """Answer one request with a session-level refusal, in the form a started stream can carry."""
        self.refused = self.refused or refused
        self.send(error_response(request_id, int(refused.envelope.code), refused.message))
        self._settle_one()

    def _settle_one(self) -> None:
        self._pending -= 1
        if not self._pending:
            self._send.close()

    def __aiter__(self) -> "Stream":
        return self

    async def __anext__(self) -> Message:
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None


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
