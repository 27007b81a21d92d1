"""Who is asking: the principal of a request, for `--auth none` and for bearers (`--auth jwt`).

With auth `none` (only allowed on a loopback bind) every request is the one implicit local principal.
With bearers, a JWT-shaped token is verified (HS256 secret or JWKS) and anything else is looked up as
an API key. Then the organization must be present and not revoked in the control plane's org directory
(read on every request, so `executor-mcp orgs revoke` takes effect at once on a running server).

Refusals, as upstream §1.5: no bearer 401 with a bare challenge; a bad bearer 401 `invalid_token`; no
or revoked organization 403 (`Forbidden`, carrying the verified account and the organization it named,
so the caller can condemn that owner's own session and no one else's); verification impossible right
now 503, which never condemns anything.

Org admins: with `--org-admin-claim NAME=VALUE` only a JWT whose claim NAME is VALUE (or a list holding
VALUE) and an API key created with `--admin` may change the org's rules; without it every member may.
The local principal of `--auth none` is always an admin.
"""

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from executor_mcp.auth.api_keys import digest
from executor_mcp.auth.bearer import MAX_TOKEN_LENGTH, bearer_token, challenge, is_jwt_shaped
from executor_mcp.auth.tokens import InvalidToken, TokenVerifier, Unavailable
from executor_mcp.protocol.errors import Refusal, Refused
from executor_mcp.protocol.http import HeaderLookup
from executor_mcp.protocol.resources import MCP_PATH, resource_for
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import StoreUnavailable
from executor_mcp.storage.records import Owner

log = logging.getLogger(__name__)

Principal = Owner

LOCAL_PRINCIPAL = Principal(account_id="local", org_id="local", org_admin=True)


@attrs.frozen
class Identity:
    """A verified bearer: whom it stands for, until when (a JWT's `exp`), and which API key it was."""

    principal: Principal
    expires_at: float | None = None
    api_key_digest: str | None = None


class Forbidden(Refused):
    """Verified, but without a live organization: 403, and grounds to condemn this account's session."""

    def __init__(self, owner: Owner) -> None:
        super().__init__(Refusal.NO_ORGANIZATION)
        self.owner = owner


class Authenticator(Protocol):
    async def authenticate(self, headers: HeaderLookup) -> Principal:
        """The request's principal, for anything but an MCP endpoint: a toolkit-bound API key is refused."""


class EndpointAuthenticator(Authenticator, Protocol):
    async def authenticate_endpoint(self, headers: HeaderLookup, resource: str = MCP_PATH) -> Principal:
        """The request's principal at an MCP endpoint; a toolkit-bound key's principal names its toolkit, and the
        endpoint refuses it anywhere but there."""


class NoAuth:
    async def authenticate(self, headers: HeaderLookup) -> Principal:
        return LOCAL_PRINCIPAL

    async def authenticate_endpoint(self, headers: HeaderLookup, resource: str = MCP_PATH) -> Principal:
        return LOCAL_PRINCIPAL


class BearerAuth:
    def __init__(
        self,
        verifier: TokenVerifier,
        control: ControlPlane,
        resource_metadata_url: Callable[[str], str],
        clock: Callable[[], float],
        org_admin_claim: tuple[str, str] | None = None,
    ) -> None:
        self._verifier = verifier
        self._admin_claim = org_admin_claim
        self._control = control
        self._metadata_url = resource_metadata_url
        self._clock = clock
        self._seen_orgs: set[str] = set()

    async def authenticate(self, headers: HeaderLookup) -> Principal:
        return refuse_bound(await self.authenticate_endpoint(headers))

    async def authenticate_endpoint(self, headers: HeaderLookup, resource: str = MCP_PATH) -> Principal:
        """`resource`: the endpoint asked (`/mcp`, a toolkit's), whose metadata a challenge points to."""
        token = bearer_token(headers)
        if token is None:
            raise Refused(Refusal.UNAUTHORIZED, challenge=challenge(self._metadata_url(resource)))
        return (await self.identify(token, resource=resource)).principal

    async def identify(self, token: str, *, resource: str | None = None) -> Identity:
        """Who a bearer (a JWT or an API key) is, or the refusal; the web console signs in with this too. A
        toolkit-bound API key is refused unless at an MCP endpoint (`resource`, which checks it is its toolkit's)."""
        # A header is latin-1, but a sign-in body is JSON, which can carry a lone surrogate: no token is
        # anything but ASCII, and the digest of such a text cannot even be taken.
        at = resource or MCP_PATH
        if not token or len(token) > MAX_TOKEN_LENGTH or not token.isascii():
            raise self._invalid("The bearer token is invalid", at)
        expires_at, key_digest = None, None
        try:
            if is_jwt_shaped(token):
                claims = await self._verifier.verify(token)
                account, org, admin = claims.account_id, claims.org_id, self._holds_admin_claim(claims.values)
                exp = claims.values.get("exp")
                expires_at = float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None
                toolkit = None
            else:
                key_digest = digest(token)
                account, org, admin, toolkit = await self._api_key(key_digest)
            if not org or not await self._org_is_live(org):
                raise Forbidden(Principal(account_id=account, org_id=org or None))
        except InvalidToken as exc:
            raise self._invalid(str(exc), at) from None
        except Unavailable:
            raise Refused(Refusal.AUTH_UNAVAILABLE) from None
        principal = Principal(account_id=account, org_id=org, org_admin=admin, toolkit=toolkit)
        return Identity(principal if resource is not None else refuse_bound(principal), expires_at, key_digest)

    async def confirm(self, principal: Principal, api_key_digest: str | None) -> None:
        """What an earlier `identify` proved still holds: the organization is live and, when the proof was an
        API key, that key is not revoked. The console asks on every request of a signed-in visitor."""
        try:
            if api_key_digest is not None:
                account, org, _, _ = await self._api_key(api_key_digest)
                if (account, org) != (principal.account_id, principal.org_id):
                    raise InvalidToken("The API key is invalid")
            if not principal.org_id or not await self._org_is_live(principal.org_id):
                raise Forbidden(principal)
        except InvalidToken as exc:
            raise self._invalid(str(exc), MCP_PATH) from None
        except Unavailable:
            raise Refused(Refusal.AUTH_UNAVAILABLE) from None

    @property
    def members_are_admins(self) -> bool:
        """Without `--org-admin-claim` every member administers the org."""
        return self._admin_claim is None

    def _invalid(self, description: str, resource: str) -> Refused:
        return Refused(Refusal.UNAUTHORIZED, challenge=challenge(self._metadata_url(resource), description))

    def _holds_admin_claim(self, claims: Mapping[str, Any]) -> bool:
        if self._admin_claim is None:
            return True
        name, wanted = self._admin_claim
        held = claims.get(name)
        return held == wanted or (isinstance(held, list) and wanted in held)

    async def _api_key(self, key_digest: str) -> tuple[str, str, bool, str | None]:
        record = await self._store(self._control.api_keys.get_api_key(key_digest))
        if record is None or record.revoked:
            raise InvalidToken("The API key is invalid")
        return record.account_id, record.org_id, self._admin_claim is None or record.admin, record.toolkit

    async def _org_is_live(self, org_id: str) -> bool:
        record = await self._store(self._control.orgs.get_org(org_id))
        if record is None and org_id not in self._seen_orgs:
            record = await self._store(self._control.orgs.note_org(org_id, self._clock()))
            self._seen_orgs.add(org_id)
        return record is None or not record.revoked

    @staticmethod
    async def _store(pending):
        """A control-plane call; a storage failure is "cannot tell right now", never a refusal."""
        try:
            return await pending
        except StoreUnavailable as exc:  # the shared database's outage: a condition, said in one line
            log.warning("control plane unavailable for authentication: %s", exc)
            raise Unavailable(str(exc)) from None
        except Exception as exc:
            log.exception("control plane unavailable for authentication")
            raise Unavailable(str(exc)) from None


def refuse_bound(principal: Principal, resource: str | None = None) -> Principal:
    """`principal`, unless its bearer is bound to a toolkit and `resource` (the MCP endpoint asked; None for any
    other route) is not that toolkit's endpoint: then the refusal that names the endpoint it may use."""
    if principal.toolkit is not None and resource != resource_for(principal.toolkit):
        raise Refused(Refusal.TOOLKIT_BOUND, endpoint=resource_for(principal.toolkit))
    return principal
