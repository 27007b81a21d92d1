"""A new session's file and directory entry are written at once (`SessionManager` via `_NewSession`): when one
of the two fails, the caller gets that error itself, and the other is undone, so no half-made session is
left for start-up recovery or a listing to find."""

from pathlib import Path

import pytest
import trio

from executor_mcp.protocol.mcp import Implementation, InitializeParams
from executor_mcp.sessions.manager import SESSIONS_DIR
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.records import Owner
from executor_mcp.storage.session_file import SessionFile
from tests.session_managers import start_manager

PARAMS = InitializeParams("2025-06-18", {}, Implementation("client", "1.0"))
ACME = Owner("alice", "acme")


async def test_a_session_whose_file_cannot_be_made_leaves_no_directory_entry(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path
) -> None:
    manager = await start_manager(nursery, control, tmp_path)
    (tmp_path / SESSIONS_DIR).write_text("not a directory")  # the file's write fails for real
    with pytest.raises(FileExistsError):  # the error itself, not a group of the two writes
        await manager.create(ACME, "/mcp", PARAMS, "2025-06-18", b"{}")
    assert await control.sessions.owner_sessions(ACME) == []
    assert manager.state_counts().total() == 0


async def test_a_session_made_whole_has_both_its_file_and_its_entry(
    nursery: trio.Nursery, control: ControlPlane, tmp_path: Path
) -> None:
    manager = await start_manager(nursery, control, tmp_path)
    session = await manager.create(ACME, "/mcp", PARAMS, "2025-06-18", b"{}")
    assert [record.session_id for record in await control.sessions.owner_sessions(ACME)] == [session.id]
    assert SessionFile.path_for(tmp_path / SESSIONS_DIR, session.id).is_file()
