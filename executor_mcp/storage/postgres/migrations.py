"""The PostgreSQL schema, versioned: each migration is applied once, in order, under an advisory lock.

Every instance runs `migrate` at start (and `executor-mcp migrate` runs it alone): the first to take the lock
applies what is missing, the others wait and then find nothing to do. A database whose schema is newer than
this code refuses to start rather than be written by code that does not know its tables.
A migration, once released, never changes: a change to the schema is a new one at the end.
"""

import attrs
import psycopg

from executor_mcp.storage.postgres import (
    audit,
    catalog,
    console,
    executions,
    in_flight,
    instances,
    oauth,
    orgs,
    policies,
    rates,
    secrets,
    sessions,
    toolkits,
)

# `pg_advisory_xact_lock`'s key: "executor-mcp schema" in a 64-bit integer, any value other tools do not use.
MIGRATION_LOCK = 0x6578_6D63_7073_6368


@attrs.frozen
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "the control plane's tables",
        sessions.TABLES
        + orgs.TABLES
        + policies.TABLES
        + audit.TABLES
        + console.TABLES
        + catalog.TABLES
        + secrets.TABLES,
    ),
    Migration(2, "durable executions and instance leases", executions.TABLES + instances.TABLES),
    Migration(3, "oauth clients and flows", oauth.TABLES),
    Migration(4, "oauth refresh claims", oauth.CLAIM_TABLES),
    Migration(5, "toolkits", toolkits.TABLES),
    Migration(6, "rate limits", rates.TABLES),
    Migration(7, "executions in flight, and rate limits in one statement", in_flight.TABLES + rates.FUNCTIONS),
)
LATEST = MIGRATIONS[-1].version


class SchemaTooNew(Exception):
    """The database was migrated by a newer version of executor-mcp."""


def migrate(connection: psycopg.Connection) -> list[int]:
    """Apply the missing migrations in the caller's transaction; the versions applied now."""
    connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
    connection.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    applied = {row[0] for row in connection.execute("SELECT version FROM schema_migrations")}
    if applied and max(applied) > LATEST:
        raise SchemaTooNew(
            f"the database's schema is at version {max(applied)}, newer than this executor-mcp knows ({LATEST}):"
            " upgrade executor-mcp"
        )
    done = []
    for migration in MIGRATIONS:
        if migration.version in applied:
            continue
        for statement in migration.statements:
            connection.execute(statement.encode())
        connection.execute(
            "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (migration.version, migration.name)
        )
        done.append(migration.version)
    return done
