"""Admission as the server builds it, for tests without a server: places in the embedded backend's memory
store, limits fixed instead of read from an org's record."""

from executor_mcp.execution.admission import Admission, Refusal, Slot
from executor_mcp.storage.interfaces import InFlightStore
from executor_mcp.storage.lmdb.in_flight import MemoryInFlight
from executor_mcp.storage.records import Owner, UsageLimits


def admission(
    guard: int,
    per_org: int | None = None,
    per_account: int | None = None,
    *,
    store: InFlightStore | None = None,
    instance: str = "",
) -> Admission:
    """`guard` per account on this process; the configured limits `per_org` and `per_account`, in `store` (a
    fresh one of its own if not given; two admissions given one are two processes sharing it)."""
    limits = UsageLimits(executions_account=per_account, executions_org=per_org)

    async def effective(org_id: str | None) -> UsageLimits:
        return limits

    return Admission(store or MemoryInFlight(), effective, instance, guard=guard)


async def admitted(to: Admission, owner: Owner) -> Slot:
    slot = await to.admit(owner)
    assert not isinstance(slot, Refusal), slot
    return slot
