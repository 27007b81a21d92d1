"""Tool policies (`interfaces.PolicyStore`) in LMDB.

Keyed `org \\0 account \\0 policy id` (an org rule's account is empty), so the rules one caller sees, its org's
and its own, are two prefix ranges: no read or edit touches another org's or another member's rules, however
many they write.
"""

from collections.abc import Callable
from typing import TypeVar

from executor_mcp.storage.environment import Environment, Txn
from executor_mcp.storage.exported import canonical, key_parts, record_key
from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.lmdb import keys
from executor_mcp.storage.records import PolicyRecord, decode, decoded_or_skipped, encode

T = TypeVar("T")

# Policies of 61054cb and before, keyed by id alone; moved under their owner's keys, then dropped.
_LEGACY_POLICIES = b"policies"


class LmdbPolicies:
    def __init__(self, env: Environment) -> None:
        self._env = env
        self._policies = env.database(b"policies-by-owner")

    def upgrade(self, txn: Txn) -> None:
        """A data dir from before policies were keyed by owner: move every rule, once. Losing them on an
        upgrade would silently lift every guardrail."""
        if txn.get(_LEGACY_POLICIES) is None:
            return
        legacy = self._env.database(_LEGACY_POLICIES, txn=txn)
        for key, raw in txn.cursor(db=legacy):
            record = decoded_or_skipped(raw, PolicyRecord, bytes(key))
            if record is not None:
                txn.put(_policy_key(record), encode(record), db=self._policies)
        txn.drop(legacy, delete=True)

    async def policies(self, org_id: str, account_id: str | None) -> list[PolicyRecord]:
        return await self._env.read(lambda txn: self._visible(txn, org_id, account_id))

    async def edit_policies(
        self,
        org_id: str,
        account_id: str | None,
        edit: Callable[[list[PolicyRecord]], tuple[list[PolicyRecord], list[PolicyRecord], T]],
    ) -> T:
        def _edit(txn: Txn) -> T:
            puts, deletes, result = edit(self._visible(txn, org_id, account_id))
            for record in puts:
                txn.put(_policy_key(record), encode(record), db=self._policies)
            for record in deletes:
                txn.delete(_policy_key(record), db=self._policies)
            return result

        return await self._env.write(_edit)

    async def export_records(self) -> Exported:
        """Every org's and every account's rules, each under (org, account, id)."""

        def _export(txn: Txn) -> Exported:
            found = []
            for key, raw in txn.cursor(db=self._policies):
                kept = canonical(raw, PolicyRecord, bytes(key))
                if kept is not None and _policy_key(kept[0]) == key:
                    record = kept[0]
                    found.append((record_key(record.org_id, record.account_id or "", record.id), kept[1]))
            return sorted(found)

        return await self._env.read(_export)

    async def import_records(self, records: Exported) -> None:
        def _import(txn: Txn) -> None:
            for key, value in records:
                kept = canonical(value, PolicyRecord, key)
                if kept is None or key_parts(key, 3) != [kept[0].org_id, kept[0].account_id or "", kept[0].id]:
                    raise ValueError(f"not an exported rule: {key[:80]!r}")
                txn.put(keys.writable(_policy_key(kept[0])), value, db=self._policies)

        await self._env.write(_import)

    def _visible(self, txn: Txn, org_id: str, account_id: str | None) -> list[PolicyRecord]:
        records = self._range(txn, org_id, None)
        if account_id:
            records += self._range(txn, org_id, account_id)
        return records

    def _range(self, txn: Txn, org_id: str, account_id: str | None) -> list[PolicyRecord]:
        start = _policy_prefix(org_id, account_id)
        records = []
        cursor = txn.cursor(db=self._policies)
        if cursor.set_range(start):
            for key, raw in cursor.iternext():
                if not key.startswith(start):
                    break
                record = decode(raw, PolicyRecord)
                if record.org_id == org_id and record.account_id == account_id:
                    records.append(record)
        return records


def _policy_prefix(org_id: str, account_id: str | None) -> bytes:
    return org_id.encode() + b"\x00" + (account_id or "").encode() + b"\x00"


def _policy_key(record: PolicyRecord) -> bytes:
    return _policy_prefix(record.org_id, record.account_id) + record.id.encode()
