"""Toolkits without I/O: what a scope shows, how its rules weigh against the org's and the user's (they only
tighten, by property over every combination), and the service's rules for who changes what, over a real store."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executor_mcp.policies.model import Action, Rule, RuleOwner, decide
from executor_mcp.policies.service import PolicyError
from executor_mcp.policies.toolkit_service import ToolkitError, ToolkitForbidden, Toolkits
from executor_mcp.policies.toolkits import ConnectionLevel, Level, ToolkitScope, in_order, slug_from
from executor_mcp.protocol.resources import slug_of
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.records import Owner

ADMIN = Owner("alice", "acme", org_admin=True)
MEMBER = Owner("bob", "acme")


def scope(*levels: tuple[str, Level], rules: tuple[Rule, ...] = ()) -> ToolkitScope:
    rows = [ConnectionLevel(f"c{i}", pattern, level, f"{i:012}") for i, (pattern, level) in enumerate(levels)]
    return ToolkitScope("kit", in_order(rows), rules)


def test_a_toolkit_shows_only_what_its_first_matching_pattern_allows() -> None:
    kit = scope(("github.org.secret.*", Level.OFF), ("github.*", Level.READ), ("executor.coreTools.*", Level.FULL))
    assert kit.shows("github.org.main.getRepo", read_only=True)
    assert not kit.shows("github.org.main.createIssue", read_only=False)
    assert not kit.shows("github.org.secret.getRepo", read_only=True)  # first match: off
    assert kit.shows("executor.coreTools.policies.create", read_only=False)
    assert not kit.shows("slack.org.main.post", read_only=True)  # no pattern: an allowlist shows nothing else
    assert scope().level("anything") is Level.OFF


ACTIONS = st.sampled_from(list(Action))
PATTERNS = st.sampled_from(["*", "github.*", "github.org.main.getRepo", "slack.*"])


def rules_of(owner: RuleOwner, draws: list[tuple[str, Action]]) -> list[Rule]:
    return [Rule(f"{owner}{i}", owner, pattern, action, f"{i:012}") for i, (pattern, action) in enumerate(draws)]


@given(
    org=st.lists(st.tuples(PATTERNS, ACTIONS), max_size=3),
    user=st.lists(st.tuples(PATTERNS, ACTIONS), max_size=3),
    toolkit=st.lists(st.tuples(PATTERNS, ACTIONS), max_size=3),
    annotated=st.booleans(),
)
def test_toolkit_rules_never_loosen_and_only_their_own_word_tightens(org, user, toolkit, annotated) -> None:
    base_rules = rules_of(RuleOwner.ORG, org) + rules_of(RuleOwner.USER, user)
    kit_rules = rules_of(RuleOwner.TOOLKIT, toolkit)
    tool = "github.org.main.getRepo"
    base = decide(base_rules, tool, annotated)
    projected = decide(base_rules + kit_rules, tool, annotated)
    assert projected.action.severity >= base.action.severity
    kit_word = decide(kit_rules, tool, False)
    expected = max(base.action, kit_word.action, key=lambda action: action.severity) if kit_word.rule else base.action
    assert projected.action is expected
    if projected.action is not base.action:
        assert projected.rule is not None
        assert projected.rule.owner is RuleOwner.TOOLKIT


def test_a_toolkit_approve_does_not_lift_the_tools_own_approval_gate() -> None:
    kit = [Rule("k", RuleOwner.TOOLKIT, "*", Action.APPROVE, "1")]
    assert decide(kit, "github.org.main.createIssue", requires_approval=True).action is Action.REQUIRE_APPROVAL
    assert decide(kit, "github.org.main.getRepo", requires_approval=False).action is Action.APPROVE


@pytest.mark.parametrize(
    ("name", "slug"),
    [("CRM tools", "crm-tools"), ("  Ops / On-call  ", "ops-on-call"), ("!!!", ""), ("a" * 80, "a" * 63)],
)
def test_a_slug_is_made_from_a_name(name: str, slug: str) -> None:
    assert slug_from(name) == slug


def test_a_resource_names_its_toolkit() -> None:
    assert slug_of("/mcp/toolkits/crm") == "crm"
    assert slug_of("/mcp") is None


@pytest.fixture
async def service(tmp_path: Path):
    plane = await ControlPlane.open(tmp_path)
    try:
        yield Toolkits(plane.toolkits)
    finally:
        await plane.close()


async def test_org_toolkits_are_changed_by_admins_and_used_by_every_member(service: Toolkits) -> None:
    made = await service.create(ADMIN, RuleOwner.ORG, "CRM", None)
    assert (made.slug, made.owner, made.account_id) == ("crm", "org", None)
    with pytest.raises(ToolkitForbidden):
        await service.create(MEMBER, RuleOwner.ORG, "Ops", None)
    with pytest.raises(ToolkitForbidden):
        await service.add_connection(MEMBER, made.id, "github.*", Level.READ, None)
    await service.add_connection(ADMIN, made.id, "github.*", Level.READ, None)
    seen = await service.scope(MEMBER, "crm")
    assert seen is not None
    assert seen.level("github.org.main.getRepo") is Level.READ
    assert await service.scope(Owner("eve", "other"), "crm") is None


async def test_a_user_toolkit_is_its_owners_alone_and_an_org_slug_wins(service: Toolkits) -> None:
    mine = await service.create(MEMBER, RuleOwner.USER, "Mine", "crm")
    assert [r.id for r in await service.visible(ADMIN)] == []
    with pytest.raises(ToolkitError, match=r"Toolkit not found\."):
        await service.remove(ADMIN, mine.id)
    found = await service.scope(MEMBER, "crm")
    assert found is not None
    assert found.connections == ()
    org = await service.create(ADMIN, RuleOwner.ORG, "CRM", "crm")  # another owner: the slug is free there
    await service.add_connection(ADMIN, org.id, "*", Level.FULL, None)
    winner = await service.scope(MEMBER, "crm")
    assert winner is not None
    assert winner.level("x.y") is Level.FULL
    with pytest.raises(ToolkitError, match=r'Toolkit slug "crm" is already in use\.'):
        await service.create(MEMBER, RuleOwner.USER, "Again", "crm")


async def test_rows_go_first_unless_placed_and_a_listed_pattern_is_not_added_twice(service: Toolkits) -> None:
    kit = await service.create(ADMIN, RuleOwner.ORG, "Kit", None)
    _, first = await service.add_rule(ADMIN, kit.id, "github.*", Action.BLOCK, None)
    _, second = await service.add_rule(ADMIN, kit.id, "*", Action.REQUIRE_APPROVAL, None)
    assert second.position < first.position
    for _ in range(40):  # halving runs out of room: the rows are renumbered, order kept
        await service.add_rule(ADMIN, kit.id, "slack.*", Action.APPROVE, None)
    rules = sorted((await service.get(ADMIN, kit.id)).policies, key=lambda rule: rule.position)
    assert [rule.pattern for rule in rules][-2:] == ["*", "github.*"]
    _, row = await service.add_connection(ADMIN, kit.id, "github.*", Level.READ, None)
    _, again = await service.add_connection(ADMIN, kit.id, "github.*", Level.FULL, None)
    assert (again.id, again.level) == (row.id, "read")
    _, changed = await service.update_connection(ADMIN, kit.id, row.id, Level.OFF)
    assert changed.level == "off"
    with pytest.raises(PolicyError):
        await service.remove_rule(ADMIN, kit.id, "tkpol_missing")
