"""The toolkit store's contract, on every backend: what a caller sees, edits that land whole or not at all, and
two edits from two instances that cannot both take one slug."""

import logging

import attrs
import pytest
import trio

from executor_mcp.policies.model import RuleOwner
from executor_mcp.policies.toolkit_service import ToolkitError, Toolkits
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import ToolkitStore
from executor_mcp.storage.records import Owner, ToolkitConnectionRecord, ToolkitRecord
from tests.unit.storage_contract.spoiled import spoil


def toolkit(toolkit_id: str, org: str = "acme", account: str | None = None, slug: str = "crm") -> ToolkitRecord:
    owner = "user" if account else "org"
    return ToolkitRecord(toolkit_id, org, owner, account, slug, slug.upper(), 1.0, 1.0)


def put(*records: ToolkitRecord):
    return lambda _seen: (list(records), [], None)


async def test_a_caller_sees_its_orgs_toolkits_and_its_own(toolkits: ToolkitStore) -> None:
    await toolkits.edit_toolkits("acme", None, put(toolkit("org1"), toolkit("org2", slug="ops")))
    await toolkits.edit_toolkits("acme", "alice", put(toolkit("mine", account="alice")))
    await toolkits.edit_toolkits("acme", "bob", put(toolkit("bobs", account="bob")))
    await toolkits.edit_toolkits("evil", "alice", put(toolkit("evil1", org="evil")))

    assert sorted(r.id for r in await toolkits.toolkits("acme", "alice")) == ["mine", "org1", "org2"]
    assert sorted(r.id for r in await toolkits.toolkits("acme", "bob")) == ["bobs", "org1", "org2"]
    assert sorted(r.id for r in await toolkits.toolkits("acme", None)) == ["org1", "org2"]
    assert [r.id for r in await toolkits.toolkits("evil", "alice")] == ["evil1"]
    assert await toolkits.toolkits("nobody", "alice") == []
    assert await toolkits.toolkits("acme", "alice\x00") == await toolkits.toolkits("acme", None)


async def test_a_toolkit_keeps_its_rows_and_an_edit_replaces_it_whole(toolkits: ToolkitStore) -> None:
    row = ToolkitConnectionRecord("tkconn_1", "github.*", "read", "000000000512", 1.0, 1.0)
    await toolkits.edit_toolkits("acme", None, put(toolkit("org1")))

    def add_row(seen: list[ToolkitRecord]) -> tuple[list[ToolkitRecord], list[ToolkitRecord], str]:
        (found,) = seen
        return [attrs.evolve(found, connections=(row,))], [], "done"

    assert await toolkits.edit_toolkits("acme", None, add_row) == "done"
    (stored,) = await toolkits.toolkits("acme", None)
    assert stored.connections == (row,)

    def failing(seen: list[ToolkitRecord]) -> tuple[list[ToolkitRecord], list[ToolkitRecord], None]:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        await toolkits.edit_toolkits("acme", None, failing)
    await toolkits.edit_toolkits("acme", None, lambda seen: ([], seen, None))
    assert await toolkits.toolkits("acme", None) == []


async def test_two_instances_creating_one_slug_at_once_make_one_toolkit(
    planes: tuple[ControlPlane, ControlPlane],
) -> None:
    admin = Owner("alice", "acme", org_admin=True)
    outcomes: list[str] = []

    async def create(plane: ControlPlane) -> None:
        try:
            await Toolkits(plane.toolkits).create(admin, RuleOwner.ORG, "CRM", "crm")
            outcomes.append("made")
        except ToolkitError as refused:
            outcomes.append(str(refused))

    async with trio.open_nursery() as nursery:
        for plane in (*planes, *planes):
            nursery.start_soon(create, plane)
    assert sorted(outcomes) == ['Toolkit slug "crm" is already in use.'] * 3 + ["made"]
    assert [r.slug for r in await planes[1].toolkits.toolkits("acme", None)] == ["crm"]


async def test_an_unreadable_toolkit_is_skipped_and_the_orgs_others_stay_usable(
    plane: ControlPlane, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    await plane.toolkits.edit_toolkits("acme", None, put(toolkit("org1"), toolkit("broken", slug="ops")))
    await spoil(plane, backend, "toolkits", "id", "broken")
    with caplog.at_level(logging.ERROR):
        assert [record.id for record in await plane.toolkits.toolkits("acme", "alice")] == ["org1"]
        exported = await plane.toolkits.export_records()
    assert "skipping an unreadable ToolkitRecord" in caplog.text
    assert len(exported) == 1
    await plane.toolkits.edit_toolkits("acme", None, put(toolkit("org2", slug="web")))
    assert sorted(record.id for record in await plane.toolkits.toolkits("acme", None)) == ["org1", "org2"]
