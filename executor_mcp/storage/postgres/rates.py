"""Rate-limit state (`interfaces.RateStore`) in PostgreSQL, shared by every instance: one row per key, its TAT.

A call's keys are charged in one transaction of two statements: the first makes the missing rows, locks them all
in key order (so two calls sharing keys never deadlock) and reads them with the database's clock (instances' clocks
may disagree; the database's is one); they are weighed by `ratelimits.model.take`, and the second writes them back
only if every key admits the call. A refused call changes nothing. Rows whose TAT has passed hold nothing a
missing row would not: `forget_expired` deletes them, so the table holds the keys active in the last minute.
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
            # One statement makes the missing rows, locks them all in key order, reads them and the clock.
            rows = connection.execute(
                "INSERT INTO rate_tats (key, tat) SELECT key, 0 FROM unnest(%s::text[]) AS key ORDER BY key"
                " ON CONFLICT (key) DO UPDATE SET tat = rate_tats.tat"
                " RETURNING key, tat, extract(epoch FROM clock_timestamp())::float8",
                (keys,),
            ).fetchall()
            now = max(row[2] for row in rows)
            taken = take({key: tat for key, tat, _ in rows}, limits, now)
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
