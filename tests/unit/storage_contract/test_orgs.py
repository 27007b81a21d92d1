"""The org store's and the API key store's contract, on every backend."""

import attrs
import trio

from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import ApiKeyStore, OrgStore
from executor_mcp.storage.records import ApiKeyRecord, OrgRecord, UsageLimits


async def test_an_org_is_noted_once_and_keeps_when_it_was_first_seen(orgs: OrgStore) -> None:
    assert await orgs.get_org("acme") is None
    assert await orgs.note_org("acme", 10.0) == OrgRecord("acme", first_seen_at=10.0)
    assert await orgs.note_org("acme", 20.0) == OrgRecord("acme", first_seen_at=10.0)
    assert await orgs.get_org("acme") == OrgRecord("acme", first_seen_at=10.0)
    await orgs.note_org("evil", 30.0)
    assert sorted(record.org_id for record in await orgs.orgs()) == ["acme", "evil"]


async def test_revoking_and_reinstating_an_org(orgs: OrgStore) -> None:
    await orgs.note_org("acme", 10.0)
    revoked = await orgs.set_org_revoked("acme", True, 20.0)
    assert revoked == OrgRecord("acme", first_seen_at=10.0, revoked=True, changed_at=20.0)
    assert await orgs.get_org("acme") == revoked
    assert await orgs.note_org("acme", 25.0) == revoked  # noting a known org changes nothing
    reinstated = await orgs.set_org_revoked("acme", False, 30.0)
    assert (reinstated.revoked, reinstated.changed_at, reinstated.first_seen_at) == (False, 30.0, 10.0)
    # An org never seen can be revoked ahead of its first request.
    assert await orgs.set_org_revoked("new", True, 40.0) == OrgRecord(
        "new", first_seen_at=40.0, revoked=True, changed_at=40.0
    )


async def test_an_orgs_own_limits_are_kept_with_it_and_leave_the_rest_as_it_was(orgs: OrgStore) -> None:
    await orgs.set_org_revoked("acme", True, 10.0)
    limited = await orgs.set_org_limits("acme", lambda _: UsageLimits(org=100, account=10), 20.0)
    assert limited == OrgRecord("acme", 10.0, revoked=True, changed_at=20.0, limits=UsageLimits(org=100, account=10))
    assert await orgs.get_org("acme") == limited
    assert (await orgs.set_org_limits("acme", lambda _: None, 30.0)).limits is None
    assert (await orgs.set_org_limits("new", lambda _: UsageLimits(connection=5), 40.0)).first_seen_at == 40.0


async def test_revoked_among_names_the_revoked_orgs_of_those_asked_about(orgs: OrgStore) -> None:
    assert await orgs.revoked_among([]) == set()
    assert await orgs.revoked_among(["acme", "unknown"]) == set()
    for org_id in ("acme", "evil", "good"):
        await orgs.note_org(org_id, 10.0)
    await orgs.set_org_revoked("acme", True, 20.0)
    await orgs.set_org_revoked("evil", True, 20.0)
    await orgs.set_org_revoked("new", True, 30.0)  # revoked before it was ever seen
    assert await orgs.revoked_among(["acme", "good", "unknown", "new"]) == {"acme", "new"}
    assert await orgs.revoked_among({"evil", "good"}) == {"evil"}
    assert await orgs.revoked_among(["acme", "acme"]) == {"acme"}
    await orgs.set_org_revoked("acme", False, 40.0)
    assert await orgs.revoked_among(["acme", "evil"]) == {"evil"}
    assert (await orgs.get_org("evil")).revoked  # asking changes nothing
    # Ids no store can hold (too long, a NUL) name no org: nothing, and no failure for the others.
    assert await orgs.revoked_among(["x" * 600, "a\x00b", "evil"]) == {"evil"}


def key(key_id: str, account: str = "alice") -> ApiKeyRecord:
    return ApiKeyRecord(key_id=key_id, account_id=account, org_id="acme", created_at=1.0)


async def test_api_keys_are_found_by_digest_and_revoked_by_id(api_keys: ApiKeyStore) -> None:
    assert await api_keys.get_api_key("d1") is None
    await api_keys.put_api_key("d1", key("k1"))
    await api_keys.put_api_key("d2", key("k2", account="bob"))
    assert await api_keys.get_api_key("d1") == key("k1")
    assert sorted(record.key_id for record in await api_keys.api_keys()) == ["k1", "k2"]

    revoked = await api_keys.revoke_api_key("k2")
    assert revoked is not None
    assert revoked.revoked
    assert await api_keys.get_api_key("d2") == revoked
    assert not (await api_keys.get_api_key("d1")).revoked
    assert await api_keys.revoke_api_key("unknown") is None
    assert await api_keys.revoke_api_key("d1") is None  # by public id, never by digest


async def test_two_instances_changing_different_limits_at_once_lose_neither(
    planes: tuple[ControlPlane, ControlPlane],
) -> None:
    async def change(plane: ControlPlane, field: str, value: int) -> None:
        await plane.orgs.set_org_limits(
            "acme", lambda known: attrs.evolve(known or UsageLimits(), **{field: value}), 1.0
        )

    fields = [field.name for field in attrs.fields(UsageLimits)]
    async with trio.open_nursery() as nursery:
        for index, field in enumerate(fields * 6):
            nursery.start_soon(change, planes[index % 2], field, index + 1)
    record = await planes[0].orgs.get_org("acme")
    assert record is not None
    assert record.limits is not None
    assert all(getattr(record.limits, field) is not None for field in fields)
