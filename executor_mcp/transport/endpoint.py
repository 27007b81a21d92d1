"""The `/mcp` endpoint: Streamable HTTP on a bare ASGI exchange (`asgi.py`); the other routes on quart-trio.

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
from typing import Any

import trio
from quart import Response, request
from quart_trio import QuartTrio
from quart_trio.wrappers.request import TrioBody, TrioRequest
from werkzeug.datastructures import Headers
from werkzeug.exceptions import HTTPException

from executor_mcp.audit.trail import AuditTrail
from executor_mcp.auth.principal import Authenticator, Forbidden, Principal
from executor_mcp.codec import dumps
from executor_mcp.execution.runs import Book
from executor_mcp.integrations.handoff import Handoffs
from executor_mcp.integrations.service import Integrations
from executor_mcp.logs import note
from executor_mcp.observability.metrics import rpc_method_of
from executor_mcp.policies.service import Policies
from executor_mcp.protocol.errors import (
    BODY_TIMEOUT_SECONDS,
    MAX_BODY_BYTES,
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
    encode,
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
from executor_mcp.protocol.modern import is_modern, speaks_modern_by_header
from executor_mcp.sessions.manager import SessionManager
from executor_mcp.sessions.session import Session
from executor_mcp.sessions.streams import Call, Stream
from executor_mcp.tools.catalog import Catalog
from executor_mcp.toolserver.modern import ModernCalls
from executor_mcp.transport import headers as rules
from executor_mcp.transport import last_write
from executor_mcp.transport.approvals_api import ApprovalsApi
from executor_mcp.transport.asgi import Answer, Edge, Exchange, decide_finish, declares_body
from executor_mcp.transport.audit_api import AuditApi
from executor_mcp.transport.browser import BrowserGuard
from executor_mcp.transport.discovery import MCP_PATH, METADATA_PATH, PublicUrl, protected_resource_metadata
from executor_mcp.transport.integrations_api import IntegrationsApi, body_limit
from executor_mcp.transport.modern import ModernEndpoint, session_modes
from executor_mcp.transport.observed import Operations
from executor_mcp.transport.policies_api import PoliciesApi
from executor_mcp.transport.sessions_api import SessionsApi
from executor_mcp.transport.sse import PRIMING, parse_event_id
from executor_mcp.transport.streaming import listen_events, stream_events
from executor_mcp.web.approvals import ApprovalsPages
from executor_mcp.web.audit import AuditPages
from executor_mcp.web.catalog import CatalogPages
from executor_mcp.web.connect import ConnectPage
from executor_mcp.web.console import Console, ConsoleCredentials, is_console_path
from executor_mcp.web.governance import GovernancePages

log = logging.getLogger(__name__)

RESOURCE = MCP_PATH
API_PREFIX = "/api"
STREAMING_METHODS = frozenset({"tools/call"})
_ALLOWED = ("GET", "POST", "DELETE", "OPTIONS")
# Every method reaches the policies API, which routes them itself and answers its own JSON errors.
POLICY_API_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


MODERN_ONLY_POST = {"Content-Type": rules.JSON, "Allow": "POST"}


class McpEndpoint:
    def __init__(
        self, manager: SessionManager, authenticator: Authenticator, guard: BrowserGuard, modern: ModernEndpoint
    ) -> None:
        self._manager = manager
        self._auth = authenticator
        self._guard = guard
        self._modern = modern

    async def serve(self, exchange: Exchange) -> Answer:
        """The answer to one exchange, refusals and defects included (the edge adds CORS and `Connection`)."""
        try:
            return await self._dispatch(exchange)
        except Refused as exc:
            return _refusal_answer(exc)
        except Exception as exc:
            return _refusal_answer(_defect_refusal(exc))

    async def _dispatch(self, exchange: Exchange) -> Answer:
        if (refusal := self._guard.refusal(exchange.headers)) is not None:
            raise Refused(refusal)
        if exchange.method == "OPTIONS":
            return Answer(204, headers=dict(rules.PREFLIGHT))
        if exchange.method not in _ALLOWED:
            raise Refused(Refusal.METHOD_NOT_ALLOWED)
        principal = await self._authenticate(exchange)
        if exchange.method == "POST":
            return await self._post(exchange, principal)
        if speaks_modern_by_header(exchange.headers):  # 2026 has no GET stream and no session to DELETE
            return Answer(405, dumps(envelope_body(Refused(Refusal.METHOD_NOT_ALLOWED))), MODERN_ONLY_POST)
        if exchange.method == "GET":
            return await self._get(exchange, principal)
        return await self._delete(exchange, principal)

    async def _authenticate(self, exchange: Exchange) -> Principal:
        try:
            return await self._auth.authenticate(exchange.headers)
        except Forbidden as refused:
            # A definitive "no organization" ends the session it names, if this account in this org owns it.
            session_id = exchange.headers.get(rules.SESSION_HEADER, "").strip()
            if session_id:
                with trio.CancelScope(shield=True):
                    await self._manager.evict(session_id, owned_by=refused.owner)
            raise

    async def _post(self, exchange: Exchange, principal: Principal) -> Answer:
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
        if is_modern(headers, messages, batch):
            return await self._modern.post(exchange, principal, messages, batch)
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
            return await self._initialize(exchange, initializes[0], raw, principal)

        session_id = rules.require_session_id(headers)
        rules.protocol_version(headers)
        session = await self._manager.acquire(session_id, principal, RESOURCE)
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

    async def _initialize(self, exchange: Exchange, message: Request, raw: bytes, principal: Principal) -> Answer:
        # Everything is checked before anything is created: a refused initialize leaves no file behind.
        try:
            params: InitializeParams = structure_params(message.params, InitializeParams)
            if problems := initialize_problems(params):
                raise RpcError(Code.INVALID_PARAMS, "Invalid params", problems)
        except RpcError as exc:
            return _answer_json(encode(error_response(message.id, exc.code, exc.message, exc.data)), status=400)
        version = negotiate_version(params.protocol_version)
        # Chosen once, at creation.
        elicitation, mode = session_modes(exchange)
        session = await self._manager.create(principal, RESOURCE, params, version, raw, elicitation, mode)
        answer = RpcResponse(id=message.id, result=initialize_result(version))
        return _answer_json(encode(answer), headers={rules.SESSION_HEADER: session.id})

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

    async def _get(self, exchange: Exchange, principal: Principal) -> Answer:
        headers = exchange.headers
        rules.require_stream_accept(headers)
        session_id = rules.require_session_id(headers)
        rules.protocol_version(headers)
        session = await self._manager.acquire(session_id, principal, RESOURCE)
        resume_from = parse_event_id(headers.get("last-event-id", ""))
        return _event_stream(listen_events(session, session.listen(), resume_from))

    async def _delete(self, exchange: Exchange, principal: Principal) -> Answer:
        session_id = exchange.headers.get(rules.SESSION_HEADER, "").strip()
        if session_id:
            session = await self._manager.acquire(session_id, principal, RESOURCE, activity=False)
            await self._manager.terminate(session)
        return _empty(200)


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


def _defect_refusal(exc: Exception) -> Refused:
    correlation = secrets.token_hex(4)
    log.error("unhandled error [%s]", correlation, exc_info=exc)
    return Refused(Refusal.INTERNAL)


def _json(body: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(body), status=status, content_type=rules.JSON, headers=headers or {})


def _envelope(status: int, code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return _json(encode(error_response(None, code, message)), status=status, headers=headers)


def _refused(exc: Refused) -> Response:
    if _is_api(request.path):
        return _api_error(exc.envelope.status, exc.message, envelope_headers(exc))
    return _json(envelope_body(exc), status=exc.envelope.status, headers=envelope_headers(exc))


def _is_api(path: str) -> bool:
    return path == API_PREFIX or path.startswith(API_PREFIX + "/")


def _api_error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """The `/api` form of a refusal, `{"error": ...}`, as documented in `policies_api.py`."""
    return _json({"error": message}, status=status, headers=headers)


_HTTP_REFUSALS = {
    404: Refusal.NOT_FOUND,
    405: Refusal.METHOD_NOT_ALLOWED,
    408: Refusal.BODY_TIMEOUT,
    413: Refusal.BODY_TOO_LARGE,
}


def _http_error(exc: HTTPException) -> Response:
    refusal = _HTTP_REFUSALS.get(exc.code or 500)
    if refusal is not None:
        return _refused(Refused(refusal))
    if _is_api(request.path):
        return _api_error(exc.code or 500, exc.name)
    return _envelope(exc.code or 500, Code.TRANSPORT, exc.name)


def _defect(exc: Exception) -> Response:
    if isinstance(exc, HTTPException):
        return _http_error(exc)
    return _refused(_defect_refusal(exc))


class _Body(TrioBody):
    """A request body that knows whether the client has finished sending it."""

    received = False

    def set_complete(self) -> None:
        self.received = True
        super().set_complete()


class _Request(TrioRequest):
    """A request whose body may be as large as its route allows: the spec routes of the integrations API
    take more than `MAX_BODY_BYTES` (their handler bounds the body itself)."""

    body_class = _Body

    def __init__(self, method: str, scheme: str, path: str, *args: Any, **kwargs: Any) -> None:
        limit = kwargs.get("max_content_length")
        if limit is not None:
            kwargs["max_content_length"] = max(limit, body_limit(path))
        super().__init__(method, scheme, path, *args, **kwargs)


class _App(QuartTrio):
    """quart-trio, with the last write of every response shielded.

    Finishing a response while the client still owes body bytes makes hypercorn close the connection
    from inside that last write, just as quart-trio cancels the request's tasks (the client "left"):
    unshielded, the close is itself cancelled and the socket stays open, so a client that sends
    `Content-Length: 1000` and stalls would hold its connection (and a descriptor) forever. Such an
    answer also says `Connection: close`, so the client does not reuse a connection about to close.
    """

    request_class = _Request

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def send_last_shielded(message: Any) -> None:
            if message.get("type") == "http.response.body" and not message.get("more_body", False):
                with trio.CancelScope(shield=True):
                    await send(message)
            else:
                await send(message)

        await super().__call__(scope, receive, send_last_shielded if scope.get("type") == "http" else send)


def create_app(
    manager: SessionManager,
    authenticator: Authenticator,
    public: PublicUrl,
    policies: Policies,
    authorization_servers: tuple[str, ...] = (),
    browser: BrowserGuard | None = None,
    integrations: Integrations | None = None,
    handoffs: Handoffs | None = None,
    console: Console | None = None,
    catalog: Catalog | None = None,
    approvals: Book | None = None,
    *,
    modern_calls: ModernCalls,
    operations: Operations | None = None,
    audit: AuditTrail | None = None,
) -> Edge:
    """The HTTP app: `/mcp` on a bare exchange, the rest on Quart. `browser` is the `--auth none` Origin/Host guard
    (off by default, as with bearers). Without `integrations`, the integrations API's routes are absent; without
    `handoffs` (the connect links and where they point), the connect page and its API; without `console`, the web
    console (and `/api` accepts bearers only). `catalog` (the sandbox's) lets a policy evaluation see each tool's
    approval annotation, and the console's integrations and connections pages list its built-in tools; without it
    those pages are absent; without `approvals` (the book of paused executions), the approvals API and pages.
    `modern_calls` serves the 2026 requests' tool calls; `operations`, `/healthz`, `/readyz` and `/metrics`;
    `audit`, `/api/audit` (and, with a console, its `/audit` page)."""
    last_write.install()
    guard = browser or BrowserGuard(enabled=False)
    # No static folder: Quart's default `/static/<path>` route would answer (even OPTIONS) with HTML.
    app = _App("executor_mcp", static_folder=None)
    # Quart's 60 s default response timeout would silently cut SSE streams; a body gets a bounded time.
    app.config.update(RESPONSE_TIMEOUT=None, MAX_CONTENT_LENGTH=MAX_BODY_BYTES, BODY_TIMEOUT=BODY_TIMEOUT_SECONDS)
    endpoint = McpEndpoint(manager, authenticator, guard, ModernEndpoint(manager, modern_calls, RESOURCE))
    api_auth: Authenticator = authenticator
    if console is not None:
        api_auth = ConsoleCredentials(console, authenticator)
        console.register(app)
        GovernancePages(console).register(app)
        if approvals is not None:
            ApprovalsPages(console, approvals).register(app)

    async def metadata() -> Response:
        if request.method == "OPTIONS":
            return Response(b"", status=204, headers=rules.PREFLIGHT)
        return _json(protected_resource_metadata(public, authorization_servers))

    for path in (METADATA_PATH, METADATA_PATH + MCP_PATH):
        app.add_url_rule(path, path, metadata, methods=["GET", "OPTIONS"], provide_automatic_options=False)
    SessionsApi(manager, api_auth).register(app)
    if audit is not None:
        AuditApi(audit, api_auth).register(app)
        if console is not None:
            AuditPages(console, audit).register(app)
    if operations is not None:
        operations.register(app)
    api = PoliciesApi(policies, api_auth, catalog)
    app.add_url_rule(
        API_PREFIX + "/policies",
        "policies",
        api.collection,
        methods=POLICY_API_METHODS,
        provide_automatic_options=False,
    )
    # A fixed path outranks `<policy_id>`: no policy id (`pol_...`) is `evaluate`.
    app.add_url_rule(
        API_PREFIX + "/policies/evaluate",
        "policies_evaluate",
        api.evaluate,
        methods=POLICY_API_METHODS,
        provide_automatic_options=False,
    )
    app.add_url_rule(
        API_PREFIX + "/policies/<policy_id>",
        "policy",
        api.item,
        methods=POLICY_API_METHODS,
        provide_automatic_options=False,
    )
    if approvals is not None:
        ApprovalsApi(approvals, api_auth).register(app)
    if integrations is not None:
        IntegrationsApi(integrations, api_auth, policies, handoffs).register(app)
        if handoffs is not None:
            ConnectPage(integrations, handoffs.book, guard).register(app)
        if console is not None and catalog is not None:
            CatalogPages(console, integrations, catalog, handoffs=handoffs is not None).register(app)

    async def refuse_browsers() -> Response | None:
        """Before any route (and before routing: unknown paths too), the `--auth none` browser checks."""
        refusal = guard.refusal(request.headers)
        return None if refusal is None else _refused(Refused(refusal))

    async def finish(response: Response) -> Response:
        """Every answer: `Connection: close` if the body is still owed, and the mode's CORS headers."""
        body_owed = declares_body(request.headers) and not request.body.received
        decided = decide_finish(guard, request.headers, body_owed=body_owed, console=is_console_path(request.path))
        response.headers = Headers(decided.apply(list(response.headers.items())))
        return response

    app.before_request(refuse_browsers)
    app.register_error_handler(Refused, _refused)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _defect)
    app.after_request(finish)
    return Edge(MCP_PATH, endpoint.serve, guard, app, body_limit=MAX_BODY_BYTES, body_seconds=BODY_TIMEOUT_SECONDS)
