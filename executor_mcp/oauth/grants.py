"""The authorization request and the token endpoint's exchanges (RFC 6749, 7636, 8707), built and read purely.

Requests are `OutboundRequest`s the outbound client sends once; answers are read into `Tokens` or a typed
`TokenError` that says whether signing in again is the only way on (`invalid_grant`). Token values never
appear in a repr, a message or an error: an error keeps the server's code and a bounded description.
"""

import base64
import json
import math
import re
from collections.abc import Sequence
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import attrs

from executor_mcp.oauth.pkce import S256
from executor_mcp.outbound.model import OutboundRequest, OutboundResponse
from executor_mcp.records.oauth import AUTH_BASIC, AUTH_POST

# Scopes that say who the user is or that a refresh token is wanted, never what an API allows: not reported
# as missing from a grant.
IDENTITY_SCOPES = frozenset({"openid", "email", "profile", "offline_access"})
MAX_TOKEN_LENGTH = 16 * 1024
MAX_DESCRIPTION = 300
REFRESH_AHEAD = 60.0  # seconds before expiry that a token is refreshed
INVALID_GRANT = "invalid_grant"


@attrs.frozen
class ClientAuth:
    """How a client is known at the token endpoint; its secret stays out of every repr."""

    client_id: str
    secret: str | None = attrs.field(default=None, repr=False)
    method: str = "none"


@attrs.frozen
class Tokens:
    access_token: str = attrs.field(repr=False)
    expires_in: float | None = None
    refresh_token: str | None = attrs.field(default=None, repr=False)
    scope: str | None = None  # granted, when the server says
    id_token: str | None = attrs.field(default=None, repr=False)


@attrs.frozen
class TokenError:
    """The token endpoint refused: its RFC 6749 `error` code (None when it gave none) and why, in its words."""

    code: str | None
    description: str
    status: int

    @property
    def reauth(self) -> bool:
        """Only a new sign-in can fix it: the grant (code or refresh token) is invalid, expired or revoked."""
        return self.code == INVALID_GRANT

    @property
    def message(self) -> str:
        if self.code is None:
            return f"the token endpoint answered HTTP {self.status}: {self.description}"
        return f"({self.code}): {self.description}" if self.description else f"({self.code})"


# Authorization servers that issue a refresh token only when asked with `access_type=offline`, and again
# (after the first consent) only with `prompt=consent`: Google's.
OFFLINE_ON_REQUEST = frozenset({"accounts.google.com"})


def authorization_url(
    endpoint: str,
    *,
    client_id: str,
    redirect_uri: str,
    state: str,
    challenge: str,
    scopes: Sequence[str],
    resource: str | None,
) -> str:
    """Where the user signs in: the endpoint with the request's parameters added to any it has."""
    params = [
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect_uri),
        ("state", state),
        ("code_challenge", challenge),
        ("code_challenge_method", S256),
    ]
    if scopes:
        params.append(("scope", " ".join(scopes)))
    if resource:
        params.append(("resource", resource))
    parts = urlsplit(endpoint)
    if (parts.hostname or "").lower() in OFFLINE_ON_REQUEST:
        params += [("access_type", "offline"), ("prompt", "consent")]
    query = "&".join(filter(None, [parts.query, urlencode(params, quote_via=quote)]))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


def code_form(code: str, redirect_uri: str, verifier: str, resource: str | None) -> dict[str, str]:
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri, "code_verifier": verifier}
    return _with_resource(form, resource)


def refresh_form(refresh_token: str, scopes: Sequence[str], resource: str | None) -> dict[str, str]:
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    if scopes:
        form["scope"] = " ".join(scopes)
    return _with_resource(form, resource)


def client_credentials_form(scopes: Sequence[str], resource: str | None) -> dict[str, str]:
    form = {"grant_type": "client_credentials"}
    if scopes:
        form["scope"] = " ".join(scopes)
    return _with_resource(form, resource)


def _with_resource(form: dict[str, str], resource: str | None) -> dict[str, str]:
    if resource:
        form["resource"] = resource
    return form


# How long an authorization server may take to answer a token request (upstream's OAuth default too).
ENDPOINT_TIMEOUT = 20.0


def token_request(token_url: str, client: ClientAuth, form: dict[str, str]) -> OutboundRequest:
    """A POST to the token endpoint, the client authenticated as it registered (RFC 6749 §2.3)."""
    headers = [("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json")]
    body = dict(form)
    credential_headers: frozenset[str] = frozenset()
    if client.method == AUTH_BASIC and client.secret is not None:
        pair = f"{quote(client.client_id, safe='')}:{quote(client.secret, safe='')}"
        headers.append(("Authorization", "Basic " + base64.b64encode(pair.encode()).decode()))
        credential_headers = frozenset({"authorization"})
    else:
        body["client_id"] = client.client_id
        if client.method == AUTH_POST and client.secret is not None:
            body["client_secret"] = client.secret
    return OutboundRequest(
        method="POST",
        url=token_url,
        headers=tuple(headers),
        body=urlencode(body).encode(),
        credential_headers=credential_headers,
        follow_redirects=False,
    )


def read_tokens(response: OutboundResponse) -> Tokens | TokenError:
    """The token endpoint's answer: tokens from a 200 with a bearer access token, else the error it gave."""
    try:
        document = json.loads(response.body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nesting too deep is no answer either
        document = None
    if not isinstance(document, dict):
        return TokenError(None, "its answer is not a JSON object", response.status)
    if response.status != 200 or "error" in document:
        code = document.get("error")
        described = document.get("error_description")
        return TokenError(
            code if isinstance(code, str) and 0 < len(code) <= 64 else None,
            _bounded(described if isinstance(described, str) else ""),
            response.status,
        )
    access = document.get("access_token")
    kind = document.get("token_type")
    if not isinstance(access, str) or not _token(access) or not isinstance(kind, str) or kind.lower() != "bearer":
        return TokenError(None, "its answer holds no bearer access token", response.status)
    expires = document.get("expires_in")
    if isinstance(expires, str) and expires.isdigit():
        expires = int(expires)  # some servers send a string
    refresh = document.get("refresh_token")
    scope = document.get("scope")
    id_token = document.get("id_token")
    return Tokens(
        access_token=access,
        expires_in=float(expires)
        if isinstance(expires, int | float) and not isinstance(expires, bool) and math.isfinite(expires) and expires > 0
        else None,
        refresh_token=refresh if _token(refresh) else None,
        scope=_bounded(scope, 4096) if isinstance(scope, str) else None,
        id_token=id_token if _token(id_token) else None,
    )


def _token(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_TOKEN_LENGTH and value.isprintable()


def _bounded(text: str, limit: int = MAX_DESCRIPTION) -> str:
    printable = "".join(char if char.isprintable() else " " for char in text[: limit * 2])
    return printable if len(printable) <= limit else printable[: limit - 1] + "…"


def granted_scopes(tokens: Tokens, requested: Sequence[str]) -> tuple[str, ...]:
    """What the grant covers: what the server says it granted, else what was asked (RFC 6749 §5.1). Spaces
    separate scopes; GitHub and Slack separate them with commas."""
    if tokens.scope is not None:
        return tuple(dict.fromkeys(scope for scope in re.split(r"[\s,]+", tokens.scope) if scope))
    return tuple(dict.fromkeys(requested))


def missing_scopes(requested: Sequence[str], granted: Sequence[str]) -> tuple[str, ...]:
    """Requested API scopes the grant lacks (identity scopes and `*/.default` are never counted)."""
    have = set(granted)
    return tuple(
        scope
        for scope in dict.fromkeys(requested)
        if scope not in have and scope not in IDENTITY_SCOPES and not scope.endswith("/.default")
    )


def refresh_due(expires_at: float | None, now: float, issued_at: float | None = None) -> bool:
    """A token is refreshed a minute before it expires, or halfway through its life when that is shorter (a
    token that lives a minute is not refreshed on every call); one with no known expiry never is."""
    if expires_at is None:
        return False
    ahead = REFRESH_AHEAD if issued_at is None else min(REFRESH_AHEAD, max(expires_at - issued_at, 0.0) / 2)
    return expires_at <= now + ahead
