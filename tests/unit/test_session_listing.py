"""Listing an owner's sessions with their state here and their meta, and ending one of them by its owner, on the
session manager over real LMDB files."""

from pathlib import Path

import pytest
import trio

from executor_mcp.protocol.errors import Refusal, Refused
from executor_mcp.protocol.mcp import Implementation, InitializeParams
from executor_mcp.sessions.lifecycle import State, listed_state
from executor_mcp.sessions.manager import SessionManager
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.records import Owner
from tests.session_managers import start_manager

ALICE = Owner("alice", "acme")
PARAMS = InitializeParams("2025-06-18", {}, Implementation("inspector", "2.1"))


@pytest.mark.parametrize(
    ("handle", "condemned", "shown"),
    [
        (None, False, State.DISPOSED),
        (None, True, State.CONDEMNED),
        (State.LIVE, False, State.LIVE),
        (State.LIVE, True, State.CONDEMNED),
        (State.RESTORING, False, State.RESTORING),
        (State.CONDEMNED, False, State.CONDEMNED),
        (State.RESTARTING, False, State.RESTARTING),
    ],
)
def test_the_listed_state_of_a_stored_session(handle: State | None, condemned: bool, shown: State) -> None:
    assert listed_state(handle, condemned) is shown


async def _open(manager: SessionManager, owner: Owner, mode: str = "model") -> str:
    session = await manager.create(owner, "/mcp", PARAMS, "2025-06-18", b"{}", elicitation_mode=mode)
    return session.id


async def test_an_owner_sees_only_its_sessions_with_their_state_and_client(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path
) -> None:
    first = await start_manager(nursery, control, tmp_path)
    kept = await _open(first, ALICE, mode="browser")
    live = await _open(first, ALICE)
    condemned = await _open(first, ALICE)
    others = [await _open(first, Owner("bob", "acme")), await _open(first, Owner("alice", "globex"))]
    await first.shutdown(grace=0)
    manager = await start_manager(nursery, control, tmp_path)
    await manager.acquire(live, ALICE, "/mcp")
    await control.sessions.update_session(condemned, condemned=True)  # an admin's marker, not yet acted on here

    listing = {listed.record.session_id: listed for listed in await manager.owner_listing(ALICE)}
    assert set(listing) == {kept, live, condemned}
    assert not set(others) & set(listing)
    assert listing[live].state is State.LIVE
    assert listing[kept].state is State.DISPOSED
    assert listing[condemned].state is State.CONDEMNED
    for session_id in (kept, live):
        meta = listing[session_id].meta
        assert meta is not None
        assert meta.client_info == {"name": "inspector", "version": "2.1"}
    assert listing[kept].meta is not None
    assert listing[kept].meta.elicitation_mode == "browser"
    assert listing[condemned].meta is None
    assert next(iter(listing)) == live  # the most recently active first


async def test_reading_a_stored_sessions_file_never_races_its_restore(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path
) -> None:
    first = await start_manager(nursery, control, tmp_path)
    session_id = await _open(first, ALICE)
    await first.shutdown(grace=0)
    manager = await start_manager(nursery, control, tmp_path)
    acquired = []

    async def acquire() -> None:
        acquired.append(await manager.acquire(session_id, ALICE, "/mcp"))

    async with trio.open_nursery() as racers:
        for _ in range(5):
            racers.start_soon(manager.owner_listing, ALICE)
            racers.start_soon(acquire)
    assert len({id(session) for session in acquired}) == 1
    assert acquired[0].state is State.LIVE
    (listed,) = await manager.owner_listing(ALICE)
    assert listed.state is State.LIVE


async def test_only_the_owner_ends_a_session(nursery: trio.Nursery, control: ControlPlane, tmp_path: Path) -> None:
    manager = await start_manager(nursery, control, tmp_path)
    session_id = await _open(manager, ALICE)
    for stranger in (Owner("bob", "acme"), Owner("alice", "globex")):
        assert await manager.end_owned(session_id, stranger) is False
    assert await manager.end_owned("0" * 64, ALICE) is False
    assert await manager.end_owned("not an id", ALICE) is False
    assert (await manager.acquire(session_id, ALICE, "/mcp")).state is State.LIVE

    assert await manager.end_owned(session_id, Owner("alice", "acme", org_admin=True)) is True
    with pytest.raises(Refused) as caught:
        await manager.acquire(session_id, ALICE, "/mcp")
    assert caught.value.refusal in {Refusal.SESSION_TERMINATED, Refusal.SESSION_NOT_FOUND}


async def test_a_stored_session_is_ended_without_being_used(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path
) -> None:
    first = await start_manager(nursery, control, tmp_path)
    session_id = await _open(first, ALICE)
    await first.shutdown(grace=0)
    manager = await start_manager(nursery, control, tmp_path)
    assert await manager.end_owned(session_id, ALICE) is True
    with trio.fail_after(5):
        while await control.sessions.get_session(session_id) is not None:  # noqa: ASYNC110
            await trio.sleep(0.01)
    assert await manager.owner_listing(ALICE) == []


async def test_a_damaged_session_file_hides_only_its_own_client(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = await start_manager(nursery, control, tmp_path)
    damaged, sound = await _open(first, ALICE), await _open(first, ALICE)
    await first.shutdown(grace=0)
    manager = await start_manager(nursery, control, tmp_path)
    path = manager._path(damaged)
    target = path / "data.mdb" if path.is_dir() else path
    target.write_bytes(b"not an LMDB file " * 512)
    listing = {listed.record.session_id: listed for listed in await manager.owner_listing(ALICE)}
    assert set(listing) == {damaged, sound}
    assert listing[damaged].meta is None
    assert listing[damaged].state is State.DISPOSED
    assert listing[sound].meta is not None
    assert "could not be read for a listing" in caplog.text
