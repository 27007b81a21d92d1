"""Moving records between backends (`Transferable`, `storage/transfer.py`): what one backend exports, either
backend imports into an empty store, and then serves through its interfaces as the source did."""

from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import pytest

from executor_mcp.records.oauth import OAuthClientRecord, OAuthFlowRecord
from executor_mcp.storage import transfer
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.records import (
    ApiKeyRecord,
    ConsoleLinkRecord,
    PolicyRecord,
    ToolkitConnectionRecord,
    ToolkitRecord,
    ToolkitRuleRecord,
)
from tests.unit.storage_contract.catalog_records import connection, integration
from tests.unit.storage_contract.conftest import CONTROL_PLANES

AUDIT = [(b"org-a:0001", b"first"), (b"org-a:0002", b"second"), (b"org-b:0001", b"other org")]
KEY = ApiKeyRecord(key_id="k1", account_id="alice", org_id="acme", created_at=1.0, admin=True, toolkit="crm")
TOOLKITS = [
    ToolkitRecord(
        id=f"tk_{owner}",
        org_id="acme",
        owner=owner,
        account_id=account,
        slug="crm",
        name="CRM",
        created_at=1.0,
        updated_at=2.0,
        policies=(ToolkitRuleRecord("tkpol_1", "github.*", "require_approval", "000000000512", 1.0, 1.0),),
        connections=(ToolkitConnectionRecord("tkconn_1", "github.org.main.*", "read", "000000000512", 1.0, 1.0),),
    )
    for owner, account in (("org", None), ("user", "alice"))
]
LINK = ConsoleLinkRecord(account_id="alice", org_id="acme", admin=False, created_at=1.0, expires_at=10**10)
OAUTH_CLIENTS = [
    OAuthClientRecord(
        org_id="acme",
        owner=owner,
        account_id=account,
        slug="github",
        grant="authorization_code",
        authorization_url="https://auth.example/authorize",
        token_url="https://auth.example/token",
        client_id=f"client-{owner}",
        token_auth_method="client_secret_basic",
        created_at=1.0,
        secret_item=f"oauth-client:{owner}:github",
        issuer="https://auth.example",
    )
    for owner, account in (("org", ""), ("user", "alice"))
]
FLOW = OAuthFlowRecord(
    state_digest="state-digest",
    org_id="acme",
    account_id="alice",
    org_admin=False,
    client_owner="org",
    client_slug="github",
    owner="user",
    integration="github",
    name="mine",
    template="oauth2-0",
    redirect_uri="https://executor.example/oauth/callback",
    code_verifier="verifier",
    scopes=("repo",),
    created_at=1.0,
    expires_at=10**10,
)


def rule(policy_id: str, org: str, account: str | None) -> PolicyRecord:
    return PolicyRecord(
        id=policy_id,
        org_id=org,
        owner="user" if account else "org",
        account_id=account,
        pattern="github.*",
        action="block",
        position="a0",
        created_at=1.0,
        updated_at=2.0,
    )


async def populate(plane: ControlPlane) -> dict[str, bytes]:
    """A record in every domain that moves, written through the interfaces; the signing keys made."""
    await plane.orgs.note_org("acme", 1.0)
    await plane.orgs.set_org_revoked("gone", True, 2.0)
    await plane.api_keys.put_api_key("digest-1", KEY)
    for org, account in (("acme", None), ("acme", "alice"), ("beta", None)):
        await plane.policies.edit_policies(
            org, account, lambda _, org=org, account=account: ([rule(f"r-{org}-{account}", org, account)], [], None)
        )
    for toolkit in TOOLKITS:
        await plane.toolkits.edit_toolkits("acme", "alice", lambda _, toolkit=toolkit: ([toolkit], [], None))
    await plane.audit.append_audit(AUDIT)
    await plane.sign_ins.put_console_link("link-digest", LINK, now=2.0)
    await plane.facts.record_data_dir_facts({"auth": "api-key", "nested": {"b": 1, "a": [1, 2]}})
    assert await plane.catalog.add_integration(integration(), b"spec", b"compiled spec")
    assert await plane.catalog.add_integration(integration(slug="slack", source_hash="h2"), b"spec2", b"compiled2")
    assert await plane.catalog.put_connection(connection())
    assert await plane.catalog.put_connection(connection(owner="user", account="alice", name="mine"))
    discovered = await plane.catalog.set_discovered(
        connection(), synced_at=5.0, source_hash="d1", source=b"found", compiled=b"found compiled"
    )
    assert discovered is not None
    await plane.secrets.put_secret_items("acme", "", {"connection:org:github:main:token": b"v1.sealed"})
    await plane.secrets.put_secret_items("acme", "alice", {"connection:user:github:mine:token": b"v1.mine"})
    for client in OAUTH_CLIENTS:
        await plane.oauth.put_client(client)
    assert await plane.oauth.put_flow(FLOW, 1, now=2.0)  # a sign-in in progress: it does not move
    return {
        "console": await plane.signing_keys.console_key(),
        "request_state": await plane.signing_keys.request_state_key(),
        "workspace": await plane.signing_keys.workspace_key(),
    }


@pytest.fixture(params=sorted(CONTROL_PLANES))
def open_target(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Awaitable[ControlPlane]]:
    """A second, empty control plane, of either backend, to move into."""
    return CONTROL_PLANES[request.param](request, tmp_path / "target")


async def test_a_copy_serves_every_domain_as_the_source_did(
    plane: ControlPlane, open_target: Callable[[], Awaitable[ControlPlane]]
) -> None:
    keys = await populate(plane)
    target = await open_target()
    try:
        copied = await transfer.copy(plane, target)
        assert all(copied[domain] for domain in transfer.DOMAINS), copied
        checks = await transfer.verify(plane, target)
        assert [check.domain for check in checks if not check.verified] == []

        assert await target.signing_keys.console_key() == keys["console"]
        assert await target.signing_keys.request_state_key() == keys["request_state"]
        assert await target.signing_keys.workspace_key() == keys["workspace"]
        assert await target.orgs.orgs() == await plane.orgs.orgs()
        assert await target.orgs.revoked_among(["acme", "gone"]) == {"gone"}
        assert await target.api_keys.get_api_key("digest-1") == KEY
        assert await target.policies.policies("acme", "alice") == [
            rule("r-acme-None", "acme", None),
            rule("r-acme-alice", "acme", "alice"),
        ]
        assert await target.policies.policies("beta", None) == [rule("r-beta-None", "beta", None)]
        assert await target.toolkits.toolkits("acme", "alice") == TOOLKITS
        assert await target.toolkits.toolkits("acme", "bob") == TOOLKITS[:1]
        newest, _ = await target.audit.audit_newest(b"org-a", b"org-a", b"org-b", 10, lambda _: True, 100)
        assert newest == [AUDIT[1], AUDIT[0]]
        assert await target.facts.data_dir_facts() == {"auth": "api-key", "nested": {"b": 1, "a": [1, 2]}}
        assert await target.catalog.integrations("acme") == await plane.catalog.integrations("acme")
        assert await target.catalog.connections("acme", "alice") == await plane.catalog.connections("acme", "alice")
        moved = await target.catalog.get_connection("acme", "org", "", "github", "main")
        assert moved is not None
        assert (moved.source_hash, moved.tools_synced_at) == ("d1", 5.0)
        assert await target.catalog.get_compiled("d1") == b"found compiled"
        assert await target.catalog.catalog_revision("acme") == await plane.catalog.catalog_revision("acme")
        assert await target.secrets.get_secret_item("acme", "", "connection:org:github:main:token") == b"v1.sealed"
        assert await target.secrets.secret_items("acme", "alice") == ["connection:user:github:mine:token"]
        assert await target.sign_ins.take_console_link("link-digest", now=3.0) == LINK
        assert await target.oauth.clients("acme", "alice") == OAUTH_CLIENTS
        assert await target.oauth.clients("acme", "bob") == OAUTH_CLIENTS[:1]
        assert await target.oauth.take_flow(FLOW.state_digest, now=3.0) is None
        assert await plane.oauth.take_flow(FLOW.state_digest, now=3.0) == FLOW

        # The holders were counted anew: the last one out deletes a source, and no sooner.
        assert await target.catalog.remove_connection("acme", "org", "", "github", "main") is not None
        assert await target.catalog.get_source("d1") is None
        assert await target.catalog.get_source("h1") == b"spec"
        assert await target.catalog.remove_integration("acme", "github") == [
            connection(owner="user", account="alice", name="mine")
        ]
        assert await target.catalog.get_source("h1") is None
        assert await target.catalog.get_source("h2") == b"spec2"
    finally:
        await target.close()


async def test_a_target_holding_records_is_refused_untouched(
    plane: ControlPlane, open_target: Callable[[], Awaitable[ControlPlane]]
) -> None:
    await populate(plane)
    target = await open_target()
    try:
        await target.signing_keys.console_key()
        with pytest.raises(transfer.TargetNotEmpty) as refused:
            await transfer.copy(plane, target)
        assert refused.value.held == {"signing_keys": 1}
        assert await transfer.held(target) == {"signing_keys": 1}
    finally:
        await target.close()


async def test_a_difference_after_the_copy_is_found(
    plane: ControlPlane, open_target: Callable[[], Awaitable[ControlPlane]]
) -> None:
    await populate(plane)
    target = await open_target()
    try:
        await transfer.copy(plane, target)
        await target.secrets.delete_secret_items("acme", "alice", ["connection:user:github:mine:token"])
        await target.policies.edit_policies(
            "beta", None, lambda rules: ([attrs.evolve(rules[0], action="allow")], [], None)
        )
        await target.orgs.note_org("extra", 3.0)
        await target.oauth.remove_client("acme", "user", "alice", "github")
        failed = {check.domain: check for check in await transfer.verify(plane, target) if not check.verified}
        assert set(failed) == {"secrets", "policies", "orgs", "oauth_clients"}
        assert (failed["oauth_clients"].missing, failed["oauth_clients"].extra) == (1, 0)
        assert (failed["secrets"].missing, failed["secrets"].changed, failed["secrets"].extra) == (1, 0, 0)
        assert (failed["policies"].missing, failed["policies"].changed, failed["policies"].extra) == (0, 1, 0)
        assert (failed["orgs"].missing, failed["orgs"].changed, failed["orgs"].extra) == (0, 0, 1)
        assert "1 missing" in failed["secrets"].difference()
    finally:
        await target.close()


async def test_an_import_of_records_in_no_exported_form_writes_nothing(plane: ControlPlane) -> None:
    with pytest.raises(ValueError, match="not an exported OrgRecord"):
        await plane.orgs.import_records([(b'"acme"', b"{}"), (b"not a key", b"{}")])
    with pytest.raises(ValueError, match="not an exported catalog record"):
        await plane.catalog.import_records([(b'"nothing"\x00"h"', b"x")])
    with pytest.raises(ValueError, match="not an exported OAuthClientRecord"):
        await plane.oauth.import_records([(b'"acme"\x00"org"\x00""\x00"github"', b"{}")])
    with pytest.raises(ValueError, match="not a signing key"):
        await plane.signing_keys.import_records([(b'"not-a-signing-key"', b"k" * 32)])
    assert await transfer.held(plane) == {}
