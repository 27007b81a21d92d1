"""Records that belong to an org, or to one account in it, in LMDB: tool policies and toolkits.

Keyed `org \\0 account \\0 id` (an org's own record has the empty account), so what one caller sees, its org's
records and its own, is two prefix ranges: no read or edit touches another org's or another member's records,
however many they write. A key is checked against the record it holds, so no identifier holding the separator
reaches into another owner's range.
"""

from collections.abc import Callable
from typing import Generic, TypeVar

from executor_mcp.storage.environment import Environment, Txn
from executor_mcp.storage.exported import canonical, key_parts, record_key
from executor_mcp.storage.interfaces import Exported, Owned
from executor_mcp.storage.lmdb import keys
from executor_mcp.storage.records import decoded_or_skipped, encode

T = TypeVar("T")


R = TypeVar("R", bound=Owned)


class OwnedRecords(Generic[R]):
    def __init__(self, env: Environment, name: bytes, cls: type[R], what: str) -> None:
        """`what` names one record in an import's refusal ("rule", "toolkit")."""
        self._env = env
        self.db = env.database(name)
        self._cls = cls
        self._what = what

    async def visible(self, org_id: str, account_id: str | None) -> list[R]:
        return await self._env.read(lambda txn: self.visible_in(txn, org_id, account_id))

    async def edit(
        self, org_id: str, account_id: str | None, edit: Callable[[list[R]], tuple[list[R], list[R], T]]
    ) -> T:
        def _edit(txn: Txn) -> T:
            puts, deletes, result = edit(self.visible_in(txn, org_id, account_id))
            for record in puts:
                txn.put(owned_key(record), encode(record), db=self.db)
            for record in deletes:
                txn.delete(owned_key(record), db=self.db)
            return result

        return await self._env.write(_edit)

    async def export_records(self) -> Exported:
        """Every org's and every account's records, each under (org, account, id)."""

        def _export(txn: Txn) -> Exported:
            found = []
            for key, raw in txn.cursor(db=self.db):
                kept = canonical(raw, self._cls, bytes(key))
                if kept is not None and owned_key(kept[0]) == key:
                    record = kept[0]
                    found.append((record_key(record.org_id, record.account_id or "", record.id), kept[1]))
            return sorted(found)

        return await self._env.read(_export)

    async def import_records(self, records: Exported) -> None:
        def _import(txn: Txn) -> None:
            for key, value in records:
                kept = canonical(value, self._cls, key)
                if kept is None or key_parts(key, 3) != [kept[0].org_id, kept[0].account_id or "", kept[0].id]:
                    raise ValueError(f"not an exported {self._what}: {key[:80]!r}")
                txn.put(keys.writable(owned_key(kept[0])), value, db=self.db)

        await self._env.write(_import)

    def visible_in(self, txn: Txn, org_id: str, account_id: str | None) -> list[R]:
        records = self._range(txn, org_id, None)
        if account_id:
            records += self._range(txn, org_id, account_id)
        return records

    def _range(self, txn: Txn, org_id: str, account_id: str | None) -> list[R]:
        start = _owner_prefix(org_id, account_id)
        records = []
        cursor = txn.cursor(db=self.db)
        if cursor.set_range(start):
            for key, raw in cursor.iternext():
                if not key.startswith(start):
                    break
                record = decoded_or_skipped(raw, self._cls, bytes(key))
                if record is not None and record.org_id == org_id and record.account_id == account_id:
                    records.append(record)
        return records


def _owner_prefix(org_id: str, account_id: str | None) -> bytes:
    return org_id.encode() + b"\x00" + (account_id or "").encode() + b"\x00"


def owned_key(record: Owned) -> bytes:
    return _owner_prefix(record.org_id, record.account_id) + record.id.encode()
