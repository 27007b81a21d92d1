"""Toolkits as a principal sees them: its organization's and its own, stored in the control plane.

Scoped like policies: an org toolkit belongs to the principal's organization (every member may use its
endpoint; only an org admin may change it), a user toolkit to the principal's account within it. Another org's
or another member's toolkit does not exist for the caller ("Toolkit not found.", never "forbidden"). A slug is
unique among one owner's toolkits; where an org toolkit and the caller's own share a slug, the org's endpoint
wins, as upstream's lookup does. Every list is bounded, because a call on a toolkit endpoint reads the toolkit.

Messages and shapes follow upstream's toolkits plugin (`upstream-oauth-toolkits.md` §B), with two differences
(PRODUCT.md): a connection pattern carries a level, and the rules only tighten the org's and the user's.
"""

import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from executor_mcp.policies.model import (
    POSITION_STEP,
    Action,
    Rule,
    RuleOwner,
    evaluation_order,
    format_position,
    position_number,
)
from executor_mcp.policies.service import (
    PolicyError,
    PolicyForbidden,
    check_text,
    may_change,
    new_id,
    parse_action,
    parse_owner,
    parse_pattern,
    parse_position,
    renumbered,
)
from executor_mcp.policies.toolkits import SLUG, ConnectionLevel, Level, ToolkitScope, in_order, slug_from
from executor_mcp.protocol.resources import slug_of
from executor_mcp.storage.interfaces import ToolkitStore
from executor_mcp.storage.records import Owner as Principal
from executor_mcp.storage.records import ToolkitConnectionRecord, ToolkitRecord, ToolkitRuleRecord

MAX_TOOLKITS_PER_OWNER = 64
MAX_RULES_PER_TOOLKIT = 256
MAX_CONNECTIONS_PER_TOOLKIT = 256
MAX_NAME_LENGTH = 200


class ToolkitError(PolicyError):
    """A toolkit request that cannot be honoured; the message is for the caller (upstream's `ToolkitError`)."""


class ToolkitNotFound(ToolkitError):
    def __init__(self) -> None:
        super().__init__("Toolkit not found.")


class ToolkitForbidden(PolicyForbidden):
    """Only an org admin changes an org toolkit."""


def parse_name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolkitError("Toolkit name is required.")
    check_text("name", value, MAX_NAME_LENGTH)
    return value.strip()


def parse_slug(value: Any) -> str:
    if not isinstance(value, str) or not SLUG.match(value):
        raise ToolkitError(
            "slug must be 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit"
        )
    return value


def parse_level(value: Any) -> Level:
    try:
        return Level(Level.FULL if value is None else value)
    except ValueError:
        raise ToolkitError('level must be "off", "read" or "full"') from None


def parse_new_toolkit(values: Mapping[str, Any]) -> tuple[RuleOwner, str, str | None]:
    """A create request's fields: (owner, name, slug or None to derive it from the name)."""
    slug = values.get("slug")
    return parse_owner(values.get("owner")), parse_name(values.get("name")), None if slug is None else parse_slug(slug)


def describe_toolkit(record: ToolkitRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "owner": record.owner,
        "slug": record.slug,
        "name": record.name,
        "createdAt": _ms(record.created_at),
        "updatedAt": _ms(record.updated_at),
    }


def describe_rule(toolkit: ToolkitRecord, rule: ToolkitRuleRecord) -> dict[str, Any]:
    return {
        "id": rule.id,
        "toolkitId": toolkit.id,
        "pattern": rule.pattern,
        "action": rule.action,
        "position": rule.position,
        "createdAt": _ms(rule.created_at),
        "updatedAt": _ms(rule.updated_at),
    }


def describe_connection(toolkit: ToolkitRecord, connection: ToolkitConnectionRecord) -> dict[str, Any]:
    return {
        "id": connection.id,
        "toolkitId": toolkit.id,
        "pattern": connection.pattern,
        "level": connection.level,
        "position": connection.position,
        "createdAt": _ms(connection.created_at),
        "updatedAt": _ms(connection.updated_at),
    }


def _ms(at: float) -> int:
    return int(at * 1000)


def scope_of(record: ToolkitRecord) -> ToolkitScope:
    """The toolkit as its endpoint's calls weigh it."""
    rules = [Rule(r.id, RuleOwner.TOOLKIT, r.pattern, Action(r.action), r.position) for r in record.policies]
    levels = [ConnectionLevel(c.id, c.pattern, Level(c.level), c.position) for c in record.connections]
    return ToolkitScope(record.slug, in_order(levels), tuple(evaluation_order(rules)))


def listed(records: list[ToolkitRecord]) -> list[ToolkitRecord]:
    """Org toolkits first, then by name (upstream's order)."""
    return sorted(records, key=lambda record: (record.owner != RuleOwner.ORG.value, record.name, record.id))


def first_position(positions: list[str]) -> str | None:
    """A generated position before every one of `positions` (a new row goes first, as upstream places it), or
    None when there is no room: renumber, then ask again."""
    low = min((position_number(position) for position in positions), default=2 * POSITION_STEP)
    return format_position(low // 2) if low >= 2 else None


class Toolkits:
    def __init__(self, store: ToolkitStore, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    async def visible(self, principal: Principal) -> list[ToolkitRecord]:
        return listed(await self._store.toolkits(_org(principal), principal.account_id))

    async def get(self, principal: Principal, toolkit_id: str) -> ToolkitRecord:
        return _find(await self._store.toolkits(_org(principal), principal.account_id), toolkit_id)

    async def scope(self, principal: Principal, slug: str) -> ToolkitScope | None:
        """The toolkit the endpoint `/mcp/toolkits/<slug>` is for this caller now: the org's of that slug, else the
        caller's own; None when neither exists (the endpoint is not found)."""
        if not principal.org_id:
            return None
        found = [r for r in await self._store.toolkits(principal.org_id, principal.account_id) if r.slug == slug]
        found.sort(key=lambda record: record.owner != RuleOwner.ORG.value)
        return scope_of(found[0]) if found else None

    async def current(self, principal: Principal, resource: str) -> ToolkitScope | None:
        """The scope of a call made through the endpoint `resource`, read now (a change reaches open sessions at
        their next call): None on every endpoint but a toolkit's; a toolkit that is gone shows nothing."""
        slug = slug_of(resource)
        if slug is None:
            return None
        return await self.scope(principal, slug) or ToolkitScope(slug, (), ())

    async def create(self, principal: Principal, owner: RuleOwner, name: str, slug: str | None) -> ToolkitRecord:
        _may_change(principal, owner)
        chosen = slug or slug_from(name)
        if not chosen:
            raise ToolkitError("Toolkit slug is required: the name has no letters or digits to make one from.")
        now = self._clock()

        def edit(records: list[ToolkitRecord]) -> tuple[list[ToolkitRecord], list[ToolkitRecord], ToolkitRecord]:
            mine = [r for r in records if r.owner == owner.value]
            if len(mine) >= MAX_TOOLKITS_PER_OWNER:
                raise ToolkitError(f"At most {MAX_TOOLKITS_PER_OWNER} {owner.value} toolkits are allowed.")
            _slug_free(mine, chosen, None)
            record = ToolkitRecord(
                id=new_id("tk", now),
                org_id=_org(principal),
                owner=owner.value,
                account_id=principal.account_id if owner is RuleOwner.USER else None,
                slug=chosen,
                name=name,
                created_at=now,
                updated_at=now,
            )
            return [record], [], record

        return await self._store.edit_toolkits(_org(principal), principal.account_id, edit)

    async def update(
        self, principal: Principal, toolkit_id: str, *, name: str | None = None, slug: str | None = None
    ) -> ToolkitRecord:
        def change(record: ToolkitRecord, records: list[ToolkitRecord], now: float) -> ToolkitRecord:
            if slug is not None:
                _slug_free([r for r in records if r.owner == record.owner], slug, record.id)
            return attrs.evolve(record, name=name or record.name, slug=slug or record.slug, updated_at=now)

        return await self._edit(principal, toolkit_id, change)

    async def remove(self, principal: Principal, toolkit_id: str) -> None:
        def edit(records: list[ToolkitRecord]) -> tuple[list[ToolkitRecord], list[ToolkitRecord], None]:
            record = _find(records, toolkit_id)
            _may_change(principal, RuleOwner(record.owner))
            return [], [record], None

        await self._store.edit_toolkits(_org(principal), principal.account_id, edit)

    # -- its rules ------------------------------------------------------------------------------------

    async def add_rule(
        self, principal: Principal, toolkit_id: str, pattern: str, action: Action, position: str | None
    ) -> tuple[ToolkitRecord, ToolkitRuleRecord]:
        def change(record: ToolkitRecord, records: list[ToolkitRecord], now: float) -> ToolkitRecord:
            if len(record.policies) >= MAX_RULES_PER_TOOLKIT:
                raise ToolkitError(f"At most {MAX_RULES_PER_TOOLKIT} rules are allowed in a toolkit.")
            rules, chosen = _placed(record.policies, position)
            rule = ToolkitRuleRecord(new_id("tkpol", now), pattern, action.value, chosen, now, now)
            return attrs.evolve(record, policies=(*rules, rule), updated_at=now)

        updated = await self._edit(principal, toolkit_id, change)
        return updated, updated.policies[-1]

    async def update_rule(
        self,
        principal: Principal,
        toolkit_id: str,
        rule_id: str,
        *,
        pattern: str | None = None,
        action: Action | None = None,
        position: str | None = None,
    ) -> tuple[ToolkitRecord, ToolkitRuleRecord]:
        def change(record: ToolkitRecord, records: list[ToolkitRecord], now: float) -> ToolkitRecord:
            rule = _row(record.policies, rule_id, "Toolkit policy not found.")
            changed = attrs.evolve(
                rule,
                pattern=pattern or rule.pattern,
                action=action.value if action is not None else rule.action,
                position=position or rule.position,
                updated_at=now,
            )
            return attrs.evolve(record, policies=_replaced(record.policies, changed), updated_at=now)

        updated = await self._edit(principal, toolkit_id, change)
        return updated, _row(updated.policies, rule_id, "Toolkit policy not found.")

    async def remove_rule(self, principal: Principal, toolkit_id: str, rule_id: str) -> None:
        def change(record: ToolkitRecord, records: list[ToolkitRecord], now: float) -> ToolkitRecord:
            _row(record.policies, rule_id, "Toolkit policy not found.")
            return attrs.evolve(record, policies=tuple(r for r in record.policies if r.id != rule_id), updated_at=now)

        await self._edit(principal, toolkit_id, change)

    # -- its connections ------------------------------------------------------------------------------

    async def add_connection(
        self, principal: Principal, toolkit_id: str, pattern: str, level: Level, position: str | None
    ) -> tuple[ToolkitRecord, ToolkitConnectionRecord]:
        """Idempotent on the pattern: a pattern already listed is answered as it is (its level unchanged)."""

        def change(record: ToolkitRecord, records: list[ToolkitRecord], now: float) -> ToolkitRecord:
            if any(c.pattern == pattern for c in record.connections):
                return record
            if len(record.connections) >= MAX_CONNECTIONS_PER_TOOLKIT:
                raise ToolkitError(f"At most {MAX_CONNECTIONS_PER_TOOLKIT} connections are allowed in a toolkit.")
            rows, chosen = _placed(record.connections, position)
            connection = ToolkitConnectionRecord(new_id("tkconn", now), pattern, level.value, chosen, now, now)
            return attrs.evolve(record, connections=(*rows, connection), updated_at=now)

        updated = await self._edit(principal, toolkit_id, change)
        return updated, next(c for c in updated.connections if c.pattern == pattern)

    async def update_connection(
        self, principal: Principal, toolkit_id: str, connection_id: str, level: Level
    ) -> tuple[ToolkitRecord, ToolkitConnectionRecord]:
        def change(record: ToolkitRecord, records: list[ToolkitRecord], now: float) -> ToolkitRecord:
            row = _row(record.connections, connection_id, "Toolkit connection not found.")
            changed = attrs.evolve(row, level=level.value, updated_at=now)
            return attrs.evolve(record, connections=_replaced(record.connections, changed), updated_at=now)

        updated = await self._edit(principal, toolkit_id, change)
        return updated, _row(updated.connections, connection_id, "Toolkit connection not found.")

    async def remove_connection(self, principal: Principal, toolkit_id: str, connection_id: str) -> None:
        def change(record: ToolkitRecord, records: list[ToolkitRecord], now: float) -> ToolkitRecord:
            _row(record.connections, connection_id, "Toolkit connection not found.")
            kept = tuple(c for c in record.connections if c.id != connection_id)
            return attrs.evolve(record, connections=kept, updated_at=now)

        await self._edit(principal, toolkit_id, change)

    async def _edit(
        self,
        principal: Principal,
        toolkit_id: str,
        change: Callable[[ToolkitRecord, list[ToolkitRecord], float], ToolkitRecord],
    ) -> ToolkitRecord:
        """Change one toolkit the caller may change, read and written in one transaction."""
        now = self._clock()

        def edit(records: list[ToolkitRecord]) -> tuple[list[ToolkitRecord], list[ToolkitRecord], ToolkitRecord]:
            record = _find(records, toolkit_id)
            _may_change(principal, RuleOwner(record.owner))
            changed = change(record, records, now)
            return ([changed] if changed is not record else []), [], changed

        return await self._store.edit_toolkits(_org(principal), principal.account_id, edit)


def parse_rule(values: Mapping[str, Any]) -> tuple[str, Action, str | None]:
    """A toolkit rule's create fields: (pattern, action, position)."""
    return (
        _toolkit_pattern(values.get("pattern")),
        parse_action(values.get("action")),
        parse_position(values.get("position")),
    )


def parse_rule_change(values: Mapping[str, Any]) -> dict[str, Any]:
    pattern, action = values.get("pattern"), values.get("action")
    return {
        "pattern": _toolkit_pattern(pattern) if pattern is not None else None,
        "action": parse_action(action) if action is not None else None,
        "position": parse_position(values.get("position")),
    }


def parse_connection(values: Mapping[str, Any]) -> tuple[str, Level, str | None]:
    """A toolkit connection's create fields: (pattern, level, position)."""
    return (
        _toolkit_pattern(values.get("pattern")),
        parse_level(values.get("level")),
        parse_position(values.get("position")),
    )


def _toolkit_pattern(value: Any) -> str:
    try:
        return parse_pattern(value)
    except PolicyError as exc:
        raise ToolkitError(str(exc).replace("tool policy pattern", "toolkit policy pattern")) from None


def _org(principal: Principal) -> str:
    if not principal.org_id:
        raise ToolkitError("toolkits need an organization")
    return principal.org_id


def _may_change(principal: Principal, owner: RuleOwner) -> None:
    try:
        may_change(principal, owner)
    except PolicyForbidden:
        raise ToolkitForbidden("Only an organization admin can create, change or remove org toolkits") from None


def _find(records: list[ToolkitRecord], toolkit_id: str) -> ToolkitRecord:
    for record in records:
        if record.id == toolkit_id:
            return record
    raise ToolkitNotFound()


def _slug_free(records: list[ToolkitRecord], slug: str, toolkit_id: str | None) -> None:
    if any(record.slug == slug and record.id != toolkit_id for record in records):
        raise ToolkitError(f'Toolkit slug "{slug}" is already in use.')


R = TypeVar("R", ToolkitRuleRecord, ToolkitConnectionRecord)


def _row(rows: tuple[R, ...], row_id: str, missing: str) -> R:
    for row in rows:
        if row.id == row_id:
            return row
    raise ToolkitError(missing)


def _replaced(rows: tuple[R, ...], changed: R) -> tuple[R, ...]:
    return tuple(changed if row.id == changed.id else row for row in rows)


def _placed(rows: tuple[R, ...], position: str | None) -> tuple[tuple[R, ...], str]:
    """The rows (renumbered when there was no room) and the position a new row takes: `position` as given, else
    before every other row."""
    if position is not None:
        return rows, position
    chosen = first_position([row.position for row in rows])
    if chosen is not None:
        return rows, chosen
    return tuple(renumbered(rows)), format_position(POSITION_STEP // 2)
