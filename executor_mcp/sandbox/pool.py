"""Supervised sandbox worker processes, as many kept warm as recent demand needed, one execution each.

One execution per process is what makes a runaway execution harmless to everyone else: its loop
burns its own process (until the CPU budget stops it), and every other execution runs in another
process on the other core. A worker that finished an execution cleanly goes back to the warm pool; one
that broke a limit, died, went quiet or was abandoned is killed and replaced.

How many stay warm is `sizing.py`'s decision: the recent peak of executions at once (at least a floor),
started ahead of demand in the background; idle ones above that are let go once the peak that kept them
is a window old. New workers are forked by the zygote (`zygote.py`), a few milliseconds each;
while it is not running (starting, or being replaced after it died) they are spawned, a whole
interpreter start each.

Every worker process and the zygote are owned by a supervising task in the pool's nursery, so closing
the pool (server shutdown) kills them all; a server killed outright cannot, and then each worker sees
its stdin hang up and exits by itself (see the worker), as the zygote does on its socket. No process
outlives the server.
"""

import logging
import subprocess
from collections import deque
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from executor_mcp.background import Backoff, retrying
from executor_mcp.sandbox.processes import (
    SpawnedProcess,
    WorkerProcess,
    Zygote,
    ZygoteBroken,
    ZygoteUnavailable,
    open_isolated,
    relay_stderr,
    worker_command,
    zygote_command,
)
from executor_mcp.sandbox.protocol import FrameDecoder, FrameError, frame
from executor_mcp.sandbox.sizing import WARM_WINDOW, WarmPoolSizing
from executor_mcp.sandbox.slots import FairSlots

log = logging.getLogger(__name__)

# The fewest workers kept warm. With the zygote a start is cheap, so one is enough, and the idle server
# (with the zygote) stays as light as it was with two spawned spares (each process is ~18 MiB resident).
SPARES = 1
ZYGOTE_BACKOFF = Backoff(first=0.5, factor=2, ceiling=30)


class WorkerLost(Exception):
    """The worker died, broke the protocol or stopped answering; the execution cannot go on."""


class WorkerMisbehaved(WorkerLost):
    """The worker sent what no well-behaved worker sends (a malformed or oversized frame).

    It runs untrusted code, so this is the code's doing rather than a server defect: the execution
    ends with a message that says so, and the worker is killed.
    """


class Worker:
    def __init__(self, process: WorkerProcess) -> None:
        self.process = process
        self.reusable = False
        self._decoder = FrameDecoder()

    @property
    def alive(self) -> bool:
        return not self.process.exited

    async def request(self, message: dict[str, Any], *, answer_within: float) -> dict[str, Any]:
        """Send one request and wait for its reply; past `answer_within` seconds the worker is killed."""
        try:
            await self.process.stdin.send_all(frame(message))
            with trio.move_on_after(answer_within):
                while (reply := self._decoder.next()) is None:
                    chunk = await self.process.stdout.receive_some(1 << 16)
                    if not chunk:
                        raise WorkerLost(f"the sandbox worker exited ({self.process.describe_exit()})")
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
        self.process.kill()


@attrs.frozen
class PoolStats:
    """What the pool did and holds, for tests and metrics."""

    started: int  # worker processes ever started, forked or spawned
    forked: int  # of those, forked by the zygote
    idle: int
    in_use: int
    starting: int
    zygote_ready: bool


class WorkerPool:
    def __init__(
        self,
        *,
        max_workers: int,
        spares: int = SPARES,
        command: list[str] | None = None,
        zygote: list[str] | None = None,
        warm_window: float = WARM_WINDOW,
    ) -> None:
        """`command` spawns a worker; `zygote` forks them (by default both are ours; given a `command`
        alone, workers are only spawned with it)."""
        self._slots = FairSlots(max_workers)
        self._sizing = WarmPoolSizing(floor=spares, ceiling=max_workers, window=warm_window)
        self._command = command or worker_command()
        self._zygote_command = zygote if zygote is not None or command is not None else zygote_command()
        self._zygote: Zygote | None = None
        self._idle: deque[Worker] = deque()  # oldest first: executions take the newest, the trim the oldest
        self._starting = 0  # spares being started: counted, so a burst of ends starts no more than are missing
        self._started = 0
        self._forked = 0
        self._nursery: trio.Nursery | None = None

    @property
    def most_one_account_holds(self) -> int:
        return self._slots.most_one_account_holds

    def stats(self) -> PoolStats:
        return PoolStats(
            started=self._started,
            forked=self._forked,
            idle=len(self._idle),
            in_use=self._sizing.in_use,
            starting=self._starting,
            zygote_ready=self._zygote is not None,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self._zygote_command:
                nursery.start_soon(self._keep_zygote, self._zygote_command)
            nursery.start_soon(self._let_idle_go)
            self._replenish()
            task_status.started()
            await trio.sleep_forever()

    @asynccontextmanager
    async def lease(self, account: Hashable = None) -> AsyncIterator[Worker]:
        """A worker for one execution of `account`, shared fairly (`slots.py`) when the pool is full.

        It is returned warm only if the execution marked it reusable.
        """
        async with self._slots.hold(account):
            self._sizing.acquired(trio.current_time())
            worker = None
            try:
                worker = self._take_idle() or await self._start()
                self._replenish()
                worker.reusable = False
                yield worker
            finally:
                self._sizing.released(trio.current_time())
                if worker is not None:
                    if worker.reusable and worker.alive and self._sizing.keeps(trio.current_time(), len(self._idle)):
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
        for _ in range(self._sizing.spares_missing(trio.current_time(), len(self._idle) + self._starting)):
            self._starting += 1
            self._nursery.start_soon(self._add_spare)

    async def _add_spare(self) -> None:
        try:
            worker = await retrying("starting a spare sandbox worker", self._start)
        finally:
            self._starting -= 1
        if self._sizing.keeps(trio.current_time(), len(self._idle)):
            self._idle.append(worker)
        else:
            worker.kill()

    async def _let_idle_go(self) -> None:
        """Kill the idle workers the peak no longer asks for, each time the peak drops."""
        while True:
            await retrying("letting idle sandbox workers go", self._let_surplus_go)

    async def _let_surplus_go(self) -> None:
        change = self._sizing.next_change()
        await trio.sleep_until(change if change is not None else trio.current_time() + self._sizing.window)
        self._idle = deque(worker for worker in self._idle if worker.alive)  # the dead are no surplus to kill
        for _ in range(self._sizing.surplus(trio.current_time(), len(self._idle))):
            self._idle.popleft().kill()

    async def _start(self) -> Worker:
        if self._nursery is None:
            raise RuntimeError("the worker pool is not running")
        process: WorkerProcess | None = None
        if (zygote := self._zygote) is not None:
            try:
                process = await zygote.fork()
            except ZygoteBroken as exc:
                log.warning("%s; spawning a sandbox worker instead", exc)
            else:
                self._forked += 1
        if process is None:
            process = SpawnedProcess(await open_isolated(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        self._started += 1
        worker = Worker(process)
        self._nursery.start_soon(self._supervise, worker)
        return worker

    async def _supervise(self, worker: Worker) -> None:
        """Own the process: relay what it says on stderr, and make sure it is dead when we are done."""
        try:
            await relay_stderr("sandbox worker", worker.process.pid, worker.process.stderr)
            await worker.process.wait()
        finally:
            worker.kill()
            with trio.CancelScope(shield=True):
                await worker.process.wait()
            worker.process.release()

    async def _keep_zygote(self, command: list[str]) -> None:
        """Run a zygote for as long as the pool runs, replacing one that dies (workers are spawned meanwhile)."""
        delays = ZYGOTE_BACKOFF.delays()
        while True:
            started = trio.current_time()
            try:
                await self._run_zygote(command)
            except ZygoteUnavailable as exc:
                log.warning("%s: sandbox workers are spawned, not forked", exc)
                return
            except Exception as exc:
                log.warning("the sandbox zygote failed (%s); starting another", exc)
            if trio.current_time() - started > ZYGOTE_BACKOFF.ceiling:
                delays = ZYGOTE_BACKOFF.delays()  # it had been fine for a while: not a crash loop
            await trio.sleep(next(delays))

    async def _run_zygote(self, command: list[str]) -> None:
        zygote = await Zygote.start(command)
        self._zygote = zygote
        try:
            await zygote.run()
        finally:
            self._zygote = None
            await zygote.aclose()
        log.warning("the sandbox zygote exited (%s); starting another", zygote.describe_exit())
