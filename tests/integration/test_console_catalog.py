"""The console's integrations and connections pages over raw httpx against a real `--auth jwt` server: who sees
what, that a pasted value never comes back, and the connect-link endpoint the connections page calls."""

import json
import re
from pathlib import Path

import httpx
import pytest
import trio

from tests.auth_support import mint
from tests.conftest import ServerUnderTest
from tests.console_support import Visitor, call, console_server, visitor
from tests.integration.test_integrations_e2e import SECRET, orders_spec, shop
from tests.upstream import Upstream, start_upstream

PAGES = ("/integrations", "/integrations/orders", "/integrations/executor", "/connections")


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> ServerUnderTest:
    return await console_server(nursery, data_dir, tmp_path, org_admin_claim=("role", "admin"))


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    return await start_upstream(nursery, shop)


async def add_orders(http: httpx.AsyncClient, admin: Visitor, upstream: Upstream) -> None:
    spec = {"kind": "blob", "value": json.dumps(orders_spec(upstream.url))}
    added = await call(http, admin, "POST", "/api/openapi/specs", {"spec": spec, "slug": "orders"})
    assert added.status_code == 200, added.text
    assert added.json() == {"slug": "orders", "toolCount": 3}


async def test_the_pages_send_a_stranger_to_sign_in(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    base = executor.running.url
    for path in PAGES:
        page = await http.get(base + path)
        assert page.status_code == 303
        assert page.headers["location"].startswith("/signin?next=")


async def test_another_orgs_visitor_sees_none_of_the_integrations_or_connections(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    alice = await visitor(http, base, mint("alice", "acme", role="admin"))
    await add_orders(http, alice, upstream)
    body = {"owner": "org", "name": "Acme Vault", "integration": "orders", "template": "apikey-0", "value": SECRET}
    assert (await call(http, alice, "POST", "/api/connections", body)).status_code == 200
    mine = await http.get(base + "/integrations", headers=alice.headers())
    assert "/integrations/orders" in mine.text
    assert "Orders API" in mine.text
    bob = await visitor(http, base, mint("bob", "globex", role="admin"))
    for path in ("/integrations", "/connections", "/integrations/executor"):
        page = await http.get(base + path, headers=bob.headers())
        assert page.status_code == 200
        assert "orders" not in page.text.lower()
        assert "acmevault" not in page.text.lower()
    other = await http.get(base + "/integrations/orders", headers=bob.headers())
    assert other.status_code == 404
    assert "Orders API" not in other.text
    link = await call(http, bob, "POST", "/api/connections/handoffs", {"integration": "orders"})
    assert link.status_code == 404


async def test_a_pasted_value_is_never_shown_on_any_page_or_answer(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    alice = await visitor(http, base, mint("alice", "acme", role="admin"))
    await add_orders(http, alice, upstream)
    body = {"owner": "user", "name": "Mine", "integration": "orders", "template": "apikey-0"}
    body["values"] = {"token": SECRET}
    created = await call(http, alice, "POST", "/api/connections", body)
    assert created.status_code == 200
    answers = [created.text]
    for path in (*PAGES, "/connections?created=tools.orders.user.mine"):
        page = await http.get(base + path, headers=alice.headers())
        assert page.status_code == 200, path
        answers.append(page.text)
    assert "tools.orders.user.mine" in answers[-1]
    assert 'id="created"' in answers[-1]
    for path in ("/api/connections", "/api/connections/user/orders/mine", "/api/integrations"):
        answers.append((await call(http, alice, "GET", path)).text)
    assert all(SECRET not in answer for answer in answers)


async def test_the_integration_page_shows_templates_connections_and_typed_tools_with_a_filter(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    alice = await visitor(http, base, mint("alice", "acme", role="admin"))
    await add_orders(http, alice, upstream)
    page = (await http.get(base + "/integrations/orders", headers=alice.headers())).text
    assert "apikey-0" in page
    assert "header x-api-key: &lt;token&gt;" in page
    assert "orders.getOrder" in page
    assert (
        "{ orderId: string; include?: (&#34;items&#34; | &#34;customer&#34;)[]; &#34;X-Trace&#34;?: string; "
        "session?: string; }" in page
    )
    assert "type Order = { id: string;" in page
    filtered = (await http.get(base + "/integrations/orders?query=invoice", headers=alice.headers())).text
    assert "orders.getOrderInvoice" in filtered
    assert "orders.createOrder" not in filtered
    none = (await http.get(base + "/integrations/orders?query=%3Cb%3E", headers=alice.headers())).text
    assert "No tool matches <code>&lt;b&gt;</code>" in none
    built_in = (await http.get(base + "/integrations/executor", headers=alice.headers())).text
    assert "connections.createHandoff" in built_in
    assert "tools.executor.coreTools.connections.createHandoff" in built_in


async def test_a_member_sees_the_add_form_disabled_and_the_api_agrees(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    member = await visitor(http, base, mint("carol", "acme"))
    page = (await http.get(base + "/integrations", headers=member.headers())).text
    assert re.search(r"<fieldset disabled>", page)
    assert "Only an organization admin can add, change or remove org integrations and connections." in page
    refused = await call(http, member, "POST", "/api/openapi/specs", {"spec": {"kind": "blob", "value": "x"}})
    assert refused.status_code == 403
    admin = await visitor(http, base, mint("alice", "acme", role="admin"))
    assert "<fieldset disabled>" not in (await http.get(base + "/integrations", headers=admin.headers())).text


async def test_a_connect_link_comes_from_the_api_with_the_csrf_token_only(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    alice = await visitor(http, base, mint("alice", "acme", role="admin"))
    await add_orders(http, alice, upstream)
    body = {"integration": "orders", "label": "Shop key"}
    without = await http.post(base + "/api/connections/handoffs", json=body, headers=alice.headers(csrf=False))
    assert without.status_code == 403
    made = await call(http, alice, "POST", "/api/connections/handoffs", body)
    assert made.status_code == 200, made.text
    link = made.json()
    assert set(link) == {"url", "instructions"}
    assert link["url"].startswith(base + "/connect/")
    assert "owner=user&template=apikey-0&label=Shop+key" in link["url"]
    opened = await http.get(link["url"])
    assert opened.status_code == 200
    assert "Connect Orders API" in opened.text
    member = await visitor(http, base, mint("carol", "acme"))
    org_link = await call(http, member, "POST", "/api/connections/handoffs", {"integration": "orders", "owner": "org"})
    assert org_link.status_code == 403
    unknown = await call(http, alice, "POST", "/api/connections/handoffs", {"integration": "orders", "extra": 1})
    assert unknown.status_code == 400


async def test_a_large_integration_is_paged_and_its_preview_names_a_few_tools(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    alice = await visitor(http, base, mint("alice", "acme", role="admin"))
    paths = {f"/things/{index}": {"get": {"operationId": f"thing{index:03}", "responses": {}}} for index in range(120)}
    spec = {
        "kind": "blob",
        "value": json.dumps({"openapi": "3.0.0", "info": {"title": "Big", "version": "1"}, "paths": paths}),
    }
    preview = await call(http, alice, "POST", "/api/openapi/preview?toolNames=5", {"spec": spec})
    assert preview.json()["toolNames"] == [f"things.thing{index:03}" for index in range(5)]
    assert "toolNames" not in (await call(http, alice, "POST", "/api/openapi/preview", {"spec": spec})).json()
    assert (await call(http, alice, "POST", "/api/openapi/specs", {"spec": spec, "slug": "big"})).status_code == 200
    first = (await http.get(base + "/integrations/big", headers=alice.headers())).text
    assert first.count('<li class="tool">') == 50
    assert 'href="/integrations/big?page=2"' in first
    assert "Page 1 of 3" in first
    last = (await http.get(base + "/integrations/big?page=3", headers=alice.headers())).text
    assert last.count('<li class="tool">') == 20
    assert 'id="next"' not in last
    assert "101&ndash;120 of 120" in last


async def test_odd_page_and_tool_name_counts_are_ignored_not_a_server_error(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    alice = await visitor(http, base, mint("alice", "acme", role="admin"))
    page = await http.get(base + "/integrations/executor", params={"page": "\u00b2"}, headers=alice.headers())
    assert page.status_code == 200
    assert page.text.count('<li class="tool">') > 1
    spec = {
        "kind": "blob",
        "value": json.dumps({"openapi": "3.0.0", "info": {"title": "T", "version": "1"}, "paths": {}}),
    }
    preview = await call(http, alice, "POST", "/api/openapi/preview?toolNames=%C2%B2", {"spec": spec})
    assert preview.status_code == 200, preview.text
    assert "toolNames" not in preview.json()
