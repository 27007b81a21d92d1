"""Tool policies: patterns, matching, ordering and the decision for one tool call. No I/O.

A policy belongs to an owner, `org` (the organization's guardrails) or `user` (one account's own
rules inside that organization), and says `approve`, `require_approval` or `block` for the tool ids its
pattern matches. Patterns: `*` matches everything; `a.b.c` matches exactly; a trailing `.*` matches a
subtree including its root (`a.b.*` matches `a.b` and `a.b.c.d`); a `*` segment in the middle matches
exactly one segment (`github.*.*.getRepo`).

Resolution: within each owner the first matching rule (by position, then id) is that owner's word;
across owners the most restrictive word wins (block > require_approval > approve), so a user rule can
never weaken an org rule. With no matching rule the tool's annotation decides (`requiresApproval`
means require_approval), and an explicit `approve` turns that annotation gate off.

On a toolkit's endpoint the toolkit's own rules (owner `toolkit`) are a third word, taken after the others
have decided: it replaces their decision only when it is more restrictive, so a toolkit can tighten what the
org and the user allow and never loosen it (not even the annotation gate).
"""

import enum

import attrs


class Action(enum.StrEnum):
    APPROVE = "approve"
    REQUIRE_APPROVAL = "require_approval"
    BLOCK = "block"

    @property
    def severity(self) -> int:
        return {Action.APPROVE: 1, Action.REQUIRE_APPROVAL: 2, Action.BLOCK: 3}[self]


class RuleOwner(enum.StrEnum):
    USER = "user"
    ORG = "org"
    TOOLKIT = "toolkit"

    @property
    def rank(self) -> int:
        """Evaluation order of owners: the user's own rules (inner) before the org's (outer), then a toolkit's."""
        return {RuleOwner.USER: 0, RuleOwner.ORG: 1, RuleOwner.TOOLKIT: 2}[self]


class InvalidPattern(ValueError):
    def __init__(self, pattern: str) -> None:
        super().__init__(f"Invalid tool policy pattern: {pattern}")


@attrs.frozen
class Rule:
    id: str
    owner: RuleOwner
    pattern: str
    action: Action
    position: str


@attrs.frozen
class Decision:
    action: Action
    rule: Rule | None  # the rule whose word won, None when the annotation (or nothing) decided


def validate_pattern(pattern: str) -> str:
    """The pattern, or `InvalidPattern`: no partial wildcards, no empty segments, no leading `*` but `*`."""
    if pattern == "*":
        return pattern
    segments = pattern.split(".")
    if not pattern or any(not segment for segment in segments) or segments[0] == "*":
        raise InvalidPattern(pattern)
    for segment in segments:
        if "*" in segment and segment != "*":
            raise InvalidPattern(pattern)
    return pattern


def matches(pattern: str, tool_id: str) -> bool:
    if pattern == "*":
        return True
    wanted, actual = pattern.split("."), tool_id.split(".")
    if wanted[-1] == "*":
        root = wanted[:-1]
        return len(actual) >= len(root) and _segments_match(root, actual[: len(root)])
    return len(wanted) == len(actual) and _segments_match(wanted, actual)


def _segments_match(wanted: list[str], actual: list[str]) -> bool:
    return all(w == "*" or w == a for w, a in zip(wanted, actual, strict=True))


def specificity(pattern: str) -> int:
    """How narrow a pattern is: `*`=0, `a.*`=2, `a.b.*`=4, `a.b`=5, `a.b.c`=7 (two per literal segment,
    one more for an exact pattern)."""
    if pattern == "*":
        return 0
    segments = pattern.split(".")
    literal = sum(1 for segment in segments if segment != "*")
    return 2 * literal + (0 if segments[-1] == "*" else 1)


def evaluation_order(rules: list[Rule]) -> list[Rule]:
    return sorted(rules, key=lambda rule: (rule.owner.rank, rule.position, rule.id))


def first_matches(rules: list[Rule], tool_id: str) -> dict[RuleOwner, Rule]:
    """Each owner's word on `tool_id`: its first matching rule in evaluation order."""
    firsts: dict[RuleOwner, Rule] = {}
    for rule in evaluation_order(rules):
        if rule.owner not in firsts and matches(rule.pattern, tool_id):
            firsts[rule.owner] = rule
    return firsts


def decide(rules: list[Rule], tool_id: str, requires_approval: bool = False) -> Decision:
    firsts = first_matches(rules, tool_id)
    toolkit = firsts.pop(RuleOwner.TOOLKIT, None)
    if not firsts:
        decision = Decision(Action.REQUIRE_APPROVAL if requires_approval else Action.APPROVE, None)
    else:
        # A matching rule always decides, so an explicit `approve` switches the annotation gate off.
        winner = max(firsts.values(), key=lambda rule: (rule.action.severity, -rule.owner.rank))
        decision = Decision(winner.action, winner)
    if toolkit is not None and toolkit.action.severity > decision.action.severity:
        return Decision(toolkit.action, toolkit)
    return decision


@attrs.frozen
class Explanation:
    """A decision with the words a person reads to see why: which rule won, or why none did."""

    decision: Decision
    reason: str


_OWNER_WORDS = {RuleOwner.ORG: "org rule", RuleOwner.USER: "user rule", RuleOwner.TOOLKIT: "toolkit rule"}


def explain(rules: list[Rule], tool_id: str, requires_approval: bool | None) -> Explanation:
    """What a call of `tool_id` would get, and why. `requires_approval` is the tool's own annotation, None when
    no tool has that id (so no annotation applies). The decision is `decide`'s, so the words never disagree
    with what a call gets."""
    decision = decide(rules, tool_id, bool(requires_approval))
    firsts = first_matches(rules, tool_id)
    winner = decision.rule
    if winner is None:
        if requires_approval is None:
            why = "it is approved (no tool you can reach has this path, so no approval annotation applies)"
        elif requires_approval:
            why = "the tool's own approval annotation decides: it requires approval"
        else:
            why = "it is approved (the tool does not ask for approval by default)"
        return Explanation(decision, f"No rule matches {tool_id}, so {why}.")
    words = [f'The first {_OWNER_WORDS[winner.owner]} that matches, "{winner.pattern}", says {winner.action.value}.']
    rivals = [rule for owner, rule in firsts.items() if owner is not winner.owner]
    for rival in rivals:
        if rival.action is winner.action:
            words.append(f'The first matching {_OWNER_WORDS[rival.owner]}, "{rival.pattern}", says the same.')
        else:
            words.append(
                f'It outranks the first matching {_OWNER_WORDS[rival.owner]}, "{rival.pattern}", which says '
                f"{rival.action.value}: across owners the most restrictive word wins."
            )
    if not rivals:
        other = RuleOwner.USER if winner.owner is RuleOwner.ORG else RuleOwner.ORG
        words.append(f"No {_OWNER_WORDS[other]} matches.")
    if requires_approval and winner.action is Action.APPROVE:
        words.append("A matching rule always decides, so this approve turns the tool's own approval annotation off.")
    return Explanation(decision, " ".join(words))


POSITION_WIDTH = 12
POSITION_STEP = 1024


def format_position(value: int) -> str:
    """Generated positions are zero-padded numbers, so string order is numeric order."""
    return str(value).zfill(POSITION_WIDTH)


def position_for(existing: list[Rule], pattern: str) -> str | None:
    """Where a new rule goes among its owner's rules: just below the last rule at least as specific,
    so more specific rules keep winning. None means there is no gap there: renumber, then ask again."""
    ordered = sorted(existing, key=lambda rule: (rule.position, rule.id))
    mine = specificity(pattern)
    index = max((i for i, rule in enumerate(ordered) if specificity(rule.pattern) >= mine), default=-1)
    low = position_number(ordered[index].position) if index >= 0 else 0
    if index + 1 == len(ordered):
        return format_position(low + POSITION_STEP)
    high = position_number(ordered[index + 1].position)
    if high - low < 2:
        return None
    return format_position((low + high) // 2)


def position_number(position: str) -> int:
    """A position's number: a generated one's value, 0 for a hand-written one (it sorts as text)."""
    return int(position) if position.isascii() and position.isdigit() else 0


def _place(rule: Rule) -> tuple[str, str]:
    """Where a rule stands among its owner's: by position, then id (what `evaluation_order` sorts by)."""
    return rule.position, rule.id


def moved(rules: list[Rule], rule_id: str, offset: int) -> dict[str, str]:
    """New positions, by rule id, that move `rule_id` exactly `offset` places (negative: earlier) among
    `rules`, one owner's rules; clamped at either end, where nothing moves (an empty answer).

    Usually only the moved rule changes: to a number between its new neighbours. When there is no number
    between them (no gap, equal positions, hand-written ones), every rule is renumbered in the new order, so
    a move never lands anywhere but exactly where it was asked to."""
    ordered = sorted(rules, key=_place)
    index = next((i for i, rule in enumerate(ordered) if rule.id == rule_id), None)
    if index is None:
        raise ValueError(f"no rule {rule_id} among these")
    target = min(max(index + offset, 0), len(ordered) - 1)
    if target == index:
        return {}
    rule = ordered[index]
    others = ordered[:index] + ordered[index + 1 :]
    before = others[target - 1] if target > 0 else None
    after = others[target] if target < len(others) else None
    position = _between(rule, before, after)
    if position is not None:
        return {rule.id: position}
    order = [*others[:target], rule, *others[target:]]
    renumbered = ((each, format_position((i + 1) * POSITION_STEP)) for i, each in enumerate(order))
    return {each.id: new for each, new in renumbered if new != each.position}


def _between(rule: Rule, before: Rule | None, after: Rule | None) -> str | None:
    """A generated position that puts `rule` strictly between `before` and `after`, or None if none does."""
    low = position_number(before.position) if before is not None else 0
    high = position_number(after.position) if after is not None else low + 2 * POSITION_STEP
    if high - low < 2:
        return None
    position = format_position((low + high) // 2)
    placed = (position, rule.id)
    if (before is not None and _place(before) >= placed) or (after is not None and placed >= _place(after)):
        return None
    return position
