"""The OAuth store's contract (clients, and the sign-in flows in progress), on every backend.

Everything goes through `OAuthStore` but `spoil`, which makes a stored record unreadable behind the store's back:
the one place this file knows how a backend keeps them (one entry per backend, as the conftest's tables)."""

import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel

from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.oauth import (
    AUTH_BASIC,
    AUTH_NONE,
    AUTHORIZATION_CODE,
    CLIENT_CREDENTIALS,
    DYNAMIC,
    OAuthClientRecord,
    OAuthFlowRecord,
)
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import OAuthStore
from tests.unit.storage_contract.conftest import EACH, two_planes
from tests.unit.storage_contract.spoiled import spoil

CAP = 5


def client(slug: str = "github", owner: str = "org", account: str = "", org: str = "acme", **changes: Any):
    record = OAuthClientRecord(
        org_id=org,
        owner=owner,
        account_id=account,
        slug=slug,
        grant=AUTHORIZATION_CODE,
        authorization_url="https://auth.example/authorize",
        token_url="https://auth.example/token",
        client_id=f"client-{slug}",
        token_auth_method=AUTH_BASIC,
        created_at=1.0,
        secret_item=f"oauth-client:{owner}:{slug}",
        resource="https://api.example/",
    )
    return attrs.evolve(record, **changes)


def flow(digest: str, account: str = "alice", org: str = "acme", expires: float = 100.0) -> OAuthFlowRecord:
    return OAuthFlowRecord(
        state_digest=digest,
        org_id=org,
        account_id=account,
        org_admin=False,
        client_owner="org",
        client_slug="github",
        owner="user",
        integration="github",
        name="mine",
        template="oauth2-0",
        redirect_uri="https://executor.example/oauth/callback",
        code_verifier=f"verifier-{digest}",
        scopes=("repo", "read:user"),
        created_at=1.0,
        expires_at=expires,
        issuer="https://auth.example",
    )


# -- clients -------------------------------------------------------------------------------------------


async def test_a_client_is_put_read_replaced_and_removed(oauth: OAuthStore) -> None:
    assert await oauth.get_client("acme", "org", "", "github") is None
    await oauth.put_client(client())
    assert await oauth.get_client("acme", "org", "", "github") == client()
    assert await oauth.get_client("acme", "org", "alice", "github") == client()  # the org's, whoever asks
    assert await oauth.get_client("acme", "user", "alice", "github") is None
    assert await oauth.get_client("other", "org", "", "github") is None

    replaced = client(client_id="new-id", origin=DYNAMIC, origin_issuer="https://auth.example", secret_item=None)
    await oauth.put_client(replaced)
    assert await oauth.get_client("acme", "org", "", "github") == replaced
    assert await oauth.clients("acme", "") == [replaced]

    assert await oauth.remove_client("acme", "org", "bob", "github") == replaced
    assert await oauth.get_client("acme", "org", "", "github") is None
    assert await oauth.remove_client("acme", "org", "", "github") is None
    assert await oauth.clients("acme", "alice") == []


async def test_a_capped_put_keeps_an_owner_within_its_cap_and_always_replaces(oauth: OAuthStore) -> None:
    for n in range(CAP):
        assert await oauth.put_client(client(f"c{n}"), CAP)
    assert not await oauth.put_client(client("one-more"), CAP)
    assert await oauth.get_client("acme", "org", "", "one-more") is None
    assert await oauth.put_client(client("c0", client_id="replaced"), CAP)  # a replacement is not one more
    assert await oauth.put_client(client("mine", "user", "alice"), CAP)  # an account's own are counted apart
    assert await oauth.put_client(client("c0", org="other"), CAP)  # and another org's
    assert await oauth.put_client(client("uncapped"))  # without a cap, as before
    assert len([record for record in await oauth.clients("acme", "") if record.owner == "org"]) == CAP + 1


async def test_an_account_lists_its_orgs_clients_and_its_own_sorted(oauth: OAuthStore) -> None:
    mine = [client("zeta", "user", "alice"), client("alpha", "user", "alice")]
    theirs = client("alpha", "user", "bob")
    orgs = [client("slack"), client("github", grant=CLIENT_CREDENTIALS, authorization_url="")]
    elsewhere = [client("github", org="evil"), client("mine", "user", "alice", org="evil")]
    for record in [*mine, theirs, *orgs, *elsewhere]:
        await oauth.put_client(record)

    assert await oauth.clients("acme", "alice") == [orgs[1], orgs[0], mine[1], mine[0]]
    assert await oauth.clients("acme", "bob") == [orgs[1], orgs[0], theirs]
    assert await oauth.clients("acme", "") == [orgs[1], orgs[0]]
    assert await oauth.clients("acme", "carol") == [orgs[1], orgs[0]]
    assert await oauth.get_client("acme", "user", "alice", "alpha") == mine[1]
    assert await oauth.get_client("acme", "user", "bob", "zeta") is None

    # One account's own client is not another's to remove.
    assert await oauth.remove_client("acme", "user", "bob", "zeta") is None
    assert await oauth.remove_client("acme", "user", "alice", "zeta") == mine[0]
    assert await oauth.clients("acme", "alice") == [orgs[1], orgs[0], mine[1]]


async def test_crafted_identifiers_reach_no_one_elses_clients(oauth: OAuthStore) -> None:
    await oauth.put_client(client("mine", "user", "alice"))
    await oauth.put_client(client())
    for org, account in (("acme\x00", "alice"), ('acme"', "alice"), ("acme", "alice\x00"), ("acme", 'alice"')):
        assert await oauth.get_client(org, "user", account, "mine") is None
        assert [record.slug for record in await oauth.clients(org, account)] == (["github"] if org == "acme" else [])
        assert await oauth.remove_client(org, "user", account, "mine") is None
    assert await oauth.get_client("acme", "user", "alice", "mine") == client("mine", "user", "alice")


@pytest.mark.parametrize(
    ("owner", "account", "message"),
    [("org", "alice", "belongs to no account"), ("user", "", "needs its account"), ("team", "x", "owner is")],
)
async def test_a_clients_owner_and_account_must_agree(
    oauth: OAuthStore, owner: str, account: str, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        await oauth.put_client(client(owner=owner, account=account))
    assert await oauth.clients("acme", account) == []


async def test_identifiers_too_long_to_store(oauth: OAuthStore) -> None:
    huge = "x" * 600
    for record in (client(org=huge), client(slug=huge), client("a", "user", huge)):
        with pytest.raises(InvalidInput, match="too long"):
            await oauth.put_client(record)
    for record in (flow("d", org=huge), flow("d", account=huge), flow(huge)):
        with pytest.raises(InvalidInput, match="too long"):
            await oauth.put_flow(record, CAP, 1.0)
    assert await oauth.get_client(huge, "org", "", "github") is None
    assert await oauth.get_client("acme", "user", huge, "a") is None
    assert await oauth.clients(huge, huge) == []
    assert await oauth.clients("acme", huge) == []
    assert await oauth.remove_client("acme", "org", "", huge) is None
    assert await oauth.take_flow(huge, 1.0) is None
    assert await oauth.sweep_flows(10**10) == 0


async def test_a_nul_in_any_text_is_refused_on_every_backend(oauth: OAuthStore) -> None:
    """PostgreSQL's `jsonb` holds no NUL, so no backend keeps one: what one stores, the other can."""
    for record in (client(client_id="a\x00b"), client(slug="git\x00hub"), client(resource="https://x/\x00")):
        with pytest.raises(InvalidInput):
            await oauth.put_client(record)
    for bad in (flow("d", account="al\x00ice"), attrs.evolve(flow("d"), scopes=("repo\x00",))):
        with pytest.raises(InvalidInput):
            await oauth.put_flow(bad, CAP, 1.0)
    assert await oauth.clients("acme", "alice") == []
    assert await oauth.take_flow("d", 1.0) is None
    # Other text from outside is kept as it came.
    odd = client(token_auth_method=AUTH_NONE, client_id="\u2028 é \x1f \\u0000", secret_item=None)
    await oauth.put_client(odd)
    assert await oauth.get_client("acme", "org", "", "github") == odd


async def test_an_unreadable_client_is_skipped_and_can_still_be_removed(
    plane: ControlPlane, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    await plane.oauth.put_client(client())
    await plane.oauth.put_client(client("broken"))
    await plane.oauth.put_client(client("mine", "user", "alice"))
    await spoil(plane, backend, "oauth_clients", "slug", "broken")
    with caplog.at_level(logging.ERROR):
        assert await plane.oauth.clients("acme", "alice") == [client(), client("mine", "user", "alice")]
        assert await plane.oauth.get_client("acme", "org", "", "broken") is None
        exported = await plane.oauth.export_records()
    assert "skipping an unreadable OAuthClientRecord" in caplog.text
    assert len(exported) == 2
    assert not any(b"broken" in key for key, _ in exported)
    assert await plane.oauth.remove_client("acme", "org", "", "broken") is None  # removed, nothing to tell
    await plane.oauth.put_client(client("broken"))
    assert await plane.oauth.get_client("acme", "org", "", "broken") == client("broken")


# -- flows ---------------------------------------------------------------------------------------------


async def test_a_flow_is_taken_once(oauth: OAuthStore) -> None:
    assert await oauth.put_flow(flow("one"), CAP, 1.0)
    assert await oauth.put_flow(flow("two", account="bob"), CAP, 1.0)
    assert await oauth.take_flow("one", 50.0) == flow("one")
    assert await oauth.take_flow("one", 50.0) is None
    assert await oauth.take_flow("never", 50.0) is None
    assert await oauth.take_flow("two", 99.0) == flow("two", account="bob")


async def test_a_flow_taken_for_an_account_is_only_that_accounts(oauth: OAuthStore) -> None:
    assert await oauth.put_flow(flow("one"), CAP, 1.0)  # alice's, in acme
    assert await oauth.take_flow("one", 50.0, ("acme", "bob")) is None
    assert await oauth.take_flow("one", 50.0, ("other", "alice")) is None
    assert await oauth.take_flow("one", 50.0, ("acme", "alice")) == flow("one")  # left as it was, till now
    assert await oauth.take_flow("one", 50.0, ("acme", "alice")) is None


async def test_an_expired_flow_is_not_taken_and_is_gone(oauth: OAuthStore) -> None:
    assert await oauth.put_flow(flow("late"), CAP, 1.0)
    assert await oauth.take_flow("late", 100.0) is None  # expires_at is the first moment it is expired
    assert await oauth.take_flow("late", 50.0) is None  # taken, though it had expired
    assert await oauth.sweep_flows(10**10) == 0


async def test_an_account_holds_at_most_its_cap_of_flows_not_expired(oauth: OAuthStore) -> None:
    for n in range(CAP):
        assert await oauth.put_flow(flow(f"a{n}", expires=100.0 + n), CAP, 1.0)
    assert not await oauth.put_flow(flow("refused"), CAP, 1.0)
    assert await oauth.take_flow("refused", 2.0) is None  # nothing written
    # Another account, or the same account in another org, has its own count.
    assert await oauth.put_flow(flow("b0", account="bob"), CAP, 1.0)
    assert await oauth.put_flow(flow("e0", org="evil"), CAP, 1.0)
    # Putting a flow again under its digest replaces it, and it is not counted twice.
    assert await oauth.put_flow(flow("a0", expires=100.0), CAP, 1.0)
    # A taken flow frees its place.
    assert await oauth.take_flow("a4", 2.0) == flow("a4", expires=104.0)
    assert await oauth.put_flow(flow("a5", expires=300.0), CAP, 2.0)
    assert not await oauth.put_flow(flow("refused"), CAP, 2.0)
    # Flows expired by `now` are not counted, and the put deletes them.
    assert await oauth.put_flow(flow("a6", expires=300.0), CAP, 101.5)  # a0 and a1 expired
    assert await oauth.put_flow(flow("a7", expires=300.0), CAP, 101.5)
    assert not await oauth.put_flow(flow("refused"), CAP, 101.5)
    assert await oauth.take_flow("a0", 50.0) is None  # deleted by the put, though asked "before" expiry
    assert await oauth.take_flow("a1", 50.0) is None
    assert await oauth.take_flow("b0", 50.0) == flow("b0", account="bob")  # another account's were left alone
    # A refused put still deleted what had expired.
    assert not await oauth.put_flow(flow("refused"), CAP - 3, 102.5)  # a2 expired: a3, a5, a6, a7 left
    assert await oauth.take_flow("a2", 50.0) is None
    assert [await oauth.take_flow(f"a{n}", 50.0) is not None for n in (3, 5, 6, 7)] == [True] * 4
    assert not await oauth.put_flow(flow("none"), 0, 1000.0)


async def test_a_sweep_deletes_every_expired_flow(oauth: OAuthStore) -> None:
    assert await oauth.sweep_flows(0.0) == 0
    for n, (account, expires) in enumerate([("alice", 10.0), ("alice", 20.0), ("bob", 10.0), ("bob", 30.0)]):
        assert await oauth.put_flow(flow(f"f{n}", account=account, expires=expires), CAP, 1.0)
    assert await oauth.put_flow(flow("e", org="evil", expires=15.0), CAP, 1.0)
    assert await oauth.sweep_flows(5.0) == 0
    assert await oauth.sweep_flows(15.0) == 3
    assert await oauth.sweep_flows(15.0) == 0
    assert await oauth.take_flow("f0", 1.0) is None
    assert await oauth.take_flow("e", 1.0) is None
    assert await oauth.take_flow("f1", 16.0) == flow("f1", expires=20.0)
    assert await oauth.sweep_flows(10**10) == 1
    assert await oauth.take_flow("f3", 16.0) is None


async def test_an_unreadable_flow_counts_until_it_expires_and_is_never_taken(plane: ControlPlane, backend: str) -> None:
    oauth = plane.oauth
    assert await oauth.put_flow(flow("broken", expires=50.0), 2, 1.0)
    assert await oauth.put_flow(flow("kept", expires=50.0), 2, 1.0)
    await spoil(plane, backend, "oauth_flows", "state_digest", "broken")
    assert not await oauth.put_flow(flow("refused"), 2, 2.0)
    assert await oauth.sweep_flows(50.0) == 2
    assert await oauth.put_flow(flow("again", expires=90.0), 1, 60.0)

    assert await oauth.put_flow(flow("broken", expires=90.0), 2, 60.0)
    await spoil(plane, backend, "oauth_flows", "state_digest", "broken")
    assert await oauth.take_flow("broken", 61.0) is None  # and gone: its place is free again
    assert await oauth.put_flow(flow("third", expires=90.0), 2, 61.0)
    assert await oauth.take_flow("again", 61.0) == flow("again", expires=90.0)


# -- refresh claims ---------------------------------------------------------------------------------------

CONNECTION = ("acme", "user", "alice", "github", "mine")


async def test_a_refresh_claim_is_held_until_released_or_lapsed(oauth: OAuthStore) -> None:
    assert await oauth.claim_refresh(CONNECTION, "one", 30.0, 1.0)
    assert not await oauth.claim_refresh(CONNECTION, "two", 31.0, 2.0)  # held by one
    assert await oauth.claim_refresh(("acme", "user", "bob", "github", "mine"), "two", 31.0, 2.0)  # another's
    assert await oauth.claim_refresh(CONNECTION, "one", 40.0, 3.0)  # its holder renews it
    await oauth.release_refresh(CONNECTION, "two")  # not two's to release
    assert not await oauth.claim_refresh(CONNECTION, "two", 41.0, 39.0)
    assert await oauth.claim_refresh(CONNECTION, "two", 70.0, 40.0)  # one's claim lapsed at 40
    await oauth.release_refresh(CONNECTION, "two")
    assert await oauth.claim_refresh(CONNECTION, "three", 71.0, 41.0)


# -- two planes at once, and a restart ------------------------------------------------------------------


async def test_concurrent_takes_of_one_flow_through_two_planes_have_one_winner(
    open_plane: Callable[[], Awaitable[ControlPlane]], backend: str
) -> None:
    async with two_planes(open_plane, backend) as (first, second):
        digests = [f"d{n:03}" for n in range(EACH)]
        for digest in digests:
            assert await first.oauth.put_flow(flow(digest, account=digest), CAP, 1.0)
        won: Counter[str] = Counter()

        async def take(plane: ControlPlane) -> None:
            for digest in digests:
                taken = await plane.oauth.take_flow(digest, 2.0)
                if taken is not None:
                    assert taken == flow(digest, account=digest)
                    won[digest] += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(take, first)
            nursery.start_soon(take, second)
            nursery.start_soon(take, second)
        assert won == Counter(digests)


async def test_concurrent_puts_of_one_accounts_flows_through_two_planes_keep_its_cap(
    open_plane: Callable[[], Awaitable[ControlPlane]], backend: str
) -> None:
    async with two_planes(open_plane, backend) as (first, second):
        for now, expires in ((1.0, 100.0), (200.0, 300.0)):  # the second round, once the first's have expired
            kept: list[str] = []

            async def put(
                plane: ControlPlane, name: str, now: float = now, expires: float = expires, kept: list[str] = kept
            ) -> None:
                for n in range(EACH):
                    digest = f"{name}-{now:g}-{n:03}"
                    if await plane.oauth.put_flow(flow(digest, expires=expires), CAP, now):
                        kept.append(digest)

            async with trio.open_nursery() as nursery:
                for name, plane in (("a", first), ("b", second), ("c", first), ("d", second)):
                    nursery.start_soon(put, plane, name)
            assert len(kept) == CAP
            assert not await first.oauth.put_flow(flow("one-more", expires=expires), CAP, now)
        assert await second.oauth.sweep_flows(250.0) == 0  # the first round's went in the second's puts
        assert [await first.oauth.take_flow(digest, 250.0) for digest in kept] == [
            flow(digest, expires=300.0) for digest in kept
        ]


async def test_clients_and_flows_outlive_a_restart(open_plane: Callable[[], Awaitable[ControlPlane]]) -> None:
    plane = await open_plane()
    try:
        await plane.oauth.put_client(client())
        await plane.oauth.put_client(client("mine", "user", "alice"))
        assert await plane.oauth.put_flow(flow("open"), 1, 1.0)
    finally:
        await plane.close()
    plane = await open_plane()
    try:
        assert await plane.oauth.clients("acme", "alice") == [client(), client("mine", "user", "alice")]
        assert not await plane.oauth.put_flow(flow("second"), 1, 2.0)  # the count survived too
        assert await plane.oauth.take_flow("open", 2.0) == flow("open")
        assert await plane.oauth.put_flow(flow("second"), 1, 2.0)
    finally:
        await plane.close()


async def test_an_import_of_clients_in_no_exported_form_writes_nothing(oauth: OAuthStore) -> None:
    good = client()
    raw = json.dumps(attrs.asdict(good)).encode()
    key = b'"acme"\x00"org"\x00""\x00"github"'
    for records in (
        [(key, raw), (b'"acme"\x00"org"\x00""\x00"other"', raw)],  # the key names another client
        [(key, raw), (b'"acme"', raw)],
        [(key, raw), (key, b"{}")],
    ):
        with pytest.raises(ValueError, match="not an exported"):
            await oauth.import_records(records)
    wrong = json.dumps(attrs.asdict(client(account="alice"))).encode()
    with pytest.raises(InvalidInput):
        await oauth.import_records([(key, raw), (b'"acme"\x00"org"\x00"alice"\x00"github"', wrong)])
    assert await oauth.export_records() == []
    await oauth.import_records([(key, raw)])
    assert await oauth.get_client("acme", "org", "", "github") == good


async def test_concurrent_refresh_claims_through_two_planes_have_one_holder_at_a_time(
    open_plane: Callable[[], Awaitable[ControlPlane]], backend: str
) -> None:
    async with two_planes(open_plane, backend) as (first, second):
        holding: list[str] = []
        held: Counter[str] = Counter()

        async def refresh(plane: ControlPlane, holder: str) -> None:
            for _ in range(EACH):
                if await plane.oauth.claim_refresh(CONNECTION, holder, 1000.0, 1.0):
                    holding.append(holder)
                    assert holding == [holder]  # nobody else holds it while this one does
                    held[holder] += 1
                    await trio.lowlevel.checkpoint()
                    holding.remove(holder)
                    await plane.oauth.release_refresh(CONNECTION, holder)
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            for n, plane in enumerate((first, second, first, second)):
                nursery.start_soon(refresh, plane, f"holder-{n}")
        assert sum(held.values()) >= 1
        assert await second.oauth.claim_refresh(CONNECTION, "last", 1000.0, 1.0)


async def test_concurrent_capped_puts_of_one_owners_clients_through_two_planes_keep_its_cap(
    open_plane: Callable[[], Awaitable[ControlPlane]], backend: str
) -> None:
    async with two_planes(open_plane, backend) as (first, second):
        kept: list[str] = []

        async def put(plane: ControlPlane, name: str) -> None:
            for n in range(EACH):
                if await plane.oauth.put_client(client(f"{name}-{n:03}"), CAP):
                    kept.append(f"{name}-{n:03}")

        async with trio.open_nursery() as nursery:
            for name, plane in (("a", first), ("b", second), ("c", first), ("d", second)):
                nursery.start_soon(put, plane, name)
        assert len(kept) == CAP
        assert sorted(record.slug for record in await first.oauth.clients("acme", "")) == sorted(kept)
