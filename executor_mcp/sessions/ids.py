"""Session ids, and the instance each one lives on. No I/O.

With several instances on one database, a 2025-era session lives on its home instance (its runtime, its file),
and its id names that home: `<instance>_<64 hex>`. A proxy routes by the `Mcp-Session-Id` header's prefix with
a static map (`executor-mcp proxy-config`), so no sticky table is kept anywhere, and an instance can tell a
request that reached it by mistake from one for a session that does not exist. A server with no instance id
(the embedded default) mints bare 64-hex ids, as every version before did.
"""

import secrets
from collections.abc import Sequence

from executor_mcp.codec import json_mac
from executor_mcp.config import INSTANCE_ID

SECRET_LENGTH = 64  # hex digits of the unguessable part
SEPARATOR = "_"
_HEX = frozenset("0123456789abcdef")


def id_prefix(home: str) -> str:
    """How the ids of the sessions `home` is home to start ("" with no instance id: every id)."""
    return f"{home}{SEPARATOR}" if home else ""


def new_session_id(home: str) -> str:
    return id_prefix(home) + secrets.token_hex(SECRET_LENGTH // 2)


def home_of(session_id: str) -> str | None:
    """The instance a session id names ("" for a bare id), or None when the text is no minted id at all."""
    home, separator, secret = session_id.rpartition(SEPARATOR)
    if len(secret) != SECRET_LENGTH or not set(secret) <= _HEX:
        return None
    if separator and not INSTANCE_ID.fullmatch(home):
        return None
    return home


def is_session_id(text: str) -> bool:
    """Only ids of the minted shape are looked up; anything else cannot name a session."""
    return home_of(text) is not None


def workspace_id(
    key: bytes, home: str, principal: Sequence[object], resource: str, elicitation_mode: str, mode: str
) -> str:
    """A workspace's session id: the same for every request of the principal with these modes on this instance
    (in every process it runs as), a MAC under the control plane's workspace key, of the minted ids' shape.
    Each instance has its own, as each holds its own runtime."""
    return id_prefix(home) + json_mac(key, ["workspace", *principal, resource, elicitation_mode, mode])
