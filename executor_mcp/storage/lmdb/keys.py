"""Keys of the catalog and secret tables: JSON strings joined by NUL.

JSON escapes control characters, so no org, account, slug or name can forge the separator and reach into
another owner's range (`a\\x00b` in org `c` is not `a` in org `b\\x00c`). Every key of one org starts with the
org's part, every key of one owner with the (org, owner, account) parts, so a read for one caller is a prefix
range that never decodes another org's or another member's records.
"""

import logging
from collections.abc import Iterator

from executor_mcp.codec import dumps, loads
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.storage.environment import Database, Txn

log = logging.getLogger(__name__)

# LMDB's default (and py-lmdb's compiled-in) ceiling on a key: a longer one cannot exist, so a read of it
# is empty and a write of it is refused.
MAX_KEY_BYTES = 511


def key(*parts: str) -> bytes:
    return b"\x00".join(dumps(part) for part in parts)


def prefix(*parts: str) -> bytes:
    return key(*parts) + b"\x00"


def parts_of(raw: bytes) -> list[str] | None:
    """A key back into its parts; None (logged) for a key no write of ours makes."""
    try:
        parts = [loads(part) for part in raw.split(b"\x00")]
    except ValueError:
        parts = []
    if not parts or not all(isinstance(part, str) for part in parts):
        log.error("skipping an unreadable catalog key %r", raw[:80])
        return None
    return parts


def writable(raw: bytes) -> bytes:
    if len(raw) > MAX_KEY_BYTES:
        raise InvalidInput("The identifiers are too long to store.")
    return raw


def get(txn: Txn, db: Database, raw: bytes) -> bytes | None:
    return None if len(raw) > MAX_KEY_BYTES else txn.get(raw, db=db)


def delete(txn: Txn, db: Database, raw: bytes) -> None:
    if len(raw) <= MAX_KEY_BYTES:
        txn.delete(raw, db=db)


def ranged(txn: Txn, db: Database, start: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The (key, value) pairs under the prefix `start`, in key order."""
    if len(start) > MAX_KEY_BYTES:
        return
    cursor = txn.cursor(db=db)
    if not cursor.set_range(start):
        return
    for found, value in cursor.iternext():
        if not found.startswith(start):
            return
        yield bytes(found), bytes(value)
