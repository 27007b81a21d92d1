"""Sealed secret items (`interfaces.SecretStore`) in LMDB, keyed (org, account, item id): a partition is a
prefix range, so an item id is only ever looked up inside the caller's."""

from collections.abc import Iterable, Mapping

from executor_mcp.storage.environment import Environment, Txn
from executor_mcp.storage.exported import key_parts
from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.lmdb import keys


class LmdbSecrets:
    def __init__(self, env: Environment) -> None:
        self._env = env
        self._items = env.database(b"secret-items")

    async def get_secret_item(self, org_id: str, account_id: str, item_id: str) -> bytes | None:
        return await self._env.read(lambda txn: keys.get(txn, self._items, keys.key(org_id, account_id, item_id)))

    async def put_secret_items(self, org_id: str, account_id: str, items: Mapping[str, bytes]) -> None:
        keyed = {keys.writable(keys.key(org_id, account_id, item_id)): payload for item_id, payload in items.items()}

        def _put(txn: Txn) -> None:
            for key, payload in keyed.items():
                txn.put(key, payload, db=self._items)

        await self._env.write(_put)

    async def delete_secret_items(self, org_id: str, account_id: str, item_ids: Iterable[str]) -> None:
        doomed = [keys.key(org_id, account_id, item_id) for item_id in item_ids]

        def _delete(txn: Txn) -> None:
            for key in doomed:
                keys.delete(txn, self._items, key)

        await self._env.write(_delete)

    async def secret_items(self, org_id: str, account_id: str) -> list[str]:
        start = keys.prefix(org_id, account_id)

        def _ids(txn: Txn) -> list[str]:
            ids = []
            for key, _ in keys.ranged(txn, self._items, start):
                parts = keys.parts_of(key)
                if parts is not None and len(parts) == 3:
                    ids.append(parts[2])
            return sorted(ids)

        return await self._env.read(_ids)

    async def export_records(self) -> Exported:
        """Every partition's items, sealed bytes as they are; the key is the shared form already."""

        def _export(txn: Txn) -> Exported:
            return [
                (bytes(key), bytes(payload))
                for key, payload in txn.cursor(db=self._items)
                if (parts := keys.parts_of(bytes(key))) is not None and len(parts) == 3
            ]

        return await self._env.read(_export)

    async def import_records(self, records: Exported) -> None:
        def _import(txn: Txn) -> None:
            for key, payload in records:
                txn.put(keys.writable(keys.key(*key_parts(key, 3))), payload, db=self._items)

        await self._env.write(_import)
