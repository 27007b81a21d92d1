"""Rate-limit state (`interfaces.RateStore`) in PostgreSQL, shared by every instance: one row per key, its TAT.

A call's keys are charged in one transaction: their rows are made if missing, locked in key order (so two calls
sharing keys never deadlock), weighed by `ratelimits.model.take` against the database's clock (instances' clocks
may disagree; the database's is one), and written back only if every key admits the call. A refused call writes
nothing. Rows whose TAT has passed hold nothing a missing row would not: `forget_expired` deletes them, so the
table holds the keys active in the last minute.
"""

from typing import Any

import psycopg

from executor_mcp.ratelimits.model import Limit, RateLimited, take
from executor_mcp.storage.postgres.database import Database, storable

TABLES: tuple[str, ...] = (
    """CREATE TABLE rate_tats (
        key text COLLATE "C" PRIMARY KEY,
        tat double precision NOT NULL
    )""",
)


class PgRates:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def take(self, limits: list[Limit]) -> RateLimited | None:
        limits = [limit for limit in limits if storable(limit.key)]
        if not limits:
            return None
        keys = sorted({limit.key for limit in limits})

        def _take(connection: psycopg.Connection[Any]) -> RateLimited | None:
            connection.execute(
                "INSERT INTO rate_tats (key, tat) SELECT unnest(%s::text[]), 0 ON CONFLICT (key) DO NOTHING", (keys,)
            )
            rows = connection.execute(
                "SELECT key, tat FROM rate_tats WHERE key = ANY(%s) ORDER BY key FOR UPDATE", (keys,)
            ).fetchall()
            (now,) = connection.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone() or (0.0,)
            taken = take({key: tat for key, tat in rows}, limits, now)
            if isinstance(taken, RateLimited):
                return taken
            connection.execute(
                "UPDATE rate_tats SET tat = charged.tat"
                " FROM (SELECT unnest(%s::text[]) AS key, unnest(%s::float8[]) AS tat) AS charged"
                " WHERE rate_tats.key = charged.key",
                (list(taken), list(taken.values())),
            )
            return None

        return await self._database.transact(_take)

    async def forget_expired(self) -> int:
        def _forget(connection: psycopg.Connection[Any]) -> int:
            return connection.execute(
                "DELETE FROM rate_tats WHERE tat <= extract(epoch FROM clock_timestamp())"
            ).rowcount

        return await self._database.transact(_forget)
