"""The passthrough mode is part of what a session is: stored in its meta, and read back from files written
before the mode existed as the execute mode."""

import json
from pathlib import Path

import attrs

from executor_mcp.storage.records import EXECUTE_MODE, PASSTHROUGH_MODE, Owner, SessionMeta, decode, encode
from executor_mcp.storage.session_file import SessionFile

META = SessionMeta(
    session_id="a" * 64,
    owner=Owner(account_id="acct", org_id="org"),
    resource="/mcp",
    protocol_version="2025-06-18",
    client_info={"name": "c", "version": "1"},
    client_capabilities={},
    created_at=1.0,
)


def test_a_meta_written_before_the_mode_existed_is_the_execute_mode() -> None:
    stored = json.loads(encode(META))
    del stored["mode"]
    assert decode(json.dumps(stored).encode(), SessionMeta).mode == EXECUTE_MODE


async def test_the_mode_is_kept_in_the_session_file(tmp_path: Path) -> None:
    passthrough = attrs.evolve(META, mode=PASSTHROUGH_MODE)
    file = await SessionFile.create(tmp_path / "s.mdb", passthrough, b"{}")
    await file.close()
    reopened = await SessionFile.open(tmp_path / "s.mdb")
    try:
        assert (await reopened.meta()).mode == PASSTHROUGH_MODE
    finally:
        await reopened.close()
