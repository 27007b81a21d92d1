"""The catalog store's contract: integrations, their connections, and the sources and compiled catalogs they
share, on every backend."""

import attrs
import pytest

from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.storage.interfaces import CatalogStore, SecretStore
from tests.unit.storage_contract.catalog_records import connection, integration, names


async def test_integrations_are_added_once_and_listed_by_slug(catalog: CatalogStore) -> None:
    assert await catalog.add_integration(integration(slug="stripe", source_hash="h2"), b"stripe spec", b"c2")
    assert await catalog.add_integration(integration(slug="github"), b"github spec", b"c1")
    assert [record.slug for record in await catalog.integrations("acme")] == ["github", "stripe"]
    assert await catalog.get_integration("acme", "github") == integration()
    assert await catalog.get_integration("acme", "gitlab") is None
    assert await catalog.integrations("evil") == []
    revision = await catalog.catalog_revision("acme")

    # The same slug again: nothing written, not even its source.
    assert not await catalog.add_integration(integration(source_hash="h3", name="Other"), b"other spec", b"c3")
    assert await catalog.get_source("h3") is None
    assert (await catalog.get_integration("acme", "github")).name == "Github"
    assert await catalog.catalog_revision("acme") == revision


async def test_a_replacement_moves_to_the_new_source_and_lets_go_of_the_old(catalog: CatalogStore) -> None:
    assert await catalog.add_integration(integration(), b"v1", b"compiled v1")
    assert await catalog.replace_integration(integration(description="changed"))  # same hash: no source needed
    assert (await catalog.get_integration("acme", "github")).description == "changed"

    assert await catalog.replace_integration(integration(source_hash="h2"), b"v2", b"compiled v2")
    assert (await catalog.get_source("h2"), await catalog.get_compiled("h2")) == (b"v2", b"compiled v2")
    assert (await catalog.get_source("h1"), await catalog.get_compiled("h1")) == (None, None)

    # A recompilation of the same source replaces the stored catalog.
    assert await catalog.replace_integration(integration(source_hash="h2"), compiled=b"compiled v2, again")
    assert await catalog.get_compiled("h2") == b"compiled v2, again"

    # A new hash with no source to store is refused whole.
    with pytest.raises(ValueError, match="needs its source"):
        await catalog.replace_integration(integration(source_hash="h9"))
    assert (await catalog.get_integration("acme", "github")).source_hash == "h2"
    assert await catalog.get_source("h2") == b"v2"

    assert not await catalog.replace_integration(integration(slug="gone"), b"x", b"y")
    assert await catalog.get_integration("acme", "gone") is None


async def test_sources_are_shared_by_hash_across_orgs_until_the_last_holder_goes(catalog: CatalogStore) -> None:
    assert await catalog.add_integration(integration(org="acme"), b"spec", b"compiled")
    assert await catalog.add_integration(integration(org="evil", slug="hub"), b"ignored: same hash", b"ignored")
    assert await catalog.add_integration(integration(org="acme", slug="mirror"), b"spec", b"compiled")
    assert (await catalog.get_source("h1"), await catalog.get_compiled("h1")) == (b"spec", b"compiled")

    assert await catalog.remove_integration("acme", "github") == []
    assert await catalog.get_source("h1") == b"spec"
    assert await catalog.replace_integration(integration(org="acme", slug="mirror", source_hash="h2"), b"s2", b"c2")
    assert await catalog.get_source("h1") == b"spec"  # evil still holds it
    assert await catalog.remove_integration("evil", "hub") == []
    assert (await catalog.get_source("h1"), await catalog.get_compiled("h1")) == (None, None)
    assert await catalog.remove_integration("evil", "hub") is None


async def test_a_compiled_catalog_is_filled_only_for_a_source_still_held(catalog: CatalogStore) -> None:
    assert await catalog.add_integration(integration(), b"spec", b"old")
    assert await catalog.put_compiled("h1", b"recompiled")
    assert await catalog.get_compiled("h1") == b"recompiled"
    await catalog.remove_integration("acme", "github")
    assert not await catalog.put_compiled("h1", b"late fill")
    assert await catalog.get_compiled("h1") is None


async def test_connections_are_the_orgs_and_the_callers_own(catalog: CatalogStore) -> None:
    for org in ("acme", "evil"):
        await catalog.add_integration(integration(org=org), b"spec", b"compiled")
        await catalog.add_integration(integration(org=org, slug="stripe"), b"spec", b"compiled")
        for record in (
            connection(org=org),
            connection(org=org, owner="user", account="alice"),
            connection(org=org, owner="user", account="bob"),
            connection(org=org, owner="user", account="alice", slug="stripe", name="billing"),
        ):
            assert await catalog.put_connection(record)

    alice = await catalog.connections("acme", "alice")
    assert names(alice) == [
        ("github", "org", "", "main"),
        ("github", "user", "alice", "main"),
        ("stripe", "user", "alice", "billing"),
    ]
    assert all(record.org_id == "acme" for record in alice)
    assert names(await catalog.connections("acme", "bob")) == [
        ("github", "org", "", "main"),
        ("github", "user", "bob", "main"),
    ]
    assert names(await catalog.connections("acme", "alice", integration="stripe")) == [
        ("stripe", "user", "alice", "billing")
    ]
    assert names(await catalog.connections("acme", "alice", owner="org")) == [("github", "org", "", "main")]
    assert names(await catalog.connections("acme", "", owner="user")) == []  # no account: no user connections

    # One connection by its identity; an org-owned one whoever asks, a user-owned one only its own.
    assert await catalog.get_connection("acme", "org", "mallory", "github", "main") == connection()
    mine = await catalog.get_connection("acme", "user", "alice", "github", "main")
    assert mine is not None
    assert mine.account_id == "alice"
    assert await catalog.get_connection("acme", "user", "mallory", "github", "main") is None
    assert await catalog.get_connection("acme", "user", "alice", "github", "other") is None

    removed = await catalog.remove_connection("acme", "user", "alice", "github", "main")
    assert removed == connection(owner="user", account="alice")
    assert await catalog.remove_connection("acme", "user", "alice", "github", "main") is None
    assert await catalog.get_connection("evil", "user", "alice", "github", "main") is not None


async def test_a_connection_is_an_upsert(catalog: CatalogStore) -> None:
    await catalog.add_integration(integration(), b"spec", b"compiled")
    assert await catalog.put_connection(connection())
    assert await catalog.put_connection(attrs.evolve(connection(), description="the main key", updated_at=2.0))
    listed = await catalog.connections("acme", "alice")
    assert [(record.description, record.updated_at) for record in listed] == [("the main key", 2.0)]


async def test_a_discovered_catalog_is_held_by_its_connection_until_replaced_or_removed(
    catalog: CatalogStore,
) -> None:
    assert await catalog.add_integration(integration(kind="mcp"), b"{}", b"empty")
    assert await catalog.put_connection(connection())
    assert await catalog.put_connection(connection(name="second"))

    first = await catalog.set_discovered(connection(), synced_at=5.0, source_hash="d1", source=b"v1", compiled=b"c1")
    assert (first.source_hash, first.tools_synced_at, first.sync_error) == ("d1", 5.0, None)
    # Another connection listing the same tools shares the stored source.
    await catalog.set_discovered(
        connection(name="second"), synced_at=5.0, source_hash="d1", source=b"v1", compiled=b"c1"
    )
    # A failed listing keeps the tools and notes why.
    failed = await catalog.set_discovered(connection(), synced_at=6.0, error="unreachable")
    assert (failed.source_hash, failed.tools_synced_at, failed.sync_error) == ("d1", 6.0, "unreachable")
    # An edit of the connection (re-created with a new credential) keeps what discovery stored.
    assert await catalog.put_connection(attrs.evolve(connection(), description="edited"))
    kept = await catalog.get_connection("acme", "org", "", "github", "main")
    assert (kept.description, kept.source_hash, kept.sync_error) == ("edited", "d1", "unreachable")

    # A new listing moves the connection to the new source; the old one stays while the other holds it.
    await catalog.set_discovered(connection(), synced_at=7.0, source_hash="d2", source=b"v2", compiled=b"c2")
    assert await catalog.get_source("d1") == b"v1"
    assert await catalog.remove_connection("acme", "org", "", "github", "second") is not None
    assert await catalog.get_source("d1") is None
    assert await catalog.get_compiled("d2") == b"c2"
    # Removing the integration lets go of what its connections held.
    assert await catalog.remove_integration("acme", "github") is not None
    assert await catalog.get_source("d2") is None
    assert await catalog.get_compiled("d2") is None
    assert await catalog.set_discovered(connection(), synced_at=8.0, error="gone") is None


async def test_removing_an_integration_removes_its_connections_of_every_owner(catalog: CatalogStore) -> None:
    for org in ("acme", "evil"):
        await catalog.add_integration(integration(org=org), b"spec", b"compiled")
        await catalog.add_integration(integration(org=org, slug="stripe"), b"spec", b"compiled")
        for account in ("alice", "bob"):
            await catalog.put_connection(connection(org=org, owner="user", account=account))
        await catalog.put_connection(connection(org=org))
        await catalog.put_connection(connection(org=org, slug="stripe"))

    removed = await catalog.remove_integration("acme", "github")
    assert sorted(names(removed)) == [
        ("github", "org", "", "main"),
        ("github", "user", "alice", "main"),
        ("github", "user", "bob", "main"),
    ]
    assert names(await catalog.connections("acme", "alice")) == [("stripe", "org", "", "main")]
    assert len(await catalog.connections("evil", "alice")) == 3

    # A connection whose integration is gone is refused, and nothing is written.
    assert not await catalog.put_connection(connection())
    assert await catalog.get_connection("acme", "org", "", "github", "main") is None
    # Adding the slug again starts with no connections.
    await catalog.add_integration(integration(), b"spec", b"compiled")
    assert names(await catalog.connections("acme", "alice", integration="github")) == []


async def test_every_change_of_an_org_bumps_its_revision_and_only_its(
    catalog: CatalogStore, secrets: SecretStore
) -> None:
    revisions = []

    async def note() -> None:
        revisions.append((await catalog.catalog_revision("acme"), await catalog.catalog_revision("evil")))

    await note()
    await catalog.add_integration(integration(), b"spec", b"compiled")
    await note()
    await catalog.replace_integration(integration(description="new"))
    await note()
    await catalog.put_connection(connection())
    await note()
    await catalog.remove_connection("acme", "org", "", "github", "main")
    await note()
    await catalog.remove_integration("acme", "github")
    await note()
    # What changes nothing leaves the revision alone; so do reads and secret items.
    await catalog.add_integration(integration(org="evil"), b"spec", b"compiled")
    await catalog.add_integration(integration(org="evil"), b"spec", b"compiled")
    await catalog.remove_integration("acme", "github")
    await catalog.remove_connection("acme", "org", "", "github", "main")
    assert not await catalog.put_connection(connection())
    await secrets.put_secret_items("acme", "", {"a": b"sealed"})
    await catalog.integrations("acme")
    await note()
    assert revisions == [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (5, 1)]


async def test_crafted_identifiers_reach_no_one_elses_records(catalog: CatalogStore, secrets: SecretStore) -> None:
    await catalog.add_integration(integration(), b"spec", b"compiled")
    await catalog.put_connection(connection(owner="user", account="alice"))
    await secrets.put_secret_items("acme", "alice", {"token": b"sealed"})
    for org, account in (("acme\x00", "alice"), ('acme"', "alice"), ("acme", "alice\x00"), ("acme", 'alice"')):
        assert await catalog.connections(org, account) == []
        assert await catalog.get_connection(org, "user", account, "github", "main") is None
        assert await secrets.get_secret_item(org, account, "token") is None
        assert await secrets.secret_items(org, account) == []
    assert await catalog.integrations('acme"') == []
    assert await catalog.get_integration("acme", 'github"') is None


async def test_identifiers_too_long_to_store(catalog: CatalogStore, secrets: SecretStore) -> None:
    await catalog.add_integration(integration(), b"spec", b"compiled")
    huge = "x" * 600
    with pytest.raises(InvalidInput, match="too long"):
        await catalog.add_integration(integration(org=huge), b"spec", b"compiled")
    with pytest.raises(InvalidInput, match="too long"):
        await catalog.put_connection(connection(owner="user", account=huge))
    with pytest.raises(InvalidInput, match="too long"):
        await secrets.put_secret_items("acme", huge, {"a": b"sealed"})
    assert await catalog.get_integration(huge, "github") is None
    assert await catalog.connections(huge, huge) == []
    assert await secrets.get_secret_item("acme", huge, "a") is None
    assert await catalog.integrations(huge) == []
    assert await catalog.catalog_revision(huge) == 0


@pytest.mark.parametrize(
    ("owner", "account", "message"),
    [("org", "alice", "belongs to no account"), ("user", "", "needs its account"), ("team", "x", "owner is")],
)
async def test_a_connection_owner_and_account_must_agree(
    catalog: CatalogStore, owner: str, account: str, message: str
) -> None:
    await catalog.add_integration(integration(), b"spec", b"compiled")
    with pytest.raises(InvalidInput, match=message):
        await catalog.put_connection(connection(owner=owner, account=account))


async def test_records_keep_any_text_from_outside(catalog: CatalogStore) -> None:
    """A spec's description or a remote server's error is stored as it came, NUL included (JSON escapes it)."""
    described = integration(description="nul \x00 and \u2028 here")
    assert await catalog.add_integration(described, b"spec", b"compiled")
    assert await catalog.get_integration("acme", "github") == described
    assert await catalog.put_connection(connection())
    failed = await catalog.set_discovered(connection(), synced_at=2.0, error="refused: \x00\x1f")
    assert failed is not None
    assert (await catalog.get_connection("acme", "org", "", "github", "main")).sync_error == "refused: \x00\x1f"
