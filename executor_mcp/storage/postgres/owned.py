"""Records that belong to an org, or to one account in it, in PostgreSQL: tool policies and toolkits.

One row per record, keyed (org, account, id) with the org's own records under the empty account, so what one
caller sees, its org's records and its own, is two index ranges: no read or edit touches another org's or
another member's records. The key columns are `COLLATE "C"`, so records come back in the byte order of their
ids, as LMDB's keys give them.

An edit takes a transaction-scoped advisory lock on its org before it reads: every edit of the org's records of
that table, from any instance, waits for the one before it to commit and then reads what it wrote. Row locks
(`FOR UPDATE`) would not do: a record created by one edit is a row the other's read never saw, and an edit that
counts the owner's records (a per-owner cap) or checks a name is free must see it. The lock is per org, not per
(org, account), because every account's edit reads (and an admin's writes) the org's records. Reads take no
lock: at READ COMMITTED a reader sees the last committed edit whole.
"""

import hashlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import psycopg

from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.storage.exported import canonical, key_parts, record_key
from executor_mcp.storage.interfaces import Exported, Owned
from executor_mcp.storage.postgres.database import Database, storable
from executor_mcp.storage.records import decoded_or_skipped, encode

T = TypeVar("T")
R = TypeVar("R", bound=Owned)

# The longest (org, account, id) a record may have, in UTF-8 bytes: LMDB's ceiling on its key, so a record
# either backend takes moves between them (`export`/`import`) and an id never nears PostgreSQL's limit on an
# index entry.
MAX_KEY_BYTES = 511


def owned_table(name: str) -> str:
    return f"""CREATE TABLE {name} (
        org_id text COLLATE "C" NOT NULL,
        account_id text COLLATE "C" NOT NULL,  -- '' for the org's own records
        id text COLLATE "C" NOT NULL,
        record jsonb NOT NULL,
        PRIMARY KEY (org_id, account_id, id)
    )"""


class PgOwnedRecords(Generic[R]):
    def __init__(self, database: Database, table: str, cls: type[R], what: str) -> None:
        """`table` is one of this module's own names (never input); `what` names one record in messages."""
        self._database = database
        self._table = table
        self._cls = cls
        self._what = what

    async def visible(self, org_id: str, account_id: str | None) -> list[R]:
        return await self._database.transact(lambda connection: self._visible(connection, org_id, account_id))

    async def edit(
        self, org_id: str, account_id: str | None, edit: Callable[[list[R]], tuple[list[R], list[R], T]]
    ) -> T:
        """`edit` runs once, in the worker thread, between the lock and the writes."""

        def _edit(connection: psycopg.Connection[Any]) -> T:
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key(org_id),))
            puts, deletes, result = edit(self._visible(connection, org_id, account_id))
            for record in puts:
                try:
                    connection.execute(
                        f"INSERT INTO {self._table} (org_id, account_id, id, record) VALUES (%s, %s, %s, %s::jsonb)"
                        " ON CONFLICT (org_id, account_id, id) DO UPDATE SET record = EXCLUDED.record",
                        (*self._writable_key(record), encode(record).decode()),
                    )
                except psycopg.errors.UntranslatableCharacter:  # jsonb holds no NUL (`\u0000`) in a string
                    raise InvalidInput(f"The {self._what} holds a character that cannot be stored.") from None
            for record in deletes:
                if storable(record.org_id, record.account_id or "", record.id):
                    connection.execute(
                        f"DELETE FROM {self._table} WHERE org_id = %s AND account_id = %s AND id = %s",
                        (record.org_id, record.account_id or "", record.id),
                    )
            return result

        return await self._database.transact(_edit)

    async def export_records(self) -> Exported:
        """Every org's and every account's records, each under (org, account, id)."""

        def _export(connection: psycopg.Connection[Any]) -> Exported:
            found = []
            for org, account, record_id, raw in connection.execute(
                f"SELECT org_id, account_id, id, record::text FROM {self._table}"
            ):
                kept = canonical(raw.encode(), self._cls, (org, account, record_id))
                if kept is not None:
                    found.append((record_key(org, account, record_id), kept[1]))
            return sorted(found)

        return await self._database.transact(_export)

    async def import_records(self, records: Exported) -> None:
        rows = []
        for key, value in records:
            kept = canonical(value, self._cls, key)
            if kept is None or key_parts(key, 3) != list(self._writable_key(kept[0])):
                raise ValueError(f"not an exported {self._what}: {key[:80]!r}")
            rows.append((*self._writable_key(kept[0]), kept[1].decode()))

        def _import(connection: psycopg.Connection[Any]) -> None:
            with connection.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO {self._table} (org_id, account_id, id, record) VALUES (%s, %s, %s, %s::jsonb)",
                    rows,
                )

        await self._database.transact(_import)

    def _visible(self, connection: psycopg.Connection[Any], org_id: str, account_id: str | None) -> list[R]:
        """The org's records, then (with an account) the account's own, each in id order: as LMDB lists them. An
        identifier PostgreSQL cannot hold (a NUL) names no stored record."""
        if not storable(org_id):
            return []
        accounts = [""] + ([account_id] if account_id and storable(account_id) else [])
        rows = connection.execute(
            f"SELECT org_id, account_id, id, record::text FROM {self._table}"
            " WHERE org_id = %s AND account_id = ANY(%s) ORDER BY account_id <> '', id",
            (org_id, accounts),
        ).fetchall()
        records = []
        for org, account, record_id, raw in rows:
            record = decoded_or_skipped(raw.encode(), self._cls, (org, account, record_id))
            if record is not None:
                records.append(record)
        return records

    def _lock_key(self, org_id: str) -> int:
        """The org's advisory lock for this table, a signed 64-bit digest (computed here, so any id has one).
        Two orgs that share a key only wait for each other's edits."""
        digest = hashlib.sha256(f"executor-mcp {self._table}\x00".encode() + org_id.encode("utf-8", "surrogatepass"))
        return int.from_bytes(digest.digest()[:8], "big", signed=True)

    def _writable_key(self, record: Owned) -> tuple[str, str, str]:
        key = (record.org_id, record.account_id or "", record.id)
        if not storable(*key) or sum(len(part.encode()) + 1 for part in key) > MAX_KEY_BYTES:
            raise InvalidInput(f"The {self._what}'s identifiers cannot be stored.")
        return key
