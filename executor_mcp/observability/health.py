"""Whether the server can do its work (`/readyz`), and what it holds (the scrape's `Snapshot`).

Readiness is three checks, each answered in words when it fails:

- storage: a file is created and removed in the data dir and in its sessions dir (where every new session's
  file is made). That is what a read-only remount, a full inode table or a permission change refuses, and it
  leaves nothing behind and grows nothing (an LMDB write transaction would allocate pages; the environment
  already open would also keep writing through its descriptor after a `chmod`, hiding the fault). The probe
  runs in a thread, one at a time.
- sandbox: the worker pool has a warm worker, a running zygote to fork one, or workers at work.
- server: it is not shutting down (a load balancer stops sending new work while the old finishes).
- database (with `--database-url` only): a new connection answers `SELECT 1` within `DATABASE_BOUND` seconds.
  Every request needs the shared database, so an instance that cannot reach it is taken out of rotation.

The snapshot's sizes are cheap on purpose: the control plane is one `stat`; the session files are summed by a
directory scan of at most `MAX_SCANNED` entries, redone at most every `SIZES_MAX_AGE` seconds. With the shared
database the snapshot adds its pool's state, and a scrape during an outage still answers: the stored sessions
it cannot count then read as those this process holds.
"""

import os
import secrets
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from executor_mcp.execution.runs import PendingApprovals
from executor_mcp.observability.metrics import Snapshot
from executor_mcp.sandbox.pool import PoolStats, WorkerPool
from executor_mcp.sessions.lifecycle import State
from executor_mcp.sessions.manager import SESSIONS_DIR, SessionManager
from executor_mcp.storage.control import CONTROL_FILE
from executor_mcp.storage.interfaces import SessionDirectory, StoreUnavailable
from executor_mcp.storage.postgres.database import Database

PROBE_PREFIX = ".write-probe-"
SIZES_MAX_AGE = 60.0
MAX_SCANNED = 100_000
DATABASE_BOUND = 2.0  # seconds a readiness probe waits for the database's `SELECT 1`
_SESSION_SUFFIX = ".mdb"
# Sessions with a runtime (or on their way to or from one) in this process; the rest of the stored ones are
# disposed: on disk, restored by their next request.
_HELD = (State.RESTORING, State.LIVE, State.CONDEMNED, State.RESTARTING)


@attrs.frozen
class Readiness:
    """Each check's verdict: "ok", or what is wrong."""

    checks: dict[str, str]

    @property
    def ready(self) -> bool:
        return all(verdict == "ok" for verdict in self.checks.values())


def write_probe(directory: Path) -> str:
    """Create and remove a file in `directory`: "ok", or why it cannot be written. Blocking."""
    probe = directory / f"{PROBE_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError as exc:
        return f"cannot create a file in {directory}: {exc.strerror}"
    os.close(fd)
    try:
        probe.unlink()
    except OSError as exc:
        return f"cannot remove a file in {directory}: {exc.strerror}"
    return "ok"


def storage_verdict(data_dir: Path) -> str:
    """The storage check, blocking: the data dir, then its sessions dir once it exists."""
    for directory in (data_dir, data_dir / SESSIONS_DIR):
        if directory != data_dir and not directory.is_dir():
            continue
        verdict = write_probe(directory)
        if verdict != "ok":
            return verdict
    return "ok"


def pool_verdict(stats: PoolStats) -> str:
    if stats.idle or stats.in_use or stats.zygote_ready:
        return "ok"
    return "no sandbox worker or zygote is ready yet"


def session_file_sizes(sessions_dir: Path, limit: int = MAX_SCANNED) -> tuple[int, int]:
    """(total bytes, files) of the session files, looking at no more than `limit` entries. Blocking."""
    total = files = 0
    try:
        with os.scandir(sessions_dir) as entries:
            for seen, entry in enumerate(entries):
                if seen >= limit:
                    break
                if entry.name.endswith(_SESSION_SUFFIX):
                    try:
                        total += entry.stat(follow_symlinks=False).st_size
                    except OSError:  # removed since it was listed
                        continue
                    files += 1
    except FileNotFoundError:
        pass
    return total, files


def session_states(handles: Counter[State], stored: int) -> dict[str, int]:
    """Sessions by state: those this process holds a handle of, and, as disposed, the other stored ones."""
    counts = {state.value: handles.get(state, 0) for state in _HELD}
    counts[State.DISPOSED.value] = max(0, stored - sum(counts.values()))
    return counts


class Health:
    """The readiness checks and the scrape's snapshot, over the parts of a running server."""

    def __init__(
        self,
        data_dir: Path,
        sessions: SessionDirectory,
        manager: SessionManager,
        book: PendingApprovals,
        pool: WorkerPool,
        clock: Callable[[], float] = time.monotonic,
        database: Database | None = None,
    ) -> None:
        """`database`: the shared control plane's pool (`--database-url`), checked and gauged; None with LMDB."""
        self._data_dir = data_dir
        self._sessions = sessions
        self._manager = manager
        self._book = book
        self._pool = pool
        self._clock = clock
        self._database = database
        self._probing = trio.Lock()
        self._sizing = trio.Lock()
        self._sizes: tuple[int, int] = (0, 0)
        self._sized_at: float | None = None

    async def readiness(self) -> Readiness:
        async with self._probing:
            storage = await trio.to_thread.run_sync(storage_verdict, self._data_dir)
        server = "shutting down" if self._manager.draining else "ok"
        checks = {"storage": storage, "sandbox": pool_verdict(self._pool.stats()), "server": server}
        if self._database is not None:
            checks["database"] = await self._database.ping(DATABASE_BOUND)
        return Readiness(checks)

    async def snapshot(self) -> Snapshot:
        handles = self._manager.state_counts()
        try:
            stored = await self._sessions.session_count()
        except StoreUnavailable:
            stored = sum(handles.values())
        bytes_, files = await self._session_sizes()
        stats = self._pool.stats()
        try:
            control_bytes = (self._data_dir / CONTROL_FILE).stat().st_size
        except OSError:
            control_bytes = 0
        return Snapshot(
            sessions=session_states(handles, stored),
            paused_executions=self._book.live_count,
            workers={"busy": stats.in_use, "idle": stats.idle, "starting": stats.starting},
            control_plane_bytes=control_bytes,
            session_files_bytes=bytes_,
            session_files=files,
            database_connections=None if self._database is None else _connections(self._database),
        )

    async def _session_sizes(self) -> tuple[int, int]:
        async with self._sizing:
            if self._sized_at is None or self._clock() - self._sized_at >= SIZES_MAX_AGE:
                self._sizes = await trio.to_thread.run_sync(session_file_sizes, self._data_dir / SESSIONS_DIR)
                self._sized_at = self._clock()
            return self._sizes


def _connections(database: Database) -> dict[str, int]:
    stats = database.stats()
    return {"idle": stats.idle, "in_use": stats.in_use, "waiting": stats.waiting}
