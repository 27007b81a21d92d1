"""Two control planes on one store at once (two processes on a data dir, two instances on a database): policy
edits, the first signing keys and a sign-in link, each asked through both planes concurrently."""

import time

import trio

from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.records import ConsoleLinkRecord, PolicyRecord
from tests.unit.storage_contract.test_policies import rule


def add_next(visible: list[PolicyRecord]) -> tuple[list[PolicyRecord], list[PolicyRecord], str]:
    """Add an org rule named after how many the edit saw: two edits that read the same rules write one."""
    time.sleep(0.02)  # between the read and the write, so that the edits overlap
    policy_id = f"r{sum(1 for record in visible if record.owner == 'org'):02d}"
    return [rule(policy_id)], [], policy_id


async def test_concurrent_policy_edits_through_two_planes_are_all_kept(
    planes: tuple[ControlPlane, ControlPlane],
) -> None:
    results: list[str] = []

    async def edit(plane: ControlPlane, account: str | None) -> None:
        results.append(await plane.policies.edit_policies("acme", account, add_next))

    async with trio.open_nursery() as nursery:
        # Members editing their org's rules read the same rules whoever they are.
        for number, plane in enumerate(planes * 4):
            nursery.start_soon(edit, plane, ("alice", "bob", None)[number % 3])
    expected = [f"r{number:02d}" for number in range(8)]
    assert sorted(results) == expected
    for plane in planes:
        assert [record.id for record in await plane.policies.policies("acme", None)] == expected


async def test_the_first_signing_keys_asked_through_two_planes_at_once_are_one(
    planes: tuple[ControlPlane, ControlPlane],
) -> None:
    made: dict[tuple[int, str], bytes] = {}

    async def ask(index: int, name: str) -> None:
        made[index, name] = await getattr(planes[index].signing_keys, name)()

    async with trio.open_nursery() as nursery:
        for name in ("console_key", "request_state_key", "workspace_key"):
            for index in (0, 1, 0, 1):
                nursery.start_soon(ask, index, name)
    for name in ("console_key", "request_state_key", "workspace_key"):
        assert made[0, name] == made[1, name]
        assert await getattr(planes[0].signing_keys, name)() == made[0, name]
    assert len(set(made.values())) == 3


async def test_a_link_opened_through_two_planes_at_once_signs_in_once(
    planes: tuple[ControlPlane, ControlPlane],
) -> None:
    record = ConsoleLinkRecord(account_id="a", org_id="o", admin=False, created_at=100.0, expires_at=200.0)
    await planes[0].sign_ins.put_console_link("one", record, 100.0)
    taken: list[ConsoleLinkRecord | None] = []

    async def take(plane: ControlPlane) -> None:
        taken.append(await plane.sign_ins.take_console_link("one", 150.0))

    async with trio.open_nursery() as nursery:
        for plane in planes * 3:
            nursery.start_soon(take, plane)
    assert taken.count(record) == 1
    assert taken.count(None) == 5
