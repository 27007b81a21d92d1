"""Two control planes on one catalog at once (two instances on one database, or a server and an admin command
on one data dir): no connection outlives its integration, no revision bump or source holder is lost."""

import functools
from collections.abc import Awaitable, Callable

import trio

from executor_mcp.storage.control import ControlPlane
from tests.unit.storage_contract.catalog_records import connection, integration, names
from tests.unit.storage_contract.conftest import EACH, two_planes

PUTS = 6  # connections put (and discovered) while one removal runs
ROUNDS = 2 * PUTS  # removals, each starting alongside a different put
Named = tuple[str, str, str, str]


async def race(first: ControlPlane, second: ControlPlane, round_: int) -> tuple[list[Named], list[Named]]:
    """Connections put (each then discovered) through `second` while `first` removes their integration, the
    removal starting with put number `round_ % PUTS`: the connections stored, and those the removal removed."""
    stored: list[Named] = []
    removed: list[Named] = []
    racing = trio.Event()

    async def put() -> None:
        for n in range(PUTS):
            if n == round_ % PUTS:
                racing.set()
            record = connection(owner="user", account="alice", name=f"c{n}")
            if await second.catalog.put_connection(record):
                stored.extend(names([record]))
            # A discovery after the removal holds nothing: its connection is gone.
            await second.catalog.set_discovered(
                record, synced_at=1.0, source_hash=f"d{round_}.{n}", source=b"tools", compiled=b"c"
            )

    async def remove() -> None:
        await racing.wait()
        removed.extend(names(await first.catalog.remove_integration("acme", "github") or []))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(put)
        nursery.start_soon(remove)
    return stored, removed


async def test_a_connection_put_racing_the_removal_of_its_integration_leaves_no_orphan(
    open_plane: Callable[[], Awaitable[ControlPlane]], backend: str
) -> None:
    async with two_planes(open_plane, backend) as (first, second):
        for round_ in range(ROUNDS):
            assert await first.catalog.add_integration(integration(), b"spec", b"compiled")
            stored, removed = await race(first, second, round_)
            # Every put that succeeded came before the removal, which removed it; none came after.
            assert sorted(removed) == sorted(stored)
            for plane in (first, second):
                assert await plane.catalog.connections("acme", "alice") == []
                assert await plane.catalog.get_integration("acme", "github") is None
            for n in range(PUTS):
                assert await second.catalog.get_source(f"d{round_}.{n}") is None
            assert await first.catalog.get_source("h1") is None


async def add(plane: ControlPlane, slugs: list[str], added: list[str], *, shared_source: bool) -> None:
    for slug in slugs:
        record = integration(slug=slug, source_hash="h1" if shared_source else f"h-{slug}")
        if await plane.catalog.add_integration(record, b"spec", b"compiled"):
            added.append(slug)


async def remove(plane: ControlPlane, slugs: list[str], gone: list[str]) -> None:
    for slug in slugs:
        if await plane.catalog.remove_integration("acme", slug) is not None:
            gone.append(slug)


MINE = [f"a{n:03}" for n in range(EACH)]
THEIRS = [f"b{n:03}" for n in range(EACH)]
SHARED = [f"c{n:03}" for n in range(EACH)]  # both planes add (then remove) the same slugs


async def test_concurrent_adds_and_removals_each_bump_the_revision(
    open_plane: Callable[[], Awaitable[ControlPlane]], backend: str
) -> None:
    async with two_planes(open_plane, backend) as (first, second):
        added: list[str] = []
        gone: list[str] = []
        # Sources of their own: the adds share no row but the org's revision.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(add, first, MINE + SHARED, added, shared_source=False))
            nursery.start_soon(functools.partial(add, second, THEIRS + SHARED, added, shared_source=False))
        assert sorted(added) == sorted(MINE + THEIRS + SHARED)  # each shared slug added once
        assert await second.catalog.catalog_revision("acme") == 3 * EACH
        assert len(await first.catalog.integrations("acme")) == 3 * EACH

        async with trio.open_nursery() as nursery:
            nursery.start_soon(remove, first, MINE + SHARED, gone)
            nursery.start_soon(remove, second, THEIRS + SHARED, gone)
        assert sorted(gone) == sorted(MINE + THEIRS + SHARED)
        assert await first.catalog.catalog_revision("acme") == 6 * EACH
        assert await first.catalog.integrations("acme") == []


async def test_a_source_held_through_two_planes_at_once_stays_until_its_last_holder_goes(
    open_plane: Callable[[], Awaitable[ControlPlane]], backend: str
) -> None:
    async with two_planes(open_plane, backend) as (first, second):
        added: list[str] = []
        gone: list[str] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(add, first, MINE + SHARED, added, shared_source=True))
            nursery.start_soon(functools.partial(add, second, THEIRS + SHARED, added, shared_source=True))
        assert len(added) == 3 * EACH

        async with trio.open_nursery() as nursery:
            nursery.start_soon(remove, first, MINE + SHARED, gone)
            nursery.start_soon(remove, second, THEIRS[1:] + SHARED, gone)
        assert len(gone) == 3 * EACH - 1
        assert await second.catalog.get_source("h1") == b"spec"
        assert await first.catalog.remove_integration("acme", THEIRS[0]) == []
        assert (await second.catalog.get_source("h1"), await second.catalog.get_compiled("h1")) == (None, None)
