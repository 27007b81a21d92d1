"""The catalog in the control plane over real LMDB: integrations, connections, shared sources, secret items."""

import json
import logging
import sys
from pathlib import Path

import attrs
import lmdb
import pytest
import trio

from executor_mcp.codec import dumps
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import AuthMethod, ConnectionRecord, IntegrationRecord, Placement
from executor_mcp.storage.control import CONTROL_FILE, ControlPlane
from executor_mcp.storage.records import encode

REPOSITORY = Path(__file__).resolve().parents[2]


def integration(org: str = "acme", slug: str = "github", source_hash: str = "h1", **changes) -> IntegrationRecord:
    record = IntegrationRecord(
        org_id=org,
        slug=slug,
        kind="openapi",
        name=slug.title(),
        description=f"The {slug} API",
        source_hash=source_hash,
        config={"baseUrl": "https://api.example"},
        auth_methods=(AuthMethod(slug="apikey-0", kind="apikey", placements=(Placement("header", "x-key"),)),),
        created_at=1.0,
        updated_at=1.0,
    )
    return attrs.evolve(record, **changes)


def connection(
    org: str = "acme", owner: str = "org", account: str = "", slug: str = "github", name: str = "main"
) -> ConnectionRecord:
    return ConnectionRecord(
        org_id=org,
        owner=owner,
        account_id=account,
        integration=slug,
        name=name,
        template="apikey-0",
        provider="encrypted",
        item_ids={"token": f"connection:{owner}:{slug}:{name}:token"},
        created_at=1.0,
        updated_at=1.0,
    )


def names(records: list[ConnectionRecord]) -> list[tuple[str, str, str, str]]:
    return [(record.integration, record.owner, record.account_id, record.name) for record in records]


@pytest.fixture
async def control(tmp_path: Path):
    plane = await ControlPlane.open(tmp_path)
    try:
        yield plane
    finally:
        await plane.close()


async def test_integrations_are_added_once_and_listed_by_slug(control: ControlPlane) -> None:
    assert await control.add_integration(integration(slug="stripe", source_hash="h2"), b"stripe spec", b"c2")
    assert await control.add_integration(integration(slug="github"), b"github spec", b"c1")
    assert [record.slug for record in await control.integrations("acme")] == ["github", "stripe"]
    assert await control.get_integration("acme", "github") == integration()
    assert await control.get_integration("acme", "gitlab") is None
    assert await control.integrations("evil") == []
    revision = await control.catalog_revision("acme")

    # The same slug again: nothing written, not even its source.
    assert not await control.add_integration(integration(source_hash="h3", name="Other"), b"other spec", b"c3")
    assert await control.get_source("h3") is None
    assert (await control.get_integration("acme", "github")).name == "Github"
    assert await control.catalog_revision("acme") == revision


async def test_a_replacement_moves_to_the_new_source_and_lets_go_of_the_old(control: ControlPlane) -> None:
    assert await control.add_integration(integration(), b"v1", b"compiled v1")
    assert await control.replace_integration(integration(description="changed"))  # same hash: no source needed
    assert (await control.get_integration("acme", "github")).description == "changed"

    assert await control.replace_integration(integration(source_hash="h2"), b"v2", b"compiled v2")
    assert (await control.get_source("h2"), await control.get_compiled("h2")) == (b"v2", b"compiled v2")
    assert (await control.get_source("h1"), await control.get_compiled("h1")) == (None, None)

    # A recompilation of the same source replaces the stored catalog.
    assert await control.replace_integration(integration(source_hash="h2"), compiled=b"compiled v2, again")
    assert await control.get_compiled("h2") == b"compiled v2, again"

    # A new hash with no source to store is refused whole.
    with pytest.raises(ValueError, match="needs its source"):
        await control.replace_integration(integration(source_hash="h9"))
    assert (await control.get_integration("acme", "github")).source_hash == "h2"
    assert await control.get_source("h2") == b"v2"

    assert not await control.replace_integration(integration(slug="gone"), b"x", b"y")
    assert await control.get_integration("acme", "gone") is None


async def test_sources_are_shared_by_hash_across_orgs_until_the_last_holder_goes(control: ControlPlane) -> None:
    assert await control.add_integration(integration(org="acme"), b"spec", b"compiled")
    assert await control.add_integration(integration(org="evil", slug="hub"), b"ignored: same hash", b"ignored")
    assert await control.add_integration(integration(org="acme", slug="mirror"), b"spec", b"compiled")
    assert (await control.get_source("h1"), await control.get_compiled("h1")) == (b"spec", b"compiled")

    assert await control.remove_integration("acme", "github") == []
    assert await control.get_source("h1") == b"spec"
    assert await control.replace_integration(integration(org="acme", slug="mirror", source_hash="h2"), b"s2", b"c2")
    assert await control.get_source("h1") == b"spec"  # evil still holds it
    assert await control.remove_integration("evil", "hub") == []
    assert (await control.get_source("h1"), await control.get_compiled("h1")) == (None, None)
    assert await control.remove_integration("evil", "hub") is None


async def test_a_compiled_catalog_is_filled_only_for_a_source_still_held(control: ControlPlane) -> None:
    assert await control.add_integration(integration(), b"spec", b"old")
    assert await control.put_compiled("h1", b"recompiled")
    assert await control.get_compiled("h1") == b"recompiled"
    await control.remove_integration("acme", "github")
    assert not await control.put_compiled("h1", b"late fill")
    assert await control.get_compiled("h1") is None


async def test_connections_are_the_orgs_and_the_callers_own(control: ControlPlane) -> None:
    for org in ("acme", "evil"):
        await control.add_integration(integration(org=org), b"spec", b"compiled")
        await control.add_integration(integration(org=org, slug="stripe"), b"spec", b"compiled")
        for record in (
            connection(org=org),
            connection(org=org, owner="user", account="alice"),
            connection(org=org, owner="user", account="bob"),
            connection(org=org, owner="user", account="alice", slug="stripe", name="billing"),
        ):
            assert await control.put_connection(record)

    alice = await control.connections("acme", "alice")
    assert names(alice) == [
        ("github", "org", "", "main"),
        ("github", "user", "alice", "main"),
        ("stripe", "user", "alice", "billing"),
    ]
    assert all(record.org_id == "acme" for record in alice)
    assert names(await control.connections("acme", "bob")) == [
        ("github", "org", "", "main"),
        ("github", "user", "bob", "main"),
    ]
    assert names(await control.connections("acme", "alice", integration="stripe")) == [
        ("stripe", "user", "alice", "billing")
    ]
    assert names(await control.connections("acme", "alice", owner="org")) == [("github", "org", "", "main")]
    assert names(await control.connections("acme", "", owner="user")) == []  # no account: no user connections

    # One connection by its identity; an org-owned one whoever asks, a user-owned one only its own.
    assert await control.get_connection("acme", "org", "mallory", "github", "main") == connection()
    mine = await control.get_connection("acme", "user", "alice", "github", "main")
    assert mine is not None
    assert mine.account_id == "alice"
    assert await control.get_connection("acme", "user", "mallory", "github", "main") is None
    assert await control.get_connection("acme", "user", "alice", "github", "other") is None

    removed = await control.remove_connection("acme", "user", "alice", "github", "main")
    assert removed == connection(owner="user", account="alice")
    assert await control.remove_connection("acme", "user", "alice", "github", "main") is None
    assert await control.get_connection("evil", "user", "alice", "github", "main") is not None


async def test_a_connection_is_an_upsert(control: ControlPlane) -> None:
    await control.add_integration(integration(), b"spec", b"compiled")
    assert await control.put_connection(connection())
    assert await control.put_connection(attrs.evolve(connection(), description="the main key", updated_at=2.0))
    listed = await control.connections("acme", "alice")
    assert [(record.description, record.updated_at) for record in listed] == [("the main key", 2.0)]


async def test_a_discovered_catalog_is_held_by_its_connection_until_replaced_or_removed(
    control: ControlPlane,
) -> None:
    assert await control.add_integration(integration(kind="mcp"), b"{}", b"empty")
    assert await control.put_connection(connection())
    assert await control.put_connection(connection(name="second"))

    first = await control.set_discovered(connection(), synced_at=5.0, source_hash="d1", source=b"v1", compiled=b"c1")
    assert (first.source_hash, first.tools_synced_at, first.sync_error) == ("d1", 5.0, None)
    # Another connection listing the same tools shares the stored source.
    await control.set_discovered(
        connection(name="second"), synced_at=5.0, source_hash="d1", source=b"v1", compiled=b"c1"
    )
    # A failed listing keeps the tools and notes why.
    failed = await control.set_discovered(connection(), synced_at=6.0, error="unreachable")
    assert (failed.source_hash, failed.tools_synced_at, failed.sync_error) == ("d1", 6.0, "unreachable")
    # An edit of the connection (re-created with a new credential) keeps what discovery stored.
    assert await control.put_connection(attrs.evolve(connection(), description="edited"))
    kept = await control.get_connection("acme", "org", "", "github", "main")
    assert (kept.description, kept.source_hash, kept.sync_error) == ("edited", "d1", "unreachable")

    # A new listing moves the connection to the new source; the old one stays while the other holds it.
    await control.set_discovered(connection(), synced_at=7.0, source_hash="d2", source=b"v2", compiled=b"c2")
    assert await control.get_source("d1") == b"v1"
    assert await control.remove_connection("acme", "org", "", "github", "second") is not None
    assert await control.get_source("d1") is None
    assert await control.get_compiled("d2") == b"c2"
    # Removing the integration lets go of what its connections held.
    assert await control.remove_integration("acme", "github") is not None
    assert await control.get_source("d2") is None
    assert await control.get_compiled("d2") is None
    assert await control.set_discovered(connection(), synced_at=8.0, error="gone") is None


async def test_removing_an_integration_removes_its_connections_of_every_owner(control: ControlPlane) -> None:
    for org in ("acme", "evil"):
        await control.add_integration(integration(org=org), b"spec", b"compiled")
        await control.add_integration(integration(org=org, slug="stripe"), b"spec", b"compiled")
        for account in ("alice", "bob"):
            await control.put_connection(connection(org=org, owner="user", account=account))
        await control.put_connection(connection(org=org))
        await control.put_connection(connection(org=org, slug="stripe"))

    removed = await control.remove_integration("acme", "github")
    assert sorted(names(removed)) == [
        ("github", "org", "", "main"),
        ("github", "user", "alice", "main"),
        ("github", "user", "bob", "main"),
    ]
    assert names(await control.connections("acme", "alice")) == [("stripe", "org", "", "main")]
    assert len(await control.connections("evil", "alice")) == 3

    # A connection whose integration is gone is refused, and nothing is written.
    assert not await control.put_connection(connection())
    assert await control.get_connection("acme", "org", "", "github", "main") is None
    # Adding the slug again starts with no connections.
    await control.add_integration(integration(), b"spec", b"compiled")
    assert names(await control.connections("acme", "alice", integration="github")) == []


async def test_every_change_of_an_org_bumps_its_revision_and_only_its(control: ControlPlane) -> None:
    revisions = []

    async def note() -> None:
        revisions.append((await control.catalog_revision("acme"), await control.catalog_revision("evil")))

    await note()
    await control.add_integration(integration(), b"spec", b"compiled")
    await note()
    await control.replace_integration(integration(description="new"))
    await note()
    await control.put_connection(connection())
    await note()
    await control.remove_connection("acme", "org", "", "github", "main")
    await note()
    await control.remove_integration("acme", "github")
    await note()
    # What changes nothing leaves the revision alone; so do reads and secret items.
    await control.add_integration(integration(org="evil"), b"spec", b"compiled")
    await control.add_integration(integration(org="evil"), b"spec", b"compiled")
    await control.remove_integration("acme", "github")
    await control.remove_connection("acme", "org", "", "github", "main")
    assert not await control.put_connection(connection())
    await control.put_secret_items("acme", "", {"a": b"sealed"})
    await control.integrations("acme")
    await note()
    assert revisions == [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (5, 1)]


async def test_unreadable_records_are_skipped_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    control = await ControlPlane.open(tmp_path)
    await control.add_integration(integration(), b"spec", b"compiled")
    await control.add_integration(integration(slug="stripe"), b"spec", b"compiled")
    await control.put_connection(connection())
    await control.put_connection(connection(slug="stripe"))
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
            assert [record.slug for record in await control.integrations("acme")] == ["github"]
            assert names(await control.connections("acme", "alice")) == [
                ("github", "org", "", "main"),
                ("stripe", "org", "", "main"),
            ]
            assert await control.get_integration("acme", "stripe") is None
        assert sum("skipping an unreadable" in record.getMessage() for record in caplog.records) >= 3
        # An unreadable integration can still be removed, and takes its connections along.
        assert names(await control.remove_integration("acme", "stripe")) == [("stripe", "org", "", "main")]
        assert names(await control.remove_integration("acme", "github")) == [("github", "org", "", "main")]
        assert await control.connections("acme", "alice") == []
    finally:
        await control.close()


async def test_crafted_identifiers_reach_no_one_elses_records(control: ControlPlane) -> None:
    await control.add_integration(integration(), b"spec", b"compiled")
    await control.put_connection(connection(owner="user", account="alice"))
    await control.put_secret_items("acme", "alice", {"token": b"sealed"})
    for org, account in (("acme\x00", "alice"), ('acme"', "alice"), ("acme", "alice\x00"), ("acme", 'alice"')):
        assert await control.connections(org, account) == []
        assert await control.get_connection(org, "user", account, "github", "main") is None
        assert await control.get_secret_item(org, account, "token") is None
        assert await control.secret_items(org, account) == []
    assert await control.integrations('acme"') == []
    assert await control.get_integration("acme", 'github"') is None


async def test_identifiers_too_long_to_store(control: ControlPlane) -> None:
    await control.add_integration(integration(), b"spec", b"compiled")
    huge = "x" * 600
    with pytest.raises(InvalidInput, match="too long"):
        await control.add_integration(integration(org=huge), b"spec", b"compiled")
    with pytest.raises(InvalidInput, match="too long"):
        await control.put_connection(connection(owner="user", account=huge))
    with pytest.raises(InvalidInput, match="too long"):
        await control.put_secret_items("acme", huge, {"a": b"sealed"})
    assert await control.get_integration(huge, "github") is None
    assert await control.connections(huge, huge) == []
    assert await control.get_secret_item("acme", huge, "a") is None
    assert await control.integrations(huge) == []
    assert await control.catalog_revision(huge) == 0


@pytest.mark.parametrize(
    ("owner", "account", "message"),
    [("org", "alice", "belongs to no account"), ("user", "", "needs its account"), ("team", "x", "owner is")],
)
async def test_a_connection_owner_and_account_must_agree(
    control: ControlPlane, owner: str, account: str, message: str
) -> None:
    await control.add_integration(integration(), b"spec", b"compiled")
    with pytest.raises(InvalidInput, match=message):
        await control.put_connection(connection(owner=owner, account=account))


async def test_secret_items_are_partitioned_by_org_and_account(control: ControlPlane) -> None:
    partitions = [("acme", ""), ("acme", "alice"), ("acme", "bob"), ("evil", ""), ("evil", "alice")]
    for org, account in partitions:
        await control.put_secret_items(org, account, {"token": f"{org}/{account}".encode(), "other": b"x"})
    for org, account in partitions:
        assert await control.get_secret_item(org, account, "token") == f"{org}/{account}".encode()
        assert await control.secret_items(org, account) == ["other", "token"]
    await control.delete_secret_items("acme", "alice", ["token", "never-there"])
    assert await control.get_secret_item("acme", "alice", "token") is None
    assert await control.secret_items("acme", "alice") == ["other"]
    assert await control.get_secret_item("acme", "", "token") == b"acme/"
    assert await control.get_secret_item("evil", "alice", "token") == b"evil/alice"


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
        seen = [known.slug for known in await control.integrations(record.org_id)]
        revision = await control.catalog_revision(record.org_id)
        added = await control.add_integration(record, b"admin spec", b"admin compiled")
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

    assert await control.add_integration(integration(), b"spec", b"compiled")
    assert await admin(integration(slug="stripe", source_hash="h2")) == {
        "seen": ["github"],
        "revision": 1,
        "added": True,
    }
    assert [record.slug for record in await control.integrations("acme")] == ["github", "stripe"]
    assert await control.catalog_revision("acme") == 2
    assert await control.get_source("h2") == b"admin spec"

    assert await control.put_connection(connection(slug="stripe"))
    assert await control.remove_integration("acme", "github") == []
    assert await admin(integration(slug="stripe")) == {"seen": ["stripe"], "revision": 4, "added": False}
