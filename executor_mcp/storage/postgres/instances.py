"""Instance leases in PostgreSQL (`interfaces.InstanceLeases`): one row per instance id, naming the process
that serves it and until when, by the database's clock (`clock_timestamp()`), so no two machines' clocks are
ever compared. Taking a lease is one upsert that succeeds only where the row is free, expired, or already the
taker's; of two processes racing for one id, the second's upsert waits on the first's row lock and then sees a
live lease.
"""

import psycopg

from executor_mcp.storage.postgres.database import Database

TABLES: tuple[str, ...] = (
    'CREATE TABLE instance_leases (instance_id text COLLATE "C" PRIMARY KEY, holder text NOT NULL,'
    " expires_at timestamptz NOT NULL)",
)


def _acquire(connection: psycopg.Connection, instance: str, holder: str, ttl: float) -> str | None:
    taken = connection.execute(
        "INSERT INTO instance_leases (instance_id, holder, expires_at)"
        " VALUES (%s, %s, clock_timestamp() + make_interval(secs => %s))"
        " ON CONFLICT (instance_id) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at"
        " WHERE instance_leases.holder = EXCLUDED.holder OR instance_leases.expires_at < clock_timestamp()"
        " RETURNING 1",
        (instance, holder, ttl),
    ).fetchone()
    if taken is not None:
        return None
    row = connection.execute("SELECT holder FROM instance_leases WHERE instance_id = %s", (instance,)).fetchone()
    return "" if row is None else str(row[0])


class PgInstanceLeases:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def acquire(self, instance: str, holder: str, ttl: float) -> str | None:
        return await self._database.transact(lambda connection: _acquire(connection, instance, holder, ttl))

    async def release(self, instance: str, holder: str) -> None:
        await self._database.transact(
            lambda connection: connection.execute(
                "DELETE FROM instance_leases WHERE instance_id = %s AND holder = %s", (instance, holder)
            )
        )
