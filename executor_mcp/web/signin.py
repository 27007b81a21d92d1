"""Who a console visitor is: the signed cookie that stands for a principal, the CSRF token bound to it, and the
one-time sign-in links of `executor-mcp console-link`. No I/O: the adapter (`web/console.py`) reads the key,
the clock and the control plane.

The cookie is stateless (`<payload>.<mac>`, both base64url, HMAC-SHA256 under the console key), so a server
restart keeps people signed in, and it can only be trusted until it expires: every request still asks the
control plane whether what it was made from is alive (the organization, and the API key when one was pasted),
so a revocation ends a console visit as it ends a bearer's next request.

The CSRF token is a MAC of the sign-in's random nonce: pages put it in a `<meta>`, scripts send it as a header,
and the server recomputes it, so nothing is stored per visitor and a token is worthless with any other cookie.
"""

import base64
import binascii
import hashlib
import hmac
import json
import secrets

import attrs

from executor_mcp.codec import converter, dumps
from executor_mcp.storage.records import Owner

COOKIE_NAME = "executor_console"
CSRF_HEADER = "x-csrf-token"
# How long a sign-in lasts at most; one made from a bearer ends when the bearer does, if sooner.
SIGN_IN_SECONDS = 12 * 3600
# How long a `console-link` may wait to be opened.
LINK_SECONDS = 15 * 60
MAX_LINK_SECONDS = 24 * 3600
# A cookie holds two ids, a few flags and a nonce: anything longer is not one of ours.
MAX_COOKIE_CHARS = 4096
_CLOCK_SKEW = 60.0
_COOKIE_PURPOSE = b"executor-mcp console cookie\x00"
_CSRF_PURPOSE = b"executor-mcp console csrf\x00"

# How a visitor proved who they are.
VIA_LOCAL = "local"  # `--auth none`: the one local principal, no sign-in
VIA_API_KEY = "api_key"
VIA_BEARER = "bearer"
VIA_LINK = "link"


@attrs.frozen
class SignIn:
    """One signed-in visitor: the principal, how it was proven, and until when."""

    account_id: str
    org_id: str | None
    org_admin: bool
    via: str
    issued_at: float
    expires_at: float
    nonce: str
    api_key_digest: str | None = None  # the pasted key's lookup digest (never the key), to notice a revocation
    # Whether every member was an admin when it was made (no `--org-admin-claim`): `org_admin` is only as good
    # as that rule, so the console drops a sign-in made under another one.
    members_admins: bool = True

    @property
    def principal(self) -> Owner:
        return Owner(account_id=self.account_id, org_id=self.org_id, org_admin=self.org_admin)


def new_sign_in(
    principal: Owner,
    via: str,
    now: float,
    *,
    until: float | None = None,
    api_key_digest: str | None = None,
    members_admins: bool = True,
) -> SignIn:
    """A sign-in for `principal` from now until `SIGN_IN_SECONDS` later, or `until` when that is sooner."""
    expires = now + SIGN_IN_SECONDS if until is None else min(until, now + SIGN_IN_SECONDS)
    return SignIn(
        account_id=principal.account_id,
        org_id=principal.org_id,
        org_admin=principal.org_admin,
        via=via,
        issued_at=now,
        expires_at=expires,
        nonce=secrets.token_urlsafe(18),
        api_key_digest=api_key_digest,
        members_admins=members_admins,
    )


def seal(key: bytes, sign_in: SignIn) -> str:
    payload = _b64(dumps(converter.unstructure(sign_in)))
    return f"{payload}.{_b64(_mac(key, _COOKIE_PURPOSE, payload.encode()))}"


def unseal(key: bytes, value: str | None, now: float) -> SignIn | None:
    """The sign-in a cookie value stands for, or None when it is absent, forged, damaged or expired."""
    if not value or len(value) > MAX_COOKIE_CHARS or value.count(".") != 1:
        return None
    payload, mac = value.split(".")
    try:
        presented = _unb64(mac)
    except ValueError:
        return None
    if not hmac.compare_digest(presented, _mac(key, _COOKIE_PURPOSE, payload.encode())):
        return None
    try:
        sign_in = converter.structure(json.loads(_unb64(payload)), SignIn)
    except Exception:  # signed by us, so only a format change of ours gets here
        return None
    if sign_in.expires_at <= now or sign_in.issued_at > now + _CLOCK_SKEW:
        return None
    return sign_in


def csrf_token(key: bytes, sign_in: SignIn) -> str:
    return _b64(_mac(key, _CSRF_PURPOSE, sign_in.nonce.encode()))


def csrf_valid(key: bytes, sign_in: SignIn, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(presented.encode(), csrf_token(key, sign_in).encode())


def cookie_value(header: str | None) -> str | None:
    """Our cookie's value in a `Cookie` header (the first, if a page managed to set two)."""
    for part in (header or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE_NAME:
            return value.strip()
    return None


def set_cookie(value: str, max_age: float, *, secure: bool) -> str:
    """HttpOnly (no script reads it), SameSite=Strict (no other site's request carries it), whole-site path."""
    flags = "; Secure" if secure else ""
    return f"{COOKIE_NAME}={value}; Path=/; Max-Age={max(0, int(max_age))}; HttpOnly; SameSite=Strict{flags}"


def clear_cookie(*, secure: bool) -> str:
    return set_cookie("", 0, secure=secure)


def safe_next(wanted: str | None) -> str:
    """Where to go after signing in: a path of this site only (never `//host` or `/\\host`, which browsers
    read as another site), else the console's front page."""
    if not wanted or len(wanted) > 2048 or not wanted.startswith("/") or wanted[1:2] in ("/", "\\"):
        return "/"
    if any(ord(char) < 0x21 or char == "\\" for char in wanted):
        return "/"
    return wanted


def new_link_token() -> str:
    return secrets.token_urlsafe(32)


def link_digest(token: str) -> str:
    """What the control plane keeps of a link: its SHA-256, so a copy of the data dir opens no console."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _mac(key: bytes, purpose: bytes, message: bytes) -> bytes:
    return hmac.new(key, purpose + message, hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64url") from exc
