"""The warm pool with real workers: it grows to the concurrent peak and keeps those workers, lets them go
a window later, forks them from the zygote in isolation, and outlives a zygote that dies."""

import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from executor_mcp.config import Settings
from executor_mcp.execution.engine import Engine
from executor_mcp.execution.limits import Limits
from executor_mcp.sandbox.pool import PoolStats, WorkerPool
from executor_mcp.sandbox.worker import ADDRESS_SPACE_LIMIT
from tests import sandbox_processes

SETTLE = 30  # seconds a loaded machine may take to start or fork what the pool asked for
OVERLAP = "await new Promise((resolve) => setTimeout(resolve, 300));"


async def no_tools(path: str, args: Any) -> Any:
    raise AssertionError(f"no tool calls expected, got {path}")


@pytest.fixture
async def running(nursery: trio.Nursery, request: pytest.FixtureRequest) -> AsyncIterator[WorkerPool]:
    pool = WorkerPool(**{"max_workers": Settings().sandbox_workers, **getattr(request, "param", {})})
    await nursery.start(pool.run)
    yield pool
    nursery.cancel_scope.cancel()


async def settled(pool: WorkerPool) -> PoolStats:
    """The pool's figures once the spares it asked for are started, and the zygote is up."""
    with trio.fail_after(SETTLE):
        while (stats := pool.stats()).starting or not stats.zygote_ready:  # noqa: ASYNC110
            await trio.sleep(0.05)
    return stats


async def concurrently(pool: WorkerPool, count: int, code: str) -> list[Any]:
    """`count` executions at once; each waits a little so that all of them hold a worker together."""
    engine = Engine(pool, Limits.of(Settings()))
    results: list[Any] = []

    async def one() -> None:
        outcome = await engine.run(f"{OVERLAP}\n{code}", no_tools)
        assert outcome.ok, outcome.error
        results.append(outcome.result)

    with trio.fail_after(SETTLE):
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(one)
    return results


async def test_the_pool_grows_to_the_peak_and_keeps_those_workers_warm(running: WorkerPool) -> None:
    await settled(running)
    assert len(await concurrently(running, 4, "return 1")) == 4
    after_first = await settled(running)
    assert after_first.idle == 4  # the peak
    await concurrently(running, 4, "return 1")
    after_second = await settled(running)
    assert after_second.started == after_first.started  # the same four workers served it: nothing started
    assert after_second.idle == 4


@pytest.mark.parametrize("running", [{"warm_window": 0.5}], indirect=True)
async def test_idle_workers_past_the_peak_are_let_go_after_the_window(running: WorkerPool) -> None:
    await settled(running)
    await concurrently(running, 3, "return 1")
    with trio.fail_after(SETTLE):
        while running.stats().idle != 1:  # noqa: ASYNC110
            await trio.sleep(0.05)
    await trio.sleep(0.6)  # another window: the floor stays
    assert running.stats().idle == 1


async def test_forked_workers_inherit_nothing_and_are_confined(running: WorkerPool) -> None:
    before = await settled(running)
    async with running.lease() as first, running.lease() as second:
        assert running.stats().forked > before.forked
        (zygote,) = sandbox_processes.zygotes(os.getpid())
        forked = [worker.process.pid for worker in (first, second)]
        assert set(forked) & set(sandbox_processes.children(zygote, sandbox_processes.ZYGOTE))
        for pid in sandbox_processes.children(zygote, sandbox_processes.ZYGOTE):
            assert _environment(pid) == b""
            assert os.readlink(f"/proc/{pid}/cwd") == "/"
            assert {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")} <= {0, 1, 2}
            with trio.fail_after(SETTLE):
                while (limits := _limits(pid))["Max open files"][:2] != ["16", "16"]:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            assert limits["Max file size"][:2] == ["0", "0"]
            assert limits["Max core file size"][:2] == ["0", "0"]
            assert limits["Max address space"][:2] == [str(ADDRESS_SPACE_LIMIT)] * 2
            assert _threads(pid) <= 2  # the main thread and its own lifeline, started after the fork


async def test_forked_workers_draw_different_random_numbers(running: WorkerPool) -> None:
    await settled(running)
    draws = await concurrently(running, 4, "return [Math.random(), Math.random()]")
    assert running.stats().forked >= 3  # four workers: the first spare may have been spawned before the zygote
    assert len({tuple(draw) for draw in draws}) == 4


async def test_a_killed_zygote_is_replaced_and_workers_are_spawned_meanwhile(running: WorkerPool) -> None:
    before = await settled(running)
    (zygote,) = sandbox_processes.zygotes(os.getpid())
    os.kill(zygote, signal.SIGKILL)
    with trio.fail_after(SETTLE):
        while running.stats().zygote_ready:  # noqa: ASYNC110
            await trio.sleep(0.01)
    assert await concurrently(running, 2, "return 2") == [2, 2]  # forked, or spawned while there is no zygote
    after = await settled(running)
    (replacement,) = sandbox_processes.zygotes(os.getpid())
    assert replacement != zygote
    assert after.started > before.started
    forked = after.forked
    await concurrently(running, 4, "return 3")
    assert (await settled(running)).forked > forked


def _limits(pid: int) -> dict[str, list[str]]:
    with open(f"/proc/{pid}/limits") as limits:
        return {line[:26].strip(): line[26:].split() for line in limits if line[:26].strip()}


def _environment(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as environ:
        return environ.read()


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))
