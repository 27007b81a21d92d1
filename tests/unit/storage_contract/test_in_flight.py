"""The executions-in-flight store's contract, on every backend: places up to each ceiling then the first full one
named with what it holds, a refused execution taking no place, pauses counted and named, places given back, and
(on a shared backend) two instances that together admit no more than a ceiling, an instance whose lease lapsed
holding nothing, and places of processes gone dropped by `clear` and `sweep`."""

import uuid

import pytest
import trio

from executor_mcp.ratelimits.in_flight import Ceiling, Full, Held, ceilings_for
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import InFlightStore
from executor_mcp.storage.postgres import in_flight as pg_in_flight

ALICE = ceilings_for("acme", "alice", org=3, account=2)
BOB = ceilings_for("acme", "bob", org=3, account=2)


def holder() -> str:
    return uuid.uuid4().hex


async def test_places_up_to_a_ceiling_then_the_full_one_with_what_it_holds(in_flight: InFlightStore) -> None:
    first, second = holder(), holder()
    assert await in_flight.enter("a", first, ALICE) is None
    assert await in_flight.enter("a", second, ALICE) is None
    assert await in_flight.enter("a", holder(), ALICE) == Full(ALICE[0], Held(running=2))
    assert await in_flight.enter("a", holder(), BOB) is None  # the org's third
    assert await in_flight.enter("a", holder(), BOB) == Full(BOB[1], Held(running=3))  # bob's first, the org full
    await in_flight.leave(first)
    await in_flight.leave(first)  # given back once
    assert await in_flight.enter("a", holder(), ALICE) is None
    assert isinstance(await in_flight.enter("a", holder(), ALICE), Full)


async def test_a_refused_execution_takes_no_place(in_flight: InFlightStore) -> None:
    narrow = [Ceiling("account", "executions\x1faccount\x1facme\x1fcarol", 1), *ALICE[1:]]
    assert await in_flight.enter("a", holder(), narrow) is None
    for _ in range(3):
        assert (await in_flight.enter("a", holder(), narrow)) == Full(narrow[0], Held(running=1))
    assert await in_flight.enter("a", holder(), ALICE) is None  # the org holds carol's one, alice's one
    assert await in_flight.enter("a", holder(), BOB) is None
    full = await in_flight.enter("a", holder(), BOB)
    assert full == Full(BOB[1], Held(running=3))


async def test_paused_places_are_counted_and_named_and_beyond_goes_over(in_flight: InFlightStore) -> None:
    first, second = holder(), holder()
    assert await in_flight.enter("a", first, ALICE) is None
    assert await in_flight.enter("a", second, ALICE) is None
    await in_flight.mark(first, 1, ("exec_1",), 1)
    await in_flight.mark(second, 1, (), 1)  # a native-mode pause has no id
    assert await in_flight.enter("a", holder(), ALICE) == Full(ALICE[0], Held(paused=2, pause_ids=("exec_1",)))
    await in_flight.mark(first, 0, (), 2)
    await in_flight.mark(first, 1, ("exec_1",), 1)  # an older mark landing late changes nothing
    revived = holder()
    assert await in_flight.enter("a", revived, ALICE, beyond=True) is None
    assert await in_flight.enter("a", holder(), ALICE) == Full(ALICE[0], Held(running=2, paused=1))
    await in_flight.mark("nobody", 1, ("exec_2",), 1)  # a place given back already: nothing to mark
    assert await in_flight.enter("a", holder(), []) is None  # no ceiling: nothing to refuse


async def test_two_instances_together_admit_no_more_than_a_ceiling(planes: tuple[ControlPlane, ControlPlane]) -> None:
    for name, plane in zip(("a", "b"), planes, strict=True):
        if plane.leases is not None:
            assert await plane.leases.acquire(name, f"process-{name}", 60.0) is None
    ceilings = ceilings_for("acme", "alice", org=None, account=5)
    admitted: list[bool] = []

    async def enter(plane: ControlPlane, instance: str) -> None:
        admitted.append(await plane.in_flight.enter(instance, holder(), ceilings) is None)

    async with trio.open_nursery() as nursery:
        for index in range(20):
            nursery.start_soon(enter, planes[index % 2], "ab"[index % 2])
    assert admitted.count(True) == 5


async def shared(plane: ControlPlane) -> None:
    if plane.leases is None:
        pytest.skip("one process holds every place of an unshared backend: no other instance, no lost leave")


async def test_an_instance_whose_lease_lapsed_holds_nothing(plane: ControlPlane) -> None:
    await shared(plane)
    assert plane.leases is not None
    assert await plane.leases.acquire("a", "process-a", 0.2) is None
    assert await plane.leases.acquire("b", "process-b", 60.0) is None
    ceilings = ceilings_for("acme", "alice", org=None, account=1)
    assert await plane.in_flight.enter("a", holder(), ceilings) is None
    assert isinstance(await plane.in_flight.enter("b", holder(), ceilings), Full)  # a's lease is live
    await trio.sleep(0.3)
    assert await plane.in_flight.enter("b", holder(), ceilings) is None  # a's process is gone: so is its place


async def test_a_place_taken_again_by_its_holder_is_not_counted_twice(in_flight: InFlightStore) -> None:
    """What a retry after a lost answer does: the holder has its place, and is admitted without another."""
    ceilings = ceilings_for("acme", "alice", org=None, account=1)
    mine = holder()
    assert await in_flight.enter("a", mine, ceilings) is None
    assert await in_flight.enter("a", mine, ceilings) is None
    assert isinstance(await in_flight.enter("a", holder(), ceilings), Full)
    await in_flight.leave(mine)
    assert await in_flight.enter("a", holder(), ceilings) is None


async def test_clear_and_sweep_drop_what_gone_processes_left(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    await shared(plane)
    assert plane.leases is not None
    assert await plane.leases.acquire("b", "process-b", 60.0) is None
    assert await plane.leases.acquire("gone", "process-gone", 0.01) is None
    ceilings = ceilings_for("acme", "alice", org=None, account=3)
    for instance in ("a", "a", "b", "gone", "stopped"):
        assert await plane.in_flight.enter(instance, holder(), ceilings) is None
    assert await plane.in_flight.clear("a") == 2  # a's previous process: both its places
    await trio.sleep(0.05)
    assert await plane.in_flight.sweep() == 1  # "stopped" released its lease; "gone"'s lapsed, not an hour ago
    monkeypatch.setattr(pg_in_flight, "GONE_SECONDS", 0)
    assert await plane.in_flight.sweep() == 1  # never b's, whose lease is live
    for _ in range(2):
        assert await plane.in_flight.enter("b", holder(), ceilings) is None
    assert isinstance(await plane.in_flight.enter("b", holder(), ceilings), Full)
