"""Requests one process leaves for another (an admin command for the running server): keys in a table of their
own, taken, and deleted, by the server."""

import logging

from executor_mcp.storage.environment import Database, Environment, Txn

log = logging.getLogger(__name__)


def key_text(key: bytes) -> str | None:
    try:
        return key.decode()
    except UnicodeDecodeError:
        log.error("skipping an unreadable control-plane key %r", key[:80])
        return None


def _pending(txn: Txn, db: Database, prefix: bytes) -> list[bytes]:
    """The keys starting with `prefix`, in key order: a range of the table, never a scan of others' keys."""
    cursor = txn.cursor(db=db)
    if not cursor.set_range(prefix):
        return []
    keys = []
    for key in cursor.iternext(keys=True, values=False):
        if not key.startswith(prefix):
            break
        keys.append(bytes(key))
    return keys


def _any_pending(txn: Txn, db: Database, prefix: bytes) -> bool:
    cursor = txn.cursor(db=db)
    return cursor.set_range(prefix) and bytes(cursor.key()).startswith(prefix)


async def take_requests(env: Environment, db: Database, prefix: bytes) -> list[str]:
    """The pending requests of one kind (a table of keys) whose key starts with `prefix` (b"": all), removed as
    they are taken; unreadable keys are dropped. A look first, so the usual nothing-pending costs no write."""

    def _take(txn: Txn) -> list[str]:
        taken = _pending(txn, db, prefix)
        for key in taken:
            txn.delete(key, db=db)
        return [text for key in taken if (text := key_text(key)) is not None]

    if not await env.read(lambda txn: _any_pending(txn, db, prefix)):
        return []
    return await env.write(_take)
