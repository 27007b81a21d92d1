"""The web console's edge: who a console request is, the guards of a change, and the routes every page shares.

    GET       /                      the front page
    GET       /static/<name>         the packaged style sheet and scripts
    GET|POST  /signin                the sign-in page; {token} (an API key or a bearer) -> the cookie
    GET|POST  /signin/link/<token>   a `console-link` page; its POST redeems the link -> the cookie
    POST      /signout               {} -> the cookie cleared

A visitor is whoever the sign-in cookie (`web/signin.py`) names, confirmed against the control plane on every
request (`BearerAuth.confirm`). With `--auth none` nobody signs in: the first page a browser opens gives it a
cookie for the local principal, which exists only to bind its CSRF token. Pages for a visitor who is not signed
in redirect to `/signin?next=<the page>`.

A change (every POST here, and every `/api` request a page's script makes) must come from this server's own
origin, as JSON, and, when a visitor makes it, with that visitor's CSRF token in `X-CSRF-Token`: SameSite=Strict
keeps other sites' requests from carrying the cookie at all, the origin check keeps other ports and proxies'
pages out, and the token keeps out anything that got past both.
"""

import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

from quart import Quart, Response, request

from executor_mcp.auth.principal import LOCAL_PRINCIPAL, Authenticator, BearerAuth, Principal
from executor_mcp.integrations.oauth_signins import OAUTH_CALLBACK_PATH
from executor_mcp.protocol.errors import Refusal, Refused
from executor_mcp.protocol.http import HeaderLookup
from executor_mcp.storage.interfaces import SignInStore
from executor_mcp.storage.records import ConsoleLinkRecord
from executor_mcp.transport.browser import BrowserGuard
from executor_mcp.transport.discovery import API_PREFIX, MCP_PATH, PublicUrl
from executor_mcp.transport.json_answers import json_body, json_error, json_ok
from executor_mcp.web.render import STATIC_PREFIX, Asset, load_assets, page_headers, render
from executor_mcp.web.signin import (
    CSRF_HEADER,
    VIA_API_KEY,
    VIA_BEARER,
    VIA_LINK,
    VIA_LOCAL,
    SignIn,
    clear_cookie,
    cookie_value,
    csrf_token,
    csrf_valid,
    link_digest,
    new_link_token,
    new_sign_in,
    safe_next,
    seal,
    set_cookie,
    unseal,
)

log = logging.getLogger(__name__)

HTML = "text/html; charset=utf-8"
SIGN_IN_PATH = "/signin"
LINK_PATH = "/signin/link/"
# A sign-in body is one token; a console change is a few short fields.
MAX_SIGN_IN_BODY_BYTES = 64 * 1024
# The sections of the console, in the order the bar lists them: (page key, path, label, what it is for).
SECTIONS = (
    ("approvals", "/approvals", "Approvals", "Tool calls waiting for your decision"),
    ("integrations", "/integrations", "Integrations", "The APIs agents can reach, and their tools"),
    ("connections", "/connections", "Connections", "Credentials for those APIs, and connect links"),
    ("policies", "/policies", "Policies", "Which tool calls run, ask first, or are blocked"),
    ("toolkits", "/toolkits", "Toolkits", "Scoped MCP endpoints: which tools each shows, under which rules"),
    ("sessions", "/sessions", "Sessions", "MCP sessions of your account"),
    ("audit", "/audit", "Audit", "Recent tool calls: who made them, what was decided, how they ended"),
)
NAV = tuple((key, href, label) for key, href, label, _ in SECTIONS)
_NOT_CONSOLE = (API_PREFIX + "/", "/.well-known/")


def is_console_path(path: str) -> bool:
    """Console answers carry no CORS headers: no other origin has any business reading them. Everything but
    the MCP endpoint, the JSON API and the discovery documents is the console's, and so is the OAuth callback."""
    if path == OAUTH_CALLBACK_PATH:  # under /api, but a page a person's browser opens (`web/oauth_callback.py`)
        return True
    return path != MCP_PATH and path != API_PREFIX and not path.startswith(_NOT_CONSOLE)


PageBuilder = Callable[[SignIn], Awaitable[Response]]


class Console:
    def __init__(
        self,
        sign_ins: SignInStore,
        key: bytes,
        bearer: BearerAuth | None,
        browser: BrowserGuard,
        public: PublicUrl,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sign_ins = sign_ins
        self._key = key
        self._bearer = bearer  # None with `--auth none`
        self._browser = browser
        self._public = public
        self._clock = clock
        self._assets: dict[str, Asset] = load_assets()
        self.offers_sso = False  # set when single sign-on registers its routes (`web/sso.py`)

    @property
    def local(self) -> bool:
        return self._bearer is None

    @property
    def _secure(self) -> bool:
        return self._public.value.startswith("https://")

    # -- who is asking -------------------------------------------------------------------------------

    async def visitor(self, headers: HeaderLookup) -> SignIn | None:
        """The signed-in visitor a request's cookie names, if its sign-in still holds. A sign-in made for one
        auth mode means nothing in the other. `Refused` (503) only when the control plane cannot tell now."""
        sign_in = unseal(self._key, cookie_value(headers.get("cookie")), self._clock())
        if sign_in is None or (sign_in.via == VIA_LOCAL) != self.local:
            return None
        if self._bearer is not None and sign_in.members_admins != self._bearer.members_are_admins:
            return None  # made before `--org-admin-claim` was turned on or off: its admin role says nothing now
        if self._bearer is not None:
            try:
                await self._bearer.confirm(sign_in.principal, sign_in.api_key_digest)
            except Refused as refused:
                if refused.refusal is Refusal.AUTH_UNAVAILABLE:
                    raise
                return None
        return sign_in

    def csrf(self, visitor: SignIn) -> str:
        return csrf_token(self._key, visitor)

    def csrf_presented(self, visitor: SignIn, headers: HeaderLookup) -> bool:
        return csrf_valid(self._key, visitor, headers.get(CSRF_HEADER))

    def change_refusal(self, headers: HeaderLookup, visitor: SignIn | None) -> Refusal | None:
        """Why a page's change may not be made: not from this server's own origin, or (for a visitor) without
        the visitor's CSRF token. Browsers send `Origin` with every POST, so a change without one is refused."""
        if headers.get("origin") is None:
            return Refusal.FORBIDDEN_ORIGIN
        return self.visit_refusal(headers, visitor) if visitor is not None else self._origin_refusal(headers)

    def visit_refusal(self, headers: HeaderLookup, visitor: SignIn) -> Refusal | None:
        """Why a visitor's script request may not be served: another origin named in `Origin` (a browser
        names it on every change and on every cross-origin read), or no CSRF token of this visitor."""
        if (refusal := self._origin_refusal(headers)) is not None:
            return refusal
        return None if self.csrf_presented(visitor, headers) else Refusal.CSRF_INVALID

    def _origin_refusal(self, headers: HeaderLookup) -> Refusal | None:
        origin = headers.get("origin")
        return Refusal.FORBIDDEN_ORIGIN if origin is not None and not self._browser.origin_allowed(origin) else None

    # -- answering pages -----------------------------------------------------------------------------

    async def page(self, build: PageBuilder) -> Response:
        """A page for the visitor: built by `build`, or a redirect to sign in. With `--auth none` a new
        browser gets its local sign-in (and so its CSRF token) with the first page it opens."""
        try:
            visitor = await self.visitor(request.headers)
        except Refused:
            return self.message(None, 503, "Try again", "The server cannot check your sign-in right now.")
        fresh = None
        if visitor is None:
            if not self.local:
                target = request.full_path if request.query_string else request.path
                where = SIGN_IN_PATH + "?" + urllib.parse.urlencode({"next": target})
                return Response(b"", status=303, headers={"Location": where, **page_headers()})
            visitor = fresh = new_sign_in(LOCAL_PRINCIPAL, VIA_LOCAL, self._clock())
        response = await build(visitor)
        if fresh is not None:
            response.headers["Set-Cookie"] = self._cookie(fresh)
        return response

    def view(self, visitor: SignIn | None, template: str, *, status: int = 200, **values: Any) -> Response:
        """A rendered page with what every page shows: the bar, the visitor and their CSRF token."""
        context = {
            "title": values.pop("title", "Console"),
            "page": values.pop("page", ""),
            "scripts": values.pop("scripts", ()),
            "styles": values.pop("styles", ()),
            "nav": NAV,
            "visitor": visitor,
            "csrf": self.csrf(visitor) if visitor is not None else "",
            "can_sign_out": visitor is not None and not self.local,
            **values,
        }
        return Response(render(template, **context), status=status, content_type=HTML, headers=page_headers())

    def message(self, visitor: SignIn | None, status: int, heading: str, text: str) -> Response:
        return self.view(visitor, "message.html", status=status, title=heading, heading=heading, text=text)

    # -- routes --------------------------------------------------------------------------------------

    @staticmethod
    def add_page(app: Quart, rule: str, name: str, view: Callable[..., Awaitable[Response]]) -> None:
        """A console page (GET). No automatic OPTIONS, here and on every console route: a console path answers
        it like any path without it (the 405 envelope)."""
        app.add_url_rule(rule, name, view, methods=["GET"], provide_automatic_options=False)

    def register(self, app: Quart) -> None:
        routes = (
            ("/", "console_home", self._home, ["GET"]),
            (STATIC_PREFIX + "<name>", "console_static", self._static, ["GET", "OPTIONS"]),
            (SIGN_IN_PATH, "console_sign_in", self._sign_in, ["GET", "POST"]),
            (LINK_PATH + "<token>", "console_link", self._link, ["GET", "POST"]),
            ("/signout", "console_sign_out", self._sign_out, ["POST"]),
        )
        for rule, name, view, methods in routes:
            app.add_url_rule(rule, name, view, methods=methods, provide_automatic_options=False)

    async def _home(self) -> Response:
        async def build(visitor: SignIn) -> Response:
            blurbs = {key: blurb for key, _, _, blurb in SECTIONS}
            mcp_url = self._public.value + MCP_PATH
            return self.view(visitor, "home.html", title="Console", page="home", mcp_url=mcp_url, blurbs=blurbs)

        return await self.page(build)

    async def _static(self, name: str) -> Response:
        asset = self._assets.get(name)
        if asset is None or request.method == "OPTIONS":
            raise Refused(Refusal.NOT_FOUND)  # as any path that is not there
        headers = {"ETag": asset.etag, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
        if request.headers.get("if-none-match") == asset.etag:
            return Response(b"", status=304, headers=headers)
        return Response(asset.body, status=200, content_type=asset.content_type, headers=headers)

    async def _sign_in(self) -> Response:
        if self.local:  # nobody signs in without auth: the console is open to the local principal
            return Response(b"", status=303, headers={"Location": "/", **page_headers()})
        if request.method == "GET":
            wanted = safe_next(request.args.get("next"))
            return self.view(
                None, "signin.html", title="Sign in", page="signin", next=wanted, link=False, sso=self.offers_sso
            )
        if (refusal := self.change_refusal(request.headers, None)) is not None:
            return json_error(refusal.value.status, refusal.value.message)
        body = await json_body(MAX_SIGN_IN_BODY_BYTES)
        if isinstance(body, Response):
            return body
        token = body.get("token")
        if not isinstance(token, str) or not token.strip():
            return json_error(400, "Paste an API key or a bearer token")
        assert self._bearer is not None
        try:
            identity = await self._bearer.identify(token.strip())
        except Refused as refused:
            return json_error(refused.envelope.status, _sign_in_words(refused))
        via = VIA_API_KEY if identity.api_key_digest is not None else VIA_BEARER
        sign_in = new_sign_in(
            identity.principal,
            via,
            self._clock(),
            until=identity.expires_at,
            api_key_digest=identity.api_key_digest,
            members_admins=self._bearer.members_are_admins,
        )
        log.info("console sign-in of account %s in org %s (%s)", sign_in.account_id, sign_in.org_id, via)
        return self._signed_in(sign_in)

    async def _link(self, token: str) -> Response:
        if self.local:
            return Response(b"", status=303, headers={"Location": "/", **page_headers()})
        if request.method == "GET":
            return self.view(None, "signin.html", title="Sign in", page="signin", next="/", link=True)
        if (refusal := self.change_refusal(request.headers, None)) is not None:
            return json_error(refusal.value.status, refusal.value.message)
        now = self._clock()
        record = await self._sign_ins.take_console_link(link_digest(token), now) if len(token) <= 256 else None
        if record is None:
            return json_error(404, "This sign-in link is not valid: it is unknown, has expired or was already used")
        assert self._bearer is not None
        admin = record.admin or self._bearer.members_are_admins
        principal = Principal(account_id=record.account_id, org_id=record.org_id, org_admin=admin)
        try:
            await self._bearer.confirm(principal, None)
        except Refused as refused:
            return json_error(refused.envelope.status, _sign_in_words(refused))
        log.info("console sign-in of account %s in org %s by a one-time link", record.account_id, record.org_id)
        return self._signed_in(new_sign_in(principal, VIA_LINK, now, members_admins=self._bearer.members_are_admins))

    async def _sign_out(self) -> Response:
        visitor = await self.visitor(request.headers)
        if (refusal := self.change_refusal(request.headers, visitor)) is not None:
            return json_error(refusal.value.status, refusal.value.message)
        return json_ok({"signedOut": True}, {"Set-Cookie": clear_cookie(secure=self._secure)})

    def _signed_in(self, sign_in: SignIn) -> Response:
        return json_ok({"signedIn": True}, {"Set-Cookie": self._cookie(sign_in)})

    def _cookie(self, sign_in: SignIn) -> str:
        return set_cookie(seal(self._key, sign_in), sign_in.expires_at - self._clock(), secure=self._secure)


class ConsoleCredentials:
    """`/api` authentication: a bearer exactly as at `/mcp`, or a signed-in visitor whose request carries the
    visitor's CSRF token. A request that carries our cookie without the token is refused (403), whatever the
    auth mode: only a browser sends the cookie, and only our pages know the token. `/mcp` never reads the
    cookie: an agent's endpoint is not a browser's."""

    def __init__(self, console: Console, bearer: Authenticator) -> None:
        self._console = console
        self._bearer = bearer

    async def authenticate(self, headers: HeaderLookup) -> Principal:
        if "authorization" in headers or cookie_value(headers.get("cookie")) is None:
            return await self._bearer.authenticate(headers)
        visitor = await self._console.visitor(headers)
        if visitor is None:
            return await self._bearer.authenticate(headers)  # a stale cookie counts as none
        refusal = self._console.visit_refusal(headers, visitor)
        if refusal is not None:
            raise Refused(refusal)
        return visitor.principal


async def new_link(sign_ins: SignInStore, principal: Principal, now: float, seconds: float) -> str:
    """A one-time sign-in link's token for `principal` (the control plane keeps only its digest)."""
    token = new_link_token()
    record = ConsoleLinkRecord(
        account_id=principal.account_id,
        org_id=principal.org_id or "",
        admin=principal.org_admin,
        created_at=now,
        expires_at=now + seconds,
    )
    await sign_ins.put_console_link(link_digest(token), record, now)
    return token


def _sign_in_words(refused: Refused) -> str:
    if refused.refusal is Refusal.NO_ORGANIZATION:
        return "That token has no live organization on this server"
    if refused.refusal is Refusal.AUTH_UNAVAILABLE:
        return refused.message
    return "That token is not valid here: paste an API key from `executor-mcp keys create` or a valid bearer"
