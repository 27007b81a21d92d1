"""The server's handles on sandbox worker processes, spawned or forked by the zygote, and on the zygote.

A worker is either the server's own child (spawned: a whole interpreter start) or the zygote's
(forked: see `zygote.py`). Both look the same to the pool: three pipes, a way to kill it, a way to wait
for it. A forked worker is not the server's child, so it is killed and waited for through a pidfd,
which the zygote opened before the child could be reaped and so names that process and no other.
"""

import array
import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
from typing import Protocol

import trio

from executor_mcp.sandbox.zygote import FORK_FAILED, PID, READY, UNABLE

log = logging.getLogger(__name__)

_STDERR_LINES = 20
_PIDFD_SPACE = socket.CMSG_SPACE(array.array("i").itemsize)
# A fork takes milliseconds; a zygote that takes this long to answer one is stuck and is replaced.
FORK_TIMEOUT = 10.0
# The zygote imports what a worker does: on a loaded machine that can take seconds.
ZYGOTE_START_TIMEOUT = 60.0


def worker_command() -> list[str]:
    """The binary re-executes itself as a worker; from source, the worker module runs directly."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "sandbox-worker"]
    return [sys.executable, "-m", "executor_mcp.sandbox.worker"]


def zygote_command() -> list[str]:
    if getattr(sys, "frozen", False):
        return [sys.executable, "sandbox-zygote"]
    return [sys.executable, "-m", "executor_mcp.sandbox.zygote"]


class WorkerProcess(Protocol):
    # Read-only, so that a process may hold streams that do more (a forked one's pipes are `FdStream`s).
    @property
    def pid(self) -> int: ...

    @property
    def stdin(self) -> trio.abc.SendStream: ...

    @property
    def stdout(self) -> trio.abc.ReceiveStream: ...

    @property
    def stderr(self) -> trio.abc.ReceiveStream: ...

    @property
    def exited(self) -> bool: ...

    def describe_exit(self) -> str: ...

    def kill(self) -> None: ...

    async def wait(self) -> None: ...

    def release(self) -> None:
        """Free what the handle holds of a process that is gone (its pipes close when collected)."""


async def open_isolated(command: list[str], *, stdin: int, stdout: int) -> trio.Process:
    """A process that inherits nothing of the server: no environment, no descriptors but 0, 1 and 2."""
    return await trio.lowlevel.open_process(
        command,
        stdin=stdin,
        stdout=stdout,
        stderr=subprocess.PIPE,
        env={},  # nothing of the server's environment reaches agent code's process
        cwd="/",
        close_fds=True,
    )


class SpawnedProcess:
    def __init__(self, process: trio.Process) -> None:
        self._process = process
        self.pid = process.pid
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        self.stdin, self.stdout, self.stderr = process.stdin, process.stdout, process.stderr

    @property
    def exited(self) -> bool:
        return self._process.poll() is not None

    def describe_exit(self) -> str:
        return _describe(self._process.poll())

    def kill(self) -> None:
        if not self.exited:
            self._process.kill()

    async def wait(self) -> None:
        await self._process.wait()

    def release(self) -> None:
        pass  # trio reaped it: nothing is left to free


class ForkedProcess:
    def __init__(self, pid: int, pidfd: int, stdin: int, stdout: int, stderr: int) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self._gone = False
        self._killed = False
        self.stdin = trio.lowlevel.FdStream(stdin)
        self.stdout = trio.lowlevel.FdStream(stdout)
        self.stderr = trio.lowlevel.FdStream(stderr)

    @property
    def exited(self) -> bool:
        if not self._gone and self._pidfd >= 0:
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            self._gone = bool(poller.poll(0))  # a pidfd turns readable when its process exits
            if self._gone:
                self._reap()
        return self._gone or self._pidfd < 0

    def describe_exit(self) -> str:
        # Its exit status goes to the zygote, its parent; the pool only needs to know that it is gone.
        if not self.exited:
            return "still running"
        return "killed" if self._killed else "exited"

    def kill(self) -> None:
        if not self.exited:
            self._killed = True
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                self._gone = True

    async def wait(self) -> None:
        if not self.exited:
            await trio.lowlevel.wait_readable(self._pidfd)
            self._gone = True
            self._reap()

    def _reap(self) -> None:
        """Its parent is the zygote, which reaps it; but a zygote that died leaves its workers to the nearest
        subreaper, which may be the server (as PID 1 in a container), and then nobody else would."""
        with contextlib.suppress(ChildProcessError):  # not ours to reap: the zygote did
            os.waitid(os.P_PIDFD, self._pidfd, os.WEXITED | os.WNOHANG)

    def release(self) -> None:
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1


class ZygoteBroken(OSError):
    """The zygote did not fork a worker: it died, is being replaced, or stopped answering."""


class ForkFailed(ZygoteBroken):
    """The zygote could not fork this once (out of processes or memory); it goes on, and the start spawns."""


class ZygoteUnavailable(ZygoteBroken):
    """This system cannot run a zygote (no pidfds: an old kernel, or a seccomp profile that denies them)."""


class Zygote:
    """The server's end of one zygote process: fork requests, one at a time, over its socket."""

    def __init__(self, process: trio.Process, channel: trio.socket.SocketType) -> None:
        self.process = process
        self._channel = channel
        self._lock = trio.Lock()
        self._broken = False

    @classmethod
    async def start(cls, command: list[str]) -> "Zygote":
        """A zygote that finished its imports; killed again if it does not get that far."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = await open_isolated(command, stdin=theirs.fileno(), stdout=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        zygote = cls(process, trio.socket.from_stdlib_socket(ours))
        try:
            with trio.fail_after(ZYGOTE_START_TIMEOUT):
                ready = await zygote._channel.recv(len(READY))
            if ready == UNABLE:
                raise ZygoteUnavailable("this system has no pidfds (pidfd_open, pidfd_send_signal)")
            if ready != READY:
                raise ZygoteBroken(f"the sandbox zygote exited while starting ({_describe(process.poll())})")
        except BaseException:
            await zygote.aclose()
            raise
        return zygote

    async def fork(self) -> ForkedProcess:
        async with self._lock:
            if self._broken:
                raise ZygoteBroken("the sandbox zygote is being replaced")
            theirs: list[int] = []  # the child's ends, closed here once sent
            ours: list[int] = []
            try:
                for child_reads in (True, False, False):  # stdin, stdout, stderr; a failed one leaks none
                    read, write = os.pipe()
                    theirs.append(read if child_reads else write)
                    ours.append(write if child_reads else read)
                # Shielded: a request whose reply went unread would pair the next request with it.
                with trio.CancelScope(shield=True), trio.move_on_after(FORK_TIMEOUT) as waited:
                    pid, pidfd = await self._exchange(theirs)
                if waited.cancelled_caught:
                    raise ZygoteBroken(f"the sandbox zygote did not fork within {FORK_TIMEOUT:g}s")
            except BaseException as exc:
                if not isinstance(exc, ForkFailed):
                    self._break()
                for fd in ours:
                    os.close(fd)
                raise
            finally:
                for fd in theirs:
                    os.close(fd)
        stdin, stdout, stderr = ours
        return ForkedProcess(pid, pidfd, stdin, stdout, stderr)

    async def _exchange(self, stdio: list[int]) -> tuple[int, int]:
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", stdio).tobytes())]
        try:
            await self._channel.sendmsg([b"f"], rights)
            data, ancillary, _flags, _address = await self._channel.recvmsg(
                PID.size, _PIDFD_SPACE, socket.MSG_CMSG_CLOEXEC
            )
        except (OSError, trio.ClosedResourceError) as exc:
            raise ZygoteBroken(f"the sandbox zygote broke off: {exc}") from None
        if data == FORK_FAILED and not ancillary:
            raise ForkFailed("the sandbox zygote could not fork (see its log)")
        fds = array.array("i")
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if len(data) != PID.size or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise ZygoteBroken(f"the sandbox zygote exited ({_describe(self.process.poll())})")
        (pid,) = PID.unpack(data)
        return pid, fds[0]

    def _break(self) -> None:
        """After a failed exchange the socket's state is unknown: this zygote forks no more."""
        self._broken = True
        if self.process.poll() is None:
            self.process.kill()

    async def run(self) -> None:
        """Relay what the zygote says on stderr until it exits."""
        assert self.process.stderr is not None
        await relay_stderr("sandbox zygote", self.process.pid, self.process.stderr)
        await self.process.wait()

    def describe_exit(self) -> str:
        return _describe(self.process.poll())

    async def aclose(self) -> None:
        self._break()  # a fork in progress sees the zygote die and ends; then the socket is ours to close
        with trio.CancelScope(shield=True):
            async with self._lock:
                self._channel.close()
            await self.process.wait()


def _describe(code: int | None) -> str:
    if code is None:
        return "still running"
    return f"signal {-code}" if code < 0 else f"status {code}"


async def relay_stderr(who: str, pid: int, stderr: trio.abc.ReceiveStream) -> None:
    said = 0
    pending = b""
    while chunk := await stderr.receive_some(1 << 14):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if said < _STDERR_LINES:
                log.warning("%s %d: %s", who, pid, line.decode(errors="replace")[:500])
            said += 1
    if said > _STDERR_LINES:
        log.warning("%s %d: %d more stderr lines not shown", who, pid, said - _STDERR_LINES)
