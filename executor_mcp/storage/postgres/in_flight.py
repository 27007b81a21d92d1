"""Executions in progress (`interfaces.InFlightStore`) in PostgreSQL, shared by every instance: one row per
execution, with the keys it counts under and the instance that runs it.

A row counts only while its instance's lease is live (`instances.py`) or it is the asking instance's own: a
process that died holds nothing once its lease lapses (10 s), however its rows were left. Taking a place locks
its keys (transaction-scoped advisory locks, taken in key order so two executions sharing keys never deadlock),
counts the live rows under them and inserts its own only if every ceiling admits it, so two instances admitting
at once cannot both take a key's last place. A `leave` lost to an outage is mended by `keep`, which each
instance runs every few seconds with the places it knows it holds.
"""

import hashlib
from collections.abc import Collection
from typing import Any

import psycopg

from executor_mcp.ratelimits.in_flight import Ceiling, Full, Held, first_full
from executor_mcp.storage.postgres.database import Database, storable

TABLES: tuple[str, ...] = (
    """CREATE TABLE executions_in_flight (
        holder text COLLATE "C" PRIMARY KEY,
        instance_id text COLLATE "C" NOT NULL,
        keys text[] COLLATE "C" NOT NULL,
        waits integer NOT NULL DEFAULT 0,
        pause_ids text[] COLLATE "C" NOT NULL DEFAULT '{}',
        entered_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )""",
    "CREATE INDEX executions_in_flight_by_key ON executions_in_flight USING gin (keys)",
    "CREATE INDEX executions_in_flight_by_instance ON executions_in_flight (instance_id)",
)
# A place younger than this is never dropped by `keep`: it may be being taken while the keeper reads its list.
KEEP_SPARES_SECONDS = 5.0


def _lock_key(key: str) -> int:
    """A key's advisory lock, a signed 64-bit digest (another table's locks are digests of other prefixes)."""
    digest = hashlib.sha256(b"executor-mcp executions in flight\x00" + key.encode("utf-8", "surrogatepass"))
    return int.from_bytes(digest.digest()[:8], "big", signed=True)


class PgInFlight:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def enter(self, instance: str, holder: str, ceilings: list[Ceiling], *, beyond: bool = False) -> Full | None:
        ceilings = [ceiling for ceiling in ceilings if storable(ceiling.key)]
        keys = sorted({ceiling.key for ceiling in ceilings})

        def _enter(connection: psycopg.Connection[Any]) -> Full | None:
            if not beyond and keys:
                connection.execute(
                    "SELECT pg_advisory_xact_lock(lock) FROM unnest(%s::bigint[]) WITH ORDINALITY AS l(lock, n)"
                    " ORDER BY n",
                    ([_lock_key(key) for key in keys],),
                )
                full = first_full(ceilings, _held(connection, instance, keys))
                if full is not None:
                    return full
            connection.execute(
                "INSERT INTO executions_in_flight (holder, instance_id, keys) VALUES (%s, %s, %s)"
                " ON CONFLICT (holder) DO NOTHING",
                (holder, instance, keys),
            )
            return None

        return await self._database.transact(_enter)

    async def mark(self, holder: str, waits: int, pause_ids: tuple[str, ...]) -> None:
        kept = [pause_id for pause_id in pause_ids if storable(pause_id)]
        await self._database.transact(
            lambda connection: connection.execute(
                "UPDATE executions_in_flight SET waits = %s, pause_ids = %s WHERE holder = %s", (waits, kept, holder)
            )
        )

    async def leave(self, holder: str) -> None:
        await self._database.transact(
            lambda connection: connection.execute("DELETE FROM executions_in_flight WHERE holder = %s", (holder,))
        )

    async def keep(self, instance: str, holders: Collection[str]) -> int:
        def _keep(connection: psycopg.Connection[Any]) -> int:
            return connection.execute(
                "DELETE FROM executions_in_flight WHERE instance_id = %s AND NOT (holder = ANY(%s))"
                " AND entered_at < clock_timestamp() - make_interval(secs => %s)",
                (instance, list(holders), KEEP_SPARES_SECONDS),
            ).rowcount

        return await self._database.transact(_keep)

    async def clear(self, instance: str) -> int:
        return await self._database.transact(
            lambda connection: (
                connection.execute("DELETE FROM executions_in_flight WHERE instance_id = %s", (instance,)).rowcount
            )
        )


def _held(connection: psycopg.Connection[Any], instance: str, keys: list[str]) -> dict[str, Held]:
    """What each of `keys` holds now, counting the rows of live instances (and the asker's own)."""
    rows = connection.execute(
        "SELECT key, f.waits, f.pause_ids FROM executions_in_flight f CROSS JOIN LATERAL unnest(f.keys) AS key"
        " LEFT JOIN instance_leases l ON l.instance_id = f.instance_id"
        " WHERE f.keys && %s::text[] AND key = ANY(%s)"
        " AND (f.instance_id = %s OR l.expires_at >= clock_timestamp())"
        " ORDER BY f.entered_at",
        (keys, keys, instance),
    ).fetchall()
    held: dict[str, Held] = {}
    for key, waits, pause_ids in rows:
        now = held.get(key, Held())
        if waits:
            held[key] = Held(now.running, now.paused + 1, now.pause_ids + tuple(pause_ids))
        else:
            held[key] = Held(now.running + 1, now.paused, now.pause_ids)
    return held
