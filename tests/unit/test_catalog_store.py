"""The catalog on the LMDB backend: what no backend-neutral test can reach (records written unreadable behind the
store's back, a second process on the same file). The contract itself is `storage_contract/test_catalog.py`."""

import json
import logging
import sys
from pathlib import Path

import lmdb
import pytest
import trio

from executor_mcp.codec import dumps
from executor_mcp.records.integrations import IntegrationRecord
from executor_mcp.storage.control import CONTROL_FILE, ControlPlane
from executor_mcp.storage.records import encode
from tests.unit.storage_contract.catalog_records import connection, integration, names

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture
async def control(tmp_path: Path):
    plane = await ControlPlane.open(tmp_path)
    try:
        yield plane
    finally:
        await plane.close()


async def test_unreadable_records_are_skipped_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    control = await ControlPlane.open(tmp_path)
    await control.catalog.add_integration(integration(), b"spec", b"compiled")
    await control.catalog.add_integration(integration(slug="stripe"), b"spec", b"compiled")
    await control.catalog.put_connection(connection())
    await control.catalog.put_connection(connection(slug="stripe"))
    await control.close()

    env = lmdb.open(str(tmp_path / CONTROL_FILE), subdir=False, max_dbs=32)
    try:
        with env.begin(write=True) as txn:
            integrations = env.open_db(b"integrations", txn=txn)
            txn.put(dumps("acme") + b"\x00" + dumps("broken"), b"{not a record", db=integrations)
            txn.put(dumps("acme") + b"\x00" + dumps("stripe"), b'{"slug": 5}', db=integrations)
            connections = env.open_db(b"connections", txn=txn)
            txn.put(b"\x00".join(dumps(p) for p in ("acme", "org", "", "github", "bad")), b"[]", db=connections)
            txn.put(b"not json at all", b"{}", db=connections)
    finally:
        env.close()

    control = await ControlPlane.open(tmp_path)
    try:
        with caplog.at_level(logging.ERROR):
            assert [record.slug for record in await control.catalog.integrations("acme")] == ["github"]
            assert names(await control.catalog.connections("acme", "alice")) == [
                ("github", "org", "", "main"),
                ("stripe", "org", "", "main"),
            ]
            assert await control.catalog.get_integration("acme", "stripe") is None
        assert sum("skipping an unreadable" in record.getMessage() for record in caplog.records) >= 3
        # An unreadable integration can still be removed, and takes its connections along.
        assert names(await control.catalog.remove_integration("acme", "stripe")) == [("stripe", "org", "", "main")]
        assert names(await control.catalog.remove_integration("acme", "github")) == [("github", "org", "", "main")]
        assert await control.catalog.connections("acme", "alice") == []
    finally:
        await control.close()


ADMIN = """
import json, sys
from pathlib import Path
import trio
from executor_mcp.records.integrations import IntegrationRecord
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.records import decode

async def main(data_dir, raw):
    control = await ControlPlane.open(Path(data_dir))
    try:
        record = decode(raw.encode(), IntegrationRecord)
        seen = [known.slug for known in await control.catalog.integrations(record.org_id)]
        revision = await control.catalog.catalog_revision(record.org_id)
        added = await control.catalog.add_integration(record, b"admin spec", b"admin compiled")
        print(json.dumps({"seen": seen, "revision": revision, "added": added}))
    finally:
        await control.close()

trio.run(main, *sys.argv[1:])
"""


async def test_a_server_and_an_admin_process_see_each_others_writes(control: ControlPlane, tmp_path: Path) -> None:
    async def admin(record: IntegrationRecord) -> dict:
        with trio.fail_after(30):
            done = await trio.run_process(
                [sys.executable, "-c", ADMIN, str(tmp_path), encode(record).decode()],
                capture_stdout=True,
                cwd=REPOSITORY,
            )
        return json.loads(done.stdout)

    assert await control.catalog.add_integration(integration(), b"spec", b"compiled")
    assert await admin(integration(slug="stripe", source_hash="h2")) == {
        "seen": ["github"],
        "revision": 1,
        "added": True,
    }
    assert [record.slug for record in await control.catalog.integrations("acme")] == ["github", "stripe"]
    assert await control.catalog.catalog_revision("acme") == 2
    assert await control.catalog.get_source("h2") == b"admin spec"

    assert await control.catalog.put_connection(connection(slug="stripe"))
    assert await control.catalog.remove_integration("acme", "github") == []
    assert await admin(integration(slug="stripe")) == {"seen": ["stripe"], "revision": 4, "added": False}
