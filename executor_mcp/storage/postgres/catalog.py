"""Integrations and their connections (`interfaces.CatalogStore`), with the sources and compiled catalogs they
hold, in PostgreSQL.

Tables: `catalog_integrations` keyed (org, slug); `catalog_connections` keyed (org, owner, account, integration,
name), the account empty for what the org owns; `catalog_sources`, one row per `source_hash` with its source,
its compiled catalog and how many integrations and connections hold it; `catalog_revisions`, one counter per org.
Records are their encoded bytes (`bytea`, not `jsonb`: a record holds text from outside, a spec's description
or a remote server's error, and `jsonb` cannot hold a NUL that JSON escapes as `\\u0000`). Each record's
`source_hash` is a column too, so a holder is let go of even when its record no longer decodes.

What the transactions guard, with instances writing at once (READ COMMITTED):
- A connection is written only while its integration exists: `put_connection` locks the integration row
  `FOR SHARE` and `remove_integration` locks it `FOR UPDATE` before deleting the connections, so a put either
  commits first (and the removal, waiting, then deletes what it wrote) or finds the row gone. The foreign key
  says the same in the schema.
- Reference counts change by `UPDATE ... SET holders = holders ± n` or an upsert, on the locked row: no count
  is lost, and the row is deleted in the transaction that takes it to zero. A transaction that lets go of one
  hash and holds another locks their rows first, in hash order, so two of them crossing never deadlock.
- A put of a connection another instance creates at the same moment finds its row (`ON CONFLICT DO NOTHING`,
  then read under `FOR UPDATE`) and keeps what discovery stored there, as a put over an existing row does.
- The revision is bumped by an upsert that increments the org's row, last in every write: concurrent changes
  each count, and the row lock is held only until the commit that follows.
- Reads are point or index-range reads; listings are sorted here, as LMDB sorts them (by code point, whatever
  the database's collation).

Identifiers obey LMDB's key limit (`lmdb/keys.py`), so one record fits both backends and an export moves any of
them; an identifier PostgreSQL's `text` cannot hold (a NUL, an unpaired surrogate) is refused the same way. Such
identifiers were never stored, so a read of them answers nothing without asking the database.
"""

from collections import Counter
from collections.abc import Iterable
from typing import LiteralString

import attrs
import psycopg

from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import ConnectionRecord, IntegrationRecord
from executor_mcp.storage.exported import (
    COMPILED,
    CONNECTION,
    INTEGRATION,
    REVISION,
    SOURCE,
    canonical,
    catalog_key_parts,
    record_key,
)
from executor_mcp.storage.interfaces import ORG_OWNER, USER_OWNER, ConnectionKey, Exported
from executor_mcp.storage.lmdb import keys
from executor_mcp.storage.postgres.database import Database, storable
from executor_mcp.storage.records import decoded_or_skipped, encode

TABLES: tuple[str, ...] = (
    "CREATE TABLE catalog_integrations ("
    " org_id text NOT NULL, slug text NOT NULL, source_hash text NOT NULL, record bytea NOT NULL,"
    " PRIMARY KEY (org_id, slug))",
    "CREATE TABLE catalog_connections ("
    " org_id text NOT NULL, owner text NOT NULL, account_id text NOT NULL, integration text NOT NULL,"
    " name text NOT NULL, source_hash text, record bytea NOT NULL,"
    " PRIMARY KEY (org_id, owner, account_id, integration, name),"
    " FOREIGN KEY (org_id, integration) REFERENCES catalog_integrations (org_id, slug))",
    # What `remove_integration` deletes and the foreign key checks: the connections of one integration.
    "CREATE INDEX catalog_connections_by_integration ON catalog_connections (org_id, integration)",
    "CREATE TABLE catalog_sources ("
    " source_hash text PRIMARY KEY, source bytea NOT NULL, compiled bytea NOT NULL,"
    " holders bigint NOT NULL)",
    "CREATE TABLE catalog_revisions (org_id text PRIMARY KEY, revision bigint NOT NULL)",
)


class PgCatalog:
    def __init__(self, database: Database) -> None:
        self._database = database

    # -- revisions ----------------------------------------------------------------------------------

    async def catalog_revision(self, org_id: str) -> int:
        if not readable(org_id):
            return 0

        def _read(connection: psycopg.Connection) -> int:
            row = connection.execute("SELECT revision FROM catalog_revisions WHERE org_id = %s", (org_id,)).fetchone()
            return 0 if row is None else int(row[0])

        return await self._database.transact(_read)

    # -- integrations -------------------------------------------------------------------------------

    async def integrations(self, org_id: str) -> list[IntegrationRecord]:
        if not readable(org_id):
            return []

        def _list(connection: psycopg.Connection) -> list[IntegrationRecord]:
            rows = connection.execute(
                "SELECT slug, record FROM catalog_integrations WHERE org_id = %s", (org_id,)
            ).fetchall()
            records = [record for slug, raw in rows if (record := _integration_record(raw, org_id, slug)) is not None]
            return sorted(records, key=lambda record: record.slug)

        return await self._database.transact(_list)

    async def get_integration(self, org_id: str, slug: str) -> IntegrationRecord | None:
        if not readable(org_id, slug):
            return None

        def _get(connection: psycopg.Connection) -> IntegrationRecord | None:
            row = connection.execute(
                "SELECT record FROM catalog_integrations WHERE org_id = %s AND slug = %s", (org_id, slug)
            ).fetchone()
            return None if row is None else _integration_record(row[0], org_id, slug)

        return await self._database.transact(_get)

    async def add_integration(self, record: IntegrationRecord, source: bytes, compiled: bytes) -> bool:
        writable(record.org_id, record.slug)
        writable(record.source_hash)
        raw = encode(record)

        def _add(connection: psycopg.Connection) -> bool:
            added = connection.execute(
                "INSERT INTO catalog_integrations (org_id, slug, source_hash, record) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (org_id, slug) DO NOTHING RETURNING 1",
                (record.org_id, record.slug, record.source_hash, raw),
            ).fetchone()
            if added is None:
                return False
            _hold(connection, record.source_hash, source, compiled)
            _bump(connection, record.org_id)
            return True

        return await self._database.transact(_add)

    async def replace_integration(
        self, record: IntegrationRecord, source: bytes | None = None, compiled: bytes | None = None
    ) -> bool:
        if not readable(record.org_id, record.slug):
            return False
        raw = encode(record)

        def _replace(connection: psycopg.Connection) -> bool:
            row = connection.execute(
                "SELECT source_hash FROM catalog_integrations WHERE org_id = %s AND slug = %s FOR UPDATE",
                (record.org_id, record.slug),
            ).fetchone()
            if row is None:
                return False
            previous: str = row[0]
            if previous != record.source_hash:
                _lock_sources(connection, (previous, record.source_hash))
                _hold(connection, record.source_hash, source, compiled)
                _release(connection, Counter([previous]))
            elif compiled is not None:
                connection.execute(
                    "UPDATE catalog_sources SET compiled = %s WHERE source_hash = %s", (compiled, record.source_hash)
                )
            connection.execute(
                "UPDATE catalog_integrations SET source_hash = %s, record = %s WHERE org_id = %s AND slug = %s",
                (record.source_hash, raw, record.org_id, record.slug),
            )
            _bump(connection, record.org_id)
            return True

        return await self._database.transact(_replace)

    async def remove_integration(self, org_id: str, slug: str) -> list[ConnectionRecord] | None:
        """An unreadable connection is removed too (it would otherwise come back to life if the slug were added
        again) but not returned; what it held is let go of all the same."""
        if not readable(org_id, slug):
            return None

        def _remove(connection: psycopg.Connection) -> list[ConnectionRecord] | None:
            # The row lock a concurrent `put_connection` waits on: none can be written after the delete below.
            row = connection.execute(
                "SELECT source_hash FROM catalog_integrations WHERE org_id = %s AND slug = %s FOR UPDATE",
                (org_id, slug),
            ).fetchone()
            if row is None:
                return None
            doomed = connection.execute(
                "DELETE FROM catalog_connections WHERE org_id = %s AND integration = %s"
                " RETURNING owner, account_id, name, source_hash, record",
                (org_id, slug),
            ).fetchall()
            connection.execute("DELETE FROM catalog_integrations WHERE org_id = %s AND slug = %s", (org_id, slug))
            _release(connection, Counter([row[0], *(held for *_, held, _ in doomed if held is not None)]))
            _bump(connection, org_id)
            removed = []
            for owner, account_id, name, _, raw in sorted(doomed, key=lambda row: row[:3]):
                record = _connection_record(raw, (org_id, owner, account_id, slug, name))
                if record is not None:
                    removed.append(record)
            return removed

        return await self._database.transact(_remove)

    # -- sources and compiled catalogs ----------------------------------------------------------------

    async def get_source(self, source_hash: str) -> bytes | None:
        return await self._stored(source_hash, "SELECT source FROM catalog_sources WHERE source_hash = %s")

    async def get_compiled(self, source_hash: str) -> bytes | None:
        return await self._stored(source_hash, "SELECT compiled FROM catalog_sources WHERE source_hash = %s")

    async def _stored(self, source_hash: str, query: LiteralString) -> bytes | None:
        if not readable(source_hash):
            return None

        def _get(connection: psycopg.Connection) -> bytes | None:
            row = connection.execute(query, (source_hash,)).fetchone()
            return None if row is None else bytes(row[0])

        return await self._database.transact(_get)

    async def put_compiled(self, source_hash: str, raw: bytes) -> bool:
        if not readable(source_hash):
            return False

        def _put(connection: psycopg.Connection) -> bool:
            cursor = connection.execute(
                "UPDATE catalog_sources SET compiled = %s WHERE source_hash = %s", (raw, source_hash)
            )
            return cursor.rowcount > 0

        return await self._database.transact(_put)

    # -- connections --------------------------------------------------------------------------------

    async def connections(
        self, org_id: str, account_id: str, *, integration: str | None = None, owner: str | None = None
    ) -> list[ConnectionRecord]:
        owners = [(ORG_OWNER, "")] if owner in (None, ORG_OWNER) else []
        if owner in (None, USER_OWNER) and account_id:
            owners.append((USER_OWNER, account_id))
        narrowed = [integration] if integration is not None else []
        owners = [(kind, account) for kind, account in owners if readable(org_id, kind, account, *narrowed)]
        if not owners:
            return []

        def _list(connection: psycopg.Connection) -> list[ConnectionRecord]:
            records = []
            for owner_kind, account in owners:
                rows = connection.execute(
                    "SELECT integration, name, record FROM catalog_connections"
                    " WHERE org_id = %s AND owner = %s AND account_id = %s"
                    + (" AND integration = %s" if narrowed else ""),
                    (org_id, owner_kind, account, *narrowed),
                ).fetchall()
                for slug, name, raw in rows:
                    record = _connection_record(raw, (org_id, owner_kind, account, slug, name))
                    if record is not None:
                        records.append(record)
            return sorted(records, key=lambda record: (record.integration, record.owner, record.name))

        return await self._database.transact(_list)

    async def get_connection(
        self, org_id: str, owner: str, account_id: str, integration: str, name: str
    ) -> ConnectionRecord | None:
        key = _connection_key(org_id, owner, account_id, integration, name)
        if not readable(*key):
            return None

        def _get(connection: psycopg.Connection) -> ConnectionRecord | None:
            row = connection.execute(f"SELECT record FROM catalog_connections WHERE {_BY_KEY}", key).fetchone()
            return None if row is None else _connection_record(row[0], key)

        return await self._database.transact(_get)

    async def put_connection(self, record: ConnectionRecord) -> bool:
        _check_connection(record)
        key = _connection_key(*_identity(record))
        writable(*key)

        def _put(connection: psycopg.Connection) -> bool:
            # `FOR SHARE`: puts of several connections to one integration go on at once; a removal waits for
            # them (and they for it).
            exists = connection.execute(
                "SELECT 1 FROM catalog_integrations WHERE org_id = %s AND slug = %s FOR SHARE",
                (record.org_id, record.integration),
            ).fetchone()
            if exists is None:
                return False
            while True:
                row = connection.execute(
                    f"SELECT source_hash, record FROM catalog_connections WHERE {_BY_KEY} FOR UPDATE", key
                ).fetchone()
                if row is not None:
                    held, raw = row
                    kept = _kept(record, _connection_record(raw, key))
                    if held is not None and kept.source_hash is None:
                        _release(connection, Counter([held]))  # an unreadable record's: nothing says it holds it
                    connection.execute(
                        f"UPDATE catalog_connections SET source_hash = %s, record = %s WHERE {_BY_KEY}",
                        (kept.source_hash, encode(kept), *key),
                    )
                    break
                inserted = connection.execute(
                    "INSERT INTO catalog_connections (org_id, owner, account_id, integration, name, source_hash,"
                    " record) VALUES (%s, %s, %s, %s, %s, NULL, %s) ON CONFLICT DO NOTHING RETURNING 1",
                    (*key, encode(_kept(record, None))),
                ).fetchone()
                if inserted is not None:
                    break
                # Another instance created it since the SELECT: read what it wrote, under the lock, and
                # keep its discovered fields.
            _bump(connection, record.org_id)
            return True

        return await self._database.transact(_put)

    async def set_discovered(
        self,
        connection: ConnectionRecord,
        *,
        synced_at: float,
        source_hash: str | None = None,
        source: bytes | None = None,
        compiled: bytes | None = None,
        error: str | None = None,
    ) -> ConnectionRecord | None:
        key = _connection_key(*_identity(connection))
        if not readable(*key):
            return None

        def _set(db: psycopg.Connection) -> ConnectionRecord | None:
            row = db.execute(f"SELECT record FROM catalog_connections WHERE {_BY_KEY} FOR UPDATE", key).fetchone()
            current = None if row is None else _connection_record(row[0], key)
            if current is None:
                return None
            held = current.source_hash
            if source_hash is not None and source_hash != current.source_hash:
                _lock_sources(db, [source_hash] if held is None else [held, source_hash])
                _hold(db, source_hash, source, compiled)
                if held is not None:
                    _release(db, Counter([held]))
                held = source_hash
            updated = attrs.evolve(current, tools_synced_at=synced_at, sync_error=error, source_hash=held)
            db.execute(
                f"UPDATE catalog_connections SET source_hash = %s, record = %s WHERE {_BY_KEY}",
                (held, encode(updated), *key),
            )
            _bump(db, connection.org_id)
            return updated

        return await self._database.transact(_set)

    async def remove_connection(
        self, org_id: str, owner: str, account_id: str, integration: str, name: str
    ) -> ConnectionRecord | None:
        """An unreadable connection is removed and logged, and None is returned: nothing about it can be told.
        What it held is let go of all the same (its `source_hash` column)."""
        key = _connection_key(org_id, owner, account_id, integration, name)
        if not readable(*key):
            return None

        def _remove(connection: psycopg.Connection) -> ConnectionRecord | None:
            row = connection.execute(
                f"DELETE FROM catalog_connections WHERE {_BY_KEY} RETURNING source_hash, record", key
            ).fetchone()
            if row is None:
                return None
            held, raw = row
            if held is not None:
                _release(connection, Counter([held]))
            _bump(connection, org_id)
            return _connection_record(raw, key)

        return await self._database.transact(_remove)

    # -- moving between backends ------------------------------------------------------------------------

    async def export_records(self) -> Exported:
        """Readable integrations and connections, the sources and compiled catalogs they hold, and each org's
        revision. Reference counts are not exported: the importer counts the holders it writes. (Its statements
        are one transaction at READ COMMITTED, each its own snapshot: an export is consistent on a database
        nothing writes meanwhile, which is how a move or its check takes one.)"""

        def _export(connection: psycopg.Connection) -> Exported:
            found: Exported = []
            held: set[str] = set()
            for org_id, slug, raw in connection.execute("SELECT org_id, slug, record FROM catalog_integrations"):
                integration = _integration_record(raw, org_id, slug)
                if integration is not None:
                    found.append((record_key(INTEGRATION, org_id, slug), encode(integration)))
                    held.add(integration.source_hash)
            for *key, raw in connection.execute(
                "SELECT org_id, owner, account_id, integration, name, record FROM catalog_connections"
            ):
                connection_key = _connection_key(*key)
                record = _connection_record(raw, connection_key)
                if record is not None:
                    found.append((record_key(CONNECTION, *connection_key), encode(record)))
                    if record.source_hash is not None:
                        held.add(record.source_hash)
            for source_hash, source, compiled in connection.execute(
                "SELECT source_hash, source, compiled FROM catalog_sources WHERE source_hash = ANY(%s)",
                (sorted(held),),
            ):
                found.append((record_key(SOURCE, source_hash), bytes(source)))
                found.append((record_key(COMPILED, source_hash), bytes(compiled)))
            for org_id, revision in connection.execute("SELECT org_id, revision FROM catalog_revisions"):
                found.append((record_key(REVISION, org_id), str(revision).encode()))
            return sorted(found)

        return await self._database.transact(_export)

    async def import_records(self, records: Exported) -> None:
        """Integrations before the connections their foreign key names, then each held source with its count
        of holders; a source or compiled catalog without its pair is refused (a row holds both)."""
        integrations, connections, revisions = [], [], []
        stored: dict[str, dict[str, bytes]] = {}
        holders: Counter[str] = Counter()
        for key, value in records:
            kind, *parts = catalog_key_parts(key)
            if kind == INTEGRATION and len(parts) == 2:
                integration = canonical(value, IntegrationRecord, parts)
                if integration is None or [integration[0].org_id, integration[0].slug] != parts:
                    raise ValueError(f"not an exported integration: {parts!r}")
                writable(*parts)
                integrations.append((*parts, integration[0].source_hash, value))
                holders[integration[0].source_hash] += 1
            elif kind == CONNECTION and len(parts) == 5:
                connection = canonical(value, ConnectionRecord, parts)
                if connection is None or list(_identity(connection[0])) != parts:
                    raise ValueError(f"not an exported connection: {parts!r}")
                writable(*parts)
                connections.append((*parts, connection[0].source_hash, value))
                if connection[0].source_hash is not None:
                    holders[connection[0].source_hash] += 1
            elif kind in (SOURCE, COMPILED) and len(parts) == 1:
                writable(parts[0])
                stored.setdefault(parts[0], {})[kind] = value
            elif kind == REVISION and len(parts) == 1:
                writable(parts[0])
                revisions.append((parts[0], int(value)))
            else:
                raise ValueError(f"not an exported catalog record: {key[:80]!r}")
        sources = []
        for source_hash, pair in sorted(stored.items()):
            if set(pair) != {SOURCE, COMPILED}:
                raise ValueError(f"a source without its compiled catalog, or the reverse: {source_hash!r}")
            sources.append((source_hash, pair[SOURCE], pair[COMPILED], holders[source_hash]))

        def _import(connection: psycopg.Connection) -> None:
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO catalog_integrations (org_id, slug, source_hash, record) VALUES (%s, %s, %s, %s)",
                    integrations,
                )
                cursor.executemany(
                    "INSERT INTO catalog_connections (org_id, owner, account_id, integration, name, source_hash,"
                    " record) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    connections,
                )
                cursor.executemany(
                    "INSERT INTO catalog_sources (source_hash, source, compiled, holders) VALUES (%s, %s, %s, %s)",
                    sources,
                )
                cursor.executemany("INSERT INTO catalog_revisions (org_id, revision) VALUES (%s, %s)", revisions)

        await self._database.transact(_import)


# The WHERE clause of one connection, its parameters a `ConnectionKey`.
_BY_KEY = "org_id = %s AND owner = %s AND account_id = %s AND integration = %s AND name = %s"


def _bump(connection: psycopg.Connection, org_id: str) -> None:
    connection.execute(
        "INSERT INTO catalog_revisions (org_id, revision) VALUES (%s, 1)"
        " ON CONFLICT (org_id) DO UPDATE SET revision = catalog_revisions.revision + 1",
        (org_id,),
    )


def _lock_sources(connection: psycopg.Connection, hashes: Iterable[str]) -> None:
    """Lock the stored rows of `hashes` in one order, before a transaction both holds and lets go of sources."""
    connection.execute(
        'SELECT 1 FROM catalog_sources WHERE source_hash = ANY(%s) ORDER BY source_hash COLLATE "C" FOR UPDATE',
        (sorted(set(hashes)),),
    )


def _hold(connection: psycopg.Connection, source_hash: str, source: bytes | None, compiled: bytes | None) -> None:
    """One more holder of `source_hash`; its source and compiled catalog are written unless already stored
    (one hash, one text; the stored compilation stays until `put_compiled` replaces it)."""
    writable(source_hash)
    if source is not None and compiled is not None:
        connection.execute(
            "INSERT INTO catalog_sources (source_hash, source, compiled, holders) VALUES (%s, %s, %s, 1)"
            " ON CONFLICT (source_hash) DO UPDATE SET holders = catalog_sources.holders + 1",
            (source_hash, source, compiled),
        )
        return
    held = connection.execute(
        "UPDATE catalog_sources SET holders = holders + 1 WHERE source_hash = %s", (source_hash,)
    ).rowcount
    if not held:
        raise ValueError("a source hash that is not stored needs its source and compiled catalog")


def _release(connection: psycopg.Connection, released: Counter[str]) -> None:
    """Fewer holders of each hash (by how many let go, in hash order); the last one out deletes its source and
    catalog, under the row lock its decrement took."""
    for source_hash, count in sorted(released.items()):
        row = connection.execute(
            "UPDATE catalog_sources SET holders = holders - %s WHERE source_hash = %s RETURNING holders",
            (count, source_hash),
        ).fetchone()
        if row is not None and row[0] <= 0:
            connection.execute("DELETE FROM catalog_sources WHERE source_hash = %s", (source_hash,))


def _integration_record(raw: bytes, org_id: str, slug: str) -> IntegrationRecord | None:
    record = decoded_or_skipped(bytes(raw), IntegrationRecord, (org_id, slug))
    return record if record is not None and (record.org_id, record.slug) == (org_id, slug) else None


def _connection_record(raw: bytes, key: ConnectionKey) -> ConnectionRecord | None:
    record = decoded_or_skipped(bytes(raw), ConnectionRecord, key)
    return record if record is not None and _connection_key(*_identity(record)) == key else None


def _kept(record: ConnectionRecord, previous: ConnectionRecord | None) -> ConnectionRecord:
    """`record` with the discovered-catalog fields already stored: a put never changes what discovery holds."""
    return attrs.evolve(
        record,
        source_hash=previous.source_hash if previous else None,
        tools_synced_at=previous.tools_synced_at if previous else None,
        sync_error=previous.sync_error if previous else None,
    )


def _connection_key(org_id: str, owner: str, account_id: str, integration: str, name: str) -> ConnectionKey:
    """The account part is empty for what the org owns, whoever asks."""
    return org_id, owner, "" if owner == ORG_OWNER else account_id, integration, name


def _identity(record: ConnectionRecord) -> ConnectionKey:
    return record.org_id, record.owner, record.account_id, record.integration, record.name


def _check_connection(record: ConnectionRecord) -> None:
    if record.owner == ORG_OWNER and record.account_id:
        raise InvalidInput("An org-owned connection belongs to no account.")
    if record.owner == USER_OWNER and not record.account_id:
        raise InvalidInput("A user-owned connection needs its account.")
    if record.owner not in (ORG_OWNER, USER_OWNER):
        raise InvalidInput('A connection owner is "org" or "user".')


def readable(*parts: str) -> bool:
    """Whether a record keyed by `parts` could have been stored (`writable` would let it through)."""
    return len(keys.key(*parts)) <= keys.MAX_KEY_BYTES and storable(*parts)


def writable(*parts: str) -> None:
    """`InvalidInput` for identifiers no backend stores: over LMDB's key limit (the same measure, so a record
    moves between backends), or holding what PostgreSQL's `text` cannot (a NUL, an unpaired surrogate)."""
    keys.writable(keys.key(*parts))
    if not storable(*parts):
        raise InvalidInput("The identifiers hold characters that cannot be stored.")
