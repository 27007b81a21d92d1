"""The zygote: a process that has imported the worker (Python, QuickJS, the prelude) once, and forks workers.

Starting a worker from scratch costs ~145 ms of CPU, nearly all of it the interpreter and its imports; a
fork of a process that already did them costs a few milliseconds. The forked worker must be what a
spawned one is, so:

- Its descriptors are only 0, 1 and 2, its own pipes: the server makes them and sends them here over the
  zygote's stdin, a Unix socket (SCM_RIGHTS); the child puts them in place and closes everything else.
- Its environment is empty and its directory `/`: the zygote was started that way and nothing changes
  them; the zygote itself runs no agent code and holds nothing of the server's.
- It confines itself (`worker._confine`) and starts its lifeline thread after the fork (threads do not
  survive one), exactly as `worker.main` does for a spawned worker. The zygote has no threads to fork.
- The server can kill it and wait for it although it is not the server's child: the zygote opens a pidfd
  for the child before anything could reap it and sends that back; a pidfd names this one process,
  never a later one with the same pid.
- Its QuickJS contexts are made after the fork, so no two workers share an engine's state (`Math.random`
  is seeded per execution, by the host or else from `os.urandom`, never from state a fork copies).
  Python's own state is the zygote's (its hash seed, `random`): no agent code reaches Python, so that is
  the one way a forked worker differs from a spawned one.

The zygote reaps its children (SIGCHLD), and dies with the server: only the server holds the other end
of its socket, so when the server is gone, even SIGKILLed, the next read says so and the zygote exits.
Each worker has its own lifeline on its own stdin, so it does not depend on the zygote being alive.

Requests and replies on the socket (SOCK_SEQPACKET, so each is one message), one at a time, after the
zygote said it is ready (one byte, once its imports are done): the server sends one byte with three descriptors
(the worker's stdin, stdout and stderr); the zygote answers with the child's pid as 4 bytes, big-endian,
and its pidfd, or with `FORK_FAILED` when the fork failed.
"""

import array
import gc
import os
import signal
import socket
import struct
import sys
import traceback

from executor_mcp.sandbox import worker

PID = struct.Struct(">I")
READY = b"r"
UNABLE = b"n"  # instead of READY: this system has no pidfds, so the server cannot own forked workers
FORK_FAILED = b"x"  # the answer to a request when the fork failed (the zygote goes on)
STDIO = 3
_FDS_SPACE = socket.CMSG_SPACE(STDIO * array.array("i").itemsize)


_forking = False  # between a fork and its pidfd: the child must not be reaped yet


def _reap(_signal: int, _frame: object) -> None:
    if _forking:
        return  # `_fork` reaps once the pidfd is open
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _received_fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


def _become_worker(channel: socket.socket, stdio: list[int]) -> None:
    """In the child: take the three descriptors as 0, 1 and 2, drop the rest, and serve as a worker."""
    code = 1
    try:
        channel.detach()  # its descriptor (0) is replaced below; closing the object would close the new stdin
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        os.closerange(STDIO, os.sysconf("SC_OPEN_MAX"))
        code = worker.main()
    except BaseException:
        traceback.print_exc()  # on the worker's stderr now: the server relays it
    finally:
        os._exit(code)


def _fork(channel: socket.socket, stdio: list[int]) -> None:
    """Fork a worker and send its pid and pidfd; a fork that fails is answered with nothing (the server then
    spawns), and the zygote goes on."""
    global _forking
    # No reaping until the child's pidfd is open, so a child that dies at once is still there to name: the
    # signal is blocked, and a handler already pending when it was blocked returns at once.
    _forking = True
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    pidfd = -1
    try:
        pid = os.fork()
        if pid == 0:
            _become_worker(channel, stdio)
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        print(f"cannot fork a sandbox worker: {exc}", file=sys.stderr, flush=True)
    finally:
        _forking = False
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        for fd in stdio:
            os.close(fd)
    _reap(signal.SIGCHLD, None)
    if pidfd < 0:
        channel.sendall(FORK_FAILED)
        return
    try:
        socket.send_fds(channel, [PID.pack(pid)], [pidfd])
    finally:
        os.close(pidfd)


def _has_pidfds() -> bool:
    try:
        pidfd = os.pidfd_open(os.getpid())
    except OSError:
        return False
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except OSError:
        return False
    finally:
        os.close(pidfd)
    return True


def serve(channel: socket.socket) -> None:
    while True:
        data, ancillary, _flags, _address = channel.recvmsg(1, _FDS_SPACE)
        stdio = _received_fds(ancillary)
        if not data:
            return  # the server is gone
        if len(stdio) != STDIO:
            for fd in stdio:
                os.close(fd)
            return  # not a request of ours: nothing sensible to answer
        _fork(channel, stdio)


def main() -> int:
    signal.signal(signal.SIGCHLD, _reap)
    # What the imports made is shared with every fork until written to; a collection in a worker would
    # write to all of it (reference counts aside). Frozen, the collector leaves those pages shared.
    gc.collect()
    gc.freeze()
    channel = socket.socket(fileno=sys.stdin.fileno())
    if not _has_pidfds():
        channel.sendall(UNABLE)
        return 0
    channel.sendall(READY)  # the imports are done: forks are cheap from now on
    serve(channel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
