"""JWT verification with PyJWT: an HS256 shared secret, or the keys of a JWKS endpoint.

Outcomes are three, because clients act on three: the token is good (claims), the token is bad
(`InvalidToken`, a 401 the client answers by re-authenticating), or the server cannot tell right now
(`Unavailable`, a 503 the client answers by retrying; it never condemns a session). A JWKS that cannot
be fetched, or answers garbage, is the last kind.
"""

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import httpx
import jwt
import trio

from executor_mcp.auth.identity import identity_problem

log = logging.getLogger(__name__)

JWKS_ALGORITHMS = ("RS256", "ES256")
JWKS_TTL = 300.0
# Tokens with unknown `kid`s refetch the JWKS at most this often.
JWKS_REFRESH_INTERVAL = 10.0
JWKS_FETCH_TIMEOUT = 5.0


class InvalidToken(Exception):
    """The token is expired, malformed, wrongly signed or lacks `sub`; the message is the description."""


class Unavailable(Exception):
    """Verification is temporarily impossible."""


@attrs.frozen
class Claims:
    account_id: str
    org_id: str | None
    values: Mapping[str, Any] = attrs.field(factory=dict, eq=False)  # every claim, for the org-admin claim


class _Fetch:
    """One JWKS fetch in flight, which every request needing fresh keys waits for instead of starting
    its own: the keys it got, or why it failed."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.failure: str | None = "the JWKS fetch did not finish"  # until it succeeds


class JwksKeys:
    """The signing keys of a JWKS URL, cached, refreshed when stale or on an unknown `kid`.

    At most one fetch is in flight: concurrent requests share its outcome, so an endpoint that hangs
    costs every waiting request one fetch timeout, not one each in turn. A failed fetch answers the
    requests that shared it with `Unavailable`, and the next one is started by the next request.
    """

    def __init__(self, url: str, http: httpx.AsyncClient, clock: Callable[[], float] = trio.current_time) -> None:
        self._url = url
        self._http = http
        self._clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._unknown_refreshed_at = -math.inf
        self._fetch: _Fetch | None = None

    async def key(self, kid: str | None) -> jwt.PyJWK:
        now = self._clock()
        if self._fetched_at is None or now - self._fetched_at > JWKS_TTL:
            await self._refresh()
        elif kid not in self._keys and self._fetch is not None:
            await self._refresh()  # the fetch in flight may bring it
        elif kid not in self._keys and now - self._unknown_refreshed_at > JWKS_REFRESH_INTERVAL:
            # A key we have not seen may be a rotation: look once, but never let tokens drive a fetch storm.
            self._unknown_refreshed_at = now
            await self._refresh()
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        key = self._keys.get(kid or "")
        if key is None:
            raise InvalidToken("The access token is invalid")
        return key

    async def _refresh(self) -> None:
        fetch = self._fetch
        if fetch is None:
            fetch = self._fetch = _Fetch()
            try:
                # Shielded and bounded: the requests sharing this fetch must not lose it because the one
                # that started it hung up, and nobody waits longer than one timeout.
                with trio.CancelScope(shield=True):
                    await self._fetch_keys(fetch)
            finally:
                self._fetch = None
                fetch.done.set()
        else:
            await fetch.done.wait()
        if fetch.failure is not None:
            raise Unavailable(fetch.failure)

    async def _fetch_keys(self, fetch: _Fetch) -> None:
        try:
            with trio.fail_after(JWKS_FETCH_TIMEOUT):
                response = await self._http.get(self._url, timeout=JWKS_FETCH_TIMEOUT)
            response.raise_for_status()
            document = jwt.PyJWKSet.from_dict(response.json())
        except (httpx.HTTPError, ValueError, jwt.PyJWKSetError, jwt.InvalidKeyError, trio.TooSlowError) as exc:
            fetch.failure = str(exc) or f"{type(exc).__name__} after at most {JWKS_FETCH_TIMEOUT:g} s"
            log.warning("JWKS %s unavailable: %s", self._url, fetch.failure)
            return
        self._keys = {key.key_id or "": key for key in document.keys}
        self._fetched_at = self._clock()
        fetch.failure = None


class TokenVerifier:
    def __init__(
        self,
        *,
        secret: bytes | None = None,
        jwks: JwksKeys | None = None,
        issuer: str | None = None,
        audience: str | None = None,
    ) -> None:
        if (secret is None) == (jwks is None):
            raise ValueError("exactly one of a secret or a JWKS is needed")
        self._secret = secret
        self._jwks = jwks
        self._issuer = issuer
        self._audience = audience

    async def verify(self, token: str) -> Claims:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("The access token is invalid") from None
        if self._jwks is not None:
            kid = header.get("kid")
            key: Any = (await self._jwks.key(kid if isinstance(kid, str) else None)).key
            algorithms = list(JWKS_ALGORITHMS)
        else:
            key, algorithms = self._secret, ["HS256"]
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=algorithms,
                issuer=self._issuer,
                audience=self._audience,
                options={"require": ["sub"], "verify_aud": self._audience is not None},
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("The access token expired") from None
        except jwt.PyJWTError:
            raise InvalidToken("The access token is invalid") from None
        account, org = claims.get("sub"), claims.get("org_id")
        if not isinstance(account, str) or not account or (org is not None and not isinstance(org, str)):
            raise InvalidToken("The access token is invalid")
        # An id the storage cannot hold would fail every request of this bearer as a server error.
        if identity_problem(account) or (org and identity_problem(org)):
            raise InvalidToken("The access token's sub or org_id is not a usable id")
        return Claims(account_id=account, org_id=org or None, values=claims)
