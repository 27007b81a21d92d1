"""Every route of the HTTP server, assembled above the layers it joins: `/mcp` (`transport/endpoint.py`), the JSON
APIs under `/api` (`transport/*_api.py`), operations (`transport/observed.py`) and the web console (`web/`).

`/mcp` runs on a bare ASGI exchange (`transport/asgi.py`); everything else on quart-trio, whose refusals and
defects are answered here with the envelope (`/api` paths with `{"error": ...}`).
"""

from typing import Any

import trio
from quart import Response, request
from quart_trio import QuartTrio
from quart_trio.wrappers.request import TrioBody, TrioRequest
from werkzeug.datastructures import Headers
from werkzeug.exceptions import HTTPException

from executor_mcp.audit.trail import AuditTrail
from executor_mcp.auth.principal import Authenticator, EndpointAuthenticator
from executor_mcp.codec import dumps
from executor_mcp.execution.runs import PendingApprovals
from executor_mcp.integrations.handoff import Handoffs
from executor_mcp.integrations.service import Integrations
from executor_mcp.policies.service import Policies
from executor_mcp.policies.toolkit_service import Toolkits
from executor_mcp.policies.toolkits import SLUG
from executor_mcp.protocol.errors import (
    BODY_TIMEOUT_SECONDS,
    MAX_BODY_BYTES,
    Code,
    Refusal,
    Refused,
    envelope_body,
    envelope_headers,
)
from executor_mcp.protocol.jsonrpc import encode_message, error_response
from executor_mcp.protocol.resources import TOOLKITS_PATH, resource_for
from executor_mcp.sessions.manager import SessionManager
from executor_mcp.tools.catalog import Catalog
from executor_mcp.tools.rates import Rates
from executor_mcp.toolserver.stateless import StatelessCalls
from executor_mcp.transport import headers as rules
from executor_mcp.transport import last_write
from executor_mcp.transport.approvals_api import ApprovalsApi
from executor_mcp.transport.asgi import Edge, decide_finish, declares_body
from executor_mcp.transport.audit_api import AuditApi
from executor_mcp.transport.browser import BrowserGuard
from executor_mcp.transport.discovery import API_PREFIX, MCP_PATH, METADATA_PATH, PublicUrl, protected_resource_metadata
from executor_mcp.transport.endpoint import POLICY_API_METHODS, McpEndpoint, defect_refusal
from executor_mcp.transport.integrations_api import IntegrationsApi, body_limit
from executor_mcp.transport.limits_api import LimitsApi
from executor_mcp.transport.oauth_api import ClientMetadataDocument
from executor_mcp.transport.observed import Operations
from executor_mcp.transport.policies_api import PoliciesApi
from executor_mcp.transport.sessions_api import SessionsApi
from executor_mcp.transport.stateless import StatelessEndpoint
from executor_mcp.transport.toolkits_api import ToolkitsApi
from executor_mcp.web.approvals import ApprovalsPages
from executor_mcp.web.audit import AuditPages
from executor_mcp.web.catalog import CatalogPages
from executor_mcp.web.connect import ConnectPage
from executor_mcp.web.console import Console, ConsoleCredentials, is_console_path
from executor_mcp.web.governance import GovernancePages
from executor_mcp.web.oauth_callback import OAuthCallbackPage
from executor_mcp.web.sso import SingleSignOn


def _json(body: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(body), status=status, content_type=rules.JSON, headers=headers or {})


def _envelope(status: int, code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return _json(encode_message(error_response(None, code, message)), status=status, headers=headers)


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
    return _refused(defect_refusal(exc))


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
    authenticator: EndpointAuthenticator,
    public: PublicUrl,
    policies: Policies,
    toolkits: Toolkits,
    authorization_servers: tuple[str, ...] = (),
    browser: BrowserGuard | None = None,
    integrations: Integrations | None = None,
    handoffs: Handoffs | None = None,
    console: Console | None = None,
    catalog: Catalog | None = None,
    approvals: PendingApprovals | None = None,
    *,
    stateless_calls: StatelessCalls,
    operations: Operations | None = None,
    audit: AuditTrail | None = None,
    sso: SingleSignOn | None = None,
    rates: Rates | None = None,
) -> Edge:
    """The HTTP app: `/mcp` on a bare exchange, the rest on Quart. `browser` is the `--auth none` Origin/Host guard
    (off by default, as with bearers). Without `integrations`, the integrations API's routes are absent; without
    `handoffs` (the connect links and where they point), the connect page and its API; without `console`, the web
    console (and `/api` accepts bearers only). `catalog` (the sandbox's) lets a policy evaluation see each tool's
    approval annotation, and the console's integrations and connections pages list its built-in tools; without it
    those pages are absent; without `approvals` (the book of paused executions), the approvals API and pages.
    `stateless_calls` serves the 2026 requests' tool calls; `operations`, `/healthz`, `/readyz` and `/metrics`;
    `audit`, `/api/audit` (and, with a console, its `/audit` page); `sso`, the console's single sign-on; `rates`,
    `/api/limits`."""
    last_write.install()
    guard = browser or BrowserGuard(enabled=False)
    # No static folder: Quart's default `/static/<path>` route would answer (even OPTIONS) with HTML.
    app = _App("executor_mcp", static_folder=None)
    # Quart's 60 s default response timeout would silently cut SSE streams; a body gets a bounded time.
    app.config.update(RESPONSE_TIMEOUT=None, MAX_CONTENT_LENGTH=MAX_BODY_BYTES, BODY_TIMEOUT=BODY_TIMEOUT_SECONDS)
    endpoint = McpEndpoint(manager, authenticator, guard, StatelessEndpoint(manager, stateless_calls), toolkits)
    api_auth: Authenticator = authenticator
    if console is not None:
        api_auth = ConsoleCredentials(console, authenticator)
        console.register(app)
        if sso is not None:
            sso.register(app)
        GovernancePages(console).register(app)
        if approvals is not None:
            ApprovalsPages(console, approvals).register(app)

    async def metadata() -> Response:
        if request.method == "OPTIONS":
            return Response(b"", status=204, headers=rules.PREFLIGHT)
        return _json(protected_resource_metadata(public, authorization_servers))

    async def toolkit_metadata(slug: str) -> Response:
        """A toolkit endpoint's own metadata (upstream §B.2), for any slug of the grammar: the document names no
        more than the path asked, so it tells nobody which toolkits exist."""
        if request.method == "OPTIONS":
            return Response(b"", status=204, headers=rules.PREFLIGHT)
        if not SLUG.match(slug):
            return _json({"error": "Toolkit not found"}, 404)
        return _json(protected_resource_metadata(public, authorization_servers, resource_for(slug)))

    for path in (METADATA_PATH, METADATA_PATH + MCP_PATH):
        app.add_url_rule(path, path, metadata, methods=["GET", "OPTIONS"], provide_automatic_options=False)
    app.add_url_rule(
        METADATA_PATH + TOOLKITS_PATH + "<slug>",
        "toolkit_metadata",
        toolkit_metadata,
        methods=["GET", "OPTIONS"],
        provide_automatic_options=False,
    )
    ToolkitsApi(toolkits, api_auth).register(app)
    if rates is not None:
        LimitsApi(rates, api_auth).register(app)
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
        if integrations.oauth is not None:
            ClientMetadataDocument(integrations.oauth).register(app)
        if handoffs is not None:
            ConnectPage(integrations, handoffs.book, guard).register(app)
        if console is not None:
            OAuthCallbackPage(console, integrations).register(app)
        if console is not None and catalog is not None:
            CatalogPages(console, integrations, catalog, handoffs=handoffs is not None).register(app)

    async def refuse_browsers() -> Response | None:
        """Before any route (and before routing: unknown paths too), the `--auth none` browser checks."""
        refusal = guard.refusal(request.headers)
        return None if refusal is None else _refused(Refused(refusal))

    async def finish(response: Response) -> Response:
        """Every answer: `Connection: close` if the body is still owed, and the mode's CORS headers."""
        received = isinstance(request.body, _Body) and request.body.received  # every body is one (`_Request`)
        body_owed = declares_body(request.headers) and not received
        decided = decide_finish(guard, request.headers, body_owed=body_owed, console=is_console_path(request.path))
        response.headers = Headers(decided.apply(list(response.headers.items())))
        return response

    app.before_request(refuse_browsers)
    app.register_error_handler(Refused, _refused)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _defect)
    app.after_request(finish)
    return Edge(MCP_PATH, endpoint.serve, guard, app, body_limit=MAX_BODY_BYTES, body_seconds=BODY_TIMEOUT_SECONDS)
