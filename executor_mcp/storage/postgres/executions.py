"""Durable executions in PostgreSQL (`interfaces.SharedExecutions`): every session's journals and pauses in
tables every instance reaches, so a pause made on one instance is resumed from a session on another.

`executions` says which session holds each journal; a journal's records and its pauses carry its key, and
pauses carry their session too (`pauses()` is an index range, and a pause outlives its journal until it is
forgotten by name, as in a session's file). Every write of a journal locks its `executions` row first and
checks that the writing session still holds it; adopting locks the same row, so an adoption and the old
holder's next step are ordered: either the step commits first (and the adopter sees a call no longer waiting
for its answer, and does not move it) or the adoption does (and the step raises `ExecutionMoved`, so the old
holder stops before its tool runs). A tool runs once, whichever instance resumes it. A session's writes are
also fenced by its process's instance lease (`instances.py`): a process whose lease another has taken can no
longer take a step, even of a journal its session still holds (the successor revives the same sessions).
"""

from collections.abc import Callable

import psycopg

from executor_mcp.storage.interfaces import ExecutionMoved, Fence, V
from executor_mcp.storage.postgres.database import Database

HEAD = 0  # the number of a journal's first record, which only the write that creates it holds

TABLES: tuple[str, ...] = (
    'CREATE TABLE executions (execution_key text COLLATE "C" PRIMARY KEY, session_id text COLLATE "C" NOT NULL)',
    "CREATE INDEX executions_by_session ON executions (session_id)",
    'CREATE TABLE execution_records (execution_key text COLLATE "C" NOT NULL, seq bigint NOT NULL,'
    " record bytea NOT NULL, PRIMARY KEY (execution_key, seq))",
    'CREATE TABLE execution_pauses (pause_id text COLLATE "C" PRIMARY KEY, execution_key text COLLATE "C" NOT NULL,'
    ' session_id text COLLATE "C" NOT NULL, record bytea NOT NULL)',
    "CREATE INDEX execution_pauses_by_session ON execution_pauses (session_id, pause_id)",
    "CREATE INDEX execution_pauses_by_execution ON execution_pauses (execution_key)",
)


def _holder(connection: psycopg.Connection, key: str) -> str | None:
    """The session holding journal `key`, its row locked until the transaction ends; None when there is none."""
    row = connection.execute("SELECT session_id FROM executions WHERE execution_key = %s FOR UPDATE", (key,)).fetchone()
    return None if row is None else str(row[0])


def _records(connection: psycopg.Connection, key: str) -> list[bytes]:
    rows = connection.execute(
        "SELECT record FROM execution_records WHERE execution_key = %s ORDER BY seq", (key,)
    ).fetchall()
    return [bytes(row[0]) for row in rows]


def _check_fence(connection: psycopg.Connection, fence: Fence | None) -> None:
    """The lease must still name the writer: expired but not taken is still its (a database outage longer than
    the lease must not lose the steps that follow it). Locked `FOR SHARE` until the write commits, so a takeover
    waits for it, and the successor then reads this step."""
    if fence is None:
        return
    row = connection.execute(
        "SELECT holder FROM instance_leases WHERE instance_id = %s FOR SHARE", (fence.instance,)
    ).fetchone()
    if row is None or row[0] != fence.holder:
        raise ExecutionMoved(f"instance {fence.instance} is served by another process")


def _keep(
    connection: psycopg.Connection,
    session_id: str,
    fence: Fence | None,
    key: str,
    records: list[tuple[int, bytes]],
    pauses: dict[str, bytes],
) -> None:
    holder = _holder(connection, key)
    _check_fence(connection, fence)
    if holder is None and any(seq == HEAD for seq, _ in records):
        connection.execute(
            "INSERT INTO executions (execution_key, session_id) VALUES (%s, %s) ON CONFLICT (execution_key) DO NOTHING",
            (key, session_id),
        )
        holder = _holder(connection, key)
    if holder != session_id:
        raise ExecutionMoved(key)
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO execution_records (execution_key, seq, record) VALUES (%s, %s, %s)"
            " ON CONFLICT (execution_key, seq) DO UPDATE SET record = EXCLUDED.record",
            [(key, seq, raw) for seq, raw in records],
        )
        cursor.executemany(
            "INSERT INTO execution_pauses (pause_id, execution_key, session_id, record) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (pause_id) DO UPDATE SET record = EXCLUDED.record",
            [(pause_id, key, session_id, raw) for pause_id, raw in pauses.items()],
        )


def _journal(connection: psycopg.Connection, session_id: str, key: str) -> list[bytes]:
    row = connection.execute(
        "SELECT 1 FROM executions WHERE execution_key = %s AND session_id = %s", (key, session_id)
    ).fetchone()
    return [] if row is None else _records(connection, key)


def _forget(connection: psycopg.Connection, session_id: str, key: str, pause_ids: list[str]) -> None:
    held = connection.execute(
        "DELETE FROM executions WHERE execution_key = %s AND session_id = %s RETURNING 1", (key, session_id)
    ).fetchone()
    if held is not None:
        connection.execute("DELETE FROM execution_records WHERE execution_key = %s", (key,))
    connection.execute(
        "DELETE FROM execution_pauses WHERE session_id = %s AND pause_id = ANY(%s)", (session_id, pause_ids)
    )


def _forget_all(connection: psycopg.Connection, session_id: str) -> None:
    """The journals' rows first (locking them, as an adoption does), then the records of what was deleted: a
    journal adopted meanwhile is no longer this session's and keeps its records."""
    keys = [
        row[0]
        for row in connection.execute(
            "DELETE FROM executions WHERE session_id = %s RETURNING execution_key", (session_id,)
        ).fetchall()
    ]
    connection.execute("DELETE FROM execution_records WHERE execution_key = ANY(%s)", (keys,))
    connection.execute("DELETE FROM execution_pauses WHERE session_id = %s", (session_id,))


def _pause(connection: psycopg.Connection, pause_id: str) -> tuple[str, bytes] | None:
    row = connection.execute(
        "SELECT execution_key, record FROM execution_pauses WHERE pause_id = %s", (pause_id,)
    ).fetchone()
    return None if row is None else (str(row[0]), bytes(row[1]))


def _adopt(
    connection: psycopg.Connection, pause_id: str, into: str, judge: Callable[[bytes, list[bytes]], V]
) -> V | None:
    found = _pause(connection, pause_id)
    if found is None:
        return None
    key = found[0]
    held = _holder(connection, key) is not None
    found = _pause(connection, pause_id)  # read again under the journal's lock: it may have been forgotten
    if found is None:
        return None
    verdict = judge(found[1], _records(connection, key) if held else [])
    if verdict.move:
        connection.execute("UPDATE executions SET session_id = %s WHERE execution_key = %s", (into, key))
        connection.execute("UPDATE execution_pauses SET session_id = %s WHERE execution_key = %s", (into, key))
    return verdict


class PgSessionExecutions:
    """One session's share: what its runtime reads and writes, checked against the holder of each journal."""

    def __init__(self, database: Database, session_id: str, fence: Fence | None) -> None:
        self._database = database
        self._session_id = session_id
        self._fence = fence

    async def keep_execution(
        self, key: str, records: list[tuple[int, bytes]], pauses: dict[str, bytes] | None = None
    ) -> None:
        await self._database.transact(
            lambda connection: _keep(connection, self._session_id, self._fence, key, records, pauses or {})
        )

    async def journal(self, key: str) -> list[bytes]:
        return await self._database.transact(lambda connection: _journal(connection, self._session_id, key))

    async def pauses(self) -> list[bytes]:
        def _mine(connection: psycopg.Connection) -> list[bytes]:
            rows = connection.execute(
                "SELECT record FROM execution_pauses WHERE session_id = %s ORDER BY pause_id", (self._session_id,)
            ).fetchall()
            return [bytes(row[0]) for row in rows]

        return await self._database.transact(_mine)

    async def forget_execution(self, key: str, pause_ids: list[str]) -> None:
        await self._database.transact(lambda connection: _forget(connection, self._session_id, key, pause_ids))

    async def forget_executions(self) -> None:
        await self._database.transact(lambda connection: _forget_all(connection, self._session_id))


class PgExecutions:
    def __init__(self, database: Database) -> None:
        self._database = database

    def of(self, session_id: str, fence: Fence | None = None) -> PgSessionExecutions:
        return PgSessionExecutions(self._database, session_id, fence)

    async def adopt(self, pause_id: str, into: str, judge: Callable[[bytes, list[bytes]], V]) -> V | None:
        return await self._database.transact(lambda connection: _adopt(connection, pause_id, into, judge))
