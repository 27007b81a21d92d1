"""Whether one more tool call fits its rate limits, and the `rate_limited` value a call over them answers.

The limits are tool calls per minute per org, per account and per connection: the operator's (`Settings`, the
ceiling) and the org admin's own (`/api/limits`, kept on the org's record), the stricter of the two. An org's own
limits are read through a short cache (`ORG_LIMITS_SECONDS`), so a tool call costs no control-plane read; a
change reaches every instance within that time. With no limit set anywhere a call costs a dictionary lookup.
`effective` is also what admission reads for its limits on executions in progress (`execution/admission.py`).
"""

import math
import time
from collections import OrderedDict
from collections.abc import Callable

import attrs

from executor_mcp.codec import JsonObject
from executor_mcp.ratelimits.model import RateLimited, limits_for, message
from executor_mcp.storage.interfaces import OrgStore, RateStore
from executor_mcp.storage.records import Owner as Principal
from executor_mcp.storage.records import UsageLimits

ORG_LIMITS_SECONDS = 1.0
# Orgs whose own limits are cached; another org's first call reads its record.
ORG_LIMITS_CACHE = 1024


def stricter(ceiling: int | None, own: int | None) -> int | None:
    chosen = [value for value in (ceiling, own) if value]
    return min(chosen) if chosen else None


def effective(operator: UsageLimits, own: UsageLimits | None) -> UsageLimits:
    """Each limit the stricter of the operator's and the org's own."""
    if own is None:
        return operator
    return UsageLimits(
        **{field.name: stricter(getattr(operator, field.name), getattr(own, field.name)) for field in _FIELDS}
    )


_FIELDS = attrs.fields(UsageLimits)


class Rates:
    def __init__(
        self,
        store: RateStore,
        orgs: OrgStore,
        operator: UsageLimits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._orgs = orgs
        self.operator = operator
        self._clock = clock
        self._org_limits: OrderedDict[str, tuple[float, UsageLimits | None]] = OrderedDict()

    async def check(self, principal: Principal, connection: str | None) -> JsonObject | None:
        """None when the call fits (and it is charged to every key it counts against); else the `rate_limited`
        value, with how long until it would fit. `connection` names the connection a connected tool is called
        at (None for built-in tools)."""
        org_id = principal.org_id
        if not org_id:
            return None
        now = await self.effective(org_id)
        limits = limits_for(
            org_id, principal.account_id, connection, org=now.org, account=now.account, per_connection=now.connection
        )
        if not limits:
            return None
        refused = await self._store.take(limits)
        return None if refused is None else rate_limited(refused)

    async def effective(self, org_id: str | None) -> UsageLimits:
        """The limits the org's calls and executions are counted against now (its own read through the cache);
        the operator's alone for a principal of no org."""
        return effective(self.operator, await self._own_limits(org_id) if org_id else None)

    async def own_limits(self, org_id: str) -> UsageLimits | None:
        """The org admin's own limits, as stored now."""
        record = await self._orgs.get_org(org_id)
        return record.limits if record is not None else None

    async def change_own_limits(self, org_id: str, updates: dict[str, int | None]) -> UsageLimits | None:
        """Change some of the org's own limits (`UsageLimits` fields; the rest kept as stored, in the same
        transaction) and answer them all; this instance counts by them from its next call, the others within
        `ORG_LIMITS_SECONDS`."""

        def change(current: UsageLimits | None) -> UsageLimits | None:
            changed = attrs.evolve(current or UsageLimits(), **updates)
            return None if changed == UsageLimits() else changed

        record = await self._orgs.set_org_limits(org_id, change, time.time())
        self._org_limits.pop(org_id, None)
        return record.limits

    async def _own_limits(self, org_id: str) -> UsageLimits | None:
        now = self._clock()
        cached = self._org_limits.get(org_id)
        if cached is not None and now - cached[0] < ORG_LIMITS_SECONDS:
            return cached[1]
        limits = await self.own_limits(org_id)
        self._org_limits[org_id] = (now, limits)
        self._org_limits.move_to_end(org_id)
        while len(self._org_limits) > ORG_LIMITS_CACHE:
            self._org_limits.popitem(last=False)
        return limits


def rate_limited(refused: RateLimited) -> JsonObject:
    """The value a call over a limit answers in the sandbox: code may wait `details.retryAfterMs` and try again."""
    details: JsonObject = {
        "scope": refused.limit.scope,
        "limitPerMinute": refused.limit.per_minute,
        "retryAfterMs": max(math.ceil(refused.retry_after * 1000), 1),
    }
    return {"ok": False, "error": {"code": "rate_limited", "message": message(refused), "details": details}}
