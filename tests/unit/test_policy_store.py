"""Policies in the control plane over real LMDB: reads scoped to the caller, limits, the admin rule."""

import logging
from pathlib import Path

import lmdb
import pytest

from executor_mcp.policies.model import Action, RuleOwner
from executor_mcp.policies.service import (
    MAX_RULES_PER_OWNER,
    Policies,
    PolicyError,
    PolicyForbidden,
    parse_new,
)
from executor_mcp.storage.control import CONTROL_FILE, ControlPlane
from executor_mcp.storage.records import Owner as Principal

ALICE = Principal("alice", "acme", org_admin=True)
BOB = Principal("bob", "acme", org_admin=True)
EVE = Principal("eve", "evil", org_admin=True)


def poison(data_dir: Path, keys: list[bytes]) -> None:
    """Write undecodable records at `keys`, with the server's file closed: any read of them would fail."""
    env = lmdb.open(str(data_dir / CONTROL_FILE), subdir=False, max_dbs=8)
    try:
        with env.begin(write=True) as txn:
            for key in keys:
                txn.put(key, b"{not a record", db=env.open_db(b"policies-by-owner", txn=txn))
    finally:
        env.close()


async def test_a_read_touches_only_the_callers_org_and_own_rules(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    control = await ControlPlane.open(tmp_path)
    policies = Policies(control.policies)
    org_rule = await policies.create(ALICE, RuleOwner.ORG, "a.*", Action.BLOCK)
    own_rule = await policies.create(ALICE, RuleOwner.USER, "b", Action.APPROVE)
    for principal in (BOB, EVE):
        await policies.create(principal, RuleOwner.USER, "c", Action.BLOCK)
        await policies.create(principal, RuleOwner.ORG, "d", Action.BLOCK)
    await control.close()
    # Records of another org and of another member of acme that no read for alice may decode.
    poison(tmp_path, [b"evil\x00\x00pol_poison", b"evil\x00eve\x00pol_poison", b"acme\x00bob\x00pol_poison"])

    control = await ControlPlane.open(tmp_path)
    try:
        policies = Policies(control.policies)
        with caplog.at_level(logging.ERROR):
            listed = await policies.list(ALICE)
            assert [record.pattern for record in listed] == ["b", "d", "a.*"]
            assert {org_rule.id, own_rule.id} < {record.id for record in listed}
            assert (await policies.decide(ALICE, "a.x", False)).action is Action.BLOCK
            await policies.remove(ALICE, own_rule.id, RuleOwner.USER)
            assert "pol_poison" not in caplog.text
            # Bob's own range holds a poisoned record: his read decodes it, logs it and skips it.
            assert sorted(record.pattern for record in await policies.list(BOB)) == ["a.*", "c", "d"]
        assert "skipping an unreadable PolicyRecord record b'acme\\x00bob\\x00pol_poison'" in caplog.text
    finally:
        await control.close()


async def test_each_owner_holds_a_bounded_number_of_rules(tmp_path: Path) -> None:
    control = await ControlPlane.open(tmp_path)
    try:
        policies = Policies(control.policies)
        for index in range(MAX_RULES_PER_OWNER):
            await policies.create(ALICE, RuleOwner.ORG, f"org.rule{index}", Action.BLOCK)
        with pytest.raises(PolicyError, match=f"At most {MAX_RULES_PER_OWNER} org rules are allowed"):
            await policies.create(BOB, RuleOwner.ORG, "one.more", Action.BLOCK)
        # The org's count is its own: members keep their own rules, other orgs theirs.
        await policies.create(BOB, RuleOwner.USER, "mine", Action.BLOCK)
        await policies.create(EVE, RuleOwner.ORG, "theirs", Action.BLOCK)
        assert len(await policies.list(BOB)) == MAX_RULES_PER_OWNER + 1
    finally:
        await control.close()


async def test_only_an_org_admin_changes_org_rules(tmp_path: Path) -> None:
    control = await ControlPlane.open(tmp_path)
    try:
        policies = Policies(control.policies)
        member = Principal("carol", "acme")
        rule = await policies.create(ALICE, RuleOwner.ORG, "a", Action.BLOCK)
        for change in (
            policies.create(member, RuleOwner.ORG, "b", Action.APPROVE),
            policies.update(member, rule.id, RuleOwner.ORG, action=Action.APPROVE),
            policies.remove(member, rule.id, RuleOwner.ORG),
        ):
            with pytest.raises(PolicyForbidden):
                await change
        mine = await policies.create(member, RuleOwner.USER, "b", Action.APPROVE)
        await policies.update(member, mine.id, RuleOwner.USER, action=Action.BLOCK)
        assert [(record.pattern, record.action) for record in await policies.list(member)] == [
            ("b", "block"),
            ("a", "block"),
        ]
        # The role is not part of who someone is: the same account and org, whatever the role.
        assert member == Principal("carol", "acme", org_admin=True)
    finally:
        await control.close()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"pattern": "a" * 513}, "pattern must be at most 512 characters"),
        ({"pattern": "a.\ud800"}, "pattern must be printable text"),
        ({"pattern": "a\nb"}, "pattern must be printable text"),
        ({"position": "9" * 65}, "position must be at most 64 characters"),
        ({"position": "\x00"}, "position must be printable text"),
    ],
)
def test_fields_are_bounded(values: dict, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_new({"owner": "org", "pattern": "a", "action": "block", **values})
