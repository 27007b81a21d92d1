"""The session directory (`interfaces.SessionDirectory`) and the paused-execution directory over its entries
(`interfaces.PausedDirectory`) in LMDB.

Entries are keyed by session id; an index keyed `owner prefix + session id` lists one owner's sessions
without a scan, and a count per owner answers the per-account cap with a point read. Termination requests
are keys (the session id) in their own table, taken (and deleted) by the running server: a range of it, the ids
that name the taker as their home.
"""

from collections.abc import Mapping
from typing import Any

import attrs

from executor_mcp.codec import dumps
from executor_mcp.storage.environment import Database, Environment, Txn
from executor_mcp.storage.lmdb.requests import key_text, take_requests
from executor_mcp.storage.records import Owner, SessionRecord, decoded_or_skipped, encode

# Indexes of 61054cb and before, keyed by account alone; rebuilt keyed by owner, then dropped.
_LEGACY_INDEXES = (b"sessions-by-account", b"session-counts")


def owner_prefix(owner: Owner) -> bytes:
    """An owner as a key prefix. JSON escapes control characters, so no account or org can forge the
    separator and reach into another owner's keys (`a\x00b` in org `c` is not `a` in org `b\x00c`)."""
    return dumps([owner.account_id, owner.org_id]) + b"\x00"


def _owner_key(owner: Owner, session_id: str) -> bytes:
    return owner_prefix(owner) + session_id.encode()


def _record(txn: Txn, db: Database, session_id: str | bytes) -> SessionRecord | None:
    """The entry; an unreadable one is as good as none (it is logged)."""
    raw = txn.get(session_id.encode() if isinstance(session_id, str) else session_id, db=db)
    return None if raw is None else decoded_or_skipped(raw, SessionRecord, session_id)


def _update(txn: Txn, db: Database, session_id: str, changes: Mapping[str, Any]) -> SessionRecord | None:
    """The changes are field names and values checked by attrs, not by the type checker (`**changes`)."""
    record = _record(txn, db, session_id)
    if record is None:
        return None
    updated = attrs.evolve(record, **changes)
    txn.put(session_id.encode(), encode(updated), db=db)
    return updated


class LmdbSessionDirectory:
    def __init__(self, env: Environment) -> None:
        self._env = env
        self._sessions = env.database(b"sessions")
        self._by_owner = env.database(b"sessions-by-owner")
        self._owner_counts = env.database(b"owner-session-counts")
        self._terminations = env.database(b"termination-requests")

    def upgrade(self, txn: Txn) -> None:
        """A data dir from before sessions were indexed by (account, org): rebuild the index, once."""
        legacy = [name for name in _LEGACY_INDEXES if txn.get(name) is not None]
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
        def _put(txn: Txn) -> None:
            known = txn.get(record.session_id.encode(), db=self._sessions) is not None
            txn.put(record.session_id.encode(), encode(record), db=self._sessions)
            txn.put(_owner_key(record.owner, record.session_id), b"", db=self._by_owner)
            if not known:
                self._count(txn, record.owner, +1)

        await self._env.write(_put)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return await self._env.read(lambda txn: _record(txn, self._sessions, session_id))

    async def update_session(self, session_id: str, **changes: object) -> SessionRecord | None:
        return await self._env.write(lambda txn: _update(txn, self._sessions, session_id, changes))

    async def delete_session(self, session_id: str) -> None:
        def _delete(txn: Txn) -> None:
            raw = txn.get(session_id.encode(), db=self._sessions)
            if raw is None:
                return
            record = decoded_or_skipped(raw, SessionRecord, session_id)
            if record is not None and txn.delete(_owner_key(record.owner, session_id), db=self._by_owner):
                self._count(txn, record.owner, -1)
            txn.delete(session_id.encode(), db=self._sessions)

        await self._env.write(_delete)

    def _count(self, txn: Txn, owner: Owner, change: int) -> None:
        key = owner_prefix(owner)
        raw = txn.get(key, db=self._owner_counts)
        txn.put(key, str(max(int(raw or 0) + change, 0)).encode(), db=self._owner_counts)

    async def owner_session_count(self, owner: Owner) -> int:
        raw = await self._env.read_now(lambda txn: txn.get(owner_prefix(owner), db=self._owner_counts))
        return int(raw or 0)

    async def owner_sessions(self, owner: Owner) -> list[SessionRecord]:
        start = owner_prefix(owner)

        def _mine(txn: Txn) -> list[SessionRecord]:
            records = []
            cursor = txn.cursor(db=self._by_owner)
            if cursor.set_range(start):
                for key in cursor.iternext(keys=True, values=False):
                    if not key.startswith(start):
                        break
                    record = _record(txn, self._sessions, key[len(start) :])
                    if record is not None:
                        records.append(record)
            return records

        return await self._env.read(_mine)

    async def request_termination(self, session_id: str, at: float) -> bool:
        def _request(txn: Txn) -> bool:
            if _update(txn, self._sessions, session_id, {"condemned": True}) is None:
                return False
            txn.put(session_id.encode(), str(at).encode(), db=self._terminations)
            return True

        return await self._env.write(_request)

    async def take_termination_requests(self, id_prefix: str) -> list[str]:
        return await take_requests(self._env, self._terminations, id_prefix.encode())

    async def sessions(self) -> list[SessionRecord]:
        def _all(txn: Txn) -> list[SessionRecord]:
            records = (
                decoded_or_skipped(value, SessionRecord, bytes(key)) for key, value in txn.cursor(db=self._sessions)
            )
            return [record for record in records if record is not None]

        return await self._env.read(_all)

    async def session_count(self) -> int:
        return await self._env.read_now(lambda txn: txn.stat(self._sessions)["entries"])

    async def session_ids(self) -> set[str]:
        def _ids(txn: Txn) -> set[str]:
            found = txn.cursor(db=self._sessions).iternext(keys=True, values=False)
            return {text for key in found if (text := key_text(bytes(key))) is not None}

        return await self._env.read(_ids)


class LmdbPausedDirectory:
    """Over the session directory's entries: a scan of them at start-up is what reviving costs today."""

    def __init__(self, env: Environment) -> None:
        self._env = env
        self._sessions = env.database(b"sessions")

    async def mark_paused(self, session_id: str, until: float) -> SessionRecord | None:
        return await self._env.write(lambda txn: _update(txn, self._sessions, session_id, {"paused_until": until}))

    async def paused_sessions(self) -> list[SessionRecord]:
        def _paused(txn: Txn) -> list[SessionRecord]:
            records = (
                decoded_or_skipped(value, SessionRecord, bytes(key)) for key, value in txn.cursor(db=self._sessions)
            )
            return [record for record in records if record is not None and record.paused_until and not record.condemned]

        return await self._env.read(_paused)
