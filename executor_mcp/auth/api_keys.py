"""API keys: `exk_<key id>_<secret>`, shown once at creation and stored only as a SHA-256 digest."""

import hashlib
import secrets

KEY_PREFIX = "exk_"


def new_api_key() -> tuple[str, str]:
    """A fresh (key id, key). The id is public (for `keys revoke`); the key is the bearer."""
    key_id = secrets.token_hex(6)
    return key_id, f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", errors="surrogateescape")).hexdigest()
