"""A session's own LMDB file: its meta, the initialize request it was opened with, its activity.

One environment per session keeps a session's data, its growth and its deletion independent of every
other session: wiping a session is closing one environment and unlinking two files.
"""

from pathlib import Path

from executor_mcp.codec import dumps, loads
from executor_mcp.storage.environment import Environment, remove_files
from executor_mcp.storage.records import SessionMeta, decode, encode

_META = b"meta"
_INITIALIZE = b"initialize"
_LAST_ACTIVITY = b"last-activity"


class MissingSessionFile(Exception):
    """The directory names a session whose file holds no meta (never written, or lost)."""


class SessionFile:
    def __init__(self, env: Environment) -> None:
        self._env = env

    @staticmethod
    def path_for(sessions_dir: Path, session_id: str) -> Path:
        return sessions_dir / f"{session_id}.mdb"

    @classmethod
    async def create(cls, path: Path, meta: SessionMeta, initialize_request: bytes) -> "SessionFile":
        env = await Environment.open(path)

        def _write(txn) -> None:
            txn.put(_META, encode(meta))
            txn.put(_INITIALIZE, initialize_request)
            txn.put(_LAST_ACTIVITY, dumps(meta.created_at))

        await env.write(_write)
        return cls(env)

    @classmethod
    async def open(cls, path: Path) -> "SessionFile":
        try:
            return cls(await Environment.open(path, create=False))
        except FileNotFoundError:
            raise MissingSessionFile(str(path)) from None

    async def meta(self) -> SessionMeta:
        raw = await self._env.read(lambda txn: txn.get(_META))
        if raw is None:
            raise MissingSessionFile(str(self._env.path))
        return decode(raw, SessionMeta)

    async def initialize_request(self) -> bytes | None:
        return await self._env.read(lambda txn: txn.get(_INITIALIZE))

    async def last_activity(self) -> float | None:
        raw = await self._env.read(lambda txn: txn.get(_LAST_ACTIVITY))
        return None if raw is None else loads(raw)

    async def touch(self, at: float) -> None:
        await self._env.write(lambda txn: txn.put(_LAST_ACTIVITY, dumps(at)))

    async def close(self) -> None:
        await self._env.close()

    @staticmethod
    def wipe(path: Path) -> None:
        remove_files(path)
