"""JWT verification with PyJWT: an HS256 shared secret, or the keys of a JWKS endpoint.

Outcomes are three, because clients act on three: the token is good (claims), the token is bad
(`InvalidToken`, a 401 the client answers by re-authenticating), or the server cannot tell right now
(`Unavailable`, a 503 the client answers by retrying; it never condemns a session). A JWKS that cannot
be fetched, or answers garbage, is the last kind.
"""

import logging
import math
from collections.abc import Callable
from typing import Any

import attrs
import httpx
import jwt
import trio

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


class JwksKeys:
    """The signing keys of a JWKS URL, cached, refreshed on an unknown `kid`."""

    def __init__(self, url: str, http: httpx.AsyncClient, clock: Callable[[], float] = trio.current_time) -> None:
        self._url = url
        self._http = http
        self._clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._unknown_refreshed_at = -math.inf
        self._lock = trio.Lock()

    async def key(self, kid: str | None) -> jwt.PyJWK:
        now = self._clock()
        if self._fetched_at is None or now - self._fetched_at > JWKS_TTL:
            await self._refresh()
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
        async with self._lock:
            try:
                response = await self._http.get(self._url, timeout=JWKS_FETCH_TIMEOUT)
                response.raise_for_status()
                document = jwt.PyJWKSet.from_dict(response.json())
            except (httpx.HTTPError, ValueError, jwt.PyJWKSetError, jwt.InvalidKeyError) as exc:
                log.warning("JWKS %s unavailable: %s", self._url, exc)
                raise Unavailable(str(exc)) from None
            self._keys = {key.key_id or "": key for key in document.keys}
            self._fetched_at = self._clock()


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
        options = {"require": ["sub"], "verify_aud": self._audience is not None}
        try:
            claims = jwt.decode(
                token, key, algorithms=algorithms, issuer=self._issuer, audience=self._audience, options=options
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("The access token expired") from None
        except jwt.PyJWTError:
            raise InvalidToken("The access token is invalid") from None
        account, org = claims.get("sub"), claims.get("org_id")
        if not isinstance(account, str) or not account or (org is not None and not isinstance(org, str)):
            raise InvalidToken("The access token is invalid")
        return Claims(account_id=account, org_id=org or None)
