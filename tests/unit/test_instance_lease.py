"""The lease that lets one process serve an instance: taken before serving (waiting out another holder, then
refusing), renewed, lost when another process takes it, and never needed without a shared database. On a
real PostgreSQL; trio's clock jumps over the waits (the database's clock does not, which is why leases taken
here are long)."""

from collections.abc import AsyncIterator

import pytest
import trio

from executor_mcp.config import ConfigError
from executor_mcp.sessions.instance_lease import RENEW, TTL, InstanceLease, holder_name
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import InstanceLeases
from tests.postgres import PostgresServer


@pytest.fixture
async def leases(postgres: PostgresServer) -> AsyncIterator[InstanceLeases]:
    plane = await ControlPlane.open_postgres(postgres.new_database(), pool_size=2)
    try:
        assert plane.leases is not None
        yield plane.leases
    finally:
        await plane.close()


async def test_a_second_process_for_one_instance_waits_then_is_refused_naming_the_holder(
    leases: InstanceLeases, autojump_clock: trio.abc.Clock
) -> None:
    first = InstanceLease(leases, "a", "host-1:/srv/a")
    await first.acquire()
    assert first.held
    second = InstanceLease(leases, "a", "host-2:/srv/a")
    started = trio.current_time()
    with pytest.raises(ConfigError, match=r"--instance-id a is served by another process \(host-1:/srv/a\)"):
        await second.acquire()
    assert trio.current_time() - started >= TTL  # it waited out a lease that could have ended meanwhile
    assert not second.held


async def test_the_successor_on_the_same_host_and_data_dir_takes_the_lease_at_once(
    leases: InstanceLeases, autojump_clock: trio.abc.Clock, tmp_path: object
) -> None:
    await InstanceLease(leases, "a", "host-1:/srv/a").acquire()  # then killed: never released
    successor = InstanceLease(leases, "a", "host-1:/srv/a")
    started = trio.current_time()
    await successor.acquire()
    assert successor.held
    assert trio.current_time() == started


async def test_a_lease_not_renewed_within_its_ttl_stops_serving_and_one_taken_over_is_lost(
    leases: InstanceLeases,
) -> None:
    """The lease's own clock is this test's (the renewals, every RENEW seconds, happen in real time)."""
    now = [0.0]
    lease = InstanceLease(leases, "a", "host-1:/srv/a", clock=lambda: now[0])
    await lease.acquire()
    now[0] = TTL - 0.01
    assert lease.held
    now[0] = TTL
    assert not lease.held  # no renewal (the database out of reach): its own clock ends it first
    ended = trio.Event()

    async def keeping() -> None:
        await lease.keep()
        ended.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keeping)
        await trio.sleep(RENEW + 0.5)
        assert lease.held  # renewed, from its clock's now
        # Another process took it (an operator cleared the row and started one elsewhere).
        await leases.release("a", "host-1:/srv/a")
        assert await leases.acquire("a", "host-2:/srv/a", 3600) is None
        with trio.fail_after(RENEW + 5):
            await ended.wait()  # the next renewal found it taken: no more renewals
    now[0] += TTL
    assert not lease.held
    await lease.release()  # not held: it leaves the other holder's lease alone
    assert await leases.acquire("a", "host-3:/srv/a", 1) == "host-2:/srv/a"


async def test_without_a_shared_database_there_is_no_lease_to_take() -> None:
    lease = InstanceLease(None, "", "anywhere")
    await lease.acquire()
    assert lease.held
    await lease.release()
    assert lease.held


def test_the_holder_names_this_host_and_the_data_dirs_full_path(tmp_path: object) -> None:
    import pathlib
    import socket

    directory = pathlib.Path(str(tmp_path))
    assert holder_name(directory / "x" / "..") == f"{socket.gethostname()}:{directory.resolve()}"
