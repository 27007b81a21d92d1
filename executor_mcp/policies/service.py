"""Policies as a principal sees them: its organization's rules and its own, stored in the control plane.

Every operation is scoped: an org rule belongs to the principal's organization, a user rule to the
principal's account within it. A rule of another org or account does not exist for the caller (so
updating or removing it is "not found", never "forbidden", which would confirm it exists).

Org rules are changed only by an org admin (`Principal.org_admin`: everyone unless the server runs
with `--org-admin-claim`); anyone else gets `PolicyForbidden` for them and manages only their own rules.
Each owner holds at most `MAX_RULES_PER_OWNER` rules and every field is bounded, because every tool
call of the org reads its rules.
"""

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import attrs

from executor_mcp.policies.model import (
    POSITION_STEP,
    Action,
    Decision,
    Explanation,
    InvalidPattern,
    Rule,
    RuleOwner,
    decide,
    evaluation_order,
    explain,
    format_position,
    moved,
    position_for,
    validate_pattern,
)
from executor_mcp.policies.toolkits import ToolkitScope
from executor_mcp.storage.interfaces import PolicyStore
from executor_mcp.storage.records import Owner as Principal
from executor_mcp.storage.records import PolicyRecord

_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"

# Far beyond any real tool id or hand-written position, small enough that a tool call's read stays cheap.
MAX_PATTERN_LENGTH = 512
MAX_POSITION_LENGTH = 64
# Per owner: the org's rules, and each account's own rules in the org.
MAX_RULES_PER_OWNER = 256


class PolicyError(ValueError):
    """A request about policies that cannot be honoured; the message is for the caller."""


class PolicyNotFound(PolicyError):
    pass


class PolicyForbidden(PolicyError):
    """The caller may not change the organization's rules (only its own)."""


def new_id(prefix: str, now: float) -> str:
    """A new record id: `prefix`, `_`, 48 random bits and the time, in base 36 (`pol_…`, `tk_…`)."""

    def base36(value: int) -> str:
        digits = ""
        while True:
            value, digit = divmod(value, 36)
            digits = _BASE36[digit] + digits
            if not value:
                return digits

    return f"{prefix}_{base36(secrets.randbits(48))}{base36(int(now * 1000))}"


def parse_owner(value: Any) -> RuleOwner:
    """An org or user rule's owner (a toolkit's rules are the toolkit's, changed through it)."""
    if value not in (RuleOwner.ORG.value, RuleOwner.USER.value):
        raise PolicyError('owner must be "org" or "user"')
    return RuleOwner(value)


def parse_action(value: Any) -> Action:
    try:
        return Action(value)
    except ValueError:
        raise PolicyError('action must be one of "approve", "require_approval", "block"') from None


def parse_pattern(value: Any) -> str:
    if not isinstance(value, str):
        raise PolicyError("pattern must be a string")
    check_text("pattern", value, MAX_PATTERN_LENGTH)
    try:
        return validate_pattern(value)
    except InvalidPattern as exc:
        raise PolicyError(str(exc)) from None


def parse_position(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise PolicyError("position must be a non-empty string")
    check_text("position", value, MAX_POSITION_LENGTH)
    return value


def check_text(field: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise PolicyError(f"{field} must be at most {limit} characters")
    if not value.isprintable():
        raise PolicyError(f"{field} must be printable text")


def parse_new(values: Mapping[str, Any]) -> tuple[RuleOwner, str, Action, str | None]:
    """A create request's fields, checked: (owner, pattern, action, position)."""
    return (
        parse_owner(values.get("owner")),
        parse_pattern(values.get("pattern")),
        parse_action(values.get("action")),
        parse_position(values.get("position")),
    )


def parse_change(values: Mapping[str, Any]) -> tuple[RuleOwner, dict[str, Any]]:
    """An update request's fields, checked: the owner, and the changes for `Policies.update`."""
    pattern, action = values.get("pattern"), values.get("action")
    return parse_owner(values.get("owner")), {
        "pattern": parse_pattern(pattern) if pattern is not None else None,
        "action": parse_action(action) if action is not None else None,
        "position": parse_position(values.get("position")),
    }


_MOVES = {"up": -1, "down": 1}
_TOOLS_PREFIX = "tools."


def parse_move(values: Mapping[str, Any]) -> tuple[RuleOwner, int] | None:
    """A move request's fields, checked: (owner, places), or None when the request is not a move. A move
    changes nothing else, so it comes alone."""
    if "move" not in values:
        return None
    if any(values.get(field) is not None for field in ("pattern", "action", "position")):
        raise PolicyError("move cannot be combined with pattern, action or position")
    move = values.get("move")
    if not isinstance(move, str) or move not in _MOVES:
        raise PolicyError('move must be "up" or "down"')
    return parse_owner(values.get("owner")), _MOVES[move]


def parse_tool_path(value: Any) -> str:
    """A tool path to evaluate, as policies see it: a sandbox path with or without `tools.` (policy ids
    never carry it)."""
    tool_id = value.strip().removeprefix(_TOOLS_PREFIX) if isinstance(value, str) else ""
    if not tool_id:
        raise PolicyError("path must name a tool, such as executor.coreTools.policies.list")
    check_text("path", value, MAX_PATTERN_LENGTH)
    return tool_id


def explanation_json(tool_id: str, explanation: Explanation) -> dict[str, Any]:
    """What `GET /api/policies/evaluate` answers."""
    rule = explanation.decision.rule
    return {
        "path": tool_id,
        "action": explanation.decision.action.value,
        "rule": None
        if rule is None
        else {"id": rule.id, "owner": rule.owner.value, "pattern": rule.pattern, "action": rule.action.value},
        "reason": explanation.reason,
    }


def to_rule(record: PolicyRecord) -> Rule:
    return Rule(record.id, RuleOwner(record.owner), record.pattern, Action(record.action), record.position)


def describe(record: PolicyRecord) -> dict[str, Any]:
    """A policy as the HTTP API and the core tools show it (times in milliseconds)."""
    return {
        "id": record.id,
        "owner": record.owner,
        "pattern": record.pattern,
        "action": record.action,
        "position": record.position,
        "createdAt": int(record.created_at * 1000),
        "updatedAt": int(record.updated_at * 1000),
    }


class Policies:
    def __init__(self, store: PolicyStore, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    async def list(self, principal: Principal) -> list[PolicyRecord]:
        """The principal's org rules and own user rules, in evaluation order."""
        visible = await self._store.policies(_org(principal), principal.account_id)
        by_id = {record.id: record for record in visible}
        return [by_id[rule.id] for rule in evaluation_order([to_rule(record) for record in visible])]

    async def decide(
        self, principal: Principal, tool_id: str, requires_approval: bool, scope: ToolkitScope | None = None
    ) -> Decision:
        """The one decision every endpoint applies: the org's and the user's rules, then (on a toolkit's endpoint)
        the toolkit's, which can only tighten them."""
        rules = [to_rule(record) for record in await self._store.policies(_org(principal), principal.account_id)]
        return decide([*rules, *(scope.rules if scope is not None else ())], tool_id, requires_approval)

    async def explain(self, principal: Principal, tool_id: str, requires_approval: bool | None) -> Explanation:
        """What a call of `tool_id` would get now, and why (`requires_approval`: the tool's annotation, None
        for no known tool)."""
        rules = [to_rule(record) for record in await self._store.policies(_org(principal), principal.account_id)]
        return explain(rules, tool_id, requires_approval)

    async def create(
        self, principal: Principal, owner: RuleOwner, pattern: str, action: Action, position: str | None = None
    ) -> PolicyRecord:
        may_change(principal, owner)
        now = self._clock()

        def edit(records: list[PolicyRecord]) -> tuple[list[PolicyRecord], list[PolicyRecord], PolicyRecord]:
            mine = [r for r in records if r.owner == owner.value]
            if len(mine) >= MAX_RULES_PER_OWNER:
                raise PolicyError(f"At most {MAX_RULES_PER_OWNER} {owner.value} rules are allowed; remove one first")
            moved: list[PolicyRecord] = []
            chosen = position or position_for([to_rule(r) for r in mine], pattern)
            if chosen is None:
                moved = renumbered(mine)
                chosen = position_for([to_rule(r) for r in moved], pattern)
            assert chosen is not None
            record = PolicyRecord(
                id=new_id("pol", now),
                org_id=_org(principal),
                owner=owner.value,
                account_id=principal.account_id if owner is RuleOwner.USER else None,
                pattern=pattern,
                action=action.value,
                position=chosen,
                created_at=now,
                updated_at=now,
            )
            return [*moved, record], [], record

        return await self._store.edit_policies(_org(principal), principal.account_id, edit)

    async def update(
        self,
        principal: Principal,
        policy_id: str,
        owner: RuleOwner,
        *,
        pattern: str | None = None,
        action: Action | None = None,
        position: str | None = None,
    ) -> PolicyRecord:
        may_change(principal, owner)
        now = self._clock()

        def edit(records: list[PolicyRecord]) -> tuple[list[PolicyRecord], list[PolicyRecord], PolicyRecord]:
            record = _find(records, policy_id, owner)
            changes: dict[str, Any] = {"updated_at": now}
            if pattern is not None:
                changes["pattern"] = pattern
            if action is not None:
                changes["action"] = action.value
            if position is not None:
                changes["position"] = position
            updated = attrs.evolve(record, **changes)
            return [updated], [], updated

        return await self._store.edit_policies(_org(principal), principal.account_id, edit)

    async def move(self, principal: Principal, policy_id: str, owner: RuleOwner, offset: int) -> PolicyRecord:
        """Move a rule `offset` places among its owner's rules, in the same transaction that reads them, so a
        concurrent edit cannot make it land anywhere else."""
        may_change(principal, owner)
        now = self._clock()

        def edit(records: list[PolicyRecord]) -> tuple[list[PolicyRecord], list[PolicyRecord], PolicyRecord]:
            record = _find(records, policy_id, owner)
            mine = [r for r in records if r.owner == owner.value]
            positions = moved([to_rule(r) for r in mine], policy_id, offset)
            changed = [
                attrs.evolve(r, position=positions[r.id], updated_at=now if r.id == policy_id else r.updated_at)
                for r in mine
                if r.id in positions
            ]
            return changed, [], next((r for r in changed if r.id == policy_id), record)

        return await self._store.edit_policies(_org(principal), principal.account_id, edit)

    async def remove(self, principal: Principal, policy_id: str, owner: RuleOwner) -> None:
        may_change(principal, owner)

        def edit(records: list[PolicyRecord]) -> tuple[list[PolicyRecord], list[PolicyRecord], None]:
            return [], [_find(records, policy_id, owner)], None

        await self._store.edit_policies(_org(principal), principal.account_id, edit)


def _org(principal: Principal) -> str:
    if not principal.org_id:
        raise PolicyError("policies need an organization")
    return principal.org_id


def may_change(principal: Principal, owner: RuleOwner) -> None:
    """Refuse a change of the org's rules by a non-admin (`PolicyForbidden`), and a user rule with no account."""
    if owner is RuleOwner.USER and not principal.account_id:
        raise PolicyError("user rules need an account")
    if owner is RuleOwner.ORG and not principal.org_admin:
        raise PolicyForbidden("Only an organization admin can create, change or remove org rules")


def _find(records: list[PolicyRecord], policy_id: str, owner: RuleOwner) -> PolicyRecord:
    """The caller's rule of that owner; `records` are already only the ones the caller sees."""
    for record in records:
        if record.id == policy_id and record.owner == owner.value:
            return record
    raise PolicyNotFound(f"Policy not found: {policy_id}")


class Positioned(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def position(self) -> str: ...


P = TypeVar("P", bound=Positioned)


def renumbered(records: Sequence[P]) -> list[P]:
    """`records` (attrs records with a position: rules, a toolkit's rows) in their order, numbered afresh
    `POSITION_STEP` apart, so a new one fits anywhere between them again."""
    ordered = sorted(records, key=lambda record: (record.position, record.id))
    return [
        attrs.evolve(record, position=format_position((index + 1) * POSITION_STEP))  # type: ignore[misc]
        for index, record in enumerate(ordered)
    ]
