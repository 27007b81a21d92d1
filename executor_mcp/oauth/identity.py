"""Who an OpenID Connect sign-in says a person is (no I/O): the ID token checked (signature, issuer, audience,
expiry, nonce) and its claims turned into an account and an org, or refused.

The account is one claim (the email by default: then it must be verified, and its domain on the operator's
allowlist), the org another; a person whose token lacks either, or whose domain is not allowed, does not get
in. Refusals say which rule refused, never a token.
"""

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import attrs
import jwt

ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "PS256")  # never `none`, never a shared secret
LEEWAY = 60.0  # clock difference tolerated between us and the provider
MAX_CLAIM_LENGTH = 256


class IdentityRefused(ValueError):
    """The sign-in does not admit anyone: the message is safe to show the person."""


@attrs.frozen
class Identity:
    account_id: str
    org_id: str
    claims: Mapping[str, Any]


def verify_id_token(
    raw: str, keys: Sequence[jwt.PyJWK], *, issuer: str, client_id: str, nonce: str, now: float
) -> dict[str, Any]:
    """The ID token's claims, once its signature (by one of `keys`, as its `kid` names), issuer, audience,
    expiry and nonce hold."""
    try:
        kid = jwt.get_unverified_header(raw).get("kid")
        key = next((key for key in keys if key.key_id == kid), None)
        if key is None and len(keys) == 1 and kid is None:
            key = keys[0]
        if key is None:
            raise IdentityRefused("The sign-in was signed with a key the provider does not publish")
        if key.algorithm_name not in ALGORITHMS:
            raise IdentityRefused("The provider signs with an algorithm this server does not accept")
        claims: dict[str, Any] = jwt.decode(
            raw,
            key,
            algorithms=[key.algorithm_name],
            audience=client_id,
            issuer=issuer,
            leeway=LEEWAY,
            options={"require": ["exp", "iat", "sub"]},
        )
    except IdentityRefused:
        raise
    except (jwt.PyJWTError, TypeError, ValueError) as exc:
        raise IdentityRefused(f"The provider's ID token is not valid: {exc}") from None
    if claims.get("nonce") != nonce:
        raise IdentityRefused("The provider's ID token was not issued for this sign-in (nonce)")
    if "iat" in claims and isinstance(claims["iat"], int | float) and claims["iat"] > now + LEEWAY:
        raise IdentityRefused("The provider's ID token was issued in the future")
    return claims


def identity_of(
    claims: Mapping[str, Any], *, account_claim: str, org_claim: str, allowed_domains: Collection[str]
) -> Identity:
    """The account and org the claims name. An email account must be verified and of an allowed domain."""
    account = claims.get(account_claim)
    if not isinstance(account, str) or not 0 < len(account) <= MAX_CLAIM_LENGTH or not account.isprintable():
        raise IdentityRefused(f"The provider did not name an account (claim {account_claim!r})")
    if "@" in account or account_claim == "email":
        # An address decides the domain rule, so it must be one the provider verified (not a name the user set).
        if claims.get("email_verified") is not True:
            raise IdentityRefused("The provider has not verified this email address")
        domain = account.rpartition("@")[2].lower()
        if domain not in allowed_domains:
            raise IdentityRefused(f"Accounts of {domain or 'this domain'} may not sign in here")
    org = claims.get(org_claim)
    if not isinstance(org, str) or not 0 < len(org) <= MAX_CLAIM_LENGTH or not org.isprintable():
        raise IdentityRefused(f"The provider did not name an organization (claim {org_claim!r})")
    return Identity(account.lower() if "@" in account else account, org, claims)


def has_claim(claims: Mapping[str, Any], name: str, value: str) -> bool:
    """Whether the claims hold `name=value` (the value, or a list holding it): the admin rule's test."""
    held = claims.get(name)
    return held == value or (isinstance(held, list) and value in held)
