"""The signing keys', the sign-in links' and the data-dir facts' contract, on every backend."""

from collections.abc import Awaitable, Callable

from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import DataDirFacts, SigningKeys, SignInStore
from executor_mcp.storage.records import ConsoleLinkRecord


async def test_each_signing_key_is_made_once_and_kept(open_plane: Callable[[], Awaitable[ControlPlane]]) -> None:
    plane = await open_plane()
    try:
        keys: SigningKeys = plane.signing_keys
        made = (await keys.console_key(), await keys.request_state_key(), await keys.workspace_key())
        assert all(len(key) == 32 for key in made)
        assert len(set(made)) == 3
        assert await keys.console_key() == made[0]
    finally:
        await plane.close()
    plane = await open_plane()
    try:
        keys = plane.signing_keys
        assert (await keys.console_key(), await keys.request_state_key(), await keys.workspace_key()) == made
    finally:
        await plane.close()


def link(created: float, expires: float) -> ConsoleLinkRecord:
    return ConsoleLinkRecord(account_id="a", org_id="o", admin=False, created_at=created, expires_at=expires)


async def test_a_link_opens_once_and_not_after_it_expires(sign_ins: SignInStore) -> None:
    record = link(100.0, 200.0)
    await sign_ins.put_console_link("one", record, 100.0)
    await sign_ins.put_console_link("two", record, 100.0)
    assert await sign_ins.take_console_link("one", 150.0) == record
    assert await sign_ins.take_console_link("one", 150.0) is None
    assert await sign_ins.take_console_link("two", 250.0) is None
    assert await sign_ins.take_console_link("two", 150.0) is None  # taken, though it had expired
    assert await sign_ins.take_console_link("never", 150.0) is None


async def test_adding_a_link_forgets_the_expired_ones(sign_ins: SignInStore) -> None:
    old = link(0.0, 10.0)
    await sign_ins.put_console_link("old", old, 0.0)
    new = link(20.0, 99.0)
    await sign_ins.put_console_link("new", new, 20.0)
    assert await sign_ins.take_console_link("old", 5.0) is None  # gone, though asked "before" expiry
    assert await sign_ins.take_console_link("new", 30.0) == new


async def test_the_last_recorded_facts_are_the_data_dirs(open_plane: Callable[[], Awaitable[ControlPlane]]) -> None:
    plane = await open_plane()
    try:
        facts: DataDirFacts = plane.facts
        assert await facts.data_dir_facts() == {}
        await facts.record_data_dir_facts({"allow_stdio_mcp": True, "secret_env": ["A"]})
        await facts.record_data_dir_facts({"allow_stdio_mcp": False})
    finally:
        await plane.close()
    plane = await open_plane()
    try:
        assert await plane.facts.data_dir_facts() == {"allow_stdio_mcp": False}
    finally:
        await plane.close()
