"""One server per data dir: `serve` and `stdio` each hold an exclusive lock on it while they run.

Two servers on one data dir would each recover it at start-up (wiping a file the other has not yet listed),
revive the same paused sessions into two runtimes, and sweep each other's work. Admin commands take no lock:
they write through the control plane's own transactions, which is what LMDB's multi-process use is for.

The lock is `flock` on a file in the data dir: the kernel drops it when the process ends however it ends, so
a crash never leaves a stale lock behind. The file also says which process holds it (its first line, the pid), for
the refusal, and once `serve` listens, the URL it serves at (its second line), for `doctor` to find it on whatever
port it runs. What the file says is read only while its lock is held: a crashed server's lines are stale.
"""

import fcntl
import os
from pathlib import Path

import attrs

LOCK_FILE = "server.lock"
# Bytes of the lock file read back: a pid and a URL (a host name is at most 253 characters).
_MOST_READ = 4096


class DataDirInUse(Exception):
    """Another server holds the data dir."""


@attrs.frozen
class Holder:
    """The server holding a data dir: its pid (0 if unreadable) and, once it has announced it, its URL."""

    pid: int
    url: str | None


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
        pid = _said(fd)[0] or "unknown"
        os.close(fd)
        raise DataDirInUse(
            f"{data_dir} is in use by another executor-mcp server (pid {pid}): stop it, or give this one "
            "its own --data-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return Held(fd)


def _said(fd: int) -> tuple[str, str]:
    """The lock file's pid and URL lines ("" where missing)."""
    pid, _, url = os.pread(fd, _MOST_READ, 0).decode("ascii", "replace").partition("\n")
    return pid.strip(), url.strip()


def announce(data_dir: Path, url: str) -> None:
    """Say, under this process's pid, the URL it serves at: called by the server holding the data dir once it
    listens, so `doctor` finds it without being told its port (`--port 0`, or a port from another config)."""
    fd = os.open(data_dir / LOCK_FILE, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.pwrite(fd, f"{os.getpid()}\n{url}\n".encode(), 0)
    finally:
        os.close(fd)


def holder(data_dir: Path) -> Holder | None:
    """The server holding the data dir, or None when none does or it cannot be told (for `doctor`)."""
    try:
        fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # no lock file, or no data dir (missing, or not a directory): no server holds it
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, url = _said(fd)
            return Holder(int(pid) if pid.isdigit() else 0, url or None)
        return None
    finally:
        os.close(fd)
