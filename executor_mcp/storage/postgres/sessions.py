"""The session directory (`interfaces.SessionDirectory`) and the paused-execution directory over its entries
(`interfaces.PausedDirectory`) in PostgreSQL.

`sessions` holds each entry by session id with its owner as a column (`owner_key`, indexed), so one owner's
sessions are an index range and moving or deleting an entry always knows whose count to change, even when its
record no longer decodes. `owner_session_counts` answers the per-account cap with a point read; every change
of it is an `INSERT ... ON CONFLICT DO UPDATE` increment in the transaction that adds, moves or removes the
entry, so two instances opening or deleting sessions of one owner at once never lose a change (the second
waits on the first's row lock and adds to what it committed). Whether a put is new is decided by the insert
itself (`ON CONFLICT DO NOTHING`), never by an earlier read that a concurrent put could make stale.
Read-modify-writes of an entry (`update_session`, `mark_paused`, `request_termination`) lock its row first
(`SELECT ... FOR UPDATE`), so concurrent updates apply one after the other, as LMDB's single writer does.
Termination requests are rows of their own, taken with `DELETE ... RETURNING` of the ids that name the taker as
their home (a `LIKE` prefix of the key, its wildcards escaped): of two processes taking the same rows at
once, the second waits on the rows the first deletes and skips them once it commits, so each request is taken
once, and by the session's home.
"""

from collections.abc import Mapping
from typing import Any

import attrs
import psycopg

from executor_mcp.codec import dumps
from executor_mcp.storage.postgres.database import Database
from executor_mcp.storage.records import Owner, SessionRecord, decoded_or_skipped, encode

# Identifiers sort as LMDB's keys do (by bytes: UTF-8 in the "C" collation), so listings keep LMDB's order.
TABLES: tuple[str, ...] = (
    'CREATE TABLE sessions (session_id text COLLATE "C" PRIMARY KEY, owner_key text COLLATE "C" NOT NULL,'
    " record jsonb NOT NULL)",
    "CREATE INDEX sessions_by_owner ON sessions (owner_key, session_id)",
    'CREATE TABLE owner_session_counts (owner_key text COLLATE "C" PRIMARY KEY, sessions bigint NOT NULL)',
    'CREATE TABLE termination_requests (session_id text COLLATE "C" PRIMARY KEY,'
    " requested_at double precision NOT NULL)",
)


def owner_key(owner: Owner) -> str:
    """An owner as one column value: a JSON array, so no account can forge another owner's key
    (`a\\x00b` in org `c` is not `a` in org `b\\x00c`) and an account in no org is not one in org ""."""
    return dumps([owner.account_id, owner.org_id]).decode()


def _decoded(session_id: str, raw: str) -> SessionRecord | None:
    return decoded_or_skipped(raw.encode(), SessionRecord, session_id)


def _count(connection: psycopg.Connection, key: str, change: int) -> None:
    """Add `change` to the owner's count, never below 0, as one atomic upsert: concurrent changes queue on the
    row's lock and each adds to what the one before committed."""
    connection.execute(
        "INSERT INTO owner_session_counts (owner_key, sessions) VALUES (%s, GREATEST(%s, 0))"
        " ON CONFLICT (owner_key) DO UPDATE SET sessions = GREATEST(owner_session_counts.sessions + %s, 0)",
        (key, change, change),
    )


def _rewrite(connection: psycopg.Connection, held_by: str, record: SessionRecord) -> None:
    """Replace the locked entry of `record.session_id`, whose owner column was `held_by`; a change of owner
    moves the entry between the owners' counts."""
    key = owner_key(record.owner)
    connection.execute(
        "UPDATE sessions SET owner_key = %s, record = %s::jsonb WHERE session_id = %s",
        (key, encode(record).decode(), record.session_id),
    )
    if key != held_by:
        _count(connection, held_by, -1)
        _count(connection, key, +1)


def _locked(connection: psycopg.Connection, session_id: str) -> tuple[str, str] | None:
    """The entry's owner column and record, its row locked until the transaction ends; None when absent."""
    row = connection.execute(
        "SELECT owner_key, record::text FROM sessions WHERE session_id = %s FOR UPDATE", (session_id,)
    ).fetchone()
    return None if row is None else (row[0], row[1])


def _update(connection: psycopg.Connection, session_id: str, changes: Mapping[str, Any]) -> SessionRecord | None:
    """The changes are field names and values checked by attrs, not by the type checker (`**changes`); an
    unreadable entry is as good as none (logged) and is left as it is."""
    found = _locked(connection, session_id)
    record = None if found is None else _decoded(session_id, found[1])
    if found is None or record is None:
        return None
    updated = attrs.evolve(record, **changes)
    _rewrite(connection, found[0], updated)
    return updated


def _put(connection: psycopg.Connection, record: SessionRecord) -> None:
    """Insert, or replace what is there. A pass repeats only when the insert met an entry that was deleted
    before this transaction could lock it: then the id is free again and the next insert decides."""
    key = owner_key(record.owner)
    while True:
        inserted = connection.execute(
            "INSERT INTO sessions (session_id, owner_key, record) VALUES (%s, %s, %s::jsonb)"
            " ON CONFLICT (session_id) DO NOTHING RETURNING session_id",
            (record.session_id, key, encode(record).decode()),
        ).fetchone()
        if inserted is not None:
            _count(connection, key, +1)
            return
        found = _locked(connection, record.session_id)
        if found is not None:
            _rewrite(connection, found[0], record)
            return


def _delete(connection: psycopg.Connection, session_id: str) -> None:
    row = connection.execute("DELETE FROM sessions WHERE session_id = %s RETURNING owner_key", (session_id,)).fetchone()
    if row is not None:
        _count(connection, row[0], -1)


def _request_termination(connection: psycopg.Connection, session_id: str, at: float) -> bool:
    if _update(connection, session_id, {"condemned": True}) is None:
        return False
    connection.execute(
        "INSERT INTO termination_requests (session_id, requested_at) VALUES (%s, %s)"
        " ON CONFLICT (session_id) DO UPDATE SET requested_at = EXCLUDED.requested_at",
        (session_id, at),
    )
    return True


def _like_prefix(prefix: str) -> str:
    """A `LIKE` pattern matching the text that starts with `prefix`, its wildcards (`_` is one: the session ids'
    separator) and the escape character taken literally."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{escaped}%"


def _take_terminations(connection: psycopg.Connection, id_prefix: str) -> list[str]:
    """The pending requests of ids starting with `id_prefix`, deleted by the statement that reads them, in id
    order as LMDB's are."""
    rows = connection.execute(
        "DELETE FROM termination_requests WHERE session_id LIKE %s ESCAPE '\\' RETURNING session_id",
        (_like_prefix(id_prefix),),
    ).fetchall()
    return sorted(row[0] for row in rows)


def _all(connection: psycopg.Connection) -> list[SessionRecord]:
    rows = connection.execute("SELECT session_id, record::text FROM sessions ORDER BY session_id").fetchall()
    return [record for session_id, raw in rows if (record := _decoded(session_id, raw)) is not None]


class PgSessionDirectory:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def put_session(self, record: SessionRecord) -> None:
        await self._database.transact(lambda connection: _put(connection, record))

    async def get_session(self, session_id: str) -> SessionRecord | None:
        def _get(connection: psycopg.Connection) -> SessionRecord | None:
            row = connection.execute(
                "SELECT record::text FROM sessions WHERE session_id = %s", (session_id,)
            ).fetchone()
            return None if row is None else _decoded(session_id, row[0])

        return await self._database.transact(_get)

    async def update_session(self, session_id: str, **changes: object) -> SessionRecord | None:
        return await self._database.transact(lambda connection: _update(connection, session_id, changes))

    async def delete_session(self, session_id: str) -> None:
        await self._database.transact(lambda connection: _delete(connection, session_id))

    async def owner_session_count(self, owner: Owner) -> int:
        def _read(connection: psycopg.Connection) -> int:
            row = connection.execute(
                "SELECT sessions FROM owner_session_counts WHERE owner_key = %s", (owner_key(owner),)
            ).fetchone()
            return 0 if row is None else int(row[0])

        return await self._database.transact(_read)

    async def owner_sessions(self, owner: Owner) -> list[SessionRecord]:
        def _mine(connection: psycopg.Connection) -> list[SessionRecord]:
            rows = connection.execute(
                "SELECT session_id, record::text FROM sessions WHERE owner_key = %s ORDER BY session_id",
                (owner_key(owner),),
            ).fetchall()
            return [record for session_id, raw in rows if (record := _decoded(session_id, raw)) is not None]

        return await self._database.transact(_mine)

    async def request_termination(self, session_id: str, at: float) -> bool:
        return await self._database.transact(lambda connection: _request_termination(connection, session_id, at))

    async def take_termination_requests(self, id_prefix: str) -> list[str]:
        return await self._database.transact(lambda connection: _take_terminations(connection, id_prefix))

    async def sessions(self) -> list[SessionRecord]:
        return await self._database.transact(_all)

    async def session_count(self) -> int:
        """A count of the primary key's index: exact, and small next to what a metrics scrape costs. A counter
        row kept by every put and delete would be one lock that every session opened by any instance waits on."""

        def _count_all(connection: psycopg.Connection) -> int:
            row = connection.execute("SELECT count(*) FROM sessions").fetchone()
            return 0 if row is None else int(row[0])

        return await self._database.transact(_count_all)

    async def session_ids(self) -> set[str]:
        def _ids(connection: psycopg.Connection) -> set[str]:
            return {row[0] for row in connection.execute("SELECT session_id FROM sessions").fetchall()}

        return await self._database.transact(_ids)


class PgPausedDirectory:
    """Over the session directory's entries: a scan of them at start-up is what reviving costs, as in LMDB
    (decoding each record, so an unreadable one is skipped as everywhere else)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def mark_paused(self, session_id: str, until: float) -> SessionRecord | None:
        return await self._database.transact(
            lambda connection: _update(connection, session_id, {"paused_until": until})
        )

    async def paused_sessions(self) -> list[SessionRecord]:
        records = await self._database.transact(_all)
        return [record for record in records if record.paused_until and not record.condemned]
