"""Reading the bearer of a request and phrasing the challenge that refuses it. No I/O."""

from executor_mcp.protocol.http import HeaderLookup

BEARER_SCHEME = "bearer"
# Larger than any real JWT or API key; a bigger bearer is refused without parsing it.
MAX_TOKEN_LENGTH = 16 * 1024


def bearer_token(headers: HeaderLookup) -> str | None:
    """The token of a `Bearer` authorization (possibly empty), or None when the request carries no bearer.

    The scheme is case-insensitive (RFC 9110), and servers strip trailing whitespace from header values,
    so `Bearer ` arrives as `Bearer`: an empty bearer, which is a bad token, not a missing one."""
    value = headers.get("authorization")
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != BEARER_SCHEME:
        return None
    return token.strip()


def is_jwt_shaped(token: str) -> bool:
    """Three dot-separated parts, as upstream decides; an unsigned (`alg: none`) JWT has an empty third."""
    return token.count(".") == 2


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def challenge(resource_metadata: str, description: str | None = None) -> str:
    """`WWW-Authenticate` for a 401: no `error=` when no token was sent, `invalid_token` otherwise."""
    if description is None:
        return f"Bearer resource_metadata={_quoted(resource_metadata)}"
    return (
        f"Bearer error={_quoted('invalid_token')}, error_description={_quoted(description)}, "
        f"resource_metadata={_quoted(resource_metadata)}"
    )
