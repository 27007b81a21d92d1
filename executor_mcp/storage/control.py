"""The control plane: one server-level LMDB environment shared by the server and admin commands.

It holds the session directory (which ids exist, whom they belong to, whether they are condemned);
later capabilities add organizations, API keys and policies beside it. LMDB is multi-process, so an
admin command can change it while a server runs on the same data dir.
"""

from pathlib import Path

import attrs

from executor_mcp.storage.environment import Environment
from executor_mcp.storage.records import SessionRecord, decode, encode

CONTROL_FILE = "control.mdb"
_MAX_DBS = 8


class ControlPlane:
    def __init__(self, env: Environment) -> None:
        self._env = env
        self._sessions = env.database(b"sessions")

    @classmethod
    async def open(cls, data_dir: Path) -> "ControlPlane":
        return cls(await Environment.open(data_dir / CONTROL_FILE, max_dbs=_MAX_DBS))

    async def close(self) -> None:
        await self._env.close()

    async def put_session(self, record: SessionRecord) -> None:
        await self._env.write(lambda txn: txn.put(record.session_id.encode(), encode(record), db=self._sessions))

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
        await self._env.write(lambda txn: txn.delete(session_id.encode(), db=self._sessions))

    async def sessions(self) -> list[SessionRecord]:
        def _all(txn) -> list[SessionRecord]:
            return [decode(value, SessionRecord) for _, value in txn.cursor(db=self._sessions)]

        return await self._env.read(_all)
