"""The control plane: one server-level LMDB environment shared by the server and admin commands.

It holds the session directory (which ids exist, whom they belong to, whether they are condemned),
the organization directory (which orgs are revoked), the API keys and the tool policies. LMDB is multi-process, so an
admin command (`executor-mcp orgs revoke`, `keys create`) changes it while a server runs on the same
data dir, and the server sees the change on its next read.
"""

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import attrs

from executor_mcp.storage.environment import Environment
from executor_mcp.storage.records import ApiKeyRecord, OrgRecord, PolicyRecord, SessionRecord, decode, encode

T = TypeVar("T")

CONTROL_FILE = "control.mdb"
_MAX_DBS = 8


def _account_key(account_id: str, session_id: str) -> bytes:
    return account_id.encode() + b"\x00" + session_id.encode()


class ControlPlane:
    def __init__(self, env: Environment) -> None:
        self._env = env
        self._sessions = env.database(b"sessions")
        self._by_account = env.database(b"sessions-by-account")
        self._account_counts = env.database(b"session-counts")
        self._terminations = env.database(b"termination-requests")
        self._orgs = env.database(b"orgs")
        self._keys = env.database(b"api-keys")
        self._policies = env.database(b"policies-by-owner")

    @classmethod
    async def open(cls, data_dir: Path) -> "ControlPlane":
        return cls(await Environment.open(data_dir / CONTROL_FILE, max_dbs=_MAX_DBS))

    async def close(self) -> None:
        await self._env.close()

    async def put_session(self, record: SessionRecord) -> None:
        def _put(txn) -> None:
            known = txn.get(record.session_id.encode(), db=self._sessions) is not None
            txn.put(record.session_id.encode(), encode(record), db=self._sessions)
            txn.put(_account_key(record.owner.account_id, record.session_id), b"", db=self._by_account)
            if not known:
                self._count(txn, record.owner.account_id, +1)

        await self._env.write(_put)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        raw = await self._env.read(lambda txn: txn.get(session_id.encode(), db=self._sessions))
        return None if raw is None else decode(raw, SessionRecord)

    async def update_session(self, session_id: str, **changes: object) -> SessionRecord | None:
        """Change fields of a record in one transaction; None if the record is gone."""

        def _update(txn) -> SessionRecord | None:
            raw = txn.get(session_id.encode(), db=self._sessions)
            if raw is None:
                return None
            updated = attrs.evolve(decode(raw, SessionRecord), **changes)
            txn.put(session_id.encode(), encode(updated), db=self._sessions)
            return updated

        return await self._env.write(_update)

    async def delete_session(self, session_id: str) -> None:
        def _delete(txn) -> None:
            raw = txn.get(session_id.encode(), db=self._sessions)
            if raw is not None:
                record = decode(raw, SessionRecord)
                txn.delete(_account_key(record.owner.account_id, session_id), db=self._by_account)
                txn.delete(session_id.encode(), db=self._sessions)
                self._count(txn, record.owner.account_id, -1)

        await self._env.write(_delete)

    def _count(self, txn, account_id: str, change: int) -> None:
        raw = txn.get(account_id.encode(), db=self._account_counts)
        txn.put(account_id.encode(), str(max(int(raw or 0) + change, 0)).encode(), db=self._account_counts)

    async def account_session_count(self, account_id: str) -> int:
        raw = await self._env.read(lambda txn: txn.get(account_id.encode(), db=self._account_counts))
        return int(raw or 0)

    async def account_sessions(self, account_id: str) -> list[SessionRecord]:
        """One account's sessions, through the per-account index (no scan of everyone's)."""
        prefix = _account_key(account_id, "")

        def _mine(txn) -> list[SessionRecord]:
            records = []
            cursor = txn.cursor(db=self._by_account)
            if cursor.set_range(prefix):
                for key in cursor.iternext(keys=True, values=False):
                    if not key.startswith(prefix):
                        break
                    raw = txn.get(key[len(prefix) :], db=self._sessions)
                    if raw is not None:
                        records.append(decode(raw, SessionRecord))
            return records

        return await self._env.read(_mine)

    async def request_termination(self, session_id: str, at: float) -> bool:
        """Condemn a session from outside the server (admin): mark it, and leave a request the running
        server picks up. False if there is no such session."""

        def _request(txn) -> bool:
            raw = txn.get(session_id.encode(), db=self._sessions)
            if raw is None:
                return False
            record = attrs.evolve(decode(raw, SessionRecord), condemned=True)
            txn.put(session_id.encode(), encode(record), db=self._sessions)
            txn.put(session_id.encode(), str(at).encode(), db=self._terminations)
            return True

        return await self._env.write(_request)

    async def take_termination_requests(self) -> list[str]:
        def _take(txn) -> list[str]:
            ids = [key.decode() for key, _ in txn.cursor(db=self._terminations)]
            for session_id in ids:
                txn.delete(session_id.encode(), db=self._terminations)
            return ids

        if not await self._env.read(lambda txn: txn.stat(self._terminations)["entries"]):
            return []
        return await self._env.write(_take)

    async def sessions(self) -> list[SessionRecord]:
        def _all(txn) -> list[SessionRecord]:
            return [decode(value, SessionRecord) for _, value in txn.cursor(db=self._sessions)]

        return await self._env.read(_all)

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
        def _set(txn) -> OrgRecord:
            raw = txn.get(org_id.encode(), db=self._orgs)
            base = decode(raw, OrgRecord) if raw is not None else OrgRecord(org_id=org_id, first_seen_at=at)
            record = attrs.evolve(base, revoked=revoked, changed_at=at)
            txn.put(org_id.encode(), encode(record), db=self._orgs)
            return record

        return await self._env.write(_set)

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
