"""The catalog on the PostgreSQL backend: what no backend-neutral test can reach (records made unreadable behind
the store's back). The contract itself is `storage_contract/test_catalog.py`."""

import logging
from collections.abc import AsyncIterator

import psycopg
import pytest

from executor_mcp.storage.control import ControlPlane
from tests.postgres import PostgresServer
from tests.unit.storage_contract.catalog_records import connection, integration, names


@pytest.fixture
def url(postgres: PostgresServer) -> str:
    return postgres.new_database()


@pytest.fixture
async def control(url: str) -> AsyncIterator[ControlPlane]:
    plane = await ControlPlane.open_postgres(url, pool_size=2)
    try:
        yield plane
    finally:
        await plane.close()


def spoil(url: str, statement: bytes, parameters: tuple[str, ...]) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        assert connection.execute(statement, parameters).rowcount == 1


async def test_unreadable_records_are_skipped_and_still_let_go_of_what_they_hold(
    control: ControlPlane, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    catalog = control.catalog
    await catalog.add_integration(integration(), b"spec", b"compiled")
    await catalog.add_integration(integration(slug="stripe", source_hash="h2"), b"spec 2", b"compiled 2")
    await catalog.put_connection(connection())
    await catalog.put_connection(connection(slug="stripe"))
    await catalog.put_connection(connection(slug="stripe", name="other"))
    await catalog.set_discovered(connection(slug="stripe"), synced_at=1.0, source_hash="d1", source=b"t", compiled=b"c")
    await catalog.set_discovered(
        connection(slug="stripe", name="other"), synced_at=1.0, source_hash="d2", source=b"t", compiled=b"c"
    )
    spoil(url, b"UPDATE catalog_integrations SET record = '{\"slug\": 5}' WHERE slug = %s", ("stripe",))
    spoil(url, b"UPDATE catalog_connections SET record = '[]' WHERE integration = %s AND name = %s", ("stripe", "main"))
    spoil(url, b"UPDATE catalog_connections SET record = 'not json' WHERE name = %s", ("other",))
    revision = await catalog.catalog_revision("acme")

    with caplog.at_level(logging.ERROR):
        assert [record.slug for record in await catalog.integrations("acme")] == ["github"]
        assert names(await catalog.connections("acme", "alice")) == [("github", "org", "", "main")]
        assert await catalog.get_integration("acme", "stripe") is None
        assert await catalog.get_connection("acme", "org", "", "stripe", "main") is None
        assert await catalog.set_discovered(connection(slug="stripe"), synced_at=2.0, error="x") is None
    assert sum("skipping an unreadable" in record.getMessage() for record in caplog.records) >= 4

    # A put over an unreadable connection writes it afresh, letting go of what the old one held.
    assert await catalog.put_connection(connection(slug="stripe", name="other"))
    assert await catalog.get_source("d2") is None
    # An unreadable integration can still be removed: it takes its connections along, readable or not, and
    # every source they held goes with the last holder.
    assert names(await catalog.remove_integration("acme", "stripe")) == [("stripe", "org", "", "other")]
    assert (await catalog.get_source("h2"), await catalog.get_source("d1")) == (None, None)
    assert await catalog.catalog_revision("acme") == revision + 2
    assert await catalog.get_source("h1") == b"spec"
