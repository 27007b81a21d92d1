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


async def take_requests(env: Environment, db: Database) -> list[str]:
    """Every pending request of one kind (a table of keys), removed as it is taken; unreadable keys are
    dropped. A look first, so the usual nothing-pending costs no write."""

    def _take(txn: Txn) -> list[str]:
        taken = [bytes(key) for key in txn.cursor(db=db).iternext(keys=True, values=False)]
        for key in taken:
            txn.delete(key, db=db)
        return [text for key in taken if (text := key_text(key)) is not None]

    if not await env.read(lambda txn: txn.stat(db)["entries"]):
        return []
    return await env.write(_take)
