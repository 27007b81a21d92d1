"""Executions in progress (`interfaces.InFlightStore`) in PostgreSQL, shared by every instance: one row per
execution, with the keys it counts under and the instance that runs it.

A row counts only while its instance's lease is live (`instances.py`) or it is the asking instance's own: a
process that died holds nothing once its lease lapses (10 s), however its rows were left. Taking a place is one
statement (`executions_enter`): it locks the keys (transaction-scoped advisory locks, taken in key order so two
executions sharing keys never deadlock), counts the live rows under them and inserts its own only if every
ceiling admits it, so two instances admitting at once cannot both take a key's last place. Every call here is
one statement, one round trip. A `leave` lost to an outage is mended by `keep`, which each
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
    # Taking a place is one statement, so the keys' locks are held only inside the server (a transaction of
    # several round trips would hold them while each answer travels to a thread that, on a busy server, is slow
    # to wake, and every execution of an org waits on the org's key). Being VOLATILE, each of its queries sees
    # what committed before it ran, so the count after the locks sees every place taken before them. It takes
    # the place if every key has fewer than its most (`ratelimits.in_flight.first_full`'s rule), and answers
    # nothing; else what each key holds, for the refusal.
    """CREATE FUNCTION executions_enter(
        p_instance text, p_holder text, p_keys text[], p_mosts integer[], p_locks bigint[], p_beyond boolean
    ) RETURNS TABLE (key text, running integer, paused integer, pause_ids text[])
    LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        IF NOT p_beyond THEN
            PERFORM pg_advisory_xact_lock(l.lock) FROM unnest(p_locks) WITH ORDINALITY AS l(lock, n) ORDER BY l.n;
            IF EXISTS (
                SELECT 1 FROM unnest(p_keys, p_mosts) AS w(key, most)
                WHERE (
                    SELECT count(*) FROM executions_in_flight f
                    LEFT JOIN instance_leases l ON l.instance_id = f.instance_id
                    WHERE f.keys @> ARRAY[w.key]
                    AND (f.instance_id = p_instance OR l.expires_at >= clock_timestamp())
                ) >= w.most
            ) THEN
                RETURN QUERY
                    WITH live AS (
                        SELECT f.keys, f.waits, f.pause_ids, f.entered_at FROM executions_in_flight f
                        LEFT JOIN instance_leases l ON l.instance_id = f.instance_id
                        WHERE f.keys && p_keys
                        AND (f.instance_id = p_instance OR l.expires_at >= clock_timestamp())
                    )
                    SELECT w.key, c.running, c.paused, i.ids FROM unnest(p_keys) AS w(key),
                    LATERAL (
                        SELECT count(*) FILTER (WHERE v.waits = 0)::integer AS running,
                            count(*) FILTER (WHERE v.waits > 0)::integer AS paused
                        FROM live v WHERE v.keys @> ARRAY[w.key]
                    ) AS c,
                    LATERAL (
                        SELECT coalesce(array_agg(u.p ORDER BY v.entered_at, u.n), '{}') AS ids
                        FROM live v CROSS JOIN LATERAL unnest(v.pause_ids) WITH ORDINALITY AS u(p, n)
                        WHERE v.keys @> ARRAY[w.key] AND v.waits > 0
                    ) AS i;
                RETURN;
            END IF;
        END IF;
        INSERT INTO executions_in_flight (holder, instance_id, keys) VALUES (p_holder, p_instance, p_keys)
            ON CONFLICT (holder) DO NOTHING;
    END
    $$""",
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
        most = {ceiling.key: ceiling.most for ceiling in sorted(ceilings, key=lambda ceiling: ceiling.key)}
        locks = [_lock_key(key) for key in most]

        def _enter(connection: psycopg.Connection[Any]) -> list[tuple[str, int, int, list[str]]]:
            return connection.execute(
                "SELECT * FROM executions_enter(%s, %s, %s, %s, %s, %s)",
                (instance, holder, list(most), list(most.values()), locks, beyond),
            ).fetchall()

        held = await self._database.statement(_enter)
        if not held:
            return None
        full = first_full(ceilings, {key: Held(running, paused, tuple(ids)) for key, running, paused, ids in held})
        assert full is not None, "the database refused a place no ceiling is full for"
        return full

    async def mark(self, holder: str, waits: int, pause_ids: tuple[str, ...]) -> None:
        kept = [pause_id for pause_id in pause_ids if storable(pause_id)]
        await self._database.statement(
            lambda connection: connection.execute(
                "UPDATE executions_in_flight SET waits = %s, pause_ids = %s WHERE holder = %s", (waits, kept, holder)
            )
        )

    async def leave(self, holder: str) -> None:
        await self._database.statement(
            lambda connection: connection.execute("DELETE FROM executions_in_flight WHERE holder = %s", (holder,))
        )

    async def keep(self, instance: str, holders: Collection[str]) -> int:
        def _keep(connection: psycopg.Connection[Any]) -> int:
            return connection.execute(
                "DELETE FROM executions_in_flight WHERE instance_id = %s AND NOT (holder = ANY(%s))"
                " AND entered_at < clock_timestamp() - make_interval(secs => %s)",
                (instance, list(holders), KEEP_SPARES_SECONDS),
            ).rowcount

        return await self._database.statement(_keep)

    async def clear(self, instance: str) -> int:
        return await self._database.statement(
            lambda connection: (
                connection.execute("DELETE FROM executions_in_flight WHERE instance_id = %s", (instance,)).rowcount
            )
        )
