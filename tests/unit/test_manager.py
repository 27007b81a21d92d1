"""The session manager driven directly, on real LMDB files, with a clock the test controls."""

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from executor_mcp.app import idle_policy
from executor_mcp.config import Settings
from executor_mcp.protocol.errors import Refusal, Refused
from executor_mcp.protocol.mcp import Implementation, InitializeParams
from executor_mcp.sessions.ids import is_session_id
from executor_mcp.sessions.lifecycle import State
from executor_mcp.sessions.manager import ACTIVITY_PERSIST_INTERVAL, SessionManager
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.records import Owner, SessionMeta
from executor_mcp.storage.session_file import SessionFile
from executor_mcp.toolserver.registry import ToolRegistry

OWNER = Owner(account_id="local", org_id="local")
PARAMS = InitializeParams("2025-06-18", {"elicitation": {}}, Implementation("client", "1.0"))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingTools:
    """A tool factory that counts runtime builds: one per first start or restore."""

    def __init__(self) -> None:
        self.builds: list[SessionMeta] = []

    def __call__(self, meta: SessionMeta) -> ToolRegistry:
        self.builds.append(meta)
        return ToolRegistry()


async def _start(nursery: trio.Nursery, control: ControlPlane, tmp_path: Path, **kwargs) -> SessionManager:
    settings = Settings()
    options = {
        "idle": idle_policy(settings),
        "max_sessions_per_user": settings.max_sessions_per_user,
        "retention": settings.session_retention,
        "instance": "",
    }
    manager = SessionManager(control, tmp_path, **{**options, **kwargs})
    await nursery.start(manager.run)
    return manager


async def _restart(old: SessionManager, nursery: trio.Nursery, control: ControlPlane, tmp_path: Path, **kwargs):
    await old.shutdown(grace=0)
    return await _start(nursery, control, tmp_path, **kwargs)


async def test_ids_are_64_lowercase_hex() -> None:
    assert is_session_id("a" * 64)
    for bad in ("A" * 64, "a" * 63, "a" * 65, "g" * 64, "", "é" * 64):
        assert not is_session_id(bad)


async def test_malformed_ids_are_not_found_without_a_lookup(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path
) -> None:
    manager = await _start(nursery, control, tmp_path, tools=CountingTools())
    for bad in ("x" * 10_000, "../../etc/passwd", "0" * 63):
        with pytest.raises(Refused) as caught:
            await manager.acquire(bad, OWNER, "/mcp")
        assert caught.value.refusal is Refusal.SESSION_NOT_FOUND


async def test_concurrent_requests_share_one_restore(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path
) -> None:
    tools = CountingTools()
    first = await _start(nursery, control, tmp_path, tools=tools)
    created = await first.create(OWNER, "/mcp", PARAMS, "2025-06-18", b"{}")
    second = await _restart(first, nursery, control, tmp_path, tools=tools)

    acquired = []

    async def acquire() -> None:
        acquired.append(await second.acquire(created.id, OWNER, "/mcp"))

    async with trio.open_nursery() as racers:
        for _ in range(20):
            racers.start_soon(acquire)
    assert len(acquired) == 20
    assert len({id(session) for session in acquired}) == 1
    assert acquired[0].state is State.LIVE
    assert len(tools.builds) == 2  # the first start, and exactly one restore
    assert tools.builds[1].client_capabilities == {"elicitation": {}}


async def test_a_foreign_principal_or_resource_is_refused(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path
) -> None:
    manager = await _start(nursery, control, tmp_path, tools=CountingTools())
    created = await manager.create(OWNER, "/mcp", PARAMS, "2025-06-18", b"{}")
    for principal, resource in ((Owner("mallory", "local"), "/mcp"), (OWNER, "/mcp/toolkits/x")):
        with pytest.raises(Refused) as caught:
            await manager.acquire(created.id, principal, resource)
        assert caught.value.refusal is Refusal.FOREIGN_SESSION


async def test_activity_is_persisted_coarsely(nursery: trio.Nursery, control: ControlPlane, tmp_path: Path) -> None:
    clock = Clock()
    manager = await _start(nursery, control, tmp_path, tools=CountingTools(), clock=clock)
    session = await manager.create(OWNER, "/mcp", PARAMS, "2025-06-18", b"{}")
    created_at = clock.now

    clock.now += ACTIVITY_PERSIST_INTERVAL / 2
    await manager.acquire(session.id, OWNER, "/mcp")
    assert session.last_activity == clock.now
    assert session.persisted_activity == created_at

    clock.now += ACTIVITY_PERSIST_INTERVAL
    await manager.acquire(session.id, OWNER, "/mcp")
    with trio.fail_after(5):
        # The write happens in a worker thread, off the request path; poll the stored copy for it.
        while (record := await control.sessions.get_session(session.id)) and record.last_activity_at != clock.now:  # noqa: ASYNC110
            await trio.sleep(0.01)

    await manager.shutdown(grace=0)
    file = await SessionFile.open(SessionFile.path_for(tmp_path / "sessions", session.id))
    assert await file.last_activity() == clock.now
    await file.close()


async def test_a_condemned_marker_left_by_a_crash_is_finished_at_start(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path
) -> None:
    first = await _start(nursery, control, tmp_path, tools=CountingTools())
    session = await first.create(OWNER, "/mcp", PARAMS, "2025-06-18", b"{}")
    await first.shutdown(grace=0)
    # As if the process died right after writing the marker, before the wipe.
    await control.sessions.update_session(session.id, condemned=True)

    await _start(nursery, control, tmp_path, tools=CountingTools())
    assert await control.sessions.get_session(session.id) is None
    assert not SessionFile.path_for(tmp_path / "sessions", session.id).exists()


async def test_terminate_refuses_then_wipes(nursery: trio.Nursery, control: ControlPlane, tmp_path: Path) -> None:
    manager = await _start(nursery, control, tmp_path, tools=CountingTools())
    session = await manager.create(OWNER, "/mcp", PARAMS, "2025-06-18", b"{}")
    await manager.terminate(session)
    with pytest.raises(Refused) as caught:
        await manager.acquire(session.id, OWNER, "/mcp")
    assert caught.value.refusal in {Refusal.SESSION_TERMINATED, Refusal.SESSION_NOT_FOUND}
    await session.stopped.wait()
    with pytest.raises(Refused) as caught:
        await manager.acquire(session.id, OWNER, "/mcp")
    assert caught.value.refusal is Refusal.SESSION_NOT_FOUND
    assert await control.sessions.get_session(session.id) is None


async def test_a_shutdown_during_a_restore_is_a_restart_not_a_failure(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The restore is held up by another process's write transaction on the control plane (an admin
    command); the shutdown comes meanwhile. The request gets the restart envelope, nothing is logged as
    a runtime failure, and no illegal transition is raised."""
    first = await _start(nursery, control, tmp_path, tools=CountingTools())
    session = await first.create(OWNER, "/mcp", PARAMS, "2025-06-18", b"{}")
    await first.shutdown(grace=0)
    second = await _start(nursery, control, tmp_path, tools=CountingTools())
    for suffix in ("", "-lock"):  # its file is lost: the restore removes the entry, a control-plane write
        await trio.Path(f"{SessionFile.path_for(tmp_path / 'sessions', session.id)}{suffix}").unlink()

    holder = await trio.lowlevel.open_process(
        [sys.executable, "-c", HOLD_WRITE_LOCK, str(tmp_path / "control" / "control.mdb")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdin is not None
    assert holder.stdout is not None
    refusals: list[Refusal] = []

    async def request() -> None:
        with pytest.raises(Refused) as caught:
            await second.acquire(session.id, OWNER, "/mcp")
        refusals.append(caught.value.refusal)

    try:
        with trio.fail_after(20):
            said = b""
            while not said.endswith(b"\n"):
                said += await holder.stdout.receive_some()
            assert said == b"held\n"
            async with trio.open_nursery() as racers:
                racers.start_soon(request)
                await trio.sleep(0.5)  # the restore is now waiting for the write lock
                racers.start_soon(second.shutdown, 0)
                await trio.sleep(0.2)
                await holder.stdin.send_all(b"release\n")
            assert await holder.wait() == 0
    finally:
        holder.kill()
    assert refusals == [Refusal.RESTARTING]
    failures = [r for r in caplog.records if "runtime failed" in r.getMessage() or r.exc_info]
    assert failures == []


HOLD_WRITE_LOCK = """
import sys, lmdb
env = lmdb.open(sys.argv[1], subdir=False, max_dbs=16)
txn = env.begin(write=True)
print("held", flush=True)
sys.stdin.readline()
txn.abort()
env.close()
"""
