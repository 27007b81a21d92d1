"""Two control planes on one store at once (two instances on one database, or a server and an admin command on
one data dir): the session directory's owner counts stay exact, each termination request is taken once, by the
session's home, and a revocation is read by every instance."""

from collections import Counter
from collections.abc import Awaitable, Callable

import trio

from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.records import Owner, SessionRecord
from tests.unit.storage_contract.conftest import EACH, two_planes

OWNER = Owner(account_id="acct", org_id="org")


def entry(session_id: str, owner: Owner = OWNER) -> SessionRecord:
    return SessionRecord(session_id, owner, "/mcp", created_at=1.0, last_activity_at=1.0)


async def test_concurrent_puts_and_deletes_through_two_planes_keep_the_owner_count_exact(
    open_plane: Callable[[], Awaitable[ControlPlane]], backend: str
) -> None:
    async with two_planes(open_plane, backend) as (first, second):

        async def put(plane: ControlPlane, ids: list[str]) -> None:
            for session_id in ids:
                await plane.sessions.put_session(entry(session_id))

        async def delete(plane: ControlPlane, ids: list[str]) -> None:
            for session_id in ids:
                await plane.sessions.delete_session(session_id)

        mine = [f"a{n:03}" for n in range(EACH)]
        theirs = [f"b{n:03}" for n in range(EACH)]
        shared = [f"c{n:03}" for n in range(EACH)]  # both planes put (then delete) the same ids
        async with trio.open_nursery() as nursery:
            nursery.start_soon(put, first, mine + shared)
            nursery.start_soon(put, second, theirs + shared)
        assert await first.sessions.owner_session_count(OWNER) == 3 * EACH
        assert await second.sessions.owner_session_count(OWNER) == 3 * EACH
        assert len(await second.sessions.owner_sessions(OWNER)) == 3 * EACH

        async with trio.open_nursery() as nursery:
            nursery.start_soon(delete, first, mine + shared)
            nursery.start_soon(delete, second, shared)
            nursery.start_soon(put, second, [f"d{n:03}" for n in range(EACH)])
        assert await first.sessions.owner_session_count(OWNER) == 2 * EACH
        assert len(await first.sessions.owner_sessions(OWNER)) == 2 * EACH
        assert await first.sessions.session_count() == 2 * EACH


async def test_termination_requests_taken_through_two_planes_are_each_taken_once(
    open_plane: Callable[[], Awaitable[ControlPlane]], backend: str
) -> None:
    async with two_planes(open_plane, backend) as (first, second):
        ids = [f"s{n:03}" for n in range(EACH)]
        for session_id in ids:
            await first.sessions.put_session(entry(session_id))
        taken: Counter[str] = Counter()
        requesting = trio.Event()

        async def request() -> None:
            for session_id in ids:
                assert await first.sessions.request_termination(session_id, 1.0)
            requesting.set()

        async def take(plane: ControlPlane) -> None:
            while True:
                done = requesting.is_set()
                taken.update(await plane.sessions.take_termination_requests(""))
                if done:
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(request)
            nursery.start_soon(take, first)
            nursery.start_soon(take, second)
        assert taken == Counter(ids)
        assert all(record.condemned for record in await second.sessions.sessions())


async def test_two_instances_each_take_the_termination_requests_of_their_own_sessions(
    open_plane: Callable[[], Awaitable[ControlPlane]], backend: str
) -> None:
    async with two_planes(open_plane, backend) as (first, second):
        homes = {"a": first, "b": second}
        ids = {home: [f"{home}_{n:03}" for n in range(EACH)] for home in homes}
        for session_id in ids["a"] + ids["b"]:
            await first.sessions.put_session(entry(session_id))
        taken: dict[str, Counter[str]] = {home: Counter() for home in homes}
        requesting = trio.Event()

        async def request() -> None:
            for mine, theirs in zip(ids["a"], ids["b"], strict=True):
                assert await first.sessions.request_termination(mine, 1.0)
                assert await second.sessions.request_termination(theirs, 1.0)
            requesting.set()

        async def take(home: str) -> None:
            while True:
                done = requesting.is_set()
                taken[home].update(await homes[home].sessions.take_termination_requests(f"{home}_"))
                if done:
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(request)
            nursery.start_soon(take, "a")
            nursery.start_soon(take, "b")
        assert taken == {home: Counter(ids[home]) for home in homes}


async def test_a_revocation_through_one_plane_is_read_through_the_other(
    open_plane: Callable[[], Awaitable[ControlPlane]], backend: str
) -> None:
    """Revoking is the org's record alone, so every instance polling `revoked_among` sees it, not just one."""
    async with two_planes(open_plane, backend) as (first, second):
        ids = [f"org{n:03}" for n in range(EACH)]
        for org_id in ids:
            await second.orgs.note_org(org_id, 1.0)
        await first.orgs.set_org_revoked(ids[0], True, 2.0)
        for plane in (first, second):
            assert await plane.orgs.revoked_among(ids) == {ids[0]}
        await second.orgs.set_org_revoked(ids[0], False, 3.0)
        assert await first.orgs.revoked_among(ids) == set()


async def test_an_org_noted_through_two_planes_at_once_keeps_one_first_sighting(
    open_plane: Callable[[], Awaitable[ControlPlane]], backend: str
) -> None:
    async with two_planes(open_plane, backend) as (first, second):
        seen: dict[str, list[float]] = {}

        async def note(plane: ControlPlane, at: float) -> None:
            for n in range(EACH):
                record = await plane.orgs.note_org(f"org{n:03}", at)
                seen.setdefault(record.org_id, []).append(record.first_seen_at)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(note, first, 1.0)
            nursery.start_soon(note, second, 2.0)
        for org in await first.orgs.orgs():
            assert seen[org.org_id] == [org.first_seen_at] * 2  # both were told the one the store kept
        assert len(seen) == EACH
