"""The policy explanation (what a tool path would get, and why) and moving a rule within its owner."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executor_mcp.policies.model import (
    POSITION_STEP,
    Action,
    Rule,
    RuleOwner,
    decide,
    evaluation_order,
    explain,
    format_position,
    moved,
    position_for,
)
from executor_mcp.policies.service import PolicyError, explanation_json, parse_move, parse_tool_path


def rule(owner: RuleOwner, pattern: str, action: Action, position: int = 1024, rule_id: str | None = None) -> Rule:
    return Rule(rule_id or f"{owner}-{pattern}", owner, pattern, action, format_position(position))


def test_no_rule_and_no_annotation_is_approved() -> None:
    explanation = explain([], "github.org.main.getRepo", requires_approval=False)
    assert explanation.decision.action is Action.APPROVE
    assert explanation.decision.rule is None
    assert explanation.reason == (
        "No rule matches github.org.main.getRepo, so it is approved (the tool does not ask for approval by default)."
    )


def test_no_rule_and_the_annotation_asks_for_approval() -> None:
    other = [rule(RuleOwner.ORG, "github.*", Action.BLOCK)]
    explanation = explain(other, "executor.coreTools.policies.create", requires_approval=True)
    assert explanation.decision.action is Action.REQUIRE_APPROVAL
    assert explanation.decision.rule is None
    assert "the tool's own approval annotation decides: it requires approval" in explanation.reason


def test_no_rule_for_an_unknown_tool_says_no_annotation_applies() -> None:
    explanation = explain([], "nothing.here", requires_approval=None)
    assert explanation.decision.action is Action.APPROVE
    assert "no tool you can reach has this path" in explanation.reason


def test_the_first_match_of_an_owner_wins_over_its_later_rules() -> None:
    rules = [
        rule(RuleOwner.USER, "*", Action.BLOCK, 2048),
        rule(RuleOwner.USER, "github.*", Action.APPROVE, 1024),
    ]
    explanation = explain(rules, "github.org.main.getRepo", requires_approval=False)
    assert explanation.decision.action is Action.APPROVE
    assert explanation.decision.rule == rules[1]
    assert explanation.reason == 'The first user rule that matches, "github.*", says approve. No org rule matches.'


def test_the_most_restrictive_owner_wins_and_the_reason_names_the_loser() -> None:
    org = rule(RuleOwner.ORG, "github.*", Action.REQUIRE_APPROVAL)
    user = rule(RuleOwner.USER, "github.org.main.getRepo", Action.APPROVE)
    explanation = explain([user, org], "github.org.main.getRepo", requires_approval=False)
    assert explanation.decision.rule == org
    assert explanation.reason == (
        'The first org rule that matches, "github.*", says require_approval. It outranks the first matching user '
        'rule, "github.org.main.getRepo", which says approve: across owners the most restrictive word wins.'
    )


def test_a_tie_across_owners_says_so() -> None:
    org = rule(RuleOwner.ORG, "*", Action.BLOCK)
    user = rule(RuleOwner.USER, "a.*", Action.BLOCK)
    explanation = explain([org, user], "a.b", requires_approval=False)
    assert explanation.decision.rule == decide([org, user], "a.b").rule
    assert "says the same" in explanation.reason


def test_an_approving_rule_turns_the_annotation_off_and_says_so() -> None:
    explanation = explain([rule(RuleOwner.USER, "t", Action.APPROVE)], "t", requires_approval=True)
    assert explanation.decision.action is Action.APPROVE
    assert explanation.reason.endswith("this approve turns the tool's own approval annotation off.")


segment = st.sampled_from(["a", "b", "*"])
patterns = st.one_of(
    st.just("*"), st.lists(segment, min_size=1, max_size=3).filter(lambda p: p[0] != "*").map(".".join)
)
owned = st.tuples(st.sampled_from(list(RuleOwner)), patterns, st.sampled_from(list(Action)))


@given(
    specs=st.lists(owned, max_size=6),
    tool=st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=3).map(".".join),
    annotation=st.sampled_from([True, False, None]),
)
def test_the_explanation_always_agrees_with_the_decision(specs, tool, annotation) -> None:
    rules = [rule(owner, pattern, action, 1024 * (i + 1), f"r{i}") for i, (owner, pattern, action) in enumerate(specs)]
    explanation = explain(rules, tool, annotation)
    assert explanation.decision == decide(rules, tool, bool(annotation))
    winner = explanation.decision.rule
    assert (winner is None) == explanation.reason.startswith("No rule matches")
    if winner is not None:
        assert f'"{winner.pattern}", says {winner.action.value}' in explanation.reason


def test_the_api_shape_of_an_explanation() -> None:
    winner = rule(RuleOwner.ORG, "a.*", Action.BLOCK, rule_id="pol_1")
    assert explanation_json("a.b", explain([winner], "a.b", False)) == {
        "path": "a.b",
        "action": "block",
        "rule": {"id": "pol_1", "owner": "org", "pattern": "a.*", "action": "block"},
        "reason": 'The first org rule that matches, "a.*", says block. No user rule matches.',
    }
    assert explanation_json("z", explain([winner], "z", None))["rule"] is None


def test_a_tool_path_is_read_as_policies_see_it() -> None:
    assert parse_tool_path(" tools.github.org.main.getRepo ") == "github.org.main.getRepo"
    assert parse_tool_path("executor.coreTools.policies.list") == "executor.coreTools.policies.list"
    for bad in (None, "", "  ", 5, "x" * 513, "a\nb"):
        with pytest.raises(PolicyError):
            parse_tool_path(bad)
    for only_the_prefix in ("tools.", " tools. "):  # names no tool: nothing is left once `tools.` goes
        with pytest.raises(PolicyError, match="must name a tool"):
            parse_tool_path(only_the_prefix)


# -- moving a rule ----------------------------------------------------------------------------------


def order_after(rules: list[Rule], positions: dict[str, str]) -> list[str]:
    changed = [Rule(r.id, r.owner, r.pattern, r.action, positions.get(r.id, r.position)) for r in rules]
    return [r.id for r in evaluation_order(changed)]


def rules_at(*positions: str, owner: RuleOwner = RuleOwner.USER) -> list[Rule]:
    return [Rule(f"r{i}", owner, f"p{i}", Action.APPROVE, position) for i, position in enumerate(positions)]


def test_a_move_takes_a_position_between_the_new_neighbours() -> None:
    rules = rules_at(*(format_position(POSITION_STEP * n) for n in (1, 2, 3)))
    assert moved(rules, "r2", -1) == {"r2": format_position(1536)}
    assert moved(rules, "r0", +1) == {"r0": format_position(2560)}
    assert moved(rules, "r1", -1) == {"r1": format_position(512)}
    assert moved(rules, "r1", +1) == {"r1": format_position(3072 + POSITION_STEP)}


def test_a_move_past_either_end_changes_nothing() -> None:
    rules = rules_at(format_position(1024), format_position(2048))
    assert moved(rules, "r0", -1) == {}
    assert moved(rules, "r1", +1) == {}
    with pytest.raises(ValueError, match="no rule nope"):
        moved(rules, "nope", 1)


def test_without_a_gap_the_owner_is_renumbered_in_the_new_order() -> None:
    rules = rules_at(format_position(1), format_position(2), format_position(3))
    positions = moved(rules, "r2", -1)
    assert order_after(rules, positions) == ["r0", "r2", "r1"]
    assert set(positions.values()) <= {format_position(POSITION_STEP * n) for n in (1, 2, 3)}


def test_equal_and_hand_written_positions_still_move_exactly_one_place() -> None:
    equal = rules_at("5", "5", "5")
    assert order_after(equal, moved(equal, "r0", +1)) == ["r1", "r0", "r2"]
    written = rules_at("a", "b", "c")
    assert order_after(written, moved(written, "r2", -1)) == ["r0", "r2", "r1"]


def test_a_hand_written_position_in_other_digits_counts_as_no_number() -> None:
    # `str.isdigit` holds for "²", which `int` refuses: such a position must not make a move or an add fail.
    written = rules_at(format_position(1024), "\u00b2", format_position(4096))
    before = [r.id for r in evaluation_order(written)]
    assert before == ["r0", "r2", "r1"]
    assert order_after(written, moved(written, "r2", +1)) == ["r0", "r1", "r2"]
    assert order_after(written, moved(written, "r1", -1)) == ["r0", "r1", "r2"]
    assert position_for(written, "a.b") is not None


@given(
    positions=st.lists(
        st.one_of(st.integers(1, 5000).map(format_position), st.sampled_from(["1", "z", "00"])), min_size=1, max_size=7
    ),
    data=st.data(),
)
def test_a_move_always_moves_exactly_one_place(positions, data) -> None:
    rules = rules_at(*positions)
    before = [r.id for r in evaluation_order(rules)]
    index = data.draw(st.integers(0, len(before) - 1))
    offset = data.draw(st.sampled_from([-1, 1]))
    after = order_after(rules, moved(rules, before[index], offset))
    expected = list(before)
    target = min(max(index + offset, 0), len(before) - 1)
    expected.insert(target, expected.pop(index))
    assert after == expected


def test_a_move_request_comes_alone() -> None:
    assert parse_move({"owner": "user", "move": "up"}) == (RuleOwner.USER, -1)
    assert parse_move({"owner": "org", "move": "down"}) == (RuleOwner.ORG, 1)
    assert parse_move({"owner": "user", "position": "x"}) is None
    with pytest.raises(PolicyError, match="cannot be combined"):
        parse_move({"owner": "user", "move": "up", "pattern": "a"})
    with pytest.raises(PolicyError, match='"up" or "down"'):
        parse_move({"owner": "user", "move": 2})


def test_a_move_that_is_a_list_or_an_object_is_a_bad_request() -> None:
    # An unhashable value must not reach the dict lookup (a TypeError, so a 500).
    for move in ([], {}, ["up"]):
        with pytest.raises(PolicyError, match='"up" or "down"'):
            parse_move({"owner": "user", "move": move})
