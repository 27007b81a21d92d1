"""Turns per caller in front of a one-at-a-time resource: a flood waits behind its own author."""

import trio
import trio.testing

from executor_mcp.turns import Turns


async def test_another_caller_waits_for_one_of_a_floods_jobs_not_all_of_them() -> None:
    turns = Turns(trio.CapacityLimiter(1))
    order: list[str] = []
    release = trio.Event()

    async def job(caller: str, name: str) -> None:
        async with turns.turn(caller):
            order.append(name)
            await release.wait()

    async with trio.open_nursery() as nursery:
        for index in range(5):
            nursery.start_soon(job, "flood", f"flood-{index}")
            await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(job, "other", "other")
        await trio.testing.wait_all_tasks_blocked()
        release.set()
    assert order.index("other") <= 2  # after the job running and at most one more of the flood's
    assert sorted(order) == sorted([*(f"flood-{index}" for index in range(5)), "other"])


async def test_a_callers_queue_is_gone_once_nobody_waits_in_it() -> None:
    turns = Turns(trio.CapacityLimiter(1))
    async with turns.turn("someone"):
        pass
    async with turns.turn("someone"):
        pass
    assert turns._queues == {}
