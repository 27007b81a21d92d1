"""Sealed secret items (`interfaces.SecretStore`) in PostgreSQL: `secret_items` keyed (org, account, item id),
so an item id is only ever looked up inside the caller's partition, and a partition's listing is a range of the
primary key.

Each method is one transaction. A put upserts its items in item-id order, so two instances putting the same
items at once leave one whole value per item (never an error) and never deadlock on each other's rows; a delete
is one `DELETE ... = ANY`. Identifiers obey the catalog's rule (`catalog.writable`): what a connection names, its
items can be stored under.
"""

from collections.abc import Iterable, Mapping

import psycopg

from executor_mcp.storage.exported import key_parts, record_key
from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.postgres.catalog import readable, writable
from executor_mcp.storage.postgres.database import Database

TABLES: tuple[str, ...] = (
    "CREATE TABLE secret_items ("
    " org_id text NOT NULL, account_id text NOT NULL, item_id text NOT NULL, sealed bytea NOT NULL,"
    " PRIMARY KEY (org_id, account_id, item_id))",
)


class PgSecrets:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def get_secret_item(self, org_id: str, account_id: str, item_id: str) -> bytes | None:
        if not readable(org_id, account_id, item_id):
            return None

        def _get(connection: psycopg.Connection) -> bytes | None:
            row = connection.execute(
                "SELECT sealed FROM secret_items WHERE org_id = %s AND account_id = %s AND item_id = %s",
                (org_id, account_id, item_id),
            ).fetchone()
            return None if row is None else bytes(row[0])

        return await self._database.transact(_get)

    async def put_secret_items(self, org_id: str, account_id: str, items: Mapping[str, bytes]) -> None:
        for item_id in items:
            writable(org_id, account_id, item_id)
        rows = [(org_id, account_id, item_id, payload) for item_id, payload in sorted(items.items())]
        if not rows:
            return

        def _put(connection: psycopg.Connection) -> None:
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO secret_items (org_id, account_id, item_id, sealed) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (org_id, account_id, item_id) DO UPDATE SET sealed = excluded.sealed",
                    rows,
                )

        await self._database.transact(_put)

    async def delete_secret_items(self, org_id: str, account_id: str, item_ids: Iterable[str]) -> None:
        doomed = sorted({item_id for item_id in item_ids if readable(org_id, account_id, item_id)})
        if not doomed:
            return

        def _delete(connection: psycopg.Connection) -> None:
            connection.execute(
                "DELETE FROM secret_items WHERE org_id = %s AND account_id = %s AND item_id = ANY(%s)",
                (org_id, account_id, doomed),
            )

        await self._database.transact(_delete)

    async def secret_items(self, org_id: str, account_id: str) -> list[str]:
        """Sorted here, by code point as LMDB sorts, whatever the database's collation."""
        if not readable(org_id, account_id):
            return []

        def _ids(connection: psycopg.Connection) -> list[str]:
            rows = connection.execute(
                "SELECT item_id FROM secret_items WHERE org_id = %s AND account_id = %s", (org_id, account_id)
            ).fetchall()
            return sorted(row[0] for row in rows)

        return await self._database.transact(_ids)

    async def export_records(self) -> Exported:
        """Every partition's items, sealed bytes as they are."""

        def _export(connection: psycopg.Connection) -> Exported:
            rows = connection.execute("SELECT org_id, account_id, item_id, sealed FROM secret_items").fetchall()
            return sorted((record_key(org, account, item), bytes(sealed)) for org, account, item, sealed in rows)

        return await self._database.transact(_export)

    async def import_records(self, records: Exported) -> None:
        rows = []
        for key, sealed in records:
            parts = key_parts(key, 3)
            writable(*parts)
            rows.append((*parts, sealed))

        def _import(connection: psycopg.Connection) -> None:
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO secret_items (org_id, account_id, item_id, sealed) VALUES (%s, %s, %s, %s)", rows
                )

        await self._database.transact(_import)
