"""Rate-limit state (`interfaces.RateStore`) in PostgreSQL, shared by every instance: one row per key, its TAT.

A call's keys are charged in one statement (`rate_take`, below): it makes the missing rows, locks them all in key
order (so two calls sharing keys never deadlock), weighs them by `ratelimits.model.take`'s rule against the
database's clock (instances' clocks may disagree; the database's is one) and writes them back only if every key
admits the call. A refused call changes nothing. Rows whose TAT has passed hold nothing a missing row would not:
`forget_expired` deletes them, so the table holds the keys active in the last minute. A charge whose answer is
lost with a dropped connection is made once more on a new one (`Database.statement`): a call counted twice, which
errs on the strict side.
"""

from typing import Any

import psycopg

from executor_mcp.ratelimits.model import WINDOW, Limit, RateLimited
from executor_mcp.storage.postgres.database import Database, storable

TABLES: tuple[str, ...] = (
    """CREATE TABLE rate_tats (
        key text COLLATE "C" PRIMARY KEY,
        tat double precision NOT NULL
    )""",
)
# A call's keys charged in one statement, so their row locks are held only inside the server, never while an
# answer travels to a thread that may be slow to wake (every call of an org waits on the org's row). The rule is
# `ratelimits.model.take`'s, on the database's clock: each key's next TAT is the later of its TAT and now, plus
# its interval; the call fits if no key's is more than the window ahead, and then every key is charged. It
# answers nothing when the call fits, else each key that refuses it with how long until it would fit.
FUNCTIONS: tuple[str, ...] = (
    """CREATE FUNCTION rate_take(p_keys text[], p_intervals double precision[], p_window double precision)
    RETURNS TABLE (key text, wait double precision)
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        now double precision;
    BEGIN
        -- Each key's row locked in key order, made if missing (or deleted by a sweep since).
        INSERT INTO rate_tats AS r (key, tat) SELECT k, 0 FROM unnest(p_keys) AS k ORDER BY k
            ON CONFLICT ON CONSTRAINT rate_tats_pkey DO UPDATE SET tat = r.tat;
        now := extract(epoch FROM clock_timestamp());  -- after the locks: a wait for them is not time credited
        RETURN QUERY
            SELECT w.k, greatest(r.tat, now) + w.i - now - p_window
            FROM unnest(p_keys, p_intervals) AS w(k, i) JOIN rate_tats r ON r.key = w.k
            WHERE greatest(r.tat, now) + w.i - now > p_window;
        IF NOT FOUND THEN
            UPDATE rate_tats r SET tat = greatest(r.tat, now) + w.i
                FROM unnest(p_keys, p_intervals) AS w(k, i) WHERE r.key = w.k;
        END IF;
    END
    $$""",
)


class PgRates:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def take(self, limits: list[Limit]) -> RateLimited | None:
        by_key = {limit.key: limit for limit in sorted(limits, key=lambda limit: limit.key) if storable(limit.key)}
        if not by_key:
            return None
        intervals = [limit.interval for limit in by_key.values()]

        def _take(connection: psycopg.Connection[Any]) -> list[tuple[str, float]]:
            return connection.execute(
                "SELECT * FROM rate_take(%s, %s, %s)", (list(by_key), intervals, WINDOW)
            ).fetchall()

        refused = await self._database.statement(_take)
        if not refused:
            return None
        # The longest wait, and of equal ones the first of `limits`, as `ratelimits.model.take` answers.
        order = {limit.key: index for index, limit in enumerate(limits)}
        key, wait = max(refused, key=lambda row: (row[1], -order[row[0]]))
        return RateLimited(by_key[key], wait)

    async def forget_expired(self) -> int:
        def _forget(connection: psycopg.Connection[Any]) -> int:
            # In key order, skipping rows a charge holds, as `rate_take` locks them: never a deadlock with one.
            return connection.execute(
                "DELETE FROM rate_tats WHERE key IN (SELECT key FROM rate_tats"
                " WHERE tat <= extract(epoch FROM clock_timestamp()) ORDER BY key FOR UPDATE SKIP LOCKED)"
            ).rowcount

        return await self._database.transact(_forget)
