"""One LMDB environment driven from trio.

LMDB calls block (page faults, fsync), so every transaction runs whole (begin, work, commit) inside one
`trio.to_thread.run_sync` call: a transaction never crosses threads and the trio loop never waits on
disk. The exception is `read_now`, for point reads that every request makes (counters). A
per-environment `trio.Lock` serializes the calls, so waiting happens in trio instead of in worker
threads, and so the map can be grown with no transaction open, which LMDB requires.
The thread calls are uncancellable on purpose: a session that is being torn down waits for its last
commit before the environment closes.
"""

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import lmdb
import trio

T = TypeVar("T")
# Transactions are begun without `buffers`, so every key and value they give is `bytes` (the stubs' generic
# parameter; the runtime class is not subscriptable).
if TYPE_CHECKING:
    Txn: TypeAlias = lmdb.Transaction[bytes]
else:
    Txn = lmdb.Transaction
Database: TypeAlias = lmdb._Database

INITIAL_MAP_SIZE = 1 << 20
MAX_MAP_SIZE = 1 << 34


class StorageFull(Exception):
    """The environment would outgrow its ceiling."""


class Environment:
    def __init__(self, env: lmdb.Environment, path: Path, max_map_size: int) -> None:
        self._env = env
        self._lock = trio.Lock()
        self._max_map_size = max_map_size
        self.path = path

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        create: bool = True,
        max_dbs: int = 0,
        map_size: int = INITIAL_MAP_SIZE,
        max_map_size: int = MAX_MAP_SIZE,
    ) -> "Environment":
        """Open the environment at `path`; with `create=False` a missing file is FileNotFoundError."""

        def _open() -> lmdb.Environment:
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
            elif not path.exists():
                raise FileNotFoundError(str(path))
            return lmdb.open(str(path), subdir=False, map_size=map_size, max_dbs=max_dbs, create=create)

        return cls(await trio.to_thread.run_sync(_open), path, max_map_size)

    @classmethod
    async def create_whole(cls, path: Path, work: Callable[[Txn], object]) -> "Environment":
        """A new environment at `path` that appears there only complete: built under a temporary name
        with `work` as its first transaction, then renamed, and kept open (one thread call in all). A crash
        leaves no file or a whole one (and perhaps a `.partial` leftover for start-up recovery).

        The open environment moves with its files: its lock file is renamed first, so a process that opens
        `path` once the data file is there (an admin command) shares this lock file, never makes another."""

        def _build() -> lmdb.Environment:
            partial = partial_path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            remove_files(partial)
            building = cls(lmdb.open(str(partial), subdir=False, map_size=INITIAL_MAP_SIZE), partial, MAX_MAP_SIZE)
            try:
                building._transact(work, True)
                os.rename(lock_path(partial), lock_path(path))
                os.rename(partial, path)
                sync_directory(path.parent)
            except BaseException:
                building._env.close()
                raise
            return building._env

        return cls(await trio.to_thread.run_sync(_build), path, MAX_MAP_SIZE)

    def database(self, name: bytes, txn: Txn | None = None) -> Database:
        """Open (creating) a named database: at start-up before transactions run, or inside a write
        transaction (`txn`) that is about to drop it."""
        return self._env.open_db(name, txn=txn)

    async def read(self, work: Callable[[Txn], T]) -> T:
        return await self._run(work, write=False)

    async def read_now(self, work: Callable[[Txn], T]) -> T:
        """A point read of a few bytes, in this thread: a key or two of a page in memory costs microseconds,
        a trip to a worker thread and back a fraction of a millisecond on every request that asks. Under the
        lock all the same, so it never overlaps a map resize."""
        async with self._lock:
            return self._transact(work, False)

    async def write(self, work: Callable[[Txn], T]) -> T:
        return await self._run(work, write=True)

    async def close(self) -> None:
        async with self._lock:
            await trio.to_thread.run_sync(self._env.close)

    async def _run(self, work: Callable[[Txn], T], *, write: bool) -> T:
        async with self._lock:
            return await trio.to_thread.run_sync(self._transact, work, write)

    def _transact(self, work: Callable[[Txn], T], write: bool) -> T:
        while True:
            try:
                with self._env.begin(write=write) as txn:
                    return work(txn)
            except lmdb.MapResizedError:
                # Another process (an admin command) grew the map: adopt its size and try again.
                self._env.set_mapsize(0)
            except lmdb.MapFullError:
                # The transaction was aborted by leaving the `with`; none is open, so growing is safe.
                size = self._env.info()["map_size"]
                if size * 2 > self._max_map_size:
                    raise StorageFull(f"{self.path} would exceed {self._max_map_size} bytes") from None
                self._env.set_mapsize(size * 2)


def lock_path(path: Path) -> Path:
    """The lock file LMDB keeps beside a `subdir=False` environment."""
    return path.with_name(path.name + "-lock")


def remove_files(path: Path) -> None:
    """Delete an environment's data and lock files; only once no process holds it open."""
    for victim in (path, lock_path(path)):
        victim.unlink(missing_ok=True)


def partial_path(path: Path) -> Path:
    """Where `create_whole` builds the environment for `path`."""
    return path.with_name(path.name + ".partial")


def sync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable before anything that depends on it is committed."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
