"""OAuth clients and the sign-in flows in progress (`interfaces.OAuthStore`) in PostgreSQL.

`oauth_clients` is keyed (org, owner, account, slug), the account empty for what the org owns, so what one caller
lists is two index ranges. `oauth_flows` is keyed by the state digest (the callback's point read), with the
account that started it and its expiry as columns of their own: an account's flows are an index range, counted
and swept by the expiry column, whatever their records say (an unreadable flow counts until it expires, as in
LMDB). Identifier columns are `COLLATE "C"`, so they order as LMDB's keys do. Records are `jsonb`; a NUL, which
`jsonb` cannot hold, is refused on both backends (`lmdb/oauth.check_text`).

What the transactions guard, with instances writing at once (READ COMMITTED):
- A flow is taken by `DELETE ... RETURNING`: of two instances taking one flow, the second's delete waits for the
  first's and then finds no row, so a flow is taken once.
- `put_flow` takes a transaction-scoped advisory lock on its account (org, account) before it deletes the
  account's expired flows and counts the rest: every put of that account, from any instance, waits for the one
  before it to commit and then counts what it inserted (each statement reads a new snapshot), so no two puts
  both see room for one more. Row locks would not do: the row the other put inserts is one this count never saw.

Identifiers obey the catalog's rule (`catalog.writable`): LMDB's key limit, measured on the longest key LMDB
builds (a flow's index entry is (org, account, digest)), and text PostgreSQL can hold. What could not be written
names nothing, so a read of it answers without asking the database.
"""

import hashlib
from typing import Any

import psycopg

from executor_mcp.records.oauth import OAuthClientRecord, OAuthFlowRecord
from executor_mcp.storage.exported import canonical, record_key
from executor_mcp.storage.interfaces import ORG_OWNER, USER_OWNER, ConnectionKey, Exported
from executor_mcp.storage.lmdb import keys
from executor_mcp.storage.lmdb.oauth import check_client, check_text, client_identity, exported_client
from executor_mcp.storage.postgres.catalog import readable, writable
from executor_mcp.storage.postgres.database import Database
from executor_mcp.storage.records import decoded_or_skipped, encode

TABLES: tuple[str, ...] = (
    """CREATE TABLE oauth_clients (
        org_id text COLLATE "C" NOT NULL,
        owner text COLLATE "C" NOT NULL,
        account_id text COLLATE "C" NOT NULL,  -- '' for the org's own clients
        slug text COLLATE "C" NOT NULL,
        record jsonb NOT NULL,
        PRIMARY KEY (org_id, owner, account_id, slug)
    )""",
    """CREATE TABLE oauth_flows (
        state_digest text COLLATE "C" PRIMARY KEY,
        org_id text COLLATE "C" NOT NULL,
        account_id text COLLATE "C" NOT NULL,
        expires_at double precision NOT NULL,
        record jsonb NOT NULL
    )""",
    # What `put_flow` counts (one account's flows not expired) and what `sweep_flows` deletes.
    "CREATE INDEX oauth_flows_by_account ON oauth_flows (org_id, account_id, expires_at)",
    "CREATE INDEX oauth_flows_by_expiry ON oauth_flows (expires_at)",
)

# Migration 4: who refreshes a connection's tokens now, keyed by the connection as LMDB keys it.
CLAIM_TABLES: tuple[str, ...] = (
    """CREATE TABLE oauth_refresh_claims (
        connection_key bytea PRIMARY KEY,
        holder text NOT NULL,
        until double precision NOT NULL
    )""",
)

ClientKey = tuple[str, str, str, str]


class PgOAuth:
    def __init__(self, database: Database) -> None:
        self._database = database

    # -- clients ------------------------------------------------------------------------------------

    async def put_client(self, record: OAuthClientRecord, max_per_owner: int | None = None) -> bool:
        """With a cap, under a transaction-scoped advisory lock on the owner (as `put_flow`'s on an account): every
        capped put of that owner waits for the one before it to commit, then counts what it wrote."""
        check_client(record)
        identity = client_identity(record)
        writable(*identity)
        check_text(record)
        raw = encode(record).decode()

        def _put(connection: psycopg.Connection[Any]) -> bool:
            if max_per_owner is not None:
                connection.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(*identity[:3], purpose=b"clients"),))
                row = connection.execute(
                    "SELECT count(*), count(*) FILTER (WHERE slug = %s) FROM oauth_clients"
                    " WHERE org_id = %s AND owner = %s AND account_id = %s",
                    (identity[3], *identity[:3]),
                ).fetchone()
                assert row is not None  # count(*) always answers
                if row[1] == 0 and row[0] >= max_per_owner:
                    return False
            _insert_clients(connection, [(*identity, raw)], replace=True)
            return True

        return await self._database.transact(_put)

    async def get_client(self, org_id: str, owner: str, account_id: str, slug: str) -> OAuthClientRecord | None:
        key = _client_key(org_id, owner, account_id, slug)
        if not readable(*key):
            return None

        def _get(connection: psycopg.Connection[Any]) -> OAuthClientRecord | None:
            row = connection.execute(
                "SELECT record::text FROM oauth_clients WHERE org_id = %s AND owner = %s AND account_id = %s"
                " AND slug = %s",
                key,
            ).fetchone()
            return None if row is None else _client(row[0], key)

        return await self._database.transact(_get)

    async def clients(self, org_id: str, account_id: str) -> list[OAuthClientRecord]:
        if not readable(org_id):
            return []
        owners = [(ORG_OWNER, "")]
        if account_id and readable(org_id, USER_OWNER, account_id):
            owners.append((USER_OWNER, account_id))

        def _list(connection: psycopg.Connection[Any]) -> list[OAuthClientRecord]:
            records = []
            for owner, account in owners:
                rows = connection.execute(
                    "SELECT slug, record::text FROM oauth_clients WHERE org_id = %s AND owner = %s AND account_id = %s",
                    (org_id, owner, account),
                ).fetchall()
                for slug, raw in rows:
                    record = _client(raw, (org_id, owner, account, slug))
                    if record is not None:
                        records.append(record)
            return sorted(records, key=lambda record: (record.owner, record.slug))

        return await self._database.transact(_list)

    async def remove_client(self, org_id: str, owner: str, account_id: str, slug: str) -> OAuthClientRecord | None:
        key = _client_key(org_id, owner, account_id, slug)
        if not readable(*key):
            return None

        def _remove(connection: psycopg.Connection[Any]) -> OAuthClientRecord | None:
            row = connection.execute(
                "DELETE FROM oauth_clients WHERE org_id = %s AND owner = %s AND account_id = %s AND slug = %s"
                " RETURNING record::text",
                key,
            ).fetchone()
            return None if row is None else _client(row[0], key)

        return await self._database.transact(_remove)

    # -- flows --------------------------------------------------------------------------------------

    async def put_flow(self, record: OAuthFlowRecord, max_per_account: int, now: float) -> bool:
        writable(record.org_id, record.account_id, record.state_digest)
        check_text(record)
        raw = encode(record).decode()
        account = (record.org_id, record.account_id)

        def _put(connection: psycopg.Connection[Any]) -> bool:
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(*account),))
            connection.execute(
                "DELETE FROM oauth_flows WHERE org_id = %s AND account_id = %s AND expires_at <= %s", (*account, now)
            )
            row = connection.execute(
                "SELECT count(*) FROM oauth_flows WHERE org_id = %s AND account_id = %s AND state_digest <> %s",
                (*account, record.state_digest),
            ).fetchone()
            assert row is not None  # count(*) always answers
            if row[0] >= max_per_account:
                return False
            connection.execute(
                "INSERT INTO oauth_flows (state_digest, org_id, account_id, expires_at, record)"
                " VALUES (%s, %s, %s, %s, %s::jsonb) ON CONFLICT (state_digest) DO UPDATE SET"
                " org_id = EXCLUDED.org_id, account_id = EXCLUDED.account_id, expires_at = EXCLUDED.expires_at,"
                " record = EXCLUDED.record",
                (record.state_digest, *account, record.expires_at, raw),
            )
            return True

        return await self._database.transact(_put)

    async def take_flow(
        self, state_digest: str, now: float, account: tuple[str, str] | None = None
    ) -> OAuthFlowRecord | None:
        if not readable(state_digest):
            return None
        whose, owner = ("", ()) if account is None else (" AND org_id = %s AND account_id = %s", account)

        def _take(connection: psycopg.Connection[Any]) -> OAuthFlowRecord | None:
            row = connection.execute(
                "DELETE FROM oauth_flows WHERE state_digest = %s" + whose + " RETURNING record::text",
                (state_digest, *owner),
            ).fetchone()
            record = None if row is None else decoded_or_skipped(row[0].encode(), OAuthFlowRecord, state_digest)
            return record if record is not None and record.expires_at > now else None

        return await self._database.transact(_take)

    async def sweep_flows(self, now: float) -> int:
        return await self._database.transact(
            lambda connection: connection.execute("DELETE FROM oauth_flows WHERE expires_at <= %s", (now,)).rowcount
        )

    # -- refresh claims -----------------------------------------------------------------------------

    async def claim_refresh(self, connection: ConnectionKey, holder: str, until: float, now: float) -> bool:
        """One upsert: of two instances claiming at once, the second's waits on the first's row lock, then finds
        a claim that has not lapsed and changes nothing."""
        key = keys.key(*connection)

        def _claim(transaction: psycopg.Connection[Any]) -> bool:
            row = transaction.execute(
                "INSERT INTO oauth_refresh_claims (connection_key, holder, until) VALUES (%s, %s, %s)"
                " ON CONFLICT (connection_key) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until"
                " WHERE oauth_refresh_claims.until <= %s OR oauth_refresh_claims.holder = EXCLUDED.holder"
                " RETURNING holder",
                (key, holder, until, now),
            ).fetchone()
            return row is not None

        return await self._database.transact(_claim)

    async def release_refresh(self, connection: ConnectionKey, holder: str) -> None:
        key = keys.key(*connection)
        await self._database.transact(
            lambda transaction: transaction.execute(
                "DELETE FROM oauth_refresh_claims WHERE connection_key = %s AND holder = %s", (key, holder)
            )
        )

    # -- moving between backends ----------------------------------------------------------------------

    async def export_records(self) -> Exported:
        """The readable clients, each under (org, owner, account, slug). Flows do not move."""

        def _export(connection: psycopg.Connection[Any]) -> Exported:
            found = []
            for org, owner, account, slug, raw in connection.execute(
                "SELECT org_id, owner, account_id, slug, record::text FROM oauth_clients"
            ):
                key = (org, owner, account, slug)
                kept = canonical(raw.encode(), OAuthClientRecord, key)
                if kept is not None and client_identity(kept[0]) == key:
                    found.append((record_key(*key), kept[1]))
            return sorted(found)

        return await self._database.transact(_export)

    async def import_records(self, records: Exported) -> None:
        rows = []
        for key, value in records:
            record = exported_client(key, value)
            writable(*client_identity(record))
            rows.append((*client_identity(record), encode(record).decode()))
        await self._database.transact(lambda connection: _insert_clients(connection, rows, replace=False))


def _insert_clients(
    connection: psycopg.Connection[Any], rows: list[tuple[str, str, str, str, str]], *, replace: bool
) -> None:
    upsert = " ON CONFLICT (org_id, owner, account_id, slug) DO UPDATE SET record = EXCLUDED.record" if replace else ""
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO oauth_clients (org_id, owner, account_id, slug, record) VALUES (%s, %s, %s, %s, %s::jsonb)"
            + upsert,
            rows,
        )


def _client_key(org_id: str, owner: str, account_id: str, slug: str) -> ClientKey:
    """The account part is empty for what the org owns, whoever asks."""
    return org_id, owner, "" if owner == ORG_OWNER else account_id, slug


def _client(raw: str, key: ClientKey) -> OAuthClientRecord | None:
    """The record of row `key`, if it decodes and is the one the row names."""
    record = decoded_or_skipped(raw.encode(), OAuthClientRecord, key)
    return record if record is not None and client_identity(record) == key else None


def _lock_key(*parts: str, purpose: bytes = b"flows") -> int:
    """An advisory lock's key, a signed 64-bit digest of `parts` as LMDB keys them (an account's flows, an
    owner's clients). Two that share a key only wait for each other's puts."""
    digest = hashlib.sha256(b"executor-mcp oauth " + purpose + b"\x00" + keys.key(*parts)).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
