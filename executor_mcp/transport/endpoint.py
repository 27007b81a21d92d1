"""The MCP endpoints, `/mcp` and each toolkit's `/mcp/toolkits/<slug>`: Streamable HTTP on a bare ASGI exchange
(`asgi.py`); `routes.py` assembles them with the rest. A toolkit's endpoint is the same endpoint bound to another
resource: its sessions belong to it, and its calls are narrowed by the toolkit (`policies/toolkits.py`). A toolkit
the bearer cannot see is not found; an API key bound to a toolkit is refused at every other endpoint.

Checks run in a fixed order, each refusing with its exact envelope: (with `--auth none`, on every route
and before routing) `Host` and `Origin`, then method, authentication, headers,
body, JSON-RPC shape, `server/discover`, initialize rules, session id rules, protocol version, then
the session itself (which may restore, or refuse by its lifecycle state). Only after all of that does
a request reach the session's tool server.

Answers: `initialize` and plain requests as `application/json`; a POST carrying `tools/call` as a
`text/event-stream` (the client must accept both; see `streaming.py`); notifications and responses
alone as 202.
"""

import logging
import secrets
from collections.abc import AsyncGenerator

import trio

from executor_mcp.auth.principal import EndpointAuthenticator, Forbidden, Principal, refuse_bound
from executor_mcp.codec import dumps
from executor_mcp.logs import note
from executor_mcp.observability.metrics import rpc_method_of
from executor_mcp.policies.toolkit_service import Toolkits
from executor_mcp.policies.toolkits import SLUG
from executor_mcp.protocol.errors import (
    Code,
    Refusal,
    Refused,
    RpcError,
    envelope_body,
    envelope_headers,
)
from executor_mcp.protocol.jsonrpc import (
    InvalidJson,
    InvalidMessage,
    Request,
    encode_message,
    error_response,
    parse_body,
)
from executor_mcp.protocol.jsonrpc import (
    Response as RpcResponse,
)
from executor_mcp.protocol.mcp import (
    DISCOVER_METHOD,
    INITIALIZE_METHOD,
    InitializeParams,
    initialize_problems,
    initialize_result,
    negotiate_version,
    structure_params,
)
from executor_mcp.protocol.resources import MCP_PATH, slug_of
from executor_mcp.protocol.stateless import is_stateless, stateless_by_header
from executor_mcp.sessions.manager import SessionManager
from executor_mcp.sessions.session import Session
from executor_mcp.sessions.streams import Call, Stream
from executor_mcp.storage.interfaces import store_unavailable
from executor_mcp.transport import headers as rules
from executor_mcp.transport.asgi import Answer, Exchange
from executor_mcp.transport.browser import BrowserGuard
from executor_mcp.transport.sse import PRIMING, parse_event_id
from executor_mcp.transport.stateless import StatelessEndpoint, session_modes
from executor_mcp.transport.streaming import listen_events, stream_events

log = logging.getLogger(__name__)

STREAMING_METHODS = frozenset({"tools/call"})
_ALLOWED = ("GET", "POST", "DELETE", "OPTIONS")
# Every method reaches the policies API, which routes them itself and answers its own JSON errors.
POLICY_API_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


STATELESS_ONLY_POST = {"Content-Type": rules.JSON, "Allow": "POST"}


class McpEndpoint:
    def __init__(
        self,
        manager: SessionManager,
        authenticator: EndpointAuthenticator,
        guard: BrowserGuard,
        stateless: StatelessEndpoint,
        toolkits: Toolkits,
    ) -> None:
        self._manager = manager
        self._auth = authenticator
        self._guard = guard
        self._stateless = stateless
        self._toolkits = toolkits

    async def serve(self, exchange: Exchange) -> Answer:
        """The answer to one exchange, refusals and defects included (the edge adds CORS and `Connection`)."""
        try:
            return await self._dispatch(exchange)
        except Refused as exc:
            return _refusal_answer(exc)
        except Exception as exc:
            return _refusal_answer(defect_refusal(exc))

    async def _dispatch(self, exchange: Exchange) -> Answer:
        if (refusal := self._guard.refusal(exchange.headers)) is not None:
            raise Refused(refusal)
        if exchange.method == "OPTIONS":
            return Answer(204, headers=dict(rules.PREFLIGHT))
        if exchange.method not in _ALLOWED:
            raise Refused(Refusal.METHOD_NOT_ALLOWED)
        resource = _resource(exchange.path)
        principal = await self._authenticate(exchange, resource)
        refuse_bound(principal, resource)
        slug = slug_of(resource)
        if slug is not None and exchange.method != "DELETE" and await self._toolkits.scope(principal, slug) is None:
            raise Refused(Refusal.TOOLKIT_NOT_FOUND)  # another org's, another member's, or none: all alike
        if exchange.method == "POST":
            return await self._post(exchange, principal, resource)
        if stateless_by_header(exchange.headers):  # 2026 has no GET stream and no session to DELETE
            return Answer(405, dumps(envelope_body(Refused(Refusal.METHOD_NOT_ALLOWED))), STATELESS_ONLY_POST)
        if exchange.method == "GET":
            return await self._get(exchange, principal, resource)
        return await self._delete(exchange, principal, resource)

    async def _authenticate(self, exchange: Exchange, resource: str) -> Principal:
        try:
            return await self._auth.authenticate_endpoint(exchange.headers, resource)
        except Forbidden as refused:
            # A definitive "no organization" ends the session it names, if this account in this org owns it.
            session_id = exchange.headers.get(rules.SESSION_HEADER, "").strip()
            if session_id:
                with trio.CancelScope(shield=True):
                    await self._manager.evict(session_id, owned_by=refused.owner)
            raise

    async def _post(self, exchange: Exchange, principal: Principal, resource: str) -> Answer:
        headers = exchange.headers
        rules.require_post_accept(headers)
        rules.require_json_body(headers)
        raw = await exchange.body()
        try:
            messages, batch = parse_body(raw)
        except InvalidJson:
            raise Refused(Refusal.INVALID_JSON) from None
        except InvalidMessage:
            raise Refused(Refusal.INVALID_MESSAGE) from None
        note(jsonrpc_method=rpc_method_of(messages, batch))
        if is_stateless(headers, messages, batch):
            return await self._stateless.post(exchange, principal, messages, batch, resource)
        requests = [m for m in messages if isinstance(m, Request)]
        # A 2025 request of 2026's first method: not one of this era's (a 2026 client then falls back).
        discover = next((r for r in requests if r.method == DISCOVER_METHOD), None)
        if discover is not None:
            raise Refused(Refusal.METHOD_NOT_FOUND, request_id=discover.id)
        initializes = [r for r in requests if r.method == INITIALIZE_METHOD]
        if initializes:
            if headers.get(rules.SESSION_HEADER):
                raise Refused(Refusal.INITIALIZE_WITH_SESSION)
            if len(messages) > 1:
                raise Refused(Refusal.INITIALIZE_IN_BATCH)
            return await self._initialize(exchange, initializes[0], raw, principal, resource)

        session_id = rules.require_session_id(headers)
        rules.protocol_version(headers)
        session = await self._manager.acquire(session_id, principal, resource)
        for message in messages:
            if not isinstance(message, Request):
                session.receive(message)
        if not requests:
            return _empty(202)
        streaming = any(r.method in STREAMING_METHODS for r in requests)
        stream = session.open_stream(len(requests), PRIMING if streaming else None)
        calls = [session.start_call(r, stream) for r in requests]
        if streaming:
            return _event_stream(stream_events(session, stream, calls), primed=True)
        return await self._json_answer(session, stream, calls, batch)

    async def _initialize(
        self, exchange: Exchange, message: Request, raw: bytes, principal: Principal, resource: str
    ) -> Answer:
        # Everything is checked before anything is created: a refused initialize leaves no file behind.
        try:
            params: InitializeParams = structure_params(message.params, InitializeParams)
            if problems := initialize_problems(params):
                raise RpcError(Code.INVALID_PARAMS, "Invalid params", problems)
        except RpcError as exc:
            return _answer_json(encode_message(error_response(message.id, exc.code, exc.message, exc.data)), status=400)
        version = negotiate_version(params.protocol_version)
        # Chosen once, at creation.
        elicitation, mode = session_modes(exchange)
        session = await self._manager.create(principal, resource, params, version, raw, elicitation, mode)
        answer = RpcResponse(id=message.id, result=initialize_result(version))
        return _answer_json(encode_message(answer), headers={rules.SESSION_HEADER: session.id})

    async def _json_answer(self, session: Session, stream: Stream, calls: list[Call], batch: bool) -> Answer:
        answers: list[bytes] = []
        cursor = 0
        try:
            while events := await stream.read(cursor):
                cursor = events[-1].seq
                answers.extend(event.payload for event in events if event.answer)
        finally:
            session.abandon(calls)
        if stream.refused is not None:
            raise stream.refused
        body = b"[" + b",".join(answers) + b"]" if batch else answers[0]
        return Answer(200, body, {"Content-Type": rules.JSON})

    async def _get(self, exchange: Exchange, principal: Principal, resource: str) -> Answer:
        headers = exchange.headers
        rules.require_stream_accept(headers)
        session_id = rules.require_session_id(headers)
        rules.protocol_version(headers)
        session = await self._manager.acquire(session_id, principal, resource)
        resume_from = parse_event_id(headers.get("last-event-id", ""))
        return _event_stream(listen_events(session, session.listen(), resume_from))

    async def _delete(self, exchange: Exchange, principal: Principal, resource: str) -> Answer:
        session_id = exchange.headers.get(rules.SESSION_HEADER, "").strip()
        if session_id:
            session = await self._manager.acquire(session_id, principal, resource, activity=False)
            await self._manager.terminate(session)
        return _empty(200)


def _resource(path: str) -> str:
    """The endpoint a path asks for: `/mcp`, or a toolkit's (a slug of the toolkit grammar, else not found)."""
    slug = slug_of(path)
    if slug is not None and not SLUG.match(slug):
        raise Refused(Refusal.TOOLKIT_NOT_FOUND)
    return path if slug is not None else MCP_PATH


def _event_stream(events: AsyncGenerator[bytes, None], *, primed: bool = False) -> Answer:
    """`primed`: the stream opens with its priming event, there at once (a GET stream may wait for its first)."""
    headers = {"Content-Type": rules.EVENT_STREAM, "Cache-Control": "no-cache"}
    return Answer(200, events, headers, first_chunk_at_once=primed)


def _empty(status: int) -> Answer:
    """A bodiless answer with no Content-Type, which clients check for on 202."""
    return Answer(status)


def _answer_json(body: object, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    return Answer(status, dumps(body), {"Content-Type": rules.JSON, **(headers or {})})


def _refusal_answer(exc: Refused) -> Answer:
    return _answer_json(envelope_body(exc), status=exc.envelope.status, headers=envelope_headers(exc))


def defect_refusal(exc: Exception) -> Refused:
    """An unexpected exception as the 500 envelope; the details go to the log under a correlation id. The shared
    database out of reach is no defect but a transient condition: the 503 envelope (retry), one log line."""
    if store_unavailable(exc):
        log.warning("answered 503: %s", exc)
        return Refused(Refusal.STORE_UNAVAILABLE)
    correlation = secrets.token_hex(4)
    log.error("unhandled error [%s]", correlation, exc_info=exc)
    return Refused(Refusal.INTERNAL)
