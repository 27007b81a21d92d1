"""`/mcp` for MCP revision 2026-07-28: one request per POST, no session, answered in that era's vocabulary.

The endpoint has authenticated the request and told its era (`protocol/stateless.py`) before anything here
runs, so a 2026 request never meets a 2025 session rule. Then: one request (not a batch, not a posted
response), a notification acknowledged and dropped, the spec's ladder, and the method. `server/discover` is
computed; `tools/list` and `tools/call` run in the principal's workspace (`SessionManager.workspace`), an
ordinary durable session that is never named on the wire.

A call is answered as JSON if its answer comes within `COMMIT_SECONDS` (its status then follows its error
code), else as an event stream that carries keep-alive comments and then the answer. 2026 streams are not
resumable: no event ids, no priming event (a client that saw an id would try to reconnect with a GET). The
client leaving is cancellation: the exchange's cancellation abandons the call, which stops its work (a paused
execution has already been answered, so it is not affected).
"""

import functools
from typing import Any

import trio

from executor_mcp.auth.principal import Principal
from executor_mcp.codec import JsonObject, dumps
from executor_mcp.protocol.errors import Code, Refused, RpcError
from executor_mcp.protocol.jsonrpc import Message, Request, RequestId, Response, encode_message, error_response
from executor_mcp.protocol.mcp import DISCOVER_METHOD
from executor_mcp.protocol.stateless import StatelessRequest, discover_result, status_of, validate
from executor_mcp.sessions.lifecycle import workspace_refusal
from executor_mcp.sessions.manager import SessionManager
from executor_mcp.sessions.session import Session
from executor_mcp.sessions.streams import Stream
from executor_mcp.storage.records import ELICITATION_MODES, EXECUTE_MODE, MODEL_ELICITATION, PASSTHROUGH_MODE
from executor_mcp.toolserver.stateless import StatelessCalls
from executor_mcp.transport import headers as rules
from executor_mcp.transport.asgi import Answer, Exchange, LastChunk
from executor_mcp.transport.sse import KEEPALIVE, message_event

# How long an answer may take and still go out as JSON (as the official Python SDK server waits).
COMMIT_SECONDS = 15.0
STREAM_KEEPALIVE_SECONDS = 15.0  # as the Python SDK; 2025 streams use theirs (`streaming.py`)
_STREAM_HEADERS = {"Content-Type": rules.EVENT_STREAM, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class StatelessEndpoint:
    def __init__(self, manager: SessionManager, calls: StatelessCalls) -> None:
        self._manager = manager
        self._calls = calls

    async def post(
        self, exchange: Exchange, principal: Principal, messages: list[Message], batch: bool, resource: str
    ) -> Answer:
        """The answer to a 2026 POST at the endpoint `resource` (whose workspace serves it); a refusal of the
        server's own (a restart, say) is raised as `Refused`."""
        if batch or len(messages) != 1:
            return _error(None, Code.INVALID_REQUEST, "Invalid Request: a request must be sent alone, not in a batch")
        message = messages[0]
        if not isinstance(message, Request):
            if hasattr(message, "method"):  # a notification: 2026 defines none over HTTP; acknowledged, dropped
                return Answer(202)
            return _error(None, Code.INVALID_REQUEST, "Invalid Request: a response cannot be posted")
        try:
            validated = validate(exchange.headers, exchange.headers.repeated, message)
        except RpcError as exc:
            return _error(message.id, exc.code, exc.message, exc.data)
        if message.method == DISCOVER_METHOD:
            return _json(encode_message(Response(id=message.id, result=discover_result())))
        try:
            session = await self._manager.workspace(principal, resource, *session_modes(exchange))
            return await self._call(session, validated)
        except Refused as refused:
            raise Refused(
                workspace_refusal(refused.refusal), challenge=refused.challenge, request_id=message.id, **refused.params
            ) from None

    async def _call(self, session: Session, validated: StatelessRequest) -> Answer:
        stream = session.open_stream(1, None)
        call = session.start_call(validated.request, stream, self._calls.serving(validated.capabilities))
        try:
            with trio.move_on_after(COMMIT_SECONDS):
                while not stream.finished:
                    await stream.read(stream.events[-1].seq if stream.events else 0)
        except BaseException:
            session.abandon([call])  # the client left: the call is cancelled
            raise
        if not stream.finished:
            # Abandoned once the exchange is over however it ended (a no-op for a call already answered).
            over = functools.partial(session.abandon, [call])
            return Answer(200, _events(stream), dict(_STREAM_HEADERS), over=over)
        session.abandon([call])
        if stream.refused is not None:
            raise stream.refused
        answer = next(event for event in stream.events if event.answer)
        status = status_of(answer.error_code) if answer.error_code is not None else 200
        return Answer(status, answer.payload, {"Content-Type": rules.JSON})


async def _events(stream: Stream):
    """A long call's answer as an event stream: keep-alive comments while it runs, then its messages, with no
    event ids. The client leaving ends the exchange, which abandons the call (`Answer.over`)."""
    cursor = 0
    while True:
        events = None
        with trio.move_on_after(STREAM_KEEPALIVE_SECONDS):
            events = await stream.read(cursor)
        if events is None:
            yield KEEPALIVE
            continue
        if not events:
            return
        cursor = events[-1].seq
        frames = b"".join(message_event(event.payload) for event in events)
        if stream.finished:
            yield LastChunk(frames)
            return
        yield frames


def session_modes(exchange: Exchange) -> tuple[str, str]:
    """The elicitation mode and the tool mode a request asks for in its URL (upstream §3.1), never in its body or
    capabilities: a 2025 session takes them at `initialize`, a 2026 request picks its workspace by them."""
    asked = exchange.query("elicitation_mode") or MODEL_ELICITATION
    elicitation = asked if asked in ELICITATION_MODES else MODEL_ELICITATION
    return elicitation, PASSTHROUGH_MODE if exchange.query("mode") == PASSTHROUGH_MODE else EXECUTE_MODE


def _json(body: JsonObject, status: int = 200) -> Answer:
    return Answer(status, dumps(body), {"Content-Type": rules.JSON})


def _error(request_id: RequestId | None, code: int, message: str, data: Any = None) -> Answer:
    return _json(encode_message(error_response(request_id, code, message, data)), status_of(code))
