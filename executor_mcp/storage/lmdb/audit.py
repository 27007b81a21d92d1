"""The audit log's entries (`interfaces.AuditStore`) in LMDB: one table in key order, read backwards for the
newest first."""

from collections.abc import Callable

from executor_mcp.storage.environment import Environment, Txn
from executor_mcp.storage.interfaces import Exported


class LmdbAudit:
    def __init__(self, env: Environment) -> None:
        self._env = env
        self._audit = env.database(b"audit")

    async def append_audit(self, entries: list[tuple[bytes, bytes]]) -> None:
        def _append(txn: Txn) -> None:
            for key, value in entries:
                txn.put(key, value, db=self._audit, overwrite=False)

        await self._env.write(_append)

    async def audit_newest(
        self, prefix: bytes, start: bytes, end: bytes, limit: int, admits: Callable[[bytes], bool], scan: int
    ) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
        def _read(txn: Txn) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
            found: list[tuple[bytes, bytes]] = []
            cursor = txn.cursor(db=self._audit)
            positioned = cursor.prev() if cursor.set_range(end) else cursor.last()
            looked = 0
            while positioned:
                key = bytes(cursor.key())
                if not key.startswith(prefix) or key < start:
                    return found, None
                if looked >= scan or len(found) >= limit:
                    return found, key + b"\x00"  # the next page begins with this key (keys are of one length)
                looked += 1
                value = bytes(cursor.value())
                if admits(value):
                    found.append((key, value))
                positioned = cursor.prev()
            return found, None

        return await self._env.read(_read)

    async def sweep_audit(
        self, start: bytes, expired: Callable[[bytes], bool], skip: Callable[[bytes], bytes], batch: int
    ) -> bytes | None:
        """Within a prefix entries are in time order, so the first one kept means `skip` to the next prefix."""

        def _sweep(txn: Txn) -> bytes | None:
            cursor = txn.cursor(db=self._audit)
            positioned = cursor.set_range(start)
            deleted = looked = 0
            while positioned:
                if deleted >= batch or looked >= batch * 4:
                    return bytes(cursor.key())
                key = bytes(cursor.key())
                looked += 1
                if expired(key):
                    positioned = cursor.delete()
                    deleted += 1
                else:
                    positioned = cursor.set_range(skip(key))
            return None

        return await self._env.write(_sweep)

    async def export_records(self) -> Exported:
        """The entries as they are: their keys and values are `audit/model.py`'s on every backend."""
        return await self._env.read(
            lambda txn: [(bytes(key), bytes(value)) for key, value in txn.cursor(db=self._audit)]
        )

    async def import_records(self, records: Exported) -> None:
        await self.append_audit(records)
