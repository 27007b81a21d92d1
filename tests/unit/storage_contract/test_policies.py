"""The policy store's contract, on every backend: what a caller sees, and edits that land whole or not at all."""

import logging

import pytest

from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import PolicyStore
from executor_mcp.storage.records import PolicyRecord
from tests.unit.storage_contract.spoiled import spoil


def rule(policy_id: str, org: str = "acme", account: str | None = None, pattern: str = "*") -> PolicyRecord:
    owner = "user" if account else "org"
    return PolicyRecord(policy_id, org, owner, account, pattern, "block", "000000001024", 1.0, 1.0)


def put(*records: PolicyRecord):
    return lambda _seen: (list(records), [], None)


async def test_a_caller_sees_its_orgs_rules_and_its_own(policies: PolicyStore) -> None:
    await policies.edit_policies("acme", None, put(rule("org1"), rule("org2")))
    await policies.edit_policies("acme", "alice", put(rule("mine", account="alice")))
    await policies.edit_policies("acme", "bob", put(rule("bobs", account="bob")))
    await policies.edit_policies("evil", "alice", put(rule("evil1", org="evil"), rule("evil2", "evil", "alice")))

    assert sorted(record.id for record in await policies.policies("acme", "alice")) == ["mine", "org1", "org2"]
    assert sorted(record.id for record in await policies.policies("acme", "bob")) == ["bobs", "org1", "org2"]
    assert sorted(record.id for record in await policies.policies("acme", None)) == ["org1", "org2"]
    assert sorted(record.id for record in await policies.policies("evil", "alice")) == ["evil1", "evil2"]
    assert await policies.policies("nobody", "alice") == []
    assert await policies.policies("acme", "alice\x00") == (await policies.policies("acme", None))


async def test_an_edit_reads_what_the_caller_sees_and_writes_its_changes(policies: PolicyStore) -> None:
    await policies.edit_policies("acme", "alice", put(rule("org1"), rule("mine", account="alice")))
    seen: list[list[str]] = []

    def edit(visible: list[PolicyRecord]) -> tuple[list[PolicyRecord], list[PolicyRecord], str]:
        seen.append(sorted(record.id for record in visible))
        by_id = {record.id: record for record in visible}
        return [rule("org1", pattern="changed")], [by_id["mine"]], "done"

    assert await policies.edit_policies("acme", "alice", edit) == "done"
    assert seen[-1] == ["mine", "org1"]
    assert [(record.id, record.pattern) for record in await policies.policies("acme", "alice")] == [("org1", "changed")]


async def test_an_edit_that_fails_writes_nothing(policies: PolicyStore) -> None:
    await policies.edit_policies("acme", None, put(rule("org1")))

    def failing(visible: list[PolicyRecord]) -> tuple[list[PolicyRecord], list[PolicyRecord], None]:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        await policies.edit_policies("acme", None, failing)
    assert [record.pattern for record in await policies.policies("acme", None)] == ["*"]


async def test_an_unreadable_rule_is_skipped_and_the_others_stay_usable(
    plane: ControlPlane, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    records = (rule("org1"), rule("broken"), rule("mine", account="alice"))
    await plane.policies.edit_policies("acme", "alice", put(*records))
    await spoil(plane, backend, "policies", "id", "broken")
    with caplog.at_level(logging.ERROR):
        assert sorted(record.id for record in await plane.policies.policies("acme", "alice")) == ["mine", "org1"]
        exported = await plane.policies.export_records()
    assert "skipping an unreadable PolicyRecord" in caplog.text
    assert len(exported) == 2
    await plane.policies.edit_policies("acme", None, put(rule("org2")))
    assert sorted(record.id for record in await plane.policies.policies("acme", None)) == ["org1", "org2"]
