"""Supervised sandbox worker processes, a few kept warm, one execution per worker at a time.

One execution per process is what makes a runaway execution harmless to everyone else: its loop
burns its own process (until the CPU budget stops it), and every other execution runs in another
process on the other core. A worker that finished an execution cleanly goes back to the warm pool; one
that broke a limit, died, went quiet or was abandoned is killed and replaced.

Every worker process is owned by a supervising task in the pool's nursery, so closing the pool (server
shutdown) kills them all; a server killed outright cannot, and then each worker sees its stdin hang up
and exits by itself (see the worker). No process outlives the server.
"""

import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from typing import Any

import trio

from executor_mcp.background import retrying
from executor_mcp.sandbox.protocol import FrameDecoder, FrameError, encode
from executor_mcp.sandbox.slots import FairSlots

log = logging.getLogger(__name__)

_STDERR_LINES = 20


def worker_command() -> list[str]:
    """The binary re-executes itself as a worker; from source, the worker module runs directly."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "sandbox-worker"]
    return [sys.executable, "-m", "executor_mcp.sandbox.worker"]


class WorkerLost(Exception):
    """The worker died, broke the protocol or stopped answering; the execution cannot go on."""


class WorkerMisbehaved(WorkerLost):
    """The worker sent what no well-behaved worker sends (a malformed or oversized frame).

    It runs untrusted code, so this is the code's doing rather than a server defect: the execution
    ends with a message that says so, and the worker is killed.
    """


class Worker:
    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.reusable = False
        self._decoder = FrameDecoder()

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    async def request(self, message: dict[str, Any], *, answer_within: float) -> dict[str, Any]:
        """Send one request and wait for its reply; past `answer_within` seconds the worker is killed."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None
        assert stdout is not None
        try:
            await stdin.send_all(encode(message))
            with trio.move_on_after(answer_within):
                while (reply := self._decoder.next()) is None:
                    chunk = await stdout.receive_some(1 << 16)
                    if not chunk:
                        raise WorkerLost(f"the sandbox worker exited ({self._status()})")
                    self._decoder.feed(chunk)
                return reply
        except FrameError as exc:
            self.kill()
            raise WorkerMisbehaved(str(exc)) from None
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self.kill()
            raise WorkerLost(f"the sandbox worker broke off: {exc}") from None
        self.kill()
        raise WorkerLost(f"the sandbox worker did not answer within {answer_within:g}s")

    def kill(self) -> None:
        self.reusable = False
        if self.alive:
            self.process.kill()

    def _status(self) -> str:
        code = self.process.poll()
        if code is None:
            return "still running"
        return f"signal {-code}" if code < 0 else f"status {code}"


class WorkerPool:
    def __init__(self, *, spares: int = 2, max_workers: int = 64, command: list[str] | None = None) -> None:
        self._spares = spares
        self._slots = FairSlots(max_workers)
        self._command = command or worker_command()
        self._idle: list[Worker] = []
        self._starting = 0  # spares being started: counted, so a burst of ends starts no more than are missing
        self._nursery: trio.Nursery | None = None

    @property
    def most_one_account_holds(self) -> int:
        return self._slots.most_one_account_holds

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._replenish()
            task_status.started()
            await trio.sleep_forever()

    @asynccontextmanager
    async def lease(self, account: Hashable = None) -> AsyncIterator[Worker]:
        """A worker for one execution of `account`, shared fairly (`slots.py`) when the pool is full.

        It is returned warm only if the execution marked it reusable.
        """
        async with self._slots.hold(account):
            worker = self._take_idle() or await self._start()
            worker.reusable = False
            try:
                yield worker
            finally:
                if worker.reusable and worker.alive and len(self._idle) < self._spares:
                    self._idle.append(worker)
                else:
                    worker.kill()
                self._replenish()

    def _take_idle(self) -> Worker | None:
        while self._idle:
            worker = self._idle.pop()
            if worker.alive:
                return worker
        return None

    def _replenish(self) -> None:
        if self._nursery is None:
            return
        for _ in range(self._spares - len(self._idle) - self._starting):
            self._starting += 1
            self._nursery.start_soon(self._add_spare)

    async def _add_spare(self) -> None:
        try:
            worker = await retrying("starting a spare sandbox worker", self._start)
        finally:
            self._starting -= 1
        if len(self._idle) < self._spares:
            self._idle.append(worker)
        else:
            worker.kill()

    async def _start(self) -> Worker:
        if self._nursery is None:
            raise RuntimeError("the worker pool is not running")
        process = await trio.lowlevel.open_process(
            self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},  # nothing of the server's environment reaches agent code's process
            cwd="/",
            close_fds=True,
        )
        worker = Worker(process)
        self._nursery.start_soon(self._supervise, worker)
        return worker

    async def _supervise(self, worker: Worker) -> None:
        """Own the process: relay what it says on stderr, and make sure it is dead when we are done."""
        try:
            await _relay_stderr(worker.process)
            await worker.process.wait()
        finally:
            worker.kill()
            with trio.CancelScope(shield=True):
                await worker.process.wait()


async def _relay_stderr(process: trio.Process) -> None:
    stderr = process.stderr
    assert stderr is not None
    said = 0
    pending = b""
    while chunk := await stderr.receive_some(1 << 14):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if said < _STDERR_LINES:
                log.warning("sandbox worker %d: %s", process.pid, line.decode(errors="replace")[:500])
            said += 1
    if said > _STDERR_LINES:
        log.warning("sandbox worker %d: %d more stderr lines not shown", process.pid, said - _STDERR_LINES)
