"""Spoiling a stored record, on each backend, so that it no longer decodes: what a store must then skip (and log),
never fail on. Written below the store interfaces on purpose: no interface writes a bad record."""

import json
from collections.abc import Awaitable, Callable

from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.environment import Environment, Txn
from executor_mcp.storage.postgres.database import Database

# A table's LMDB database.
LMDB_NAMES = {
    "oauth_clients": b"oauth-clients",
    "oauth_flows": b"oauth-flows",
    "policies": b"policies-by-owner",
    "toolkits": b"toolkits-by-owner",
}
SPOILED = b'{"slug": 5}'


async def _spoil_lmdb(plane: ControlPlane, table: str, field: str, value: str) -> None:
    env = plane.backend
    assert isinstance(env, Environment)

    def _spoil(txn: Txn) -> None:
        db = env.database(LMDB_NAMES[table], txn=txn)
        hits = [key for key, raw in txn.cursor(db=db) if json.loads(raw).get(field) == value]
        assert len(hits) == 1
        txn.put(hits[0], SPOILED, db=db)

    await env.write(_spoil)


async def _spoil_postgres(plane: ControlPlane, table: str, field: str, value: str) -> None:
    database = plane.backend
    assert isinstance(database, Database)
    statement = f"UPDATE {table} SET record = '{{\"slug\": 5}}' WHERE {field} = %s".encode()
    assert await database.transact(lambda connection: connection.execute(statement, (value,)).rowcount) == 1


SPOILERS: dict[str, Callable[[ControlPlane, str, str, str], Awaitable[None]]] = {
    "lmdb": _spoil_lmdb,
    "postgres": _spoil_postgres,
}


async def spoil(plane: ControlPlane, backend: str, table: str, field: str, value: str) -> None:
    """Make the one record of `table` whose `field` is `value` no longer decode."""
    await SPOILERS[backend](plane, table, field, value)
