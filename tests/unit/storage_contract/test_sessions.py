"""The session directory's and the paused-execution directory's contract, on every backend."""

from typing import Any

import attrs

from executor_mcp.storage.interfaces import PausedDirectory, SessionDirectory
from executor_mcp.storage.records import Owner, SessionRecord

OWNER = Owner(account_id="acct", org_id="org")


def entry(session_id: str, owner: Owner = OWNER, **changes: Any) -> SessionRecord:
    return attrs.evolve(SessionRecord(session_id, owner, "/mcp", created_at=1.0, last_activity_at=1.0), **changes)


async def test_an_entry_round_trips_and_updates_in_place(sessions: SessionDirectory) -> None:
    record = SessionRecord("s1", OWNER, "/mcp", created_at=1.0, last_activity_at=1.0)
    await sessions.put_session(record)
    assert await sessions.get_session("s1") == record
    updated = await sessions.update_session("s1", condemned=True, last_activity_at=5.0)
    assert updated is not None
    assert updated.condemned
    assert (await sessions.get_session("s1")) == updated
    assert await sessions.update_session("missing", condemned=True) is None
    assert [r.session_id for r in await sessions.sessions()] == ["s1"]
    await sessions.delete_session("s1")
    assert await sessions.get_session("s1") is None


async def test_sessions_are_listed_and_counted_by_owner(sessions: SessionDirectory) -> None:
    alice, bob, alic = Owner("alice", "org"), Owner("bob", "org"), Owner("alic", "org")
    elsewhere, orgless, forged = Owner("alice", "evil"), Owner("alice", None), Owner("alice\x00org", "x")
    for session_id, owner in (("s1", alice), ("s2", bob), ("s3", alice), ("s4", alic), ("s5", elsewhere)):
        await sessions.put_session(SessionRecord(session_id, owner, "/mcp", created_at=1.0, last_activity_at=1.0))
    assert sorted(r.session_id for r in await sessions.owner_sessions(alice)) == ["s1", "s3"]
    assert await sessions.owner_session_count(alice) == 2
    await sessions.delete_session("s1")
    await sessions.delete_session("s1")
    assert [r.session_id for r in await sessions.owner_sessions(alice)] == ["s3"]
    assert await sessions.owner_session_count(alice) == 1
    assert await sessions.owner_session_count(Owner("nobody", "org")) == 0
    assert [r.session_id for r in await sessions.owner_sessions(alic)] == ["s4"]
    # The same account in another organization, or in none, is another owner.
    assert [r.session_id for r in await sessions.owner_sessions(elsewhere)] == ["s5"]
    for stranger in (orgless, forged):
        assert await sessions.owner_sessions(stranger) == []
        assert await sessions.owner_session_count(stranger) == 0


async def test_putting_a_known_session_again_replaces_it_and_counts_it_once(sessions: SessionDirectory) -> None:
    await sessions.put_session(entry("s1"))
    await sessions.put_session(entry("s1", last_activity_at=9.0))
    assert await sessions.owner_session_count(OWNER) == 1
    assert [record.last_activity_at for record in await sessions.owner_sessions(OWNER)] == [9.0]
    await sessions.delete_session("never-there")
    assert await sessions.owner_session_count(OWNER) == 1


async def test_the_directory_counts_and_names_its_entries(sessions: SessionDirectory) -> None:
    assert (await sessions.session_count(), await sessions.session_ids(), await sessions.sessions()) == (0, set(), [])
    for session_id in ("s1", "s2", "s3"):
        await sessions.put_session(entry(session_id))
    await sessions.delete_session("s2")
    assert await sessions.session_count() == 2
    assert await sessions.session_ids() == {"s1", "s3"}
    assert sorted(record.session_id for record in await sessions.sessions()) == ["s1", "s3"]


async def test_a_termination_request_condemns_and_is_taken_once(sessions: SessionDirectory) -> None:
    await sessions.put_session(entry("s1"))
    await sessions.put_session(entry("s2"))
    assert await sessions.take_termination_requests("") == []
    assert await sessions.request_termination("s1", 5.0)
    assert await sessions.request_termination("s2", 6.0)
    assert not await sessions.request_termination("missing", 7.0)
    assert (await sessions.get_session("s1")).condemned
    assert sorted(await sessions.take_termination_requests("")) == ["s1", "s2"]
    assert await sessions.take_termination_requests("") == []
    assert await sessions.get_session("missing") is None


async def test_termination_requests_are_taken_by_the_home_their_id_names(sessions: SessionDirectory) -> None:
    """Each instance takes the requests of the sessions it is home to and leaves the others for theirs. The
    prefix is literal text: `_` (the ids' separator) and `%` are no wildcards."""
    ids = ["a_1", "a_2", "ab_1", "ax1", "A_1", "b_1", "1111", "c%_1", "cd_1", "c\\_1"]
    for session_id in ids:
        await sessions.put_session(entry(session_id))
        assert await sessions.request_termination(session_id, 5.0)
    assert await sessions.take_termination_requests("a_") == ["a_1", "a_2"]
    assert await sessions.take_termination_requests("a_") == []
    assert await sessions.take_termination_requests("z_") == []
    assert await sessions.take_termination_requests("b_") == ["b_1"]
    assert await sessions.take_termination_requests("c%_") == ["c%_1"]
    assert await sessions.take_termination_requests("c\\_") == ["c\\_1"]
    assert await sessions.take_termination_requests("") == ["1111", "A_1", "ab_1", "ax1", "cd_1"]
    assert await sessions.take_termination_requests("") == []
    assert all(record.condemned for record in await sessions.sessions())  # taking changes no entry


async def test_the_paused_directory_names_the_live_sessions_that_keep_a_pause(
    sessions: SessionDirectory, paused: PausedDirectory
) -> None:
    for session_id in ("s1", "s2", "s3"):
        await sessions.put_session(entry(session_id))
    assert await paused.paused_sessions() == []
    marked = await paused.mark_paused("s1", 100.0)
    assert marked == entry("s1", paused_until=100.0)
    assert await sessions.get_session("s1") == marked  # one record: the directory's entry says it
    await paused.mark_paused("s2", 200.0)
    await paused.mark_paused("s3", 300.0)
    await sessions.update_session("s3", condemned=True)  # a condemned session is not revived
    assert sorted(record.session_id for record in await paused.paused_sessions()) == ["s1", "s2"]
    await paused.mark_paused("s1", 0.0)  # its last pause ended
    assert [record.session_id for record in await paused.paused_sessions()] == ["s2"]
    assert await paused.mark_paused("missing", 5.0) is None
    await sessions.delete_session("s2")
    assert await paused.paused_sessions() == []
