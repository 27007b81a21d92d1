"""Executions in progress (`interfaces.InFlightStore`) in PostgreSQL, shared by every instance: one row per
execution, with the keys it counts under and the instance that runs it.

A row counts only while its instance's lease is live (`instances.py`) or it is the asking instance's own: a
process that died holds nothing once its lease lapses (10 s), however its rows were left; a restarted one drops
them (`clear`), and rows of an instance gone for an hour are swept. Taking a place is one statement
(`executions_enter`): it locks the keys (transaction-scoped advisory locks, taken in key order so two executions
sharing keys never deadlock), counts the live rows under them and inserts its own only if every ceiling admits
it, so two instances admitting at once cannot both take a key's last place. Every call here is one statement,
one round trip, harmless twice (`Database.statement` may run it again after a dropped connection).
"""

import hashlib
from typing import Any

import psycopg

from executor_mcp.ratelimits.in_flight import Ceiling, Full, Held, first_full
from executor_mcp.storage.postgres.database import Database, storable

# An instance whose lease lapsed this long ago is gone: its rows (which count for nothing already) are deleted.
GONE_SECONDS = 3600

TABLES: tuple[str, ...] = (
    """CREATE TABLE executions_in_flight (
        holder text COLLATE "C" PRIMARY KEY,
        instance_id text COLLATE "C" NOT NULL,
        keys text[] COLLATE "C" NOT NULL,
        waits integer NOT NULL DEFAULT 0,
        pause_ids text[] COLLATE "C" NOT NULL DEFAULT '{}',
        marked integer NOT NULL DEFAULT 0,  -- the latest mark written: an older one landing late is ignored
        entered_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )""",
    "CREATE INDEX executions_in_flight_by_key ON executions_in_flight USING gin (keys)",
    "CREATE INDEX executions_in_flight_by_instance ON executions_in_flight (instance_id)",
    # Taking a place is one statement, so the keys' locks are held only inside the server (a transaction of
    # several round trips would hold them while each answer travels to a thread that, on a busy server, is slow
    # to wake, and every execution of an org waits on the org's key). Being VOLATILE, each of its queries sees
    # what committed before it ran, so the count after the locks sees every place taken before them; the
    # decision and what a refusal reports come from that one query. It takes the place if every key holds fewer
    # than its most (`ratelimits.in_flight.first_full`'s rule) and answers nothing; else what each key holds.
    # A holder that has its place already (the same call run again) is answered as admitted.
    """CREATE FUNCTION executions_enter(
        p_instance text, p_holder text, p_keys text[], p_mosts integer[], p_locks bigint[], p_beyond boolean
    ) RETURNS TABLE (key text, running integer, paused integer, pause_ids text[])
    LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        IF NOT p_beyond THEN
            PERFORM pg_advisory_xact_lock(l.lock) FROM unnest(p_locks) WITH ORDINALITY AS l(lock, n) ORDER BY l.n;
            -- Under the locks: a first try of this call may have committed while this one waited on them (a
            -- place taken `beyond` needs no look: its insert below does nothing the second time).
            IF EXISTS (SELECT 1 FROM executions_in_flight f WHERE f.holder = p_holder) THEN
                RETURN;
            END IF;
            RETURN QUERY
                WITH live AS (
                    SELECT f.keys, f.waits, f.pause_ids, f.entered_at FROM executions_in_flight f
                    LEFT JOIN instance_leases l ON l.instance_id = f.instance_id
                    WHERE f.keys && p_keys
                    AND (f.instance_id = p_instance OR l.expires_at >= clock_timestamp())
                ), counted AS (
                    SELECT w.key, w.most, c.running, c.paused, i.ids FROM unnest(p_keys, p_mosts) AS w(key, most),
                    LATERAL (
                        SELECT count(*) FILTER (WHERE v.waits = 0)::integer AS running,
                            count(*) FILTER (WHERE v.waits > 0)::integer AS paused
                        FROM live v WHERE v.keys @> ARRAY[w.key]
                    ) AS c,
                    LATERAL (
                        SELECT coalesce(array_agg(u.p ORDER BY v.entered_at, u.n), '{}') AS ids
                        FROM live v CROSS JOIN LATERAL unnest(v.pause_ids) WITH ORDINALITY AS u(p, n)
                        WHERE v.keys @> ARRAY[w.key] AND v.waits > 0
                    ) AS i
                )
                SELECT c.key, c.running, c.paused, c.ids FROM counted c
                WHERE EXISTS (SELECT 1 FROM counted f WHERE f.running + f.paused >= f.most);
            IF FOUND THEN
                RETURN;
            END IF;
        END IF;
        INSERT INTO executions_in_flight (holder, instance_id, keys) VALUES (p_holder, p_instance, p_keys)
            ON CONFLICT (holder) DO NOTHING;
    END
    $$""",
)


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

    async def mark(self, holder: str, waits: int, pause_ids: tuple[str, ...], version: int) -> None:
        kept = [pause_id for pause_id in pause_ids if storable(pause_id)]
        await self._database.statement(
            lambda connection: connection.execute(
                "UPDATE executions_in_flight SET waits = %s, pause_ids = %s, marked = %s"
                " WHERE holder = %s AND marked < %s",
                (waits, kept, version, holder, version),
            )
        )

    async def leave(self, holder: str) -> None:
        await self._database.statement(
            lambda connection: connection.execute("DELETE FROM executions_in_flight WHERE holder = %s", (holder,))
        )

    async def clear(self, instance: str) -> int:
        return await self._database.statement(
            lambda connection: (
                connection.execute("DELETE FROM executions_in_flight WHERE instance_id = %s", (instance,)).rowcount
            )
        )

    async def sweep(self) -> int:
        def _sweep(connection: psycopg.Connection[Any]) -> int:
            return connection.execute(
                "DELETE FROM executions_in_flight f WHERE NOT EXISTS (SELECT 1 FROM instance_leases l"
                " WHERE l.instance_id = f.instance_id"
                " AND l.expires_at > clock_timestamp() - make_interval(secs => %s))",
                (GONE_SECONDS,),
            ).rowcount

        return await self._database.statement(_sweep)
