"""One connection's discoveries in flight, against the service itself: a real LMDB control plane, the real
GraphQL kind, and a graphql-core shop on 127.0.0.1 whose introspection answers only when the test says."""

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from executor_mcp.config import Settings
from executor_mcp.integrations.assembly import open_integrations
from executor_mcp.integrations.service import Integrations
from executor_mcp.records.integrations import GRAPHQL, ConnectionRecord
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.records import Owner
from tests.graphql_upstream import TOKEN, GraphqlShop
from tests.upstream import Answer, Received, start_upstream

# Turns a wait that would never end into a failure; never reached by a passing test.
HANG = 30
ADMIN = Owner(account_id="a-1", org_id="o-1", org_admin=True)
BEARER = [
    {
        "slug": "bearer",
        "kind": "apikey",
        "placements": [{"carrier": "header", "name": "Authorization", "prefix": "Bearer "}],
    }
]


class GatedShop:
    """The shop, holding each introspection until `release` (calls are answered at once)."""

    def __init__(self) -> None:
        self.shop = GraphqlShop()
        self.gate = trio.Event()
        self.waiting = 0
        self.arrived = trio.Event()

    async def respond(self, request: Received) -> Answer:
        if b"__schema" in request.body:
            self.waiting += 1
            self.arrived.set()
            await self.gate.wait()
        return self.shop.respond(request)


@pytest.fixture
async def control(tmp_path: Path):
    plane = await ControlPlane.open(tmp_path)
    try:
        yield plane
    finally:
        await plane.close()


@pytest.fixture
async def integrations(control: ControlPlane, tmp_path: Path):
    async with open_integrations(Settings(data_dir=tmp_path, allow_local_network=True), control) as service:
        yield service


async def connected(nursery: trio.Nursery, integrations: Integrations) -> tuple[GatedShop, Any, ConnectionRecord]:
    """An integration that introspects per connection and one org connection to it, listed once already."""
    gated = GatedShop()
    gated.gate.set()
    gated.shop.upstream = await start_upstream(nursery, gated.respond)
    body = {"endpoint": gated.shop.url, "slug": "shop", "name": "Shop", "authenticationTemplate": BEARER}
    integration, _ = await integrations.add(ADMIN, GRAPHQL, body)
    connection = await integrations.connections.create(
        ADMIN,
        {"owner": "org", "name": "main", "integration": "shop", "template": "bearer", "value": TOKEN},
        pasted=True,
    )
    assert connection.source_hash is not None
    gated.gate = trio.Event()
    gated.arrived = trio.Event()
    gated.waiting = 0
    return gated, integration, connection


async def test_a_joiner_of_a_cancelled_discovery_lists_the_tools_itself(
    nursery: trio.Nursery, integrations: Integrations
) -> None:
    gated, integration, connection = await connected(nursery, integrations)
    outcomes: list[Any] = []

    async def join() -> None:
        try:
            outcomes.append(await integrations.discoveries.discover(integration, connection))
        except Exception as failure:
            outcomes.append(failure)

    first = trio.CancelScope()

    async def lead() -> None:
        with first:
            await integrations.discoveries.discover(integration, connection)

    async with trio.open_nursery() as inner:
        inner.start_soon(lead)
        await gated.arrived.wait()
        inner.start_soon(join)
        await trio.testing.wait_all_tasks_blocked()
        first.cancel()
        await trio.testing.wait_all_tasks_blocked()
        gated.gate.set()
    (outcome,) = outcomes
    assert isinstance(outcome, ConnectionRecord), outcome
    assert outcome.sync_error is None
    assert outcome.source_hash == connection.source_hash


async def test_a_connection_re_created_with_a_new_credential_is_listed_with_it_not_by_the_old_flight(
    nursery: trio.Nursery, integrations: Integrations, control: ControlPlane
) -> None:
    gated, integration, connection = await connected(nursery, integrations)
    replaced: list[ConnectionRecord] = []

    async def refresh_with_the_old_credential() -> None:
        assert (await integrations.discoveries.discover(integration, connection)).sync_error is None

    async def re_create() -> None:
        body = {"owner": "org", "name": "main", "integration": "shop", "template": "bearer", "value": "expired"}
        replaced.append(await integrations.connections.create(ADMIN, body, pasted=True))

    async with trio.open_nursery() as inner:
        inner.start_soon(refresh_with_the_old_credential)
        await gated.arrived.wait()
        inner.start_soon(re_create)
        await trio.testing.wait_all_tasks_blocked()
        gated.gate.set()
    stored = await control.catalog.get_connection("o-1", "org", "", "shop", "main")
    assert stored is not None
    assert stored.updated_at == replaced[0].updated_at
    # The new credential was sent and refused: that is what the connection says, not the old one's success.
    assert gated.waiting == 2
    assert stored.sync_error is not None
    assert "401" in stored.sync_error


async def test_a_refresh_queued_before_the_endpoint_moved_introspects_the_new_endpoint(
    nursery: trio.Nursery, integrations: Integrations
) -> None:
    old, integration, connection = await connected(nursery, integrations)
    old.gate.set()
    moved = GatedShop()
    moved.shop.upstream = await start_upstream(nursery, moved.respond)
    await integrations.configure(ADMIN, "shop", GRAPHQL, {"endpoint": moved.shop.url})
    old.arrived = moved.arrived  # whichever endpoint is introspected first ends the wait
    integrations.discoveries.mark_stale(integration, connection)  # as a call made before the move would
    async with trio.open_nursery() as inner:
        inner.start_soon(integrations.discoveries.refresh_stale)
        with trio.fail_after(HANG):
            await moved.arrived.wait()
        inner.cancel_scope.cancel()
    assert old.waiting == 0
    assert moved.waiting == 1


async def test_moving_the_endpoint_relists_a_connection_on_its_owner_s_next_read(
    nursery: trio.Nursery, integrations: Integrations
) -> None:
    old, _, _ = await connected(nursery, integrations)
    old.gate.set()
    moved = GatedShop()
    moved.gate.set()
    moved.shop.upstream = await start_upstream(nursery, moved.respond)
    async with trio.open_nursery() as inner:
        inner.start_soon(integrations.discoveries.refresh_stale)
        await integrations.view(ADMIN)
        await trio.testing.wait_all_tasks_blocked()
        assert moved.waiting == 0  # listed just now: not due
        await integrations.configure(ADMIN, "shop", GRAPHQL, {"endpoint": moved.shop.url})
        await integrations.view(ADMIN)
        with trio.fail_after(HANG):
            await moved.arrived.wait()
        inner.cancel_scope.cancel()
    assert old.waiting == 0
