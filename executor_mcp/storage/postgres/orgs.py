"""Organizations (`interfaces.OrgStore`) and API keys (`interfaces.ApiKeyStore`) in PostgreSQL.

`orgs` holds each org's record by id; orgs are never deleted, so a write that must create or change one first
makes sure its row exists (`INSERT ... ON CONFLICT DO NOTHING`) and then changes it under the row's lock: two
instances noting a new org at once keep one first sighting, and a revocation racing a first sighting revokes the
record that sighting made. A revocation is the org's record alone: every instance reads it for the orgs of the
sessions it holds live (`revoked_among`, one `= ANY` look-up per poll), so each ends its own. `api_keys` is
keyed by the secret's digest (a bearer's look-up is a point read) with the public id indexed for revocation.

Records are decoded strictly, as LMDB's are: an org or key that no longer decodes is an error, not an absence,
since an org read as absent would be noted anew as live (a revoked org reinstated by a damaged record). Revoking
or reinstating an org replaces an unreadable record, as in LMDB. Only `revoked_among` skips one (logged): it
answers for many orgs at once, each poll, and one damaged record must not keep the others' sessions alive.
"""

from collections.abc import Callable, Collection
from typing import Any

import attrs
import psycopg

from executor_mcp.storage.exported import text_keyed, text_keyed_rows
from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.postgres.database import Database, storable
from executor_mcp.storage.records import ApiKeyRecord, OrgRecord, UsageLimits, decode, decoded_or_skipped, encode

# Identifiers sort as LMDB's keys do (by bytes: UTF-8 in the "C" collation), so listings keep LMDB's order.
TABLES: tuple[str, ...] = (
    'CREATE TABLE orgs (org_id text COLLATE "C" PRIMARY KEY, record jsonb NOT NULL)',
    'CREATE TABLE api_keys (digest text COLLATE "C" PRIMARY KEY, key_id text COLLATE "C" NOT NULL,'
    " record jsonb NOT NULL)",
    "CREATE INDEX api_keys_by_key_id ON api_keys (key_id, digest)",
)


def _note(connection: psycopg.Connection, org_id: str, at: float) -> OrgRecord:
    """The insert decides who notes the org first; a loser reads the winner's record, committed by then (the
    insert waited for it)."""
    fresh = OrgRecord(org_id=org_id, first_seen_at=at)
    inserted = connection.execute(
        "INSERT INTO orgs (org_id, record) VALUES (%s, %s::jsonb) ON CONFLICT (org_id) DO NOTHING RETURNING org_id",
        (org_id, encode(fresh).decode()),
    ).fetchone()
    if inserted is not None:
        return fresh
    row = connection.execute("SELECT record::text FROM orgs WHERE org_id = %s", (org_id,)).fetchone()
    assert row is not None  # orgs are never deleted
    return decode(row[0].encode(), OrgRecord)


def _change(
    connection: psycopg.Connection, org_id: str, at: float, edit: Callable[[OrgRecord], dict[str, Any]]
) -> OrgRecord:
    connection.execute(
        "INSERT INTO orgs (org_id, record) VALUES (%s, %s::jsonb) ON CONFLICT (org_id) DO NOTHING",
        (org_id, encode(OrgRecord(org_id=org_id, first_seen_at=at)).decode()),
    )
    row = connection.execute("SELECT record::text FROM orgs WHERE org_id = %s FOR UPDATE", (org_id,)).fetchone()
    known = None if row is None else decoded_or_skipped(row[0].encode(), OrgRecord, org_id)
    base = known or OrgRecord(org_id=org_id, first_seen_at=at)
    record = attrs.evolve(base, changed_at=at, **edit(base))
    connection.execute("UPDATE orgs SET record = %s::jsonb WHERE org_id = %s", (encode(record).decode(), org_id))
    return record


def _revoked_among(connection: psycopg.Connection, org_ids: list[str]) -> set[str]:
    """One indexed look-up of every id; an unreadable record is logged and not revoked."""
    rows = connection.execute("SELECT org_id, record::text FROM orgs WHERE org_id = ANY(%s)", (org_ids,)).fetchall()
    return {
        org_id
        for org_id, raw in rows
        if (record := decoded_or_skipped(raw.encode(), OrgRecord, org_id)) is not None and record.revoked
    }


class PgOrgs:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def get_org(self, org_id: str) -> OrgRecord | None:
        def _get(connection: psycopg.Connection) -> OrgRecord | None:
            row = connection.execute("SELECT record::text FROM orgs WHERE org_id = %s", (org_id,)).fetchone()
            return None if row is None else decode(row[0].encode(), OrgRecord)

        return await self._database.transact(_get)

    async def note_org(self, org_id: str, at: float) -> OrgRecord:
        return await self._database.transact(lambda connection: _note(connection, org_id, at))

    async def set_org_revoked(self, org_id: str, revoked: bool, at: float) -> OrgRecord:
        return await self._database.transact(
            lambda connection: _change(connection, org_id, at, lambda _: {"revoked": revoked})
        )

    async def set_org_limits(
        self, org_id: str, change: Callable[[UsageLimits | None], UsageLimits | None], at: float
    ) -> OrgRecord:
        return await self._database.transact(
            lambda connection: _change(connection, org_id, at, lambda known: {"limits": change(known.limits)})
        )

    async def orgs(self) -> list[OrgRecord]:
        def _all(connection: psycopg.Connection) -> list[OrgRecord]:
            rows = connection.execute("SELECT record::text FROM orgs ORDER BY org_id").fetchall()
            return [decode(raw.encode(), OrgRecord) for (raw,) in rows]

        return await self._database.transact(_all)

    async def revoked_among(self, org_ids: Collection[str]) -> set[str]:
        # Text with a NUL cannot be a PostgreSQL value, so no stored org has such an id (its session may).
        storable_ids = sorted({org_id for org_id in org_ids if storable(org_id)})
        if not storable_ids:
            return set()
        return await self._database.transact(lambda connection: _revoked_among(connection, storable_ids))

    async def export_records(self) -> Exported:
        return await self._database.transact(
            lambda connection: text_keyed(
                connection.execute("SELECT org_id, record::text FROM orgs").fetchall(), OrgRecord
            )
        )

    async def import_records(self, records: Exported) -> None:
        rows = [(org_id, raw) for org_id, _, raw in text_keyed_rows(records, OrgRecord)]

        def _import(connection: psycopg.Connection) -> None:
            with connection.cursor() as cursor:
                cursor.executemany("INSERT INTO orgs (org_id, record) VALUES (%s, %s::jsonb)", rows)

        await self._database.transact(_import)


class PgApiKeys:
    """Keyed by the secret's digest; the public id is a column of its own (indexed) for `revoke_api_key`, kept
    equal to the record's since both are written from it together."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def put_api_key(self, digest: str, record: ApiKeyRecord) -> None:
        await self._database.transact(
            lambda connection: connection.execute(
                "INSERT INTO api_keys (digest, key_id, record) VALUES (%s, %s, %s::jsonb) ON CONFLICT (digest)"
                " DO UPDATE SET key_id = EXCLUDED.key_id, record = EXCLUDED.record",
                (digest, record.key_id, encode(record).decode()),
            )
        )

    async def get_api_key(self, digest: str) -> ApiKeyRecord | None:
        def _get(connection: psycopg.Connection) -> ApiKeyRecord | None:
            row = connection.execute("SELECT record::text FROM api_keys WHERE digest = %s", (digest,)).fetchone()
            return None if row is None else decode(row[0].encode(), ApiKeyRecord)

        return await self._database.transact(_get)

    async def revoke_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The first key (in digest order, as LMDB scans) with that public id; ids are random, so one at most."""

        def _revoke(connection: psycopg.Connection) -> ApiKeyRecord | None:
            row = connection.execute(
                "SELECT digest, record::text FROM api_keys WHERE key_id = %s ORDER BY digest LIMIT 1 FOR UPDATE",
                (key_id,),
            ).fetchone()
            if row is None:
                return None
            record = attrs.evolve(decode(row[1].encode(), ApiKeyRecord), revoked=True)
            connection.execute(
                "UPDATE api_keys SET record = %s::jsonb WHERE digest = %s", (encode(record).decode(), row[0])
            )
            return record

        return await self._database.transact(_revoke)

    async def api_keys(self) -> list[ApiKeyRecord]:
        def _all(connection: psycopg.Connection) -> list[ApiKeyRecord]:
            rows = connection.execute("SELECT record::text FROM api_keys ORDER BY digest").fetchall()
            return [decode(raw.encode(), ApiKeyRecord) for (raw,) in rows]

        return await self._database.transact(_all)

    async def export_records(self) -> Exported:
        return await self._database.transact(
            lambda connection: text_keyed(
                connection.execute("SELECT digest, record::text FROM api_keys").fetchall(), ApiKeyRecord
            )
        )

    async def import_records(self, records: Exported) -> None:
        rows = [(digest, record.key_id, raw) for digest, record, raw in text_keyed_rows(records, ApiKeyRecord)]

        def _import(connection: psycopg.Connection) -> None:
            with connection.cursor() as cursor:
                cursor.executemany("INSERT INTO api_keys (digest, key_id, record) VALUES (%s, %s, %s::jsonb)", rows)

        await self._database.transact(_import)
