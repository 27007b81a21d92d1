"""The control plane: one server-level LMDB environment shared by the server and admin commands.

It holds the session directory (which ids exist, whom they belong to, whether they are condemned),
the organization directory (which orgs are revoked), the API keys, the tool policies and the catalog of
integrations, connections and secret items (`catalog_store.CatalogStore`), and the settings the server runs
with that every command on the data dir shares (`config.DATA_DIR_FACTS`). LMDB is multi-process, so an
admin command (`executor-mcp orgs revoke`, `keys create`) changes it while a server runs on the same
data dir, and the server sees the change on its next read.
"""

import logging
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import attrs

from executor_mcp.codec import dumps, loads
from executor_mcp.storage.catalog_store import CatalogStore
from executor_mcp.storage.environment import Environment
from executor_mcp.storage.records import (
    ApiKeyRecord,
    ConsoleLinkRecord,
    OrgRecord,
    Owner,
    PolicyRecord,
    SessionRecord,
    decode,
    decoded_or_skipped,
    encode,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

CONTROL_FILE = "control.mdb"
_MAX_DBS = 32
# Indexes of 61054cb and before, keyed by account alone; rebuilt keyed by owner, then dropped.
_LEGACY_DBS = (b"sessions-by-account", b"session-counts")
# Policies of 61054cb and before, keyed by id alone; moved under their owner's keys, then dropped.
_LEGACY_POLICIES = b"policies"
_CONSOLE_KEY = b"cookie-key"
_REQUEST_STATE_KEY = b"request-state-key"
_WORKSPACE_KEY = b"workspace-id-key"
_FACTS_KEY = b"data-dir-facts"


def _owner_prefix(owner: Owner) -> bytes:
    """An owner as a key prefix. JSON escapes control characters, so no account or org can forge the
    separator and reach into another owner's keys (`a\x00b` in org `c` is not `a` in org `b\x00c`)."""
    return dumps([owner.account_id, owner.org_id]) + b"\x00"


def _owner_key(owner: Owner, session_id: str) -> bytes:
    return _owner_prefix(owner) + session_id.encode()


def _key_text(key: bytes) -> str | None:
    try:
        return key.decode()
    except UnicodeDecodeError:
        log.error("skipping an unreadable control-plane key %r", key[:80])
        return None


class ControlPlane(CatalogStore):
    def __init__(self, env: Environment) -> None:
        super().__init__(env)
        self._sessions = env.database(b"sessions")
        self._by_owner = env.database(b"sessions-by-owner")
        self._owner_counts = env.database(b"owner-session-counts")
        self._terminations = env.database(b"termination-requests")
        self._revocations = env.database(b"revocation-requests")
        self._orgs = env.database(b"orgs")
        self._keys = env.database(b"api-keys")
        self._policies = env.database(b"policies-by-owner")
        self._console = env.database(b"console")
        self._console_links = env.database(b"console-links")
        self._audit = env.database(b"audit")
        self._server = env.database(b"server")

    @classmethod
    async def open(cls, data_dir: Path) -> "ControlPlane":
        plane = cls(await Environment.open(data_dir / CONTROL_FILE, max_dbs=_MAX_DBS))
        await plane._env.write(plane._upgrade)
        return plane

    async def close(self) -> None:
        await self._env.close()

    def _upgrade(self, txn) -> None:
        self._upgrade_owner_index(txn)
        self._upgrade_policies(txn)

    def _upgrade_policies(self, txn) -> None:
        """A data dir from before policies were keyed by owner: move every rule, once. Losing them on an
        upgrade would silently lift every guardrail."""
        if txn.get(_LEGACY_POLICIES) is None:
            return
        legacy = self._env.database(_LEGACY_POLICIES, txn=txn)
        for key, raw in txn.cursor(db=legacy):
            record = decoded_or_skipped(raw, PolicyRecord, bytes(key))
            if record is not None:
                txn.put(_policy_key(record), encode(record), db=self._policies)
        txn.drop(legacy, delete=True)

    def _upgrade_owner_index(self, txn) -> None:
        """A data dir from before sessions were indexed by (account, org): rebuild the index, once."""
        legacy = [name for name in _LEGACY_DBS if txn.get(name) is not None]
        if not legacy:
            return
        for key, raw in txn.cursor(db=self._sessions):
            record = decoded_or_skipped(raw, SessionRecord, bytes(key))
            indexed = record is not None and txn.put(
                _owner_key(record.owner, record.session_id), b"", db=self._by_owner, overwrite=False
            )
            if record is not None and indexed:
                self._count(txn, record.owner, +1)
        for name in legacy:
            txn.drop(self._env.database(name, txn=txn), delete=True)

    async def put_session(self, record: SessionRecord) -> None:
        def _put(txn) -> None:
            known = txn.get(record.session_id.encode(), db=self._sessions) is not None
            txn.put(record.session_id.encode(), encode(record), db=self._sessions)
            txn.put(_owner_key(record.owner, record.session_id), b"", db=self._by_owner)
            if not known:
                self._count(txn, record.owner, +1)

        await self._env.write(_put)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """The directory entry; an unreadable one is as good as none (it is logged)."""
        raw = await self._env.read(lambda txn: txn.get(session_id.encode(), db=self._sessions))
        return None if raw is None else decoded_or_skipped(raw, SessionRecord, session_id)

    async def update_session(self, session_id: str, **changes: object) -> SessionRecord | None:
        """Change fields of a record in one transaction; None if the record is gone (or unreadable)."""

        def _update(txn) -> SessionRecord | None:
            raw = txn.get(session_id.encode(), db=self._sessions)
            record = None if raw is None else decoded_or_skipped(raw, SessionRecord, session_id)
            if record is None:
                return None
            updated = attrs.evolve(record, **changes)
            txn.put(session_id.encode(), encode(updated), db=self._sessions)
            return updated

        return await self._env.write(_update)

    async def delete_session(self, session_id: str) -> None:
        def _delete(txn) -> None:
            raw = txn.get(session_id.encode(), db=self._sessions)
            if raw is None:
                return
            record = decoded_or_skipped(raw, SessionRecord, session_id)
            if record is not None and txn.delete(_owner_key(record.owner, session_id), db=self._by_owner):
                self._count(txn, record.owner, -1)
            txn.delete(session_id.encode(), db=self._sessions)

        await self._env.write(_delete)

    def _count(self, txn, owner: Owner, change: int) -> None:
        key = _owner_prefix(owner)
        raw = txn.get(key, db=self._owner_counts)
        txn.put(key, str(max(int(raw or 0) + change, 0)).encode(), db=self._owner_counts)

    async def owner_session_count(self, owner: Owner) -> int:
        raw = await self._env.read_now(lambda txn: txn.get(_owner_prefix(owner), db=self._owner_counts))
        return int(raw or 0)

    async def owner_sessions(self, owner: Owner) -> list[SessionRecord]:
        """One owner's sessions (an account within one org), through the index: no scan of everyone's."""
        prefix = _owner_prefix(owner)

        def _mine(txn) -> list[SessionRecord]:
            records = []
            cursor = txn.cursor(db=self._by_owner)
            if cursor.set_range(prefix):
                for key in cursor.iternext(keys=True, values=False):
                    if not key.startswith(prefix):
                        break
                    session_id = key[len(prefix) :]
                    raw = txn.get(session_id, db=self._sessions)
                    record = None if raw is None else decoded_or_skipped(raw, SessionRecord, session_id)
                    if record is not None:
                        records.append(record)
            return records

        return await self._env.read(_mine)

    async def request_termination(self, session_id: str, at: float) -> bool:
        """Condemn a session from outside the server (admin): mark it, and leave a request the running
        server picks up. False if there is no such session."""

        def _request(txn) -> bool:
            raw = txn.get(session_id.encode(), db=self._sessions)
            record = None if raw is None else decoded_or_skipped(raw, SessionRecord, session_id)
            if record is None:
                return False
            txn.put(session_id.encode(), encode(attrs.evolve(record, condemned=True)), db=self._sessions)
            txn.put(session_id.encode(), str(at).encode(), db=self._terminations)
            return True

        return await self._env.write(_request)

    async def take_termination_requests(self) -> list[str]:
        return await self._take_requests(self._terminations)

    async def request_revocation(self, org_id: str, at: float) -> OrgRecord:
        """Revoke an organization from outside the server (admin): mark it revoked, and leave a request
        the running server picks up to end the org's live sessions."""

        def _request(txn) -> OrgRecord:
            record = self._set_org_revoked(txn, org_id, True, at)
            txn.put(org_id.encode(), str(at).encode(), db=self._revocations)
            return record

        return await self._env.write(_request)

    async def take_revocation_requests(self) -> list[str]:
        return await self._take_requests(self._revocations)

    async def _take_requests(self, db) -> list[str]:
        """Every pending request of one kind, removed as it is taken; unreadable keys are dropped."""

        def _take(txn) -> list[str]:
            keys = [bytes(key) for key in txn.cursor(db=db).iternext(keys=True, values=False)]
            for key in keys:
                txn.delete(key, db=db)
            return [text for key in keys if (text := _key_text(key)) is not None]

        if not await self._env.read(lambda txn: txn.stat(db)["entries"]):
            return []
        return await self._env.write(_take)

    async def sessions(self) -> list[SessionRecord]:
        """Every readable directory entry (unreadable ones are logged and skipped)."""

        def _all(txn) -> list[SessionRecord]:
            records = (
                decoded_or_skipped(value, SessionRecord, bytes(key)) for key, value in txn.cursor(db=self._sessions)
            )
            return [record for record in records if record is not None]

        return await self._env.read(_all)

    async def session_count(self) -> int:
        """How many sessions the directory holds, from LMDB's own count (no scan): for the metrics."""
        return await self._env.read_now(lambda txn: txn.stat(self._sessions)["entries"])

    async def session_ids(self) -> set[str]:
        """The ids the directory names, readable record or not: what start-up recovery compares files to."""

        def _ids(txn) -> set[str]:
            keys = txn.cursor(db=self._sessions).iternext(keys=True, values=False)
            return {text for key in keys if (text := _key_text(bytes(key))) is not None}

        return await self._env.read(_ids)

    # -- organizations ------------------------------------------------------------------------------

    async def get_org(self, org_id: str) -> OrgRecord | None:
        raw = await self._env.read(lambda txn: txn.get(org_id.encode(), db=self._orgs))
        return None if raw is None else decode(raw, OrgRecord)

    async def note_org(self, org_id: str, at: float) -> OrgRecord:
        """The org's record, created (live) the first time the org is seen."""

        def _note(txn) -> OrgRecord:
            raw = txn.get(org_id.encode(), db=self._orgs)
            if raw is not None:
                return decode(raw, OrgRecord)
            record = OrgRecord(org_id=org_id, first_seen_at=at)
            txn.put(org_id.encode(), encode(record), db=self._orgs)
            return record

        return await self._env.write(_note)

    async def set_org_revoked(self, org_id: str, revoked: bool, at: float) -> OrgRecord:
        return await self._env.write(lambda txn: self._set_org_revoked(txn, org_id, revoked, at))

    def _set_org_revoked(self, txn, org_id: str, revoked: bool, at: float) -> OrgRecord:
        raw = txn.get(org_id.encode(), db=self._orgs)
        known = None if raw is None else decoded_or_skipped(raw, OrgRecord, org_id)
        base = known or OrgRecord(org_id=org_id, first_seen_at=at)
        record = attrs.evolve(base, revoked=revoked, changed_at=at)
        txn.put(org_id.encode(), encode(record), db=self._orgs)
        return record

    async def orgs(self) -> list[OrgRecord]:
        return await self._env.read(lambda txn: [decode(v, OrgRecord) for _, v in txn.cursor(db=self._orgs)])

    # -- API keys -----------------------------------------------------------------------------------

    async def put_api_key(self, digest: str, record: ApiKeyRecord) -> None:
        await self._env.write(lambda txn: txn.put(digest.encode(), encode(record), db=self._keys))

    async def get_api_key(self, digest: str) -> ApiKeyRecord | None:
        raw = await self._env.read(lambda txn: txn.get(digest.encode(), db=self._keys))
        return None if raw is None else decode(raw, ApiKeyRecord)

    async def revoke_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """Revoke by the key's public id; None if no key has that id."""

        def _revoke(txn) -> ApiKeyRecord | None:
            for digest, raw in txn.cursor(db=self._keys):
                record = decode(raw, ApiKeyRecord)
                if record.key_id == key_id:
                    record = attrs.evolve(record, revoked=True)
                    txn.put(digest, encode(record), db=self._keys)
                    return record
            return None

        return await self._env.write(_revoke)

    async def api_keys(self) -> list[ApiKeyRecord]:
        return await self._env.read(lambda txn: [decode(v, ApiKeyRecord) for _, v in txn.cursor(db=self._keys)])

    # -- audit log (keys and records are `audit/model.py`'s; this only stores them) ---------------------

    async def append_audit(self, entries: list[tuple[bytes, bytes]]) -> None:
        """Add records in one transaction; a key already there is left as it was (append-only)."""

        def _append(txn) -> None:
            for key, value in entries:
                txn.put(key, value, db=self._audit, overwrite=False)

        await self._env.write(_append)

    async def audit_newest(
        self, prefix: bytes, start: bytes, end: bytes, limit: int, admits: Callable[[bytes], bool], scan: int
    ) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
        """Up to `limit` entries of `prefix` in [start, end), newest first, that `admits`; at most `scan` looked
        at, so a filter that admits little costs a bounded read. Also the key to page on from (exclusive), or
        None when the range was read to its start."""

        def _read(txn) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
            found: list[tuple[bytes, bytes]] = []
            cursor = txn.cursor(db=self._audit)
            positioned = cursor.prev() if cursor.set_range(end) else cursor.last()
            looked = 0
            while positioned:
                key = bytes(cursor.key())
                if not key.startswith(prefix) or key < start:
                    return found, None
                if looked >= scan or len(found) >= limit:
                    return found, key + b"\x00"  # the next page begins with this key (keys are of one length)
                looked += 1
                value = bytes(cursor.value())
                if admits(value):
                    found.append((key, value))
                positioned = cursor.prev()
            return found, None

        return await self._env.read(_read)

    async def sweep_audit(
        self, start: bytes, expired: Callable[[bytes], bool], skip: Callable[[bytes], bytes], batch: int
    ) -> bytes | None:
        """Delete up to `batch` expired entries from `start` on, in key order: within a prefix, entries are in
        time order, so the first one kept means `skip` to the next prefix. Where to go on, or None when done."""

        def _sweep(txn) -> bytes | None:
            cursor = txn.cursor(db=self._audit)
            positioned = cursor.set_range(start)
            deleted = looked = 0
            while positioned:
                if deleted >= batch or looked >= batch * 4:
                    return bytes(cursor.key())
                key = bytes(cursor.key())
                looked += 1
                if expired(key):
                    positioned = cursor.delete()
                    deleted += 1
                else:
                    positioned = cursor.set_range(skip(key))
            return None

        return await self._env.write(_sweep)

    # -- web console --------------------------------------------------------------------------------

    async def console_key(self) -> bytes:
        """The key console cookies are signed with. Losing it only signs everyone out."""
        return await self._signing_key(_CONSOLE_KEY)

    async def request_state_key(self) -> bytes:
        """The key 2026 approvals' `requestState` is signed with: kept here, not per process, so a state
        outlives a restart as its durable pause does. Losing it only makes clients run their call again."""
        return await self._signing_key(_REQUEST_STATE_KEY)

    async def workspace_key(self) -> bytes:
        """The key workspace ids are derived under, so that nobody else can compute a principal's (and probe
        whether it exists, or wake it). Losing it only orphans workspaces, swept like any idle session."""
        return await self._signing_key(_WORKSPACE_KEY)

    async def _signing_key(self, name: bytes) -> bytes:
        """A key made on first use, in one write, so a server and an admin command starting together agree."""

        def _key(txn) -> bytes:
            key = txn.get(name, db=self._console)
            if key is None:
                key = secrets.token_bytes(32)
                txn.put(name, key, db=self._console)
            return bytes(key)

        return await self._env.write(_key)

    async def put_console_link(self, digest: str, record: ConsoleLinkRecord, now: float) -> None:
        """Keep a new link, and forget the ones that expired unopened (there are never many)."""

        def _put(txn) -> None:
            for key, raw in list(txn.cursor(db=self._console_links)):
                old = decoded_or_skipped(raw, ConsoleLinkRecord, bytes(key))
                if old is None or old.expires_at <= now:
                    txn.delete(key, db=self._console_links)
            txn.put(digest.encode(), encode(record), db=self._console_links)

        await self._env.write(_put)

    async def take_console_link(self, digest: str, now: float) -> ConsoleLinkRecord | None:
        """The link's record, removed in the same write: of two processes opening one link, one gets it."""

        def _take(txn) -> ConsoleLinkRecord | None:
            raw = txn.pop(digest.encode(), db=self._console_links)
            record = None if raw is None else decoded_or_skipped(raw, ConsoleLinkRecord, digest)
            return record if record is not None and record.expires_at > now else None

        return await self._env.write(_take)

    # -- what the server runs with ---------------------------------------------------------------------

    async def record_data_dir_facts(self, facts: Mapping[str, object]) -> None:
        """The settings the server starts with that decide what the data dir's records may do
        (`config.DATA_DIR_FACTS`), replacing what the last server recorded."""
        await self._env.write(lambda txn: txn.put(_FACTS_KEY, dumps(dict(facts)), db=self._server))

    async def data_dir_facts(self) -> dict[str, object]:
        """What the last server on this data dir recorded: {} when none has run here since this was kept."""

        def _read(txn) -> dict[str, object]:
            raw = txn.get(_FACTS_KEY, db=self._server)
            try:
                facts = loads(bytes(raw)) if raw is not None else {}
            except ValueError:  # not JSON, or not UTF-8
                log.error("ignoring an unreadable record of the server's settings")
                return {}
            return facts if isinstance(facts, dict) else {}

        return await self._env.read(_read)

    # -- policies -----------------------------------------------------------------------------------
    # Keyed `org \0 account \0 policy id` (an org rule's account is empty), so the rules one caller sees,
    # its org's and its own, are two prefix ranges: no read or edit touches another org's or another
    # member's rules, however many they write.

    async def policies(self, org_id: str, account_id: str | None) -> list[PolicyRecord]:
        """The org's rules and, with `account_id`, that account's own rules in the org."""
        return await self._env.read(lambda txn: self._visible_policies(txn, org_id, account_id))

    async def edit_policies(
        self,
        org_id: str,
        account_id: str | None,
        edit: Callable[[list[PolicyRecord]], tuple[list[PolicyRecord], list[PolicyRecord], T]],
    ) -> T:
        """Read the rules `policies` would and write `edit`'s changes in one transaction, so concurrent
        edits (a server and an admin command) cannot interleave. `edit` returns (records to put,
        records to delete, result)."""

        def _edit(txn) -> T:
            puts, deletes, result = edit(self._visible_policies(txn, org_id, account_id))
            for record in puts:
                txn.put(_policy_key(record), encode(record), db=self._policies)
            for record in deletes:
                txn.delete(_policy_key(record), db=self._policies)
            return result

        return await self._env.write(_edit)

    def _visible_policies(self, txn, org_id: str, account_id: str | None) -> list[PolicyRecord]:
        records = self._policy_range(txn, org_id, None)
        if account_id:
            records += self._policy_range(txn, org_id, account_id)
        return records

    def _policy_range(self, txn, org_id: str, account_id: str | None) -> list[PolicyRecord]:
        prefix = _policy_prefix(org_id, account_id)
        records = []
        cursor = txn.cursor(db=self._policies)
        if cursor.set_range(prefix):
            for key, raw in cursor.iternext():
                if not key.startswith(prefix):
                    break
                record = decode(raw, PolicyRecord)
                if record.org_id == org_id and record.account_id == account_id:
                    records.append(record)
        return records


def _policy_prefix(org_id: str, account_id: str | None) -> bytes:
    return org_id.encode() + b"\x00" + (account_id or "").encode() + b"\x00"


def _policy_key(record: PolicyRecord) -> bytes:
    return _policy_prefix(record.org_id, record.account_id) + record.id.encode()
