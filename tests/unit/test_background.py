"""Background work that survives its failures: the shared helper, and the pool's spare starter on it."""

import contextlib
import errno
import itertools
import logging
import sys

import pytest
import trio

from executor_mcp.background import Backoff, forever, once, retrying
from executor_mcp.config import Settings
from executor_mcp.sandbox.pool import WorkerPool


def test_backoff_grows_to_its_ceiling() -> None:
    delays = Backoff(first=0.5, factor=3, ceiling=10).delays()
    assert [next(delays) for _ in range(5)] == [0.5, 1.5, 4.5, 10, 10]


async def test_retrying_waits_out_resource_errors_with_growing_delays(caplog: pytest.LogCaptureFixture) -> None:
    attempts: list[float] = []

    async def attempt() -> str:
        attempts.append(trio.current_time())
        if len(attempts) < 4:
            raise OSError(errno.EMFILE, "Too many open files")
        return "started"

    assert await retrying("opening", attempt, Backoff(first=0.01, factor=2, ceiling=0.03)) == "started"
    waits = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    assert len(waits) == 3
    assert all(wait >= minimum for wait, minimum in zip(waits, (0.01, 0.02, 0.03), strict=True))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "Too many open files" in r.getMessage()]
    assert len(warnings) == 3
    assert all(r.exc_info is None for r in warnings)  # resource trouble: no traceback per retry


async def test_once_logs_a_failure_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> None:
        raise ValueError("bad record")

    async def fine() -> None:
        return None

    assert await once("decoding", broken) is False
    assert await once("decoding", fine) is True
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [ValueError]


async def test_forever_outlives_failing_steps_until_cancelled() -> None:
    steps: list[int] = []

    async def step() -> None:
        steps.append(len(steps))
        if len(steps) % 2:
            raise RuntimeError("every other step fails")

    with trio.move_on_after(0.5):
        await forever("stepping", step, every=0.01, backoff=Backoff(first=0.01))
    assert len(steps) > 6


async def test_the_pool_keeps_trying_to_start_spares_instead_of_dying(caplog: pytest.LogCaptureFixture) -> None:
    """A worker that cannot be started (here: no such binary; in production EMFILE) is logged and
    retried; the pool, and the server whose nursery it lives in, keep running."""
    pool = WorkerPool(max_workers=Settings().sandbox_workers, spares=2, command=["/nonexistent/executor-worker"])
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(pool.run)
            await trio.sleep(0.5)
            nursery.cancel_scope.cancel()
    retries = [r for r in caplog.records if "starting a spare sandbox worker failed" in r.getMessage()]
    assert len(retries) >= 4  # two spares, each tried more than once


async def test_executions_ending_together_start_only_the_missing_spares(tmp_path) -> None:
    """Ten executions that end at once (none reusable, like runaways) leave the ten workers the peak asks
    for missing: ten starts, on top of those that served them, and not one more refill per end."""
    started = tmp_path / "started"
    command = ["/bin/sh", "-c", f'echo >> "{started}"; exec {sys.executable} -m executor_mcp.sandbox.worker']
    pool = WorkerPool(spares=2, max_workers=12, command=command)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(pool.run)
            async with contextlib.AsyncExitStack() as leases:
                for _ in range(10):
                    await leases.enter_async_context(pool.lease())
            for _ in range(400):  # a loaded machine starts processes slowly: up to 40 s
                if pool.stats().idle >= 10 and not pool.stats().starting:
                    break
                await trio.sleep(0.1)
            await trio.sleep(1)  # and any start too many would show by now
            stats = pool.stats()
            for _ in range(100):  # a process the pool started may not have run its `echo` yet
                if len(started.read_text().splitlines()) >= stats.started:
                    break
                await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
    # The floor's 2 spares (which the leases may have outrun), the leases' 10, and the peak of 10 kept warm after.
    # Every start leaves at most one line (a line without a counted start would be a start the stats hide); a
    # start let go early may leave none (on a loaded machine even one that was about to serve, seen in CI), but
    # each worker idle now is running, so its shell ran `echo`.
    assert stats.idle <= len(started.read_text().splitlines()) <= stats.started
    assert 20 <= stats.started <= 22
    assert (stats.idle, stats.in_use, stats.forked) == (10, 0, 0)
