"""Integrations and their connections (`interfaces.CatalogStore`), with the sources and compiled catalogs they
hold, in LMDB.

A source and its compiled catalog are stored once per `source_hash`; a reference count, changed in the
transaction that adds, re-points or removes a holder, says when the last one is gone and both are deleted.
Integrations are keyed (org, slug), connections (org, owner, account, integration, name): a removal of an
integration finds its connections in the org's range.
"""

from collections import Counter

import attrs

from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import ConnectionRecord, IntegrationRecord
from executor_mcp.storage.environment import Environment, Txn
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
from executor_mcp.storage.interfaces import ORG_OWNER, USER_OWNER, Exported
from executor_mcp.storage.lmdb import keys
from executor_mcp.storage.records import decoded_or_skipped, encode


class LmdbCatalog:
    def __init__(self, env: Environment) -> None:
        self._env = env
        self._integrations = env.database(b"integrations")
        self._connections = env.database(b"connections")
        self._sources = env.database(b"sources")
        self._compiled = env.database(b"compiled")
        self._references = env.database(b"source-references")
        self._revisions = env.database(b"catalog-revisions")

    # -- revisions ----------------------------------------------------------------------------------

    async def catalog_revision(self, org_id: str) -> int:
        raw = await self._env.read_now(lambda txn: keys.get(txn, self._revisions, keys.key(org_id)))
        return int(raw or 0)

    def _bump(self, txn: Txn, org_id: str) -> None:
        key = keys.writable(keys.key(org_id))
        raw = txn.get(key, db=self._revisions)
        txn.put(key, str(int(raw or 0) + 1).encode(), db=self._revisions)

    # -- integrations -------------------------------------------------------------------------------

    async def integrations(self, org_id: str) -> list[IntegrationRecord]:
        def _list(txn: Txn) -> list[IntegrationRecord]:
            records = []
            for key, raw in keys.ranged(txn, self._integrations, keys.prefix(org_id)):
                record = decoded_or_skipped(raw, IntegrationRecord, key)
                if record is not None and record.org_id == org_id and keys.key(org_id, record.slug) == key:
                    records.append(record)
            return sorted(records, key=lambda record: record.slug)

        return await self._env.read(_list)

    async def get_integration(self, org_id: str, slug: str) -> IntegrationRecord | None:
        return await self._env.read(lambda txn: self._integration(txn, org_id, slug))

    def _integration(self, txn: Txn, org_id: str, slug: str) -> IntegrationRecord | None:
        key = keys.key(org_id, slug)
        raw = keys.get(txn, self._integrations, key)
        record = None if raw is None else decoded_or_skipped(raw, IntegrationRecord, key)
        return record if record is not None and (record.org_id, record.slug) == (org_id, slug) else None

    async def add_integration(self, record: IntegrationRecord, source: bytes, compiled: bytes) -> bool:
        def _add(txn: Txn) -> bool:
            key = keys.writable(keys.key(record.org_id, record.slug))
            if not txn.put(key, encode(record), db=self._integrations, overwrite=False):
                return False
            self._hold(txn, record.source_hash, source, compiled)
            self._bump(txn, record.org_id)
            return True

        return await self._env.write(_add)

    async def replace_integration(
        self, record: IntegrationRecord, source: bytes | None = None, compiled: bytes | None = None
    ) -> bool:
        def _replace(txn: Txn) -> bool:
            key = keys.key(record.org_id, record.slug)
            raw = keys.get(txn, self._integrations, key)
            if raw is None:
                return False
            previous = decoded_or_skipped(raw, IntegrationRecord, key)
            if previous is None or previous.source_hash != record.source_hash:
                self._hold(txn, record.source_hash, source, compiled)
                if previous is not None:
                    self._release(txn, previous.source_hash)
            elif compiled is not None:
                txn.put(keys.writable(keys.key(record.source_hash)), compiled, db=self._compiled)
            txn.put(key, encode(record), db=self._integrations)
            self._bump(txn, record.org_id)
            return True

        return await self._env.write(_replace)

    async def remove_integration(self, org_id: str, slug: str) -> list[ConnectionRecord] | None:
        """An unreadable connection is removed too (it would otherwise come back to life if the slug were added
        again) but not returned."""

        def _remove(txn: Txn) -> list[ConnectionRecord] | None:
            key = keys.key(org_id, slug)
            raw = keys.get(txn, self._integrations, key)
            if raw is None:
                return None
            record = decoded_or_skipped(raw, IntegrationRecord, key)
            if record is not None:
                self._release(txn, record.source_hash)
            txn.delete(key, db=self._integrations)
            removed = []
            doomed = [
                (connection_key, value)
                for connection_key, value in keys.ranged(txn, self._connections, keys.prefix(org_id))
                if (parts := keys.parts_of(connection_key)) is not None and len(parts) == 5 and parts[3] == slug
            ]
            for connection_key, value in doomed:
                txn.delete(connection_key, db=self._connections)
                connection = decoded_or_skipped(value, ConnectionRecord, connection_key)
                if connection is not None:
                    if connection.source_hash is not None:
                        self._release(txn, connection.source_hash)
                    removed.append(connection)
            self._bump(txn, org_id)
            return removed

        return await self._env.write(_remove)

    # -- sources and compiled catalogs ----------------------------------------------------------------

    async def get_source(self, source_hash: str) -> bytes | None:
        return await self._env.read(lambda txn: keys.get(txn, self._sources, keys.key(source_hash)))

    async def get_compiled(self, source_hash: str) -> bytes | None:
        return await self._env.read(lambda txn: keys.get(txn, self._compiled, keys.key(source_hash)))

    async def put_compiled(self, source_hash: str, raw: bytes) -> bool:
        def _put(txn: Txn) -> bool:
            key = keys.key(source_hash)
            if int(keys.get(txn, self._references, key) or 0) < 1:
                return False
            txn.put(key, raw, db=self._compiled)
            return True

        return await self._env.write(_put)

    def _hold(self, txn: Txn, source_hash: str, source: bytes | None, compiled: bytes | None) -> None:
        """One more holder of `source_hash`; its source and compiled catalog are written unless already stored
        (one hash, one text; the stored compilation stays until `put_compiled` replaces it)."""
        key = keys.writable(keys.key(source_hash))
        count = int(txn.get(key, db=self._references) or 0)
        if count < 1 and (source is None or compiled is None):
            raise ValueError("a source hash that is not stored needs its source and compiled catalog")
        if source is not None:
            txn.put(key, source, db=self._sources, overwrite=count < 1)
        if compiled is not None:
            txn.put(key, compiled, db=self._compiled, overwrite=count < 1)
        txn.put(key, str(count + 1).encode(), db=self._references)

    def _release(self, txn: Txn, source_hash: str) -> None:
        """One holder fewer of `source_hash`; the last one out deletes its source and catalog."""
        key = keys.key(source_hash)
        count = int(keys.get(txn, self._references, key) or 0) - 1
        if count > 0:
            txn.put(key, str(count).encode(), db=self._references)
            return
        for db in (self._references, self._sources, self._compiled):
            keys.delete(txn, db, key)

    # -- connections --------------------------------------------------------------------------------

    async def connections(
        self, org_id: str, account_id: str, *, integration: str | None = None, owner: str | None = None
    ) -> list[ConnectionRecord]:
        owners = [(ORG_OWNER, "")] if owner in (None, ORG_OWNER) else []
        if owner in (None, USER_OWNER) and account_id:
            owners.append((USER_OWNER, account_id))
        narrowed = [integration] if integration is not None else []

        def _list(txn: Txn) -> list[ConnectionRecord]:
            records = []
            for owner_kind, account in owners:
                start = keys.prefix(org_id, owner_kind, account, *narrowed)
                for key, raw in keys.ranged(txn, self._connections, start):
                    record = decoded_or_skipped(raw, ConnectionRecord, key)
                    if record is not None and _connection_key(*_identity(record)) == key:
                        records.append(record)
            return sorted(records, key=lambda record: (record.integration, record.owner, record.name))

        return await self._env.read(_list)

    async def get_connection(
        self, org_id: str, owner: str, account_id: str, integration: str, name: str
    ) -> ConnectionRecord | None:
        key = _connection_key(org_id, owner, account_id, integration, name)
        return await self._env.read(lambda txn: self._connection(txn, key))

    def _connection(self, txn: Txn, key: bytes) -> ConnectionRecord | None:
        raw = keys.get(txn, self._connections, key)
        record = None if raw is None else decoded_or_skipped(raw, ConnectionRecord, key)
        return record if record is not None and _connection_key(*_identity(record)) == key else None

    async def put_connection(self, record: ConnectionRecord) -> bool:
        _check_connection(record)
        key = keys.writable(_connection_key(*_identity(record)))

        def _put(txn: Txn) -> bool:
            if keys.get(txn, self._integrations, keys.key(record.org_id, record.integration)) is None:
                return False
            raw = txn.get(key, db=self._connections)
            previous = None if raw is None else decoded_or_skipped(raw, ConnectionRecord, key)
            kept = attrs.evolve(
                record,
                source_hash=previous.source_hash if previous else None,
                tools_synced_at=previous.tools_synced_at if previous else None,
                sync_error=previous.sync_error if previous else None,
            )
            txn.put(key, encode(kept), db=self._connections)
            self._bump(txn, record.org_id)
            return True

        return await self._env.write(_put)

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

        def _set(txn: Txn) -> ConnectionRecord | None:
            raw = keys.get(txn, self._connections, key)
            current = None if raw is None else decoded_or_skipped(raw, ConnectionRecord, key)
            if current is None:
                return None
            held = current.source_hash
            if source_hash is not None and source_hash != current.source_hash:
                self._hold(txn, source_hash, source, compiled)
                if current.source_hash is not None:
                    self._release(txn, current.source_hash)
                held = source_hash
            updated = attrs.evolve(current, tools_synced_at=synced_at, sync_error=error, source_hash=held)
            txn.put(key, encode(updated), db=self._connections)
            self._bump(txn, connection.org_id)
            return updated

        return await self._env.write(_set)

    async def remove_connection(
        self, org_id: str, owner: str, account_id: str, integration: str, name: str
    ) -> ConnectionRecord | None:
        """An unreadable connection is removed and logged, and None is returned: nothing about it can be told."""
        key = _connection_key(org_id, owner, account_id, integration, name)

        def _remove(txn: Txn) -> ConnectionRecord | None:
            raw = keys.get(txn, self._connections, key)
            if raw is None:
                return None
            txn.delete(key, db=self._connections)
            self._bump(txn, org_id)
            removed = decoded_or_skipped(raw, ConnectionRecord, key)
            if removed is not None and removed.source_hash is not None:
                self._release(txn, removed.source_hash)
            return removed

        return await self._env.write(_remove)

    # -- moving between backends ------------------------------------------------------------------------

    async def export_records(self) -> Exported:
        """Readable integrations and connections, the sources and compiled catalogs they hold, and each org's
        revision. Reference counts are not exported: the importer counts the holders it writes."""

        def _export(txn: Txn) -> Exported:
            found: Exported = []
            held: set[str] = set()
            for key, raw in txn.cursor(db=self._integrations):
                kept = canonical(raw, IntegrationRecord, bytes(key))
                if kept is not None and keys.key(kept[0].org_id, kept[0].slug) == key:
                    found.append((record_key(INTEGRATION, kept[0].org_id, kept[0].slug), kept[1]))
                    held.add(kept[0].source_hash)
            for key, raw in txn.cursor(db=self._connections):
                connection = canonical(raw, ConnectionRecord, bytes(key))
                if connection is not None and _connection_key(*_identity(connection[0])) == key:
                    found.append((record_key(CONNECTION, *_identity(connection[0])), connection[1]))
                    if connection[0].source_hash is not None:
                        held.add(connection[0].source_hash)
            for source_hash in held:
                for kind, db in ((SOURCE, self._sources), (COMPILED, self._compiled)):
                    stored = keys.get(txn, db, keys.key(source_hash))
                    if stored is not None:
                        found.append((record_key(kind, source_hash), bytes(stored)))
            for key, raw in txn.cursor(db=self._revisions):
                parts = keys.parts_of(bytes(key))
                if parts is not None and len(parts) == 1:
                    found.append((record_key(REVISION, parts[0]), str(int(raw)).encode()))
            return sorted(found)

        return await self._env.read(_export)

    async def import_records(self, records: Exported) -> None:
        def _import(txn: Txn) -> None:
            holders: Counter[str] = Counter()
            for key, value in records:
                kind, *parts = catalog_key_parts(key)
                if kind == INTEGRATION and len(parts) == 2:
                    integration = canonical(value, IntegrationRecord, parts)
                    if integration is None or [integration[0].org_id, integration[0].slug] != parts:
                        raise ValueError(f"not an exported integration: {parts!r}")
                    holders[integration[0].source_hash] += 1
                    txn.put(keys.writable(keys.key(*parts)), value, db=self._integrations)
                elif kind == CONNECTION and len(parts) == 5:
                    connection = canonical(value, ConnectionRecord, parts)
                    if connection is None or list(_identity(connection[0])) != parts:
                        raise ValueError(f"not an exported connection: {parts!r}")
                    if connection[0].source_hash is not None:
                        holders[connection[0].source_hash] += 1
                    txn.put(keys.writable(_connection_key(*parts)), value, db=self._connections)
                elif kind in (SOURCE, COMPILED) and len(parts) == 1:
                    db = self._sources if kind == SOURCE else self._compiled
                    txn.put(keys.writable(keys.key(parts[0])), value, db=db)
                elif kind == REVISION and len(parts) == 1:
                    txn.put(keys.writable(keys.key(parts[0])), str(int(value)).encode(), db=self._revisions)
                else:
                    raise ValueError(f"not an exported catalog record: {key[:80]!r}")
            for source_hash, count in holders.items():
                txn.put(keys.writable(keys.key(source_hash)), str(count).encode(), db=self._references)

        await self._env.write(_import)


def _connection_key(org_id: str, owner: str, account_id: str, integration: str, name: str) -> bytes:
    """The account part is empty for what the org owns, whoever asks."""
    return keys.key(org_id, owner, "" if owner == ORG_OWNER else account_id, integration, name)


def _identity(record: ConnectionRecord) -> tuple[str, str, str, str, str]:
    return record.org_id, record.owner, record.account_id, record.integration, record.name


def _check_connection(record: ConnectionRecord) -> None:
    if record.owner == ORG_OWNER and record.account_id:
        raise InvalidInput("An org-owned connection belongs to no account.")
    if record.owner == USER_OWNER and not record.account_id:
        raise InvalidInput("A user-owned connection needs its account.")
    if record.owner not in (ORG_OWNER, USER_OWNER):
        raise InvalidInput('A connection owner is "org" or "user".')
