"""`GET|POST /connect/<token>`: the connect page of a handoff link, and the JSON post that redeems it.

    GET  /connect/<token>   the page: the integration, the template, one password field per input (404 page
                            when the token is unknown, expired or used)
    POST /connect/<token>   {name?, values: {input: value}} as application/json -> the connection's JSON;
                            errors {error} (400, 403, 404, 408, 409, 413, 415), never echoing a value

The token is the credential: it names the principal the connection is created for, so no bearer is asked
(with `--auth none`, the Origin/Host guard of every route still applies first). A post whose `Origin` is
not this server's is refused whatever the auth mode, as a CSRF check. Everything a post can get wrong is
checked before the token is redeemed, so a typo costs no link; the redemption itself has no await between
looking the token up and removing it, so of two concurrent posts exactly one creates the connection.
Nothing logs a value or a token (only its `handoff_id`). Every answer, JSON included, carries the console's
`page_headers` (no referrer and no caching: the path holds the token) and no CORS. The pages are the console's
templates with nobody signed in (no bar, no CSRF token: the page's `static/connect.js` sends no cookie).
"""

import json
import logging

import attrs
import trio
from quart import Quart, Response, request

from executor_mcp.codec import JsonObject, dumps
from executor_mcp.integrations.addresses import connection_identifier
from executor_mcp.integrations.connections import check_connection_request
from executor_mcp.integrations.handoff import (
    CONNECT_PATH,
    Handoff,
    HandoffBook,
    connection_request,
    free_name,
    handoff_id,
)
from executor_mcp.integrations.service import Integrations
from executor_mcp.integrations.wire import connection_json
from executor_mcp.protocol.errors import BODY_TIMEOUT_SECONDS
from executor_mcp.records.integration_errors import IntegrationError
from executor_mcp.records.integrations import AuthMethod, IntegrationRecord
from executor_mcp.transport import headers as rules
from executor_mcp.transport.browser import BrowserGuard
from executor_mcp.web.render import page_headers, render

log = logging.getLogger(__name__)

# Two or three short fields: a name and a few credentials of at most 16 KiB each.
MAX_BODY_BYTES = 64 * 1024
DEFAULT_CONNECTION_NAME = "main"
HTML = "text/html; charset=utf-8"
NOT_VALID = (
    "This connect link is not valid: it is unknown, has expired or was already used. Ask the agent for a new one."
)


@attrs.frozen
class ConnectView:
    """What the connect page shows: names, never values."""

    integration_name: str
    integration_slug: str
    method: AuthMethod
    owner: str
    account: str
    org: str
    default_name: str
    minutes_left: int


def connect_page(view: ConnectView) -> str:
    method = view.method
    return _page(
        "connect.html",
        f"Connect {view.integration_name}",
        view=view,
        method_name=method.label or method.slug,
        fields=[(variable, method.input_places(variable)) for variable in method.inputs],
    )


def not_valid_page() -> str:
    heading = "Connect link not valid"
    return _page("message.html", heading, heading=heading, text=NOT_VALID, scripts=())


def _page(page: str, title: str, scripts: tuple[str, ...] = ("connect.js",), **values: object) -> str:
    """The console's frame with nobody signed in: the link's holder may have no account in this browser."""
    return render(page, title=title, page="connect", scripts=scripts, styles=(), visitor=None, csrf="", **values)


class ConnectPage:
    def __init__(self, integrations: Integrations, book: HandoffBook, browser: BrowserGuard) -> None:
        self._integrations = integrations
        self._book = book
        self._browser = browser

    def register(self, app: Quart) -> None:
        app.add_url_rule(
            CONNECT_PATH + "<token>",
            "connect",
            self._dispatch,
            methods=["GET", "POST"],
            provide_automatic_options=False,
        )

    async def _dispatch(self, token: str) -> Response:
        if request.method == "POST":
            return await self._post(token)
        return await self._page(token)

    async def _page(self, token: str) -> Response:
        handoff = self._book.peek(token)
        found = await self._target(handoff) if handoff is not None else None
        if handoff is None or found is None:
            return Response(not_valid_page(), status=404, content_type=HTML, headers=page_headers())
        integration, method = found
        view = ConnectView(
            integration_name=integration.name,
            integration_slug=integration.slug,
            method=method,
            owner=handoff.owner,
            account=handoff.principal.account_id,
            org=handoff.principal.org_id or "",
            default_name=free_name(_wanted_name(handoff), await self._taken(handoff)),
            minutes_left=max(1, round(self._book.remaining(handoff) / 60)),
        )
        return Response(connect_page(view), status=200, content_type=HTML, headers=page_headers())

    async def _post(self, token: str) -> Response:
        origin = request.headers.get("origin")
        if origin is not None and not self._browser.origin_allowed(origin):
            return _error(403, "This page may only be submitted from this server's own origin")
        if request.mimetype != rules.JSON:
            return _error(415, "Unsupported Media Type: Content-Type must be application/json")
        handoff = self._book.peek(token)
        found = await self._target(handoff) if handoff is not None else None
        if handoff is None or found is None:
            return _error(404, NOT_VALID)
        body = await _json_body()
        if isinstance(body, Response):
            return body
        _, method = found
        taken = await self._taken(handoff)
        try:
            wanted = connection_request(handoff, body, method, free_name(_wanted_name(handoff), taken))
            check_connection_request(handoff.principal, wanted, pasted=True)
        except IntegrationError as error:
            return _error(error.status, error.message)
        name = connection_identifier(wanted["name"])
        if name in taken:
            return _error(409, f"A connection named {name} already exists: choose another name")
        if self._book.redeem(token) is None:
            return _error(404, NOT_VALID)
        try:
            record = await self._integrations.connections.create(handoff.principal, wanted, pasted=True)
        except IntegrationError as error:
            log.info("handoff %s used, but its connection was refused: %s", handoff_id(token), error.tag)
            return _error(error.status, error.message)
        log.info("handoff %s used: created %s", handoff_id(token), record.address)
        return Response(dumps(connection_json(record)), status=200, content_type=rules.JSON, headers=page_headers())

    async def _target(self, handoff: Handoff) -> tuple[IntegrationRecord, AuthMethod] | None:
        """The integration and template a handoff connects, unless they have gone since it was issued."""
        try:
            integration = await self._integrations.integration(handoff.principal, handoff.integration)
        except IntegrationError:
            return None
        method = integration.auth_method(handoff.template)
        return None if method is None or not method.inputs else (integration, method)

    async def _taken(self, handoff: Handoff) -> list[str]:
        connections = await self._integrations.connections.visible(
            handoff.principal, handoff.integration, handoff.owner
        )
        return [connection.name for connection in connections]


def _wanted_name(handoff: Handoff) -> str:
    return handoff.label or DEFAULT_CONNECTION_NAME


async def _json_body() -> JsonObject | Response:
    if (request.content_length or 0) > MAX_BODY_BYTES:
        return _error(413, f"Request body too large. Maximum size is {MAX_BODY_BYTES} bytes", {"Connection": "close"})
    raw = bytearray()
    with trio.move_on_after(BODY_TIMEOUT_SECONDS) as waiting:
        async for chunk in request.body:
            raw += chunk
            if len(raw) > MAX_BODY_BYTES:
                return _error(
                    413, f"Request body too large. Maximum size is {MAX_BODY_BYTES} bytes", {"Connection": "close"}
                )
    if waiting.cancelled_caught:
        return _error(408, "Request Timeout: the body did not arrive in time", {"Connection": "close"})
    try:
        body = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return _error(400, "The request body must be JSON")
    if not isinstance(body, dict):
        return _error(400, "The request body must be a JSON object")
    return body


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(
        dumps({"error": message}),
        status=status,
        content_type=rules.JSON,
        headers={**page_headers(), **(headers or {})},
    )
