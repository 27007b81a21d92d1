"""One server per data dir: `serve` and `stdio` each hold an exclusive lock on it while they run.

Two servers on one data dir would each recover it at start-up (wiping a file the other has not yet listed),
revive the same paused sessions into two runtimes, and sweep each other's work. Admin commands take no lock:
they write through the control plane's own transactions, which is what LMDB's multi-process use is for.

The lock is `flock` on a file in the data dir: the kernel drops it when the process ends however it ends, so
a crash never leaves a stale lock behind. The file also says which process holds it, for the refusal.
"""

import fcntl
import os
from pathlib import Path

import attrs

LOCK_FILE = "server.lock"


class DataDirInUse(Exception):
    """Another server holds the data dir."""


@attrs.frozen
class Held:
    """The data dir's lock, held until `release` (or the process's end)."""

    fd: int

    def release(self) -> None:
        os.close(self.fd)


def acquire(data_dir: Path) -> Held:
    """Hold the data dir (made if missing) for this process, or raise `DataDirInUse` naming who holds it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise DataDirInUse(
            f"{data_dir} is in use by another executor-mcp server (pid {holder}): stop it, or give this one "
            "its own --data-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return Held(fd)


def holder(data_dir: Path) -> int | None:
    """The pid of the server holding the data dir, or None when none does (for `doctor`)."""
    try:
        fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else 0
        return None
    finally:
        os.close(fd)
