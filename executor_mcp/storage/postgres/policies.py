"""Tool policies (`interfaces.PolicyStore`) in PostgreSQL.

One row per rule, keyed (org, account, id) with the org's own rules under the empty account, so what one caller
sees, its org's rules and its own, is two index ranges: no read or edit touches another org's or another
member's rules. The key columns are `COLLATE "C"`, so rules come back in the byte order of their ids, as
LMDB's keys give them.

An edit takes a transaction-scoped advisory lock on its org before it reads: every edit of the org, from any
instance, waits for the one before it to commit and then reads what it wrote. Row locks (`FOR UPDATE`) would
not do: a rule created by one edit is a row the other's read never saw, and an edit that counts the owner's
rules (the per-owner cap) or renumbers them must see it. The lock is per org, not per (org, account), because
every account's edit reads (and an admin's writes) the org's rules. Reads take no lock: at READ COMMITTED a
reader sees the last committed edit whole.
"""

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.storage.exported import canonical, key_parts, record_key
from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.postgres.database import Database, storable
from executor_mcp.storage.records import PolicyRecord, decoded_or_skipped, encode

T = TypeVar("T")

# The longest (org, account, id) a rule may have, in UTF-8 bytes: LMDB's ceiling on its key for a rule, so a
# rule either backend takes moves between them (`export`/`import`) and an id never nears PostgreSQL's limit
# on an index entry.
MAX_KEY_BYTES = 511

TABLES: tuple[str, ...] = (
    """CREATE TABLE policies (
        org_id text COLLATE "C" NOT NULL,
        account_id text COLLATE "C" NOT NULL,  -- '' for the org's own rules
        id text COLLATE "C" NOT NULL,
        record jsonb NOT NULL,
        PRIMARY KEY (org_id, account_id, id)
    )""",
)


class PgPolicies:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def policies(self, org_id: str, account_id: str | None) -> list[PolicyRecord]:
        return await self._database.transact(lambda connection: _visible(connection, org_id, account_id))

    async def edit_policies(
        self,
        org_id: str,
        account_id: str | None,
        edit: Callable[[list[PolicyRecord]], tuple[list[PolicyRecord], list[PolicyRecord], T]],
    ) -> T:
        """`edit` runs once, in the worker thread, between the lock and the writes."""

        def _edit(connection: psycopg.Connection[Any]) -> T:
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(org_id),))
            puts, deletes, result = edit(_visible(connection, org_id, account_id))
            for record in puts:
                try:
                    connection.execute(
                        "INSERT INTO policies (org_id, account_id, id, record) VALUES (%s, %s, %s, %s::jsonb)"
                        " ON CONFLICT (org_id, account_id, id) DO UPDATE SET record = EXCLUDED.record",
                        (*_writable_key(record), encode(record).decode()),
                    )
                except psycopg.errors.UntranslatableCharacter:  # jsonb holds no NUL (`\u0000`) in a string
                    raise InvalidInput("The rule holds a character that cannot be stored.") from None
            for record in deletes:
                if storable(record.org_id, record.account_id or "", record.id):
                    connection.execute(
                        "DELETE FROM policies WHERE org_id = %s AND account_id = %s AND id = %s",
                        (record.org_id, record.account_id or "", record.id),
                    )
            return result

        return await self._database.transact(_edit)

    async def export_records(self) -> Exported:
        """Every org's and every account's rules, each under (org, account, id)."""

        def _export(connection: psycopg.Connection[Any]) -> Exported:
            found = []
            for org, account, policy_id, raw in connection.execute(
                "SELECT org_id, account_id, id, record::text FROM policies"
            ):
                kept = canonical(raw.encode(), PolicyRecord, (org, account, policy_id))
                if kept is not None:
                    found.append((record_key(org, account, policy_id), kept[1]))
            return sorted(found)

        return await self._database.transact(_export)

    async def import_records(self, records: Exported) -> None:
        rows = []
        for key, value in records:
            kept = canonical(value, PolicyRecord, key)
            if kept is None or key_parts(key, 3) != list(_writable_key(kept[0])):
                raise ValueError(f"not an exported rule: {key[:80]!r}")
            rows.append((*_writable_key(kept[0]), kept[1].decode()))

        def _import(connection: psycopg.Connection[Any]) -> None:
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO policies (org_id, account_id, id, record) VALUES (%s, %s, %s, %s::jsonb)", rows
                )

        await self._database.transact(_import)


def _visible(connection: psycopg.Connection[Any], org_id: str, account_id: str | None) -> list[PolicyRecord]:
    """The org's rules, then (with an account) the account's own, each in id order: as LMDB lists them. An
    identifier PostgreSQL cannot hold (a NUL) names no stored rule."""
    if not storable(org_id):
        return []
    accounts = [""] + ([account_id] if account_id and storable(account_id) else [])
    rows = connection.execute(
        "SELECT org_id, account_id, id, record::text FROM policies WHERE org_id = %s AND account_id = ANY(%s)"
        " ORDER BY account_id <> '', id",
        (org_id, accounts),
    ).fetchall()
    records = []
    for org, account, policy_id, raw in rows:
        record = decoded_or_skipped(raw.encode(), PolicyRecord, (org, account, policy_id))
        if record is not None:
            records.append(record)
    return records


def _lock_key(org_id: str) -> int:
    """The org's advisory lock, a signed 64-bit digest of its id (computed here, so any id has one). Two orgs
    that share a key only wait for each other's edits."""
    digest = hashlib.sha256(b"executor-mcp policies\x00" + org_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _writable_key(record: PolicyRecord) -> tuple[str, str, str]:
    key = (record.org_id, record.account_id or "", record.id)
    if not storable(*key) or sum(len(part.encode()) + 1 for part in key) > MAX_KEY_BYTES:
        raise InvalidInput("The rule's identifiers cannot be stored.")
    return key
