"""The audit log's entries (`interfaces.AuditStore`) in PostgreSQL: one table of (key, value) `bytea` in key
order, read backwards for the newest first.

`bytea` compares byte by byte, whatever the database's collation, so the key order is LMDB's and `audit/model.py`'s
keys (org digest, time, random suffix) are one range per org in time order. Appending is `ON CONFLICT DO
NOTHING`: append-only, and two instances appending at once never wait on each other. Their keys do not
collide in practice: a key repeats only for the same org in the same microsecond with the same 48 random bits
(`record_key`), and were that to happen the entry first committed is kept, as LMDB keeps the first.
A listing is one statement's snapshot; a sweep deletes what it found expired, and a key another instance's
sweep deleted first is simply gone, so two sweeps at once cost only repeated reads.
"""

from collections.abc import Callable
from typing import Any

import psycopg

from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.postgres.database import Database

# How many keys a sweep reads per statement: it usually jumps to the next org after a few of an org's keys,
# so reading its whole batch ahead would ship keys it never looks at.
SWEEP_READ = 64

TABLES: tuple[str, ...] = ("CREATE TABLE audit (key bytea PRIMARY KEY, value bytea NOT NULL)",)


class PgAudit:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def append_audit(self, entries: list[tuple[bytes, bytes]]) -> None:
        def _append(connection: psycopg.Connection[Any]) -> None:
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO audit (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING", entries
                )

        if entries:
            await self._database.transact(_append)

    async def audit_newest(
        self, prefix: bytes, start: bytes, end: bytes, limit: int, admits: Callable[[bytes], bool], scan: int
    ) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
        """LMDB's walk back from `end`, over rows streamed from a server-side cursor: a page that `admits`
        everything costs `limit` + 1 rows, a filtered one no more than it looks at (at most `scan` + 1). Keys
        below `prefix` or `start` end the walk, so the statement does not ask for them."""

        def _read(connection: psycopg.Connection[Any]) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
            found: list[tuple[bytes, bytes]] = []
            looked = 0
            with connection.cursor(name="audit_newest") as cursor:
                cursor.itersize = min(limit, scan) + 1
                cursor.execute(
                    "SELECT key, value FROM audit WHERE key < %s AND key >= %s ORDER BY key DESC LIMIT %s",
                    (end, max(start, prefix), scan + 1),
                )
                for key, value in cursor:
                    if not key.startswith(prefix):
                        return found, None
                    if looked >= scan or len(found) >= limit:
                        return found, key + b"\x00"  # the next page begins with this key (keys are of one length)
                    looked += 1
                    if admits(value):
                        found.append((key, value))
            return found, None

        return await self._database.transact(_read)

    async def sweep_audit(
        self, start: bytes, expired: Callable[[bytes], bool], skip: Callable[[bytes], bytes], batch: int
    ) -> bytes | None:
        """Within a prefix entries are in time order, so the first one kept means `skip` to the next prefix.
        Looks at up to `batch` * 4 keys, as LMDB's sweep does, reading them `SWEEP_READ` at a time."""

        def _sweep(connection: psycopg.Connection[Any]) -> bytes | None:
            position = start
            deleted = looked = 0
            doomed: list[bytes] = []
            while True:
                want = min(batch * 4 - looked + 1, SWEEP_READ)
                keys = [
                    row[0]
                    for row in connection.execute(
                        "SELECT key FROM audit WHERE key >= %s ORDER BY key LIMIT %s", (position, want)
                    )
                ]
                for key in keys:
                    if deleted >= batch or looked >= batch * 4:
                        _delete(connection, doomed)
                        return key
                    looked += 1
                    if expired(key):
                        doomed.append(key)
                        deleted += 1
                    else:
                        _delete(connection, doomed)  # before the jump, which may land on them again
                        doomed = []
                        position = skip(key)
                        break
                else:
                    if len(keys) < want:
                        _delete(connection, doomed)
                        return None
                    position = keys[-1] + b"\x00"  # the least key after the last one read

        return await self._database.transact(_sweep)

    async def export_records(self) -> Exported:
        """The entries as they are: their keys and values are `audit/model.py`'s on every backend."""
        return await self._database.transact(
            lambda connection: [
                (bytes(key), bytes(value))
                for key, value in connection.execute("SELECT key, value FROM audit ORDER BY key").fetchall()
            ]
        )

    async def import_records(self, records: Exported) -> None:
        await self.append_audit(records)


def _delete(connection: psycopg.Connection[Any], keys: list[bytes]) -> None:
    if keys:
        connection.execute("DELETE FROM audit WHERE key = ANY(%s)", (keys,))
