"""The control plane's catalog: integrations, their connections, sources, compiled catalogs, secret items.

Every method is one LMDB transaction, so a server and an admin command (another process on the same data
dir) never see half a change. Keys are JSON strings joined by NUL: JSON escapes control characters, so no
org, account, slug or name can forge the separator and reach into another owner's range (`a\\x00b` in org
`c` is not `a` in org `b\\x00c`). Every key of one org starts with the org's part, every key of one
owner with the (org, owner, account) parts, so a read for one caller is a prefix range that never decodes
another org's or another member's records.

Sources and compiled catalogs are stored once per `source_hash` and shared by every integration (of any org)
and every connection (whose tools were discovered) that holds it; a reference count, changed in the
transaction that adds, re-points or removes a holder, says when the last one is gone and both are deleted.
"""

import logging
from collections.abc import Iterable, Iterator, Mapping

import attrs

from executor_mcp.codec import dumps, loads
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import ConnectionRecord, IntegrationRecord
from executor_mcp.storage.environment import Environment
from executor_mcp.storage.records import decoded_or_skipped, encode

log = logging.getLogger(__name__)

ORG_OWNER = "org"
USER_OWNER = "user"
# LMDB's default (and py-lmdb's compiled-in) ceiling on a key: a longer one cannot exist, so a read of it
# is empty and a write of it is refused.
MAX_KEY_BYTES = 511

CATALOG_DATABASES = (
    b"integrations",
    b"connections",
    b"sources",
    b"compiled",
    b"source-references",
    b"catalog-revisions",
    b"secret-items",
)


def _key(*parts: str) -> bytes:
    return b"\x00".join(dumps(part) for part in parts)


def _prefix(*parts: str) -> bytes:
    return _key(*parts) + b"\x00"


def _parts(key: bytes) -> list[str] | None:
    """A key back into its parts; None (logged) for a key no write of ours makes."""
    try:
        parts = [loads(part) for part in key.split(b"\x00")]
    except ValueError:
        parts = []
    if not parts or not all(isinstance(part, str) for part in parts):
        log.error("skipping an unreadable catalog key %r", key[:80])
        return None
    return parts


def _writable(key: bytes) -> bytes:
    if len(key) > MAX_KEY_BYTES:
        raise InvalidInput("The identifiers are too long to store.")
    return key


def _get(txn, db, key: bytes) -> bytes | None:
    return None if len(key) > MAX_KEY_BYTES else txn.get(key, db=db)


def _range(txn, db, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The (key, value) pairs under `prefix`, in key order."""
    if len(prefix) > MAX_KEY_BYTES:
        return
    cursor = txn.cursor(db=db)
    if not cursor.set_range(prefix):
        return
    for key, value in cursor.iternext():
        if not key.startswith(prefix):
            return
        yield bytes(key), bytes(value)


def _connection_key(org_id: str, owner: str, account_id: str, integration: str, name: str) -> bytes:
    return _key(org_id, owner, _owner_account(owner, account_id), integration, name)


def _owner_account(owner: str, account_id: str) -> str:
    """The account part of an owner's keys: empty for what the org owns, whoever asks."""
    return "" if owner == ORG_OWNER else account_id


def _check_connection(record: ConnectionRecord) -> None:
    if record.owner == ORG_OWNER and record.account_id:
        raise InvalidInput("An org-owned connection belongs to no account.")
    if record.owner == USER_OWNER and not record.account_id:
        raise InvalidInput("A user-owned connection needs its account.")
    if record.owner not in (ORG_OWNER, USER_OWNER):
        raise InvalidInput('A connection owner is "org" or "user".')


class CatalogStore:
    """The catalog half of the control plane (`ControlPlane` is one), over the shared environment."""

    def __init__(self, env: Environment) -> None:
        self._env = env
        self._integrations = env.database(b"integrations")
        self._connections = env.database(b"connections")
        self._sources = env.database(b"sources")
        self._compiled = env.database(b"compiled")
        self._references = env.database(b"source-references")
        self._revisions = env.database(b"catalog-revisions")
        self._secret_items = env.database(b"secret-items")

    # -- revisions ----------------------------------------------------------------------------------

    async def catalog_revision(self, org_id: str) -> int:
        """A counter bumped by every change of the org's integrations or connections, by any process: a
        cache of the org's tool catalog built at revision N is stale once this is not N."""
        raw = await self._env.read_now(lambda txn: _get(txn, self._revisions, _key(org_id)))
        return int(raw or 0)

    def _bump(self, txn, org_id: str) -> None:
        key = _writable(_key(org_id))
        raw = txn.get(key, db=self._revisions)
        txn.put(key, str(int(raw or 0) + 1).encode(), db=self._revisions)

    # -- integrations -------------------------------------------------------------------------------

    async def integrations(self, org_id: str) -> list[IntegrationRecord]:
        """The org's readable integrations, sorted by slug."""

        def _list(txn) -> list[IntegrationRecord]:
            records = []
            for key, raw in _range(txn, self._integrations, _prefix(org_id)):
                record = decoded_or_skipped(raw, IntegrationRecord, key)
                if record is not None and record.org_id == org_id and _key(org_id, record.slug) == key:
                    records.append(record)
            return sorted(records, key=lambda record: record.slug)

        return await self._env.read(_list)

    async def get_integration(self, org_id: str, slug: str) -> IntegrationRecord | None:
        """The integration, or None when there is none (or it is unreadable, which is logged)."""
        return await self._env.read(lambda txn: self._integration(txn, org_id, slug))

    def _integration(self, txn, org_id: str, slug: str) -> IntegrationRecord | None:
        key = _key(org_id, slug)
        raw = _get(txn, self._integrations, key)
        record = None if raw is None else decoded_or_skipped(raw, IntegrationRecord, key)
        return record if record is not None and (record.org_id, record.slug) == (org_id, slug) else None

    async def add_integration(self, record: IntegrationRecord, source: bytes, compiled: bytes) -> bool:
        """Store a new integration with its source and compiled catalog; False, and nothing written, when
        the org already has that slug."""

        def _add(txn) -> bool:
            key = _writable(_key(record.org_id, record.slug))
            if not txn.put(key, encode(record), db=self._integrations, overwrite=False):
                return False
            self._hold(txn, record.source_hash, source, compiled)
            self._bump(txn, record.org_id)
            return True

        return await self._env.write(_add)

    async def replace_integration(
        self, record: IntegrationRecord, source: bytes | None = None, compiled: bytes | None = None
    ) -> bool:
        """Update an existing integration (same org and slug); False, and nothing written, when it is gone.

        A `source_hash` that changes needs `source` and `compiled` unless that hash is already stored (another
        integration holds it); the old hash is released. A `compiled` given for an unchanged hash replaces the
        stored one (a recompilation)."""

        def _replace(txn) -> bool:
            key = _key(record.org_id, record.slug)
            raw = _get(txn, self._integrations, key)
            if raw is None:
                return False
            previous = decoded_or_skipped(raw, IntegrationRecord, key)
            if previous is None or previous.source_hash != record.source_hash:
                self._hold(txn, record.source_hash, source, compiled)
                if previous is not None:
                    self._release(txn, previous.source_hash)
            elif compiled is not None:
                txn.put(_writable(_key(record.source_hash)), compiled, db=self._compiled)
            txn.put(key, encode(record), db=self._integrations)
            self._bump(txn, record.org_id)
            return True

        return await self._env.write(_replace)

    async def remove_integration(self, org_id: str, slug: str) -> list[ConnectionRecord] | None:
        """Remove an integration and every connection to it (of every owner); None when there is none.

        The removed connections are returned so their secret items can be deleted; an unreadable one is
        removed too (it would otherwise come back to life if the slug were added again) but not returned."""

        def _remove(txn) -> list[ConnectionRecord] | None:
            key = _key(org_id, slug)
            raw = _get(txn, self._integrations, key)
            if raw is None:
                return None
            record = decoded_or_skipped(raw, IntegrationRecord, key)
            if record is not None:
                self._release(txn, record.source_hash)
            txn.delete(key, db=self._integrations)
            removed = []
            doomed = [
                (connection_key, value)
                for connection_key, value in _range(txn, self._connections, _prefix(org_id))
                if (parts := _parts(connection_key)) is not None and len(parts) == 5 and parts[3] == slug
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
        return await self._env.read(lambda txn: _get(txn, self._sources, _key(source_hash)))

    async def get_compiled(self, source_hash: str) -> bytes | None:
        return await self._env.read(lambda txn: _get(txn, self._compiled, _key(source_hash)))

    async def put_compiled(self, source_hash: str, raw: bytes) -> bool:
        """Fill the compiled cache of a stored source (after recompiling one that was missing or unreadable);
        False, and nothing written, when no integration holds that hash any more, so a fill racing a removal
        leaves no orphan behind."""

        def _put(txn) -> bool:
            key = _key(source_hash)
            if int(_get(txn, self._references, key) or 0) < 1:
                return False
            txn.put(key, raw, db=self._compiled)
            return True

        return await self._env.write(_put)

    def _hold(self, txn, source_hash: str, source: bytes | None, compiled: bytes | None) -> None:
        """One more integration holds `source_hash`; its source and compiled catalog are written unless
        already stored (one hash, one text; the stored compilation stays until `put_compiled` replaces it)."""
        key = _writable(_key(source_hash))
        count = int(txn.get(key, db=self._references) or 0)
        if count < 1 and (source is None or compiled is None):
            raise ValueError("a source hash that is not stored needs its source and compiled catalog")
        if source is not None:
            txn.put(key, source, db=self._sources, overwrite=count < 1)
        if compiled is not None:
            txn.put(key, compiled, db=self._compiled, overwrite=count < 1)
        txn.put(key, str(count + 1).encode(), db=self._references)

    def _release(self, txn, source_hash: str) -> None:
        """One integration fewer holds `source_hash`; the last one out deletes its source and catalog."""
        key = _key(source_hash)
        count = int(_get(txn, self._references, key) or 0) - 1
        if count > 0:
            txn.put(key, str(count).encode(), db=self._references)
            return
        for db in (self._references, self._sources, self._compiled):
            if len(key) <= MAX_KEY_BYTES:
                txn.delete(key, db=db)

    # -- connections --------------------------------------------------------------------------------

    async def connections(
        self, org_id: str, account_id: str, *, integration: str | None = None, owner: str | None = None
    ) -> list[ConnectionRecord]:
        """What `account_id` sees in the org: the org's connections and the account's own (never another
        account's), optionally of one integration or one owner, sorted by (integration, owner, name)."""
        owners = [(ORG_OWNER, "")] if owner in (None, ORG_OWNER) else []
        if owner in (None, USER_OWNER) and account_id:
            owners.append((USER_OWNER, account_id))

        def _list(txn) -> list[ConnectionRecord]:
            records = []
            for owner_kind, account in owners:
                prefix = _prefix(org_id, owner_kind, account, *([integration] if integration is not None else []))
                for key, raw in _range(txn, self._connections, prefix):
                    record = decoded_or_skipped(raw, ConnectionRecord, key)
                    if record is not None and _connection_key(*_identity(record)) == key:
                        records.append(record)
            return sorted(records, key=lambda record: (record.integration, record.owner, record.name))

        return await self._env.read(_list)

    async def get_connection(
        self, org_id: str, owner: str, account_id: str, integration: str, name: str
    ) -> ConnectionRecord | None:
        """One connection; for `owner` "org" the account is ignored (the org's connections are everyone's)."""
        key = _connection_key(org_id, owner, account_id, integration, name)

        def _one(txn) -> ConnectionRecord | None:
            raw = _get(txn, self._connections, key)
            record = None if raw is None else decoded_or_skipped(raw, ConnectionRecord, key)
            return record if record is not None and _connection_key(*_identity(record)) == key else None

        return await self._env.read(_one)

    async def put_connection(self, record: ConnectionRecord) -> bool:
        """Create or replace a connection; False, and nothing written, when its integration is gone (checked
        in the same transaction, so a removal racing this cannot leave an orphan). The discovered catalog is
        the stored one's, whatever `record` says: only `set_discovered` changes it."""
        _check_connection(record)
        key = _writable(_connection_key(*_identity(record)))

        def _put(txn) -> bool:
            if _get(txn, self._integrations, _key(record.org_id, record.integration)) is None:
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
        """Record a discovery of `connection`'s tools: on success (`source_hash`, with `source` and `compiled`
        unless that hash is stored already) the connection holds the new catalog and releases the old one; on
        failure (`error`) it keeps its tools and notes why. Only the catalog fields change, so an edit that
        landed while discovery ran is kept; None when the connection is gone."""
        key = _connection_key(*_identity(connection))

        def _set(txn) -> ConnectionRecord | None:
            raw = _get(txn, self._connections, key)
            current = None if raw is None else decoded_or_skipped(raw, ConnectionRecord, key)
            if current is None:
                return None
            changes: dict[str, object] = {"tools_synced_at": synced_at, "sync_error": error}
            if source_hash is not None and source_hash != current.source_hash:
                self._hold(txn, source_hash, source, compiled)
                if current.source_hash is not None:
                    self._release(txn, current.source_hash)
                changes["source_hash"] = source_hash
            updated = attrs.evolve(current, **changes)
            txn.put(key, encode(updated), db=self._connections)
            self._bump(txn, connection.org_id)
            return updated

        return await self._env.write(_set)

    async def remove_connection(
        self, org_id: str, owner: str, account_id: str, integration: str, name: str
    ) -> ConnectionRecord | None:
        """Remove one connection and return it; None when there was none (an unreadable one is removed and
        logged, and None is returned, since nothing about it can be told)."""
        key = _connection_key(org_id, owner, account_id, integration, name)

        def _remove(txn) -> ConnectionRecord | None:
            raw = _get(txn, self._connections, key)
            if raw is None:
                return None
            txn.delete(key, db=self._connections)
            self._bump(txn, org_id)
            removed = decoded_or_skipped(raw, ConnectionRecord, key)
            if removed is not None and removed.source_hash is not None:
                self._release(txn, removed.source_hash)
            return removed

        return await self._env.write(_remove)

    # -- encrypted secret items -----------------------------------------------------------------------
    # Partitioned by (org, account), the account empty for what org-owned connections hold: an item id is
    # only ever looked up inside the caller's partition, so guessing another's id reaches nothing.

    async def get_secret_item(self, org_id: str, account_id: str, item_id: str) -> bytes | None:
        return await self._env.read(lambda txn: _get(txn, self._secret_items, _key(org_id, account_id, item_id)))

    async def put_secret_items(self, org_id: str, account_id: str, items: Mapping[str, bytes]) -> None:
        """Write (replacing) several items of one partition at once: a connection's inputs land together."""
        keyed = {_writable(_key(org_id, account_id, item_id)): payload for item_id, payload in items.items()}

        def _put(txn) -> None:
            for key, payload in keyed.items():
                txn.put(key, payload, db=self._secret_items)

        await self._env.write(_put)

    async def delete_secret_items(self, org_id: str, account_id: str, item_ids: Iterable[str]) -> None:
        keys = [_key(org_id, account_id, item_id) for item_id in item_ids]

        def _delete(txn) -> None:
            for key in keys:
                if len(key) <= MAX_KEY_BYTES:
                    txn.delete(key, db=self._secret_items)

        await self._env.write(_delete)

    async def secret_items(self, org_id: str, account_id: str) -> list[str]:
        """The ids of one partition's items, sorted."""
        prefix = _prefix(org_id, account_id)

        def _ids(txn) -> list[str]:
            ids = []
            for key, _ in _range(txn, self._secret_items, prefix):
                parts = _parts(key)
                if parts is not None and len(parts) == 3:
                    ids.append(parts[2])
            return sorted(ids)

        return await self._env.read(_ids)


def _identity(record: ConnectionRecord) -> tuple[str, str, str, str, str]:
    return record.org_id, record.owner, record.account_id, record.integration, record.name
