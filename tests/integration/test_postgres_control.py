"""The PostgreSQL control plane's edges, against a real server (`tests/postgres.py`): the schema migrated once
however many instances start together, `executor-mcp migrate`, a newer schema refused, an unreachable database
answered in words (never a traceback, never the URL's password), and the admin commands on `--database-url`."""

import psycopg
import pytest
import trio

from executor_mcp.config import SECRET_KEY_ENV
from executor_mcp.storage.control import ControlPlane, migrate_database
from executor_mcp.storage.postgres.migrations import LATEST
from tests.integration.test_cli_operations import cli, free_port
from tests.postgres import PostgresServer


@pytest.fixture(autouse=True)
def shared_secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every instance and admin command on one database shares the key that seals its secrets."""
    monkeypatch.setenv(SECRET_KEY_ENV, "a shared test key")


async def test_instances_starting_together_migrate_once(postgres: PostgresServer) -> None:
    url = postgres.new_database()
    applied: list[list[int]] = []

    async def start() -> None:
        applied.append(await migrate_database(url))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(start)
    assert sorted(applied, key=len) == [[], [], [], list(range(1, LATEST + 1))]
    with psycopg.connect(url) as connection:
        rows = connection.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()
    assert [row[0] for row in rows] == list(range(1, LATEST + 1))


async def test_migrate_applies_then_finds_nothing_to_do(postgres: PostgresServer) -> None:
    url = postgres.new_database()
    first = await cli("migrate", "--database-url", url)
    assert (first.returncode, first.stdout.decode().strip()) == (
        0,
        f"applied {', '.join(map(str, range(1, LATEST + 1)))}",
    )
    again = await cli("migrate", "--database-url", url)
    assert (again.returncode, again.stdout.decode().strip()) == (0, f"up to date (version {LATEST})")


async def test_migrate_without_a_database_says_what_it_needs() -> None:
    done = await cli("migrate")
    assert done.returncode == 2
    assert "migrate needs --database-url" in done.stderr.decode()


async def test_a_schema_newer_than_the_code_is_refused(postgres: PostgresServer) -> None:
    url = postgres.new_database()
    await migrate_database(url)
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO schema_migrations (version, name) VALUES (%s, 'from the future')", (LATEST + 1,)
        )
    done = await cli("orgs", "list", "--database-url", url)
    assert done.returncode == 1
    assert f"schema is at version {LATEST + 1}, newer than this executor-mcp knows ({LATEST})" in done.stderr.decode()
    with pytest.raises(Exception, match="upgrade executor-mcp"):
        await ControlPlane.open_postgres(url, pool_size=1)


async def test_an_unreachable_database_is_an_error_in_words_without_the_password() -> None:
    url = f"postgresql://operator:hunter2-secret@127.0.0.1:{free_port()}/executor"
    done = await cli("orgs", "list", "--database-url", url)
    assert done.returncode == 1
    said = done.stderr.decode()
    assert said.startswith("executor-mcp: error: the database is unavailable"), said
    assert "hunter2-secret" not in said + done.stdout.decode()


async def test_admin_commands_work_on_the_shared_database(postgres: PostgresServer) -> None:
    url = postgres.new_database()
    created = await cli("keys", "create", "--user", "alice", "--org", "acme", "--database-url", url)
    assert created.returncode == 0, created.stderr
    revoked = await cli("orgs", "revoke", "acme", "--database-url", url)
    assert revoked.returncode == 0, revoked.stderr
    listed = await cli("orgs", "list", "--json", "--database-url", url)
    assert listed.returncode == 0, listed.stderr
    assert '"revoked": true' in listed.stdout.decode()
    control = await ControlPlane.open_postgres(url, pool_size=1)
    try:
        assert [key.account_id for key in await control.api_keys.api_keys()] == ["alice"]
        org = await control.orgs.get_org("acme")
        assert org is not None
        assert org.revoked
    finally:
        await control.close()


async def test_the_shared_database_needs_the_shared_secret_key(
    postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SECRET_KEY_ENV)
    done = await cli("keys", "list", "--database-url", postgres.new_database())
    assert done.returncode == 2
    assert f"--database-url needs {SECRET_KEY_ENV}" in done.stderr.decode()
