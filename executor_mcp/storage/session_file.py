"""A session's own LMDB file: its meta, the initialize request it was opened with, its activity, the
events of answers whose connection went away before they were delivered, and its durable executions
(each one's journal and pause records, as bytes the execution layer encodes).

One environment per session keeps a session's data, its growth and its deletion independent of every
other session: wiping a session is closing one environment and unlinking two files.
"""

from collections.abc import Callable
from pathlib import Path

from executor_mcp.codec import dumps, loads
from executor_mcp.storage.environment import Environment, remove_files
from executor_mcp.storage.records import SessionMeta, decode, encode

_META = b"meta"
_INITIALIZE = b"initialize"
_LAST_ACTIVITY = b"last-activity"
_EVENT = b"event:"
_UNDELIVERED = b"undelivered:"
_JOURNAL = b"journal:"
_PAUSE = b"pause:"
_SUFFIX = ".mdb"
_LOCK_SUFFIX = ".mdb-lock"


class MissingSessionFile(Exception):
    """The directory names a session whose file holds no usable meta (never written, lost, or unreadable)."""


class SessionFile:
    def __init__(self, env: Environment) -> None:
        self._env = env

    @staticmethod
    def path_for(sessions_dir: Path, session_id: str) -> Path:
        return sessions_dir / f"{session_id}{_SUFFIX}"

    @classmethod
    async def create(cls, path: Path, meta: SessionMeta, initialize_request: bytes) -> "SessionFile":
        """The file with its meta, atomically: no crash leaves a session file without meta."""

        def _write(txn) -> None:
            txn.put(_META, encode(meta))
            txn.put(_INITIALIZE, initialize_request)
            txn.put(_LAST_ACTIVITY, dumps(meta.created_at))

        return cls(await Environment.create_whole(path, _write))

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
        try:
            return decode(raw, SessionMeta)
        except Exception as exc:  # what strict decoding raises varies; any of it means no usable meta
            raise MissingSessionFile(f"{self._env.path}: unreadable meta ({type(exc).__name__})") from None

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

    @staticmethod
    def scan(sessions_dir: Path, is_session_id: Callable[[str], bool]) -> tuple[set[str], list[Path]]:
        """The ids that have a session file, and the leftovers of interrupted work: files being built
        when a crash came, and lock files whose data file is gone. Names of any other shape are not
        ours and are left alone. Blocking: run it in a thread."""
        if not sessions_dir.is_dir():
            return set(), []
        names = {entry.name for entry in sessions_dir.iterdir()}
        stored, leftovers = set(), []
        for name in names:
            stem, _, rest = name.partition(".")
            if not is_session_id(stem):
                continue
            if "." + rest == _SUFFIX:
                stored.add(stem)
            elif "." + rest != _LOCK_SUFFIX or stem + _SUFFIX not in names:
                leftovers.append(sessions_dir / name)
        return stored, leftovers

    # -- the event store: answers whose POST connection went away, kept until a GET delivers them ----

    async def store_events(self, stream_id: str, events: list[tuple[int, bytes]], keep_from: int) -> None:
        """Write events of a stream, and drop its stored events older than `keep_from` (the caps)."""
        prefix = _EVENT + stream_id.encode() + b":"

        def _store(txn) -> None:
            for seq, raw in events:
                txn.put(prefix + _seq(seq), raw)
            cursor = txn.cursor()
            if cursor.set_range(prefix):
                while cursor.key().startswith(prefix) and cursor.key() < prefix + _seq(keep_from):
                    if not cursor.delete():
                        break

        await self._env.write(_store)

    async def mark_undelivered(self, stream_id: str) -> None:
        await self._env.write(lambda txn: txn.put(_UNDELIVERED + stream_id.encode(), b""))

    async def undelivered(self) -> list[tuple[str, list[tuple[int, bytes]]]]:
        """Every finished stream not yet delivered, with its stored events in order."""

        def _scan(txn) -> list[tuple[str, list[tuple[int, bytes]]]]:
            ids = [key[len(_UNDELIVERED) :].decode() for key, _ in _prefixed(txn, _UNDELIVERED)]
            return [(stream_id, _events(txn, stream_id, 0)) for stream_id in ids]

        return await self._env.read(_scan)

    async def events_after(self, stream_id: str, seq: int) -> list[tuple[int, bytes]]:
        return await self._env.read(lambda txn: _events(txn, stream_id, seq))

    async def acknowledge(self, stream_id: str) -> None:
        """The stream was delivered: forget its events and its undelivered mark."""
        prefix = _EVENT + stream_id.encode() + b":"

        def _forget(txn) -> None:
            txn.delete(_UNDELIVERED + stream_id.encode())
            _delete_prefixed(txn, prefix)

        await self._env.write(_forget)

    # -- durable executions: journals and the pauses that wait on them --------------------------------

    async def keep_execution(
        self, key: str, records: list[tuple[int, bytes]], pauses: dict[str, bytes] | None = None
    ) -> None:
        """Append numbered journal records of execution `key`, and write pause records, in one transaction."""
        prefix = _JOURNAL + key.encode() + b":"

        def _keep(txn) -> None:
            for seq, raw in records:
                txn.put(prefix + _seq(seq), raw)
            for pause_id, raw in (pauses or {}).items():
                txn.put(_PAUSE + pause_id.encode(), raw)

        await self._env.write(_keep)

    async def journal(self, key: str) -> list[bytes]:
        """Execution `key`'s journal records in order (its head first); empty when there is none."""
        prefix = _JOURNAL + key.encode() + b":"
        return await self._env.read(lambda txn: [value for _, value in _prefixed(txn, prefix)])

    async def pauses(self) -> list[bytes]:
        """Every pause record in the file."""
        return await self._env.read(lambda txn: [value for _, value in _prefixed(txn, _PAUSE)])

    async def forget_execution(self, key: str, pause_ids: list[str]) -> None:
        """Drop execution `key`'s journal and the given pause records (the execution ended)."""
        prefix = _JOURNAL + key.encode() + b":"

        def _forget(txn) -> None:
            _delete_prefixed(txn, prefix)
            for pause_id in pause_ids:
                txn.delete(_PAUSE + pause_id.encode())

        await self._env.write(_forget)

    async def forget_executions(self) -> None:
        """Drop every journal and pause record (the runtime was disposed of: its pauses end with it)."""

        def _forget(txn) -> None:
            _delete_prefixed(txn, _JOURNAL)
            _delete_prefixed(txn, _PAUSE)

        await self._env.write(_forget)


def _prefixed(txn, prefix: bytes, start: bytes = b"") -> list[tuple[bytes, bytes]]:
    """Every key under `prefix` (from `prefix + start` on) with its value, in key order."""
    found = []
    cursor = txn.cursor()
    if cursor.set_range(prefix + start):
        for key, value in cursor:
            if not key.startswith(prefix):
                break
            found.append((bytes(key), bytes(value)))
    return found


def _delete_prefixed(txn, prefix: bytes) -> None:
    cursor = txn.cursor()
    if cursor.set_range(prefix):
        while cursor.key().startswith(prefix):
            if not cursor.delete():
                break


def _seq(seq: int) -> bytes:
    return f"{seq:016x}".encode()


def _events(txn, stream_id: str, after: int) -> list[tuple[int, bytes]]:
    prefix = _EVENT + stream_id.encode() + b":"
    return [(int(key[len(prefix) :], 16), value) for key, value in _prefixed(txn, prefix, _seq(after + 1))]
