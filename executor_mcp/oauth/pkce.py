"""PKCE (RFC 7636, S256 only) and the flow's `state`: random values, and the digests the store keeps of them."""

import base64
import hashlib
import secrets

S256 = "S256"


def new_verifier() -> str:
    """43 to 128 unreserved characters (RFC 7636 §4.1): 64 here, from 48 random bytes."""
    return secrets.token_urlsafe(48)


def challenge(verifier: str) -> str:
    """BASE64URL(SHA256(verifier)) without padding (RFC 7636 §4.2)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def new_state() -> str:
    """What the authorization server hands back to the callback: 256 random bits, unguessable."""
    return secrets.token_urlsafe(32)


def state_digest(state: str) -> str:
    """How the store finds a flow: a copy of the store alone cannot answer a callback."""
    return hashlib.sha256(state.encode("utf-8", "surrogatepass")).hexdigest()
