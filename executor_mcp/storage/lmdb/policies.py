"""Tool policies (`interfaces.PolicyStore`) in LMDB: records of an org and of its accounts (`owned.py`)."""

from collections.abc import Callable
from typing import TypeVar

from executor_mcp.storage.environment import Environment, Txn
from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.lmdb.owned import OwnedRecords, owned_key
from executor_mcp.storage.records import PolicyRecord, decoded_or_skipped, encode

T = TypeVar("T")

# Policies of 61054cb and before, keyed by id alone; moved under their owner's keys, then dropped.
_LEGACY_POLICIES = b"policies"


class LmdbPolicies:
    def __init__(self, env: Environment) -> None:
        self._env = env
        self._rules = OwnedRecords(env, b"policies-by-owner", PolicyRecord, "rule")

    def upgrade(self, txn: Txn) -> None:
        """A data dir from before policies were keyed by owner: move every rule, once. Losing them on an
        upgrade would silently lift every guardrail."""
        if txn.get(_LEGACY_POLICIES) is None:
            return
        legacy = self._env.database(_LEGACY_POLICIES, txn=txn)
        for key, raw in txn.cursor(db=legacy):
            record = decoded_or_skipped(raw, PolicyRecord, bytes(key))
            if record is not None:
                txn.put(owned_key(record), encode(record), db=self._rules.db)
        txn.drop(legacy, delete=True)

    async def policies(self, org_id: str, account_id: str | None) -> list[PolicyRecord]:
        return await self._rules.visible(org_id, account_id)

    async def edit_policies(
        self,
        org_id: str,
        account_id: str | None,
        edit: Callable[[list[PolicyRecord]], tuple[list[PolicyRecord], list[PolicyRecord], T]],
    ) -> T:
        return await self._rules.edit(org_id, account_id, edit)

    async def export_records(self) -> Exported:
        return await self._rules.export_records()

    async def import_records(self, records: Exported) -> None:
        await self._rules.import_records(records)
