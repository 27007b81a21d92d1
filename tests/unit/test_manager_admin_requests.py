"""Admin commands from another process, served by the session manager with several instances on one control
plane: a termination is taken by the session's home only, and a revocation reaches every instance."""

import secrets
from pathlib import Path

import trio

from executor_mcp.protocol.mcp import Implementation, InitializeParams
from executor_mcp.sessions.ids import new_session_id
from executor_mcp.sessions.lifecycle import State
from executor_mcp.sessions.manager import ADMIN_POLL
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.records import Owner, SessionRecord
from tests.session_managers import start_manager

PARAMS = InitializeParams("2025-06-18", {"elicitation": {}}, Implementation("client", "1.0"))
ACME, OTHER = Owner("alice", "acme"), Owner("bob", "other")
BOUND = 3 * ADMIN_POLL  # a poll, and room for a loaded machine


async def test_a_termination_is_taken_by_the_sessions_home_only(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path
) -> None:
    home = await start_manager(nursery, control, tmp_path / "a", "a")
    session = await home.create(ACME, "/mcp", PARAMS, "2025-06-18", b"{}")
    elsewhere = new_session_id("b")  # a session of instance b, which is not running
    await control.sessions.put_session(SessionRecord(elsewhere, ACME, "/mcp", created_at=1.0, last_activity_at=1.0))

    assert await control.sessions.request_termination(elsewhere, 1.0)
    assert await control.sessions.request_termination(session.id, 1.0)
    with trio.fail_after(BOUND):
        await session.stopped.wait()
    assert await control.sessions.get_session(session.id) is None
    await trio.sleep(ADMIN_POLL * 1.5)  # another poll of instance a
    assert await control.sessions.take_termination_requests("b_") == [elsewhere]  # left for its home


async def test_a_revocation_condemns_the_orgs_live_sessions_on_every_instance(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path
) -> None:
    first = await start_manager(nursery, control, tmp_path / "a", "a")
    second = await start_manager(nursery, control, tmp_path / "b", "b")
    revoked = [await first.create(ACME, "/mcp", PARAMS, "2025-06-18", b"{}") for _ in range(2)]
    revoked.append(await second.create(ACME, "/mcp", PARAMS, "2025-06-18", b"{}"))
    kept = [await manager.create(OTHER, "/mcp", PARAMS, "2025-06-18", b"{}") for manager in (first, second)]

    await control.orgs.set_org_revoked("acme", True, 2.0)  # what `orgs revoke` does: no request to take
    with trio.fail_after(BOUND):
        for session in revoked:
            await session.stopped.wait()
    for session in revoked:
        assert await control.sessions.get_session(session.id) is None
    assert [session.state for session in kept] == [State.LIVE, State.LIVE]


async def test_an_instance_less_server_takes_every_request(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path
) -> None:
    manager = await start_manager(nursery, control, tmp_path, "")
    session = await manager.create(OTHER, "/mcp", PARAMS, "2025-06-18", b"{}")
    stray = secrets.token_hex(32)  # a bare id with no file here: taken, and nothing to end
    await control.sessions.put_session(SessionRecord(stray, OTHER, "/mcp", created_at=1.0, last_activity_at=1.0))
    assert await control.sessions.request_termination(stray, 1.0)
    assert await control.sessions.request_termination(session.id, 1.0)
    with trio.fail_after(BOUND):
        await session.stopped.wait()
    await trio.sleep(ADMIN_POLL * 1.5)
    assert await control.sessions.take_termination_requests("") == []
