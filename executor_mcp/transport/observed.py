"""What every HTTP exchange gets, in one place, and the operations routes.

`Observed` wraps the whole ASGI app (`/mcp` and the Quart routes alike): it gives each request its id (the
client's `X-Request-Id` when safe, else a new one) and its log context (`logs.py`), echoes the
id in the response's `X-Request-Id` header (errors and event streams included), and when the exchange ends
counts it (`executor_mcp_http_requests_total`) and writes its one access line at info. A streamed answer's
line comes when its stream ends, with the whole exchange's duration.

`Operations` serves `/healthz` (200 while the process serves), `/readyz` (200 when storage is writable, the
sandbox pool ready, the server not shutting down and, with `--database-url`, the database answering; else 503
naming the failing check) and `/metrics`
(Prometheus text). The probes need no credential: they say nothing but "ok" or what is broken. `/metrics`
is open with `--auth none` (a loopback bind, behind the `--auth none` Host and Origin checks of every route);
once a `--metrics-token-file` is set it needs `Authorization: Bearer <that token>`, whatever the auth mode,
and with `--auth jwt` it is refused without one: its counts span every organization, which no tenant's
bearer should read.
"""

import contextlib
import hmac
import logging
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry.trace import Span, SpanKind
from quart import Quart, Response, request

from executor_mcp import traces
from executor_mcp.auth.principal import EndpointAuthenticator, Principal
from executor_mcp.codec import dumps
from executor_mcp.logs import (
    RequestLog,
    begin,
    end,
    log_access,
    loggable_path,
    note,
    request_id,
    safe_id,
)
from executor_mcp.observability.health import Health, Readiness
from executor_mcp.observability.metrics import CONTENT_TYPE, Metrics
from executor_mcp.protocol.http import HeaderLookup
from executor_mcp.protocol.resources import MCP_PATH, TOOLKITS_PATH
from executor_mcp.transport import headers as rules
from executor_mcp.transport.asgi import AsgiApp

log = logging.getLogger(__name__)

HEALTHZ_PATH = "/healthz"
READYZ_PATH = "/readyz"
METRICS_PATH = "/metrics"
# No response status was sent: the client left, or the exchange was cancelled, first (nginx's convention).
CLIENT_LEFT = 499
_REQUEST_ID = b"x-request-id"
_SESSION_ID = rules.SESSION_HEADER.lower().encode()
_NO_STORE = {"Cache-Control": "no-store"}


class Observed:
    """The ASGI app `app`, each exchange with its request id, log context, access line and count."""

    def __init__(self, app: AsgiApp, metrics: Metrics, secret_paths: tuple[str, ...] = ()) -> None:
        """`secret_paths`: path prefixes whose rest is a secret (one-time links), redacted in the log."""
        self._app = app
        self._metrics = metrics
        self._secret_paths = secret_paths

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        incoming = session = None
        for name, value in scope["headers"]:
            if name == _REQUEST_ID and incoming is None:
                incoming = value.decode("latin-1")
            elif name == _SESSION_ID and session is None:
                session = value.decode("latin-1")
        entry = RequestLog(
            request_id=request_id(incoming),
            http_method=scope["method"],
            path=loggable_path(scope["path"], self._secret_paths),
            session_id=safe_id(session),
        )
        echoed = (_REQUEST_ID, entry.request_id.encode("latin-1"))
        status = 0

        async def observed_send(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                response_headers = list(message.get("headers", ()))
                if entry.session_id is None:  # an initialize answers with the new session's id
                    entry.session_id = _session_of(response_headers)
                message = {**message, "headers": [*response_headers, echoed]}
            await send(message)

        token = begin(entry)
        started = time.perf_counter()
        with _request_span(scope, entry) as span:
            try:
                await self._app(scope, receive, observed_send)
            except Exception:
                status = status or 500  # hypercorn answers 500 for an app that raised before answering
                raise
            finally:
                end(token)
                answered = status or CLIENT_LEFT
                traces.note(span, "http.response.status_code", answered)
                if entry.jsonrpc_method:
                    traces.note(span, "mcp.method.name", entry.jsonrpc_method)
                self._metrics.count_request(entry.http_method, entry.jsonrpc_method, answered)
                log_access(entry, answered, (time.perf_counter() - started) * 1000)


def _session_of(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == _SESSION_ID:
            return safe_id(value.decode("latin-1"))
    return None


def _request_span(scope: Any, entry: RequestLog) -> AbstractContextManager[Span | None]:
    """The request's span (a server span under the caller's W3C trace context, if it sent one); nothing when
    tracing is off."""
    if not traces.enabled():
        return contextlib.nullcontext()
    route = route_of(scope["path"])
    attributes: dict[str, traces.AttributeValue] = {"http.request.method": entry.http_method, "http.route": route}
    parent = traces.parent_from(_trace_fields(scope["headers"]))
    return traces.span(f"{entry.http_method} {route}", kind=SpanKind.SERVER, attributes=attributes, parent=parent)


def route_of(path: str) -> str:
    """A request's path as a span names it: its route, never an id or a one-time link's token in it."""
    if path == MCP_PATH or path.startswith(TOOLKITS_PATH):
        return MCP_PATH if path == MCP_PATH else TOOLKITS_PATH + "{slug}"
    segments = path.split("/")
    depth = 3 if len(segments) > 2 and segments[1] in ("api", ".well-known") else 2
    return "/".join(segments[:depth]) or "/"


def _trace_fields(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The W3C trace-context headers of a request (the first of each)."""
    found: dict[str, str] = {}
    for name, value in headers:
        if name in (b"traceparent", b"tracestate") and name.decode() not in found:
            found[name.decode()] = value.decode("latin-1")
    return found


class NotedAuthenticator:
    """`inner`, noting who authenticated in the request's log context."""

    def __init__(self, inner: EndpointAuthenticator) -> None:
        self._inner = inner

    async def authenticate(self, headers: HeaderLookup) -> Principal:
        principal = await self._inner.authenticate(headers)
        note(account=principal.account_id, org=principal.org_id)
        return principal

    async def authenticate_endpoint(self, headers: HeaderLookup, resource: str = MCP_PATH) -> Principal:
        principal = await self._inner.authenticate_endpoint(headers, resource)
        note(account=principal.account_id, org=principal.org_id)
        return principal


class Operations:
    """`/healthz`, `/readyz` and `/metrics`."""

    def __init__(self, health: Health, metrics: Metrics, *, metrics_open: bool, metrics_token: bytes | None) -> None:
        """`metrics_open`: `/metrics` needs no token when none is set (`--auth none`)."""
        self._health = health
        self._metrics = metrics
        self._open = metrics_open
        self._token = metrics_token

    def register(self, app: Quart) -> None:
        for path, view in ((HEALTHZ_PATH, self.healthz), (READYZ_PATH, self.readyz), (METRICS_PATH, self.scrape)):
            app.add_url_rule(path, path.strip("/"), view, methods=["GET"], provide_automatic_options=False)

    async def healthz(self) -> Response:
        return _json({"status": "ok"}, 200)

    async def readyz(self) -> Response:
        try:
            readiness = await self._health.readiness()
        except Exception:
            log.exception("the readiness checks failed")
            readiness = Readiness({"readiness": "the checks themselves failed (see the server log)"})
        body = {"status": "ready" if readiness.ready else "unavailable", "checks": readiness.checks}
        return _json(body, 200 if readiness.ready else 503)

    async def scrape(self) -> Response:
        refusal = self._refusal(request.headers.get("authorization"))
        if refusal is not None:
            return refusal
        try:
            text = self._metrics.render(await self._health.snapshot())
        except Exception:
            log.exception("the metrics could not be gathered")
            return _json({"error": "the metrics could not be gathered (see the server log)"}, 503)
        return Response(text, status=200, content_type=CONTENT_TYPE, headers=_NO_STORE)

    def _refusal(self, authorization: str | None) -> Response | None:
        if self._token is None:
            if self._open:
                return None
            return _json({"error": "/metrics needs --metrics-token-file with --auth jwt"}, 403)
        scheme, _, credential = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(credential.strip().encode(), self._token):
            return None
        return _json({"error": "/metrics needs the metrics token as a bearer"}, 401, {"WWW-Authenticate": "Bearer"})


def _json(body: object, status: int, headers: Mapping[str, str] | None = None) -> Response:
    return Response(dumps(body), status=status, content_type=rules.JSON, headers={**_NO_STORE, **(headers or {})})
