"""The keys every instance signs with (`interfaces.SigningKeys`), the console's sign-in links
(`interfaces.SignInStore`) and the last server's recorded settings (`interfaces.DataDirFacts`), in PostgreSQL.

A signing key is made by whoever asks first: `INSERT ... ON CONFLICT DO NOTHING`, then a read. Two instances
asking at once for the first time both try to insert; the second waits on the first's row, does nothing once
it commits, and its read (a new snapshot at READ COMMITTED) finds the first one's key, so every instance
signs with one key. A link is taken by `DELETE ... RETURNING`: of two instances opening one link at once, the
second's delete waits for the first's and then finds no row, so a link signs in once.
"""

import logging
import secrets
from collections.abc import Mapping
from typing import Any

import psycopg

from executor_mcp.codec import dumps, loads
from executor_mcp.storage.exported import canonical_json, key_parts, record_key, text_keyed, text_keyed_rows
from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.postgres.database import Database
from executor_mcp.storage.records import ConsoleLinkRecord, decoded_or_skipped, encode

log = logging.getLogger(__name__)

# The names LMDB keeps them under, so an export from one is an import into the other.
_CONSOLE_KEY = "cookie-key"
_REQUEST_STATE_KEY = "request-state-key"
_WORKSPACE_KEY = "workspace-id-key"
_SIGNING_KEYS = (_CONSOLE_KEY, _REQUEST_STATE_KEY, _WORKSPACE_KEY)
# What LMDB keeps the recorded settings under, the key of their one exported record.
_FACTS_KEY = "data-dir-facts"

TABLES: tuple[str, ...] = (
    "CREATE TABLE signing_keys (name text PRIMARY KEY, key bytea NOT NULL)",
    "CREATE TABLE console_links (digest text PRIMARY KEY, record jsonb NOT NULL)",
    # One row at most: what the last server recorded.
    "CREATE TABLE data_dir_facts (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), facts jsonb NOT NULL)",
)


class PgSigningKeys:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def console_key(self) -> bytes:
        return await self._signing_key(_CONSOLE_KEY)

    async def request_state_key(self) -> bytes:
        return await self._signing_key(_REQUEST_STATE_KEY)

    async def workspace_key(self) -> bytes:
        return await self._signing_key(_WORKSPACE_KEY)

    async def _signing_key(self, name: str) -> bytes:
        """A read when the key exists (every ask but the first); the insert only when it did not."""

        def _key(connection: psycopg.Connection[Any]) -> bytes:
            row = connection.execute("SELECT key FROM signing_keys WHERE name = %s", (name,)).fetchone()
            if row is None:
                connection.execute(
                    "INSERT INTO signing_keys (name, key) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING",
                    (name, secrets.token_bytes(32)),
                )
                row = connection.execute("SELECT key FROM signing_keys WHERE name = %s", (name,)).fetchone()
            assert row is not None  # inserted now, or by whoever's insert this one waited on
            return bytes(row[0])

        return await self._database.transact(_key)

    async def export_records(self) -> Exported:
        """The keys made so far, by name (one never asked for is made on the target when first asked)."""

        def _export(connection: psycopg.Connection[Any]) -> Exported:
            rows = connection.execute("SELECT name, key FROM signing_keys").fetchall()
            return sorted((record_key(name), bytes(key)) for name, key in rows)

        return await self._database.transact(_export)

    async def import_records(self, records: Exported) -> None:
        rows = []
        for key, value in records:
            (name,) = key_parts(key, 1)
            if name not in _SIGNING_KEYS:
                raise ValueError(f"not a signing key: {name!r}")
            rows.append((name, value))

        def _import(connection: psycopg.Connection[Any]) -> None:
            with connection.cursor() as cursor:
                cursor.executemany("INSERT INTO signing_keys (name, key) VALUES (%s, %s)", rows)

        await self._database.transact(_import)


class PgSignIns:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def put_console_link(self, digest: str, record: ConsoleLinkRecord, now: float) -> None:
        """Expired (and unreadable) links are swept here, on the next link made: there are never many."""

        def _put(connection: psycopg.Connection[Any]) -> None:
            stale = []
            for old_digest, raw in connection.execute("SELECT digest, record::text FROM console_links"):
                old = decoded_or_skipped(raw.encode(), ConsoleLinkRecord, old_digest)
                if old is None or old.expires_at <= now:
                    stale.append(old_digest)
            if stale:
                connection.execute("DELETE FROM console_links WHERE digest = ANY(%s)", (stale,))
            connection.execute(
                "INSERT INTO console_links (digest, record) VALUES (%s, %s::jsonb)"
                " ON CONFLICT (digest) DO UPDATE SET record = EXCLUDED.record",
                (digest, encode(record).decode()),
            )

        await self._database.transact(_put)

    async def take_console_link(self, digest: str, now: float) -> ConsoleLinkRecord | None:
        def _take(connection: psycopg.Connection[Any]) -> ConsoleLinkRecord | None:
            row = connection.execute(
                "DELETE FROM console_links WHERE digest = %s RETURNING record::text", (digest,)
            ).fetchone()
            record = None if row is None else decoded_or_skipped(row[0].encode(), ConsoleLinkRecord, digest)
            return record if record is not None and record.expires_at > now else None

        if "\x00" in digest:  # no link is stored under it (text holds no NUL)
            return None
        return await self._database.transact(_take)

    async def export_records(self) -> Exported:
        """Expired links too: they are swept on the next link made, on either backend."""
        return await self._database.transact(
            lambda connection: text_keyed(
                connection.execute("SELECT digest, record::text FROM console_links").fetchall(), ConsoleLinkRecord
            )
        )

    async def import_records(self, records: Exported) -> None:
        rows = [(digest, raw) for digest, _, raw in text_keyed_rows(records, ConsoleLinkRecord)]

        def _import(connection: psycopg.Connection[Any]) -> None:
            with connection.cursor() as cursor:
                cursor.executemany("INSERT INTO console_links (digest, record) VALUES (%s, %s::jsonb)", rows)

        await self._database.transact(_import)


class PgDataDirFacts:
    def __init__(self, database: Database) -> None:
        self._database = database

    async def record_data_dir_facts(self, facts: Mapping[str, object]) -> None:
        await self._database.transact(
            lambda connection: connection.execute(
                "INSERT INTO data_dir_facts (facts) VALUES (%s::jsonb)"
                " ON CONFLICT (only_row) DO UPDATE SET facts = EXCLUDED.facts",
                (dumps(dict(facts)).decode(),),
            )
        )

    async def data_dir_facts(self) -> dict[str, object]:
        def _read(connection: psycopg.Connection[Any]) -> dict[str, object]:
            row = connection.execute("SELECT facts::text FROM data_dir_facts").fetchone()
            facts = loads(row[0]) if row is not None else {}  # jsonb: always JSON, not always an object
            if not isinstance(facts, dict):
                log.error("ignoring an unreadable record of the server's settings")
                return {}
            return facts

        return await self._database.transact(_read)

    async def export_records(self) -> Exported:
        facts = await self.data_dir_facts()
        return [(record_key(_FACTS_KEY), canonical_json(facts))] if facts else []

    async def import_records(self, records: Exported) -> None:
        facts = None
        for key, value in records:
            facts = loads(value)
            if key_parts(key, 1) != [_FACTS_KEY] or not isinstance(facts, dict):
                raise ValueError("not an exported record of the server's settings")
        if facts is not None:
            await self.record_data_dir_facts(facts)
