"""The policy model: pattern grammar, matching, specificity, placement and resolution."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executor_mcp.policies.model import (
    Action,
    InvalidPattern,
    Rule,
    RuleOwner,
    decide,
    matches,
    position_for,
    specificity,
    validate_pattern,
)


@pytest.mark.parametrize("pattern", ["*", "a", "a.b", "a.*", "a.b.*", "github.*.*.getRepo", "a.*.c"])
def test_valid_patterns(pattern: str) -> None:
    assert validate_pattern(pattern) == pattern


@pytest.mark.parametrize("pattern", ["", "me*", "*.a", "a..b", ".a", "a.", "a.b*", "**", "a.*x.b"])
def test_invalid_patterns(pattern: str) -> None:
    with pytest.raises(InvalidPattern, match=r"^Invalid tool policy pattern: "):
        validate_pattern(pattern)


@pytest.mark.parametrize(
    ("pattern", "tool", "expected"),
    [
        ("*", "anything.at.all", True),
        ("a.b", "a.b", True),
        ("a.b", "a.b.c", False),
        ("a.b.*", "a.b", True),
        ("a.b.*", "a.b.c.d", True),
        ("a.b.*", "a.bc", False),
        ("github.*.*.getRepo", "github.org.main.getRepo", True),
        ("github.*.*.getRepo", "github.org.getRepo", False),
        ("a.*.c", "a.x.c", True),
        ("a.*.c", "a.x.y.c", False),
    ],
)
def test_matching(pattern: str, tool: str, expected: bool) -> None:
    assert matches(pattern, tool) is expected


def test_specificity_scores() -> None:
    assert [specificity(p) for p in ("*", "a.*", "a.b.*", "a.b", "a.b.c")] == [0, 2, 4, 5, 7]


def rule(owner: RuleOwner, pattern: str, action: Action, position: str = "000000001024", rule_id: str = "p") -> Rule:
    return Rule(id=f"{rule_id}-{owner}-{pattern}", owner=owner, pattern=pattern, action=action, position=position)


def test_first_match_per_owner_by_position() -> None:
    rules = [
        rule(RuleOwner.ORG, "*", Action.BLOCK, "000000002048"),
        rule(RuleOwner.ORG, "a.*", Action.APPROVE, "000000001024"),
    ]
    assert decide(rules, "a.b").action is Action.APPROVE
    assert decide(rules, "z").action is Action.BLOCK


def test_most_restrictive_across_owners() -> None:
    rules = [rule(RuleOwner.USER, "a.b", Action.APPROVE), rule(RuleOwner.ORG, "a.*", Action.REQUIRE_APPROVAL)]
    decision = decide(rules, "a.b")
    assert decision.action is Action.REQUIRE_APPROVAL
    assert decision.rule is not None
    assert decision.rule.owner is RuleOwner.ORG


def test_annotation_default_and_explicit_approve() -> None:
    assert decide([], "t", requires_approval=True).action is Action.REQUIRE_APPROVAL
    assert decide([], "t").action is Action.APPROVE
    approved = decide([rule(RuleOwner.USER, "t", Action.APPROVE)], "t", requires_approval=True)
    assert approved.action is Action.APPROVE


def test_a_new_rule_goes_below_more_specific_ones() -> None:
    existing = [
        rule(RuleOwner.ORG, "a.b.c", Action.BLOCK, "000000001024"),
        rule(RuleOwner.ORG, "*", Action.APPROVE, "000000002048"),
    ]
    position = position_for(existing, "a.*")
    assert position is not None
    assert "000000001024" < position < "000000002048"
    assert position_for(existing, "x.y.z") == "000000001536"
    assert position_for([], "*") == "000000001024"
    crowded = [
        rule(RuleOwner.ORG, "a.b", Action.BLOCK, "000000000001"),
        rule(RuleOwner.ORG, "*", Action.BLOCK, "000000000002"),
    ]
    assert position_for(crowded, "a.*") is None


segment = st.sampled_from(["a", "b", "c", "*"])
patterns = st.one_of(
    st.just("*"),
    st.lists(segment, min_size=1, max_size=3).filter(lambda parts: parts[0] != "*").map(".".join),
)
tool_ids = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4).map(".".join)
actions = st.sampled_from(list(Action))


@given(
    org_rules=st.lists(st.tuples(patterns, actions), max_size=4),
    user_rules=st.lists(st.tuples(patterns, actions), max_size=4),
    tool=tool_ids,
    annotated=st.booleans(),
)
def test_a_user_rule_never_weakens_an_org_rule(org_rules, user_rules, tool, annotated) -> None:
    org = [rule(RuleOwner.ORG, p, a, f"{i:012d}", f"o{i}") for i, (p, a) in enumerate(org_rules)]
    user = [rule(RuleOwner.USER, p, a, f"{i:012d}", f"u{i}") for i, (p, a) in enumerate(user_rules)]
    with_user = decide(org + user, tool, annotated)
    org_only = decide(org, tool, annotated)
    if org_only.rule is not None:
        assert with_user.action.severity >= org_only.action.severity
