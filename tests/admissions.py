"""Admission as the server builds it, for tests without a server: places in the embedded backend's memory
store, limits fixed instead of read from an org's record."""

from executor_mcp.execution.admission import Admission, Refusal, Slot
from executor_mcp.storage.lmdb.in_flight import MemoryInFlight
from executor_mcp.storage.records import Owner, UsageLimits


def admission(per_account: int, per_org: int | None = None) -> Admission:
    limits = UsageLimits(executions_account=per_account, executions_org=per_org)

    async def effective(org_id: str | None) -> UsageLimits:
        return limits

    return Admission(MemoryInFlight(), effective)


async def admitted(to: Admission, owner: Owner) -> Slot:
    slot = await to.admit(owner)
    assert not isinstance(slot, Refusal), slot
    return slot
