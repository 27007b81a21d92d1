"""What only a store several instances share has: adopting a paused execution into another session, and the
lease that says which process serves an instance. Through two control planes on one PostgreSQL database, as
two instances have them."""

import functools
from collections.abc import AsyncIterator

import attrs
import pytest
import trio

from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import ExecutionMoved, Fence, InstanceLeases, SharedExecutions
from tests.postgres import PostgresServer
from tests.unit.storage_contract.conftest import EACH, two_planes

A, B, C = "a_" + "1" * 64, "b_" + "2" * 64, "b_" + "3" * 64


@attrs.frozen
class Judged:
    move: bool
    pause: bytes = b""
    journal: tuple[bytes, ...] = ()


def moving(raw_pause: bytes, raw_journal: list[bytes]) -> Judged:
    return Judged(True, raw_pause, tuple(raw_journal))


def staying(raw_pause: bytes, raw_journal: list[bytes]) -> Judged:
    return Judged(False, raw_pause, tuple(raw_journal))


@pytest.fixture
async def two(postgres: PostgresServer) -> AsyncIterator[tuple[ControlPlane, ControlPlane]]:
    opener = functools.partial(ControlPlane.open_postgres, postgres.new_database(), pool_size=4)
    async with two_planes(opener, "postgres") as planes:
        yield planes


def shared(plane: ControlPlane) -> SharedExecutions:
    assert plane.executions is not None
    return plane.executions


def leases(plane: ControlPlane) -> InstanceLeases:
    assert plane.leases is not None
    return plane.leases


async def test_an_adopted_execution_moves_whole_and_its_old_session_can_no_longer_write_it(
    two: tuple[ControlPlane, ControlPlane],
) -> None:
    home, elsewhere = two
    old = shared(home).of(A)
    await old.keep_execution("e1", [(0, b"head"), (1, b"step")], {"p1": b"pause"})
    await old.keep_execution("e2", [(0, b"other")], {"p2": b"other pause"})

    verdict = await shared(elsewhere).adopt("p1", B, moving)
    assert verdict == Judged(True, b"pause", (b"head", b"step"))  # judged on what was kept
    new = shared(elsewhere).of(B)
    assert (await new.pauses(), await new.journal("e1")) == ([b"pause"], [b"head", b"step"])
    assert (await old.pauses(), await old.journal("e1")) == ([b"other pause"], [])

    with pytest.raises(ExecutionMoved):
        await old.keep_execution("e1", [(2, b"a step the old run must not take")])
    await old.forget_execution("e1", ["p1"])  # the old run ending forgets nothing of the adopter's
    await old.forget_executions()
    assert await new.journal("e1") == [b"head", b"step"]
    await new.keep_execution("e1", [(2, b"the adopter's step")])
    assert await new.journal("e1") == [b"head", b"step", b"the adopter's step"]
    assert await shared(home).of(A).journal("e2") == []  # the old session's own were forgotten with it


async def test_a_refused_adoption_moves_nothing_and_an_unknown_pause_is_none(
    two: tuple[ControlPlane, ControlPlane],
) -> None:
    home, elsewhere = two
    await shared(home).of(A).keep_execution("e1", [(0, b"head")], {"p1": b"pause"})
    assert await shared(elsewhere).adopt("p1", B, staying) == Judged(False, b"pause", (b"head",))
    assert await shared(home).of(A).pauses() == [b"pause"]
    await shared(home).of(A).keep_execution("e1", [(1, b"step")])
    assert await shared(elsewhere).adopt("never", B, moving) is None


async def test_a_write_without_its_head_to_a_journal_that_is_not_there_is_refused(
    two: tuple[ControlPlane, ControlPlane],
) -> None:
    home, _ = two
    journals = shared(home).of(A)
    with pytest.raises(ExecutionMoved):
        await journals.keep_execution("gone", [(3, b"a step of a forgotten journal")])
    await journals.keep_execution("e1", [(0, b"head")], {"p1": b"pause"})
    await journals.forget_execution("e1", ["p1"])
    with pytest.raises(ExecutionMoved):
        await journals.keep_execution("e1", [(1, b"a step after forgetting")])
    assert await journals.journal("e1") == []


async def test_a_step_and_an_adoption_racing_through_two_planes_are_ordered_never_both(
    two: tuple[ControlPlane, ControlPlane],
) -> None:
    """The old holder writes the step that lets its tool run (here `PASS`) while another instance adopts,
    moving only what has no such step: each time, exactly one of them wins."""
    home, elsewhere = two

    def unless_passed(raw_pause: bytes, raw_journal: list[bytes]) -> Judged:
        return Judged(b"PASS" not in raw_journal)

    for n in range(EACH):
        key, pause_id = f"e{n}", f"p{n}"
        await shared(home).of(A).keep_execution(key, [(0, b"head")], {pause_id: b"pause"})
        wrote = moved = False

        async def step(key: str = key) -> None:
            nonlocal wrote
            try:
                await shared(home).of(A).keep_execution(key, [(1, b"PASS")])
                wrote = True
            except ExecutionMoved:
                pass

        async def adopt(pause_id: str = pause_id) -> None:
            nonlocal moved
            verdict = await shared(elsewhere).adopt(pause_id, B, unless_passed)
            moved = verdict is not None and verdict.move

        async with trio.open_nursery() as nursery:
            nursery.start_soon(step)
            nursery.start_soon(adopt)
        assert wrote != moved, f"trial {n}: step written {wrote}, adopted {moved}"
        holder = B if moved else A
        assert await shared(home).of(holder).journal(key) == ([b"head"] if moved else [b"head", b"PASS"])


async def test_two_adoptions_of_one_pause_leave_it_with_one_session(two: tuple[ControlPlane, ControlPlane]) -> None:
    home, elsewhere = two
    await shared(home).of(A).keep_execution("e1", [(0, b"head")], {"p1": b"pause"})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(shared(home).adopt, "p1", B, moving)
        nursery.start_soon(shared(elsewhere).adopt, "p1", C, moving)
    holders = [s for s in (A, B, C) if await shared(home).of(s).pauses()]
    assert len(holders) == 1
    assert holders[0] in (B, C)
    assert await shared(home).of(holders[0]).journal("e1") == [b"head"]


async def test_an_instance_lease_is_held_by_one_holder_until_it_expires_or_is_released(
    two: tuple[ControlPlane, ControlPlane],
) -> None:
    first, second = two
    assert await leases(first).acquire("a", "host-1:/data", 30.0) is None
    assert await leases(second).acquire("a", "host-2:/data", 30.0) == "host-1:/data"
    assert await leases(first).acquire("a", "host-1:/data", 30.0) is None  # a renewal
    assert await leases(second).acquire("b", "host-2:/data", 30.0) is None  # another instance is another lease
    await leases(second).release("a", "host-2:/data")  # not the holder: nothing happens
    assert await leases(second).acquire("a", "host-2:/data", 30.0) == "host-1:/data"
    await leases(first).release("a", "host-1:/data")
    assert await leases(second).acquire("a", "host-2:/data", 0.2) is None
    await trio.sleep(0.3)  # by the database's clock, the lease has run out
    assert await leases(first).acquire("a", "host-1:/data", 30.0) is None


async def test_of_many_processes_taking_one_free_lease_at_once_one_gets_it(
    two: tuple[ControlPlane, ControlPlane],
) -> None:
    first, second = two
    results: list[str | None] = []

    async def take(plane: ControlPlane, holder: str) -> None:
        results.append(await leases(plane).acquire("a", holder, 30.0))

    async with trio.open_nursery() as nursery:
        for n in range(8):
            nursery.start_soon(take, (first, second)[n % 2], f"host-{n}:/data")
    assert results.count(None) == 1
    winner = {holder for holder in results if holder is not None}
    assert len(winner) == 1


async def test_a_fenced_write_needs_the_lease_to_name_its_writer(two: tuple[ControlPlane, ControlPlane]) -> None:
    """A process whose instance another process took can take no more steps, even of journals its session
    still holds; one whose lease only ran out (nobody took it) still can."""
    home, elsewhere = two
    fence = Fence("a", "host-1:/srv/a")
    journals = shared(home).of(A, fence)
    with pytest.raises(ExecutionMoved):  # no lease at all
        await journals.keep_execution("e1", [(0, b"head")], {"p1": b"pause"})
    assert await leases(home).acquire("a", "host-1:/srv/a", 0.1) is None
    await journals.keep_execution("e1", [(0, b"head")], {"p1": b"pause"})
    await trio.sleep(0.2)  # expired, not taken
    await journals.keep_execution("e1", [(1, b"after an outage")])
    assert await leases(elsewhere).acquire("a", "host-2:/srv/a", 30.0) is None
    with pytest.raises(ExecutionMoved):
        await journals.keep_execution("e1", [(2, b"a step of a process that lost its instance")])
    assert await shared(home).of(A).journal("e1") == [b"head", b"after an outage"]
