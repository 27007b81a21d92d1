"""Single sign-on for the console: people sign in with one OpenID Connect provider (`--oidc-issuer`), beside API
keys, bearer tokens and one-time links.

`GET /signin/sso` sends the browser to the provider (authorization code, PKCE S256, a `state` and a `nonce`),
keeping them in a short-lived cookie of their own: sealed (HMAC under the console's key), HttpOnly, and
SameSite=Lax, since the provider's redirect back is a navigation from another site, which a Strict cookie does
not ride. `GET /signin/sso/callback` checks the state against that cookie, exchanges the code (the client secret
from `--oidc-client-secret-file`), checks the ID token (signature by the provider's published keys, issuer,
audience, expiry, nonce) and its claims (`oauth/identity.py`: a verified email of an allowed domain, an org),
then signs the person in as any console sign-in is (the org must not be revoked). The console's own cookie is
Strict: a page of ours, not the provider's redirect, takes the browser on (a refresh), so it rides along.
"""

import base64
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable
from html import escape
from typing import Any
from urllib.parse import quote

import attrs
import httpx
import trio
from quart import Quart, Response, request

from executor_mcp.auth.principal import BearerAuth, Principal
from executor_mcp.auth.tokens import InvalidToken, JwksKeys, Unavailable
from executor_mcp.codec import json_mac
from executor_mcp.oauth.grants import ClientAuth, TokenError, authorization_url, code_form, read_tokens, token_request
from executor_mcp.oauth.identity import IdentityRefused, has_claim, identity_of, verify_id_token
from executor_mcp.oauth.metadata import AuthorizationServer, MetadataError, parse_authorization_server
from executor_mcp.oauth.pkce import challenge, new_state, new_verifier
from executor_mcp.outbound.model import OutboundResponse
from executor_mcp.protocol.errors import Refused
from executor_mcp.records.oauth import AUTH_BASIC, AUTH_POST
from executor_mcp.transport.discovery import PublicUrl
from executor_mcp.web.console import Console
from executor_mcp.web.render import page_headers
from executor_mcp.web.signin import SignIn, new_sign_in, safe_next, seal, set_cookie

log = logging.getLogger(__name__)

SSO_PATH = "/signin/sso"
SSO_CALLBACK_PATH = "/signin/sso/callback"
VIA_SSO = "sso"
FLOW_COOKIE = "executor_sso"
FLOW_SECONDS = 600.0
PROVIDER_TIMEOUT = 20.0
SCOPES = ("openid", "email", "profile")
_PURPOSE = "console-sso-flow"


@attrs.frozen
class SsoSettings:
    issuer: str
    client_id: str
    client_secret: str = attrs.field(repr=False)
    allowed_domains: frozenset[str]
    account_claim: str = "email"
    org_claim: str = "org"
    admin_claim: tuple[str, str] | None = None


class SingleSignOn:
    def __init__(
        self,
        settings: SsoSettings,
        console: Console,
        key: bytes,
        bearer: BearerAuth,
        public: PublicUrl,
        http: httpx.AsyncClient,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._console = console
        self._key = key
        self._bearer = bearer
        self._public = public
        self._http = http
        self._clock = clock
        self._provider: AuthorizationServer | None = None
        self._keys: JwksKeys | None = None

    def register(self, app: Quart) -> None:
        self._console.offers_sso = True  # its sign-in page offers this way in
        app.add_url_rule(SSO_PATH, "console_sso", self._start, methods=["GET"], provide_automatic_options=False)
        app.add_url_rule(
            SSO_CALLBACK_PATH, "console_sso_callback", self._callback, methods=["GET"], provide_automatic_options=False
        )

    @property
    def _redirect_uri(self) -> str:
        return self._public.value + SSO_CALLBACK_PATH

    async def _start(self) -> Response:
        try:
            provider = await self._discovered()
        except (MetadataError, httpx.HTTPError, trio.TooSlowError) as exc:
            log.warning("single sign-on: the provider's metadata is unavailable: %s", exc)
            return self._failed(503, "The sign-in provider cannot be reached now. Try again in a moment.")
        if provider.authorization_endpoint is None:
            return self._failed(503, "The sign-in provider names no authorization endpoint.")
        state, nonce, verifier = new_state(), secrets.token_urlsafe(24), new_verifier()
        flow = {
            "state": state,
            "nonce": nonce,
            "verifier": verifier,
            "next": safe_next(request.args.get("next")),
            "expires": self._clock() + FLOW_SECONDS,
        }
        url = authorization_url(
            provider.authorization_endpoint,
            client_id=self._settings.client_id,
            redirect_uri=self._redirect_uri,
            state=state,
            challenge=challenge(verifier),
            scopes=SCOPES,
            resource=None,
        )
        headers = {
            "Location": f"{url}&nonce={quote(nonce)}",
            "Set-Cookie": self._flow_cookie(_seal(self._key, flow), FLOW_SECONDS),
            **page_headers(),
        }
        return Response(b"", status=303, headers=headers)

    async def _callback(self) -> Response:
        flow = _unseal(self._key, _cookie(request.headers.get("cookie")), self._clock())
        cleared = self._flow_cookie("", 0)
        state = request.args.get("state", "")
        if flow is None or not hmac.compare_digest(str(flow.get("state", "")).encode(), state.encode()):
            return self._failed(400, "This sign-in has expired or was started elsewhere. Start it again.", cleared)
        if "error" in request.args:
            words = escape(request.args.get("error_description") or request.args.get("error", ""))[:300]
            return self._failed(403, f"The sign-in provider refused: {words}", cleared)
        code = request.args.get("code", "")
        if not code or len(code) > 4096:
            return self._failed(400, "The sign-in provider sent no authorization code.", cleared)
        try:
            principal = await self._identify(code, str(flow["verifier"]), str(flow["nonce"]))
        except IdentityRefused as refused:
            log.info("single sign-on refused: %s", refused)
            return self._failed(403, str(refused), cleared)
        try:
            await self._bearer.confirm(principal, None)
        except Refused as refused:
            return self._failed(refused.envelope.status, refused.message, cleared)
        members_admins = self._settings.admin_claim is None and self._bearer.members_are_admins
        sign_in = new_sign_in(principal, VIA_SSO, self._clock(), members_admins=members_admins)
        log.info("console sign-in of account %s in org %s by single sign-on", principal.account_id, principal.org_id)
        return self._onward(sign_in, str(flow.get("next") or "/"), cleared)

    async def _identify(self, code: str, verifier: str, nonce: str) -> Principal:
        settings = self._settings
        try:
            provider = await self._discovered()
        except (MetadataError, httpx.HTTPError, trio.TooSlowError):
            raise IdentityRefused("The sign-in provider cannot be reached now. Try again in a moment.") from None
        methods = provider.token_auth_methods or (AUTH_BASIC,)
        method = AUTH_BASIC if AUTH_BASIC in methods else AUTH_POST
        auth = ClientAuth(settings.client_id, settings.client_secret, method)
        sent = token_request(provider.token_endpoint, auth, code_form(code, self._redirect_uri, verifier, None))
        try:
            with trio.fail_after(PROVIDER_TIMEOUT):
                answer = await self._http.request(sent.method, sent.url, headers=list(sent.headers), content=sent.body)
        except (httpx.HTTPError, trio.TooSlowError):
            raise IdentityRefused("The sign-in provider cannot be reached now. Try again in a moment.") from None
        tokens = read_tokens(OutboundResponse(answer.status_code, {}, answer.content))
        if isinstance(tokens, TokenError):
            raise IdentityRefused(f"The sign-in provider refused the code {tokens.message}")
        if tokens.id_token is None:
            raise IdentityRefused("The sign-in provider sent no ID token")
        try:
            keys = self._jwks(provider)
            kid = _kid(tokens.id_token)
            key = await keys.key(kid)
        except (InvalidToken, Unavailable) as exc:
            raise IdentityRefused(f"The provider's signing keys do not verify this sign-in: {exc}") from None
        claims = verify_id_token(
            tokens.id_token, [key], issuer=provider.issuer, client_id=settings.client_id, nonce=nonce, now=self._clock()
        )
        identity = identity_of(
            claims,
            account_claim=settings.account_claim,
            org_claim=settings.org_claim,
            allowed_domains=settings.allowed_domains,
        )
        admin_rule = settings.admin_claim
        admin = self._bearer.members_are_admins if admin_rule is None else has_claim(claims, *admin_rule)
        return Principal(account_id=identity.account_id, org_id=identity.org_id, org_admin=admin)

    async def _discovered(self) -> AuthorizationServer:
        if self._provider is None:
            url = self._settings.issuer.rstrip("/") + "/.well-known/openid-configuration"
            with trio.fail_after(PROVIDER_TIMEOUT):
                response = await self._http.get(url, timeout=PROVIDER_TIMEOUT)
            response.raise_for_status()
            self._provider = parse_authorization_server(response.content, self._settings.issuer)
        return self._provider

    def _jwks(self, provider: AuthorizationServer) -> JwksKeys:
        if provider.jwks_uri is None:
            raise Unavailable("the provider publishes no jwks_uri")
        if self._keys is None:
            self._keys = JwksKeys(provider.jwks_uri, self._http)
        return self._keys

    def _flow_cookie(self, value: str, max_age: float) -> str:
        secure = "; Secure" if self._public.value.startswith("https://") else ""
        return f"{FLOW_COOKIE}={value}; Path={SSO_PATH}; Max-Age={int(max_age)}; HttpOnly; SameSite=Lax{secure}"

    def _failed(self, status: int, text: str, cookie: str | None = None) -> Response:
        response = self._console.message(None, status, "Sign-in failed", text)
        if cookie is not None:
            response.headers["Set-Cookie"] = cookie
        return response

    def _onward(self, sign_in: SignIn, next_path: str, cleared: str) -> Response:
        """Signed in: the console cookie set, and a page of ours that moves on (a same-site navigation, so
        the Strict cookie rides on it)."""
        target = escape(safe_next(next_path), quote=True)
        body = (
            '<!doctype html><html><head><meta charset="utf-8">'
            f'<meta http-equiv="refresh" content="0;url={target}"><title>Signed in</title></head>'
            f'<body><p>Signed in. <a href="{target}">Continue</a></p></body></html>'
        )
        secure = self._public.value.startswith("https://")
        cookie = set_cookie(seal(self._key, sign_in), sign_in.expires_at - self._clock(), secure=secure)
        response = Response(body, status=200, content_type="text/html; charset=utf-8", headers=page_headers())
        response.headers.add("Set-Cookie", cookie)
        response.headers.add("Set-Cookie", cleared)
        return response


def _kid(raw: str) -> str | None:
    try:
        header = json.loads(base64.urlsafe_b64decode(raw.split(".")[0] + "=="))
    except (ValueError, IndexError):
        return None
    kid = header.get("kid") if isinstance(header, dict) else None
    return kid if isinstance(kid, str) else None


def _cookie(header: str | None) -> str | None:
    for part in (header or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == FLOW_COOKIE:
            return value.strip()
    return None


def _seal(key: bytes, flow: dict[str, Any]) -> str:
    payload = base64.urlsafe_b64encode(json.dumps(flow, sort_keys=True).encode()).decode().rstrip("=")
    return f"{payload}.{json_mac(key, [_PURPOSE, payload])}"


def _unseal(key: bytes, value: str | None, now: float) -> dict[str, Any] | None:
    if not value or len(value) > 4096 or value.count(".") != 1:
        return None
    payload, mac = value.split(".")
    if not hmac.compare_digest(mac.encode(), json_mac(key, [_PURPOSE, payload]).encode()):
        return None
    try:
        flow = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except ValueError:
        return None
    if not isinstance(flow, dict) or not isinstance(flow.get("expires"), int | float) or flow["expires"] <= now:
        return None
    return flow
