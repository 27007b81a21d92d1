"""LMDB storage on real files: growth on demand, session files, the control plane's upgrades of older layouts.
The stores' contract is `storage_contract/`."""

from pathlib import Path

import lmdb
import pytest

from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.environment import Environment, StorageFull
from executor_mcp.storage.records import Owner, PolicyRecord, SessionMeta, SessionRecord, encode
from executor_mcp.storage.session_file import MissingSessionFile, SessionFile

OWNER = Owner(account_id="acct", org_id="org")


def _meta(session_id: str = "a" * 64) -> SessionMeta:
    return SessionMeta(
        session_id=session_id,
        owner=OWNER,
        resource="/mcp",
        protocol_version="2025-06-18",
        client_info={"name": "c", "version": "1"},
        client_capabilities={},
        created_at=1.0,
    )


async def test_the_map_grows_when_full(tmp_path: Path) -> None:
    env = await Environment.open(tmp_path / "small.mdb", map_size=64 * 1024)
    payload = b"x" * 1024
    for index in range(200):
        await env.write(lambda txn, index=index: txn.put(str(index).encode(), payload))
    count = await env.read(lambda txn: txn.stat()["entries"])
    assert count == 200
    await env.close()


async def test_growth_stops_at_the_ceiling(tmp_path: Path) -> None:
    env = await Environment.open(tmp_path / "capped.mdb", map_size=64 * 1024, max_map_size=128 * 1024)
    written = 0

    async def fill() -> None:
        nonlocal written
        for index in range(1000):
            await env.write(lambda txn, index=index: txn.put(str(index).encode(), b"y" * 1024))
            written += 1

    with pytest.raises(StorageFull):
        await fill()
    assert 0 < written < 1000
    # What was committed before the ceiling is intact and still readable.
    assert await env.read(lambda txn: txn.get(b"0")) == b"y" * 1024
    await env.close()


async def test_session_file_round_trip_and_wipe(tmp_path: Path) -> None:
    path = SessionFile.path_for(tmp_path, "a" * 64)
    created = await SessionFile.create(path, _meta(), b'{"jsonrpc":"2.0"}')
    await created.touch(42.5)
    await created.close()

    reopened = await SessionFile.open(path)
    assert await reopened.meta() == _meta()
    assert await reopened.initialize_request() == b'{"jsonrpc":"2.0"}'
    assert await reopened.last_activity() == 42.5
    await reopened.close()

    SessionFile.wipe(path)
    assert not path.exists()
    assert not path.with_name(path.name + "-lock").exists()
    with pytest.raises(MissingSessionFile):
        await SessionFile.open(path)


async def test_opening_a_missing_session_file_creates_nothing(tmp_path: Path) -> None:
    path = SessionFile.path_for(tmp_path, "b" * 64)
    with pytest.raises(MissingSessionFile):
        await SessionFile.open(path)
    assert not path.exists()


async def test_an_index_keyed_by_account_alone_is_rebuilt_by_owner(tmp_path: Path) -> None:
    """A data dir written before ownership was (account, org): its sessions are indexed on first open."""
    environment = lmdb.open(str(tmp_path / "control.mdb"), subdir=False, max_dbs=8)
    sessions = environment.open_db(b"sessions")
    legacy = environment.open_db(b"sessions-by-account")
    with environment.begin(write=True) as txn:
        for session_id, owner in (("s1", Owner("alice", "acme")), ("s2", Owner("alice", "evil"))):
            record = SessionRecord(session_id, owner, "/mcp", created_at=1.0, last_activity_at=1.0)
            txn.put(session_id.encode(), encode(record), db=sessions)
            txn.put(b"alice\x00" + session_id.encode(), b"", db=legacy)
    environment.close()

    control = await ControlPlane.open(tmp_path)
    assert [r.session_id for r in await control.sessions.owner_sessions(Owner("alice", "acme"))] == ["s1"]
    assert await control.sessions.owner_session_count(Owner("alice", "evil")) == 1
    await control.close()
    control = await ControlPlane.open(tmp_path)  # once: reopening counts nothing twice
    assert await control.sessions.owner_session_count(Owner("alice", "evil")) == 1
    await control.close()


async def test_policies_keyed_by_id_alone_move_under_their_owner(tmp_path: Path) -> None:
    """A data dir written before policies were keyed by owner keeps every rule: losing them would lift guardrails."""
    environment = lmdb.open(str(tmp_path / "control.mdb"), subdir=False, max_dbs=8)
    legacy = environment.open_db(b"policies")
    rules = [
        PolicyRecord("pol_org", "acme", "org", None, "github.*", "block", "000000001024", 1.0, 1.0),
        PolicyRecord("pol_user", "acme", "user", "alice", "*", "require_approval", "000000001024", 1.0, 1.0),
    ]
    with environment.begin(write=True) as txn:
        for rule in rules:
            txn.put(rule.id.encode(), encode(rule), db=legacy)
        txn.put(b"pol_bad", b"{not json", db=legacy)
    environment.close()

    for _ in range(2):  # once: reopening moves nothing twice
        control = await ControlPlane.open(tmp_path)
        assert sorted(r.id for r in await control.policies.policies("acme", "alice")) == ["pol_org", "pol_user"]
        assert [r.id for r in await control.policies.policies("acme", "bob")] == ["pol_org"]
        await control.close()
