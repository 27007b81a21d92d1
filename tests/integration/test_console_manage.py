"""The integrations pages' new forms and an integration's Manage section over raw httpx against real `--auth jwt`
servers: the MCP form offers stdio commands only where the server takes them (and the API agrees), the Manage
section names the routes that refresh, update and remove the integration (and they do, with the visitor's CSRF
token), a member gets it disabled with the service's words, and an endpoint's token reaches only an admin."""

import json
import re
from pathlib import Path

import httpx
import pytest
import trio

from tests.auth_support import mint
from tests.conftest import ServerUnderTest
from tests.console_support import Visitor, call, console_server, visitor
from tests.integration.test_console_catalog_browser import SPEC_PATH, shop_with_spec
from tests.upstream import Upstream, start_upstream

ALICE = mint("alice", "acme", role="admin")
CAROL = mint("carol", "acme")
NOT_ADMIN = "Only an organization admin can add, change or remove org integrations and connections"
KEY = "query-key-5d1e8a"


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> ServerUnderTest:
    return await console_server(nursery, data_dir, tmp_path, org_admin_claim=("role", "admin"))


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    return await start_upstream(nursery, shop_with_spec)


async def page(http: httpx.AsyncClient, who: Visitor, path: str) -> str:
    answer = await http.get(who.base_url + path, headers=who.headers())
    assert answer.status_code == 200, answer.text
    return answer.text


def attribute(text: str, element_id: str, name: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*?\s{name}="([^"]*)"', text)
    assert found is not None, (element_id, name)
    return found.group(1)


async def test_the_mcp_form_offers_stdio_commands_only_where_the_server_runs_them(
    nursery: trio.Nursery, executor: ServerUnderTest, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    stdio = {"name": "Local", "transport": "stdio", "command": "/bin/echo", "args": ["a b", "--c"]}
    alice = await visitor(http, executor.running.url, ALICE)
    remote_only = await page(http, alice, "/integrations")
    assert 'id="add-mcp"' in remote_only
    assert 'id="add-graphql"' in remote_only
    assert 'id="stdio-off"' in remote_only
    assert 'value="stdio"' not in remote_only
    refused = await call(http, alice, "POST", "/api/mcp/servers", stdio)
    assert refused.status_code == 400
    assert "stdio transport is disabled" in refused.json()["message"]

    allowing = await console_server(
        nursery, tmp_path / "stdio-data", tmp_path, org_admin_claim=("role", "admin"), allow_stdio_mcp=True
    )
    admin = await visitor(http, allowing.running.url, ALICE)
    offered = await page(http, admin, "/integrations")
    assert '<option value="stdio">' in offered
    assert 'id="mcp-stdio" hidden' in offered
    assert 'id="stdio-off"' not in offered
    added = await call(http, admin, "POST", "/api/mcp/servers", stdio)
    assert added.json() == {"slug": "local", "toolCount": 0}
    shown = await page(http, admin, "/integrations/local")
    assert "<dt>Command</dt><dd><code>/bin/echo a b --c</code></dd>" in shown
    assert attribute(shown, "update-command", "data-path") == "/api/mcp/servers/local/config"
    assert 'value="/bin/echo"' in shown
    assert ">a b\n--c</textarea>" in shown
    member = await visitor(http, allowing.running.url, CAROL)
    read_only = await page(http, member, "/integrations/local")
    assert "<dt>Command</dt>" in read_only  # as `GET /api/mcp/servers/local` shows a member
    assert 'value="/bin/echo"' not in read_only
    assert f"{NOT_ADMIN}." in read_only


async def test_an_admin_refreshes_updates_renames_and_removes_a_spec_through_the_routes_the_page_names(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    alice = await visitor(http, base, ALICE)
    spec_url = upstream.url + SPEC_PATH
    added = await call(http, alice, "POST", "/api/openapi/specs", {"spec": {"kind": "url", "url": spec_url}})
    assert added.json() == {"slug": "orders_api", "toolCount": 3}
    shown = await page(http, alice, "/integrations/orders_api")
    assert attribute(shown, "manage", "data-refresh") == "spec"
    assert re.search(r'<button type="button" id="refresh" class="secondary">', shown)
    assert 'id="manage-refused"' not in shown
    assert "<fieldset disabled>" not in shown
    assert '<script src="/static/catalog.js" defer>' in shown

    refreshed = await call(http, alice, "POST", "/api/openapi/integrations/orders_api/spec", {})
    assert refreshed.json()["toolCount"] == 3
    assert [r.path for r in upstream.received].count(SPEC_PATH) == 2  # fetched again, from the URL it was added from
    replacement = {"openapi": "3.0.0", "info": {"title": "T", "version": "1"}, "paths": {}}
    update_path = attribute(shown, "update-spec", "data-path")
    without_token = await http.post(
        base + update_path, json={"spec": {"kind": "blob", "value": "{}"}}, headers=alice.headers(csrf=False)
    )
    assert without_token.status_code == 403
    updated = await call(http, alice, "POST", update_path, {"spec": {"kind": "blob", "value": json.dumps(replacement)}})
    assert updated.json() == {
        "slug": "orders_api",
        "toolCount": 0,
        "addedTools": [],
        "removedTools": ["orders.createOrder", "orders.getOrder", "orders.getOrderInvoice"],
    }
    hostile = "<img src=x onerror=alert(1)>"
    renamed = await call(http, alice, "PATCH", "/api/integrations/orders_api", {"name": hostile, "description": ""})
    assert renamed.status_code == 200
    after = await page(http, alice, "/integrations/orders_api")
    assert "<img src=x" not in after
    assert "Remove &lt;img src=x onerror=alert(1)&gt;</button>" in after
    pasted = {"spec": {"kind": "blob", "value": json.dumps(replacement)}, "slug": "pasted"}
    assert (await call(http, alice, "POST", "/api/openapi/specs", pasted)).status_code == 200
    no_url = await page(http, alice, "/integrations/pasted")
    assert attribute(no_url, "manage", "data-refresh") == ""  # a pasted spec has no URL to fetch again
    assert 'id="refresh"' not in no_url
    assert 'id="update-spec"' in no_url
    removed = await call(http, alice, "DELETE", "/api/integrations/orders_api")
    assert removed.json() == {"removed": True}
    gone = await http.get(base + "/integrations/orders_api", headers=alice.headers())
    assert gone.status_code == 404


async def test_a_member_gets_every_change_disabled_with_the_services_words_and_the_api_agrees(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    alice = await visitor(http, base, ALICE)
    spec = {"kind": "url", "url": upstream.url + SPEC_PATH}
    assert (await call(http, alice, "POST", "/api/openapi/specs", {"spec": spec, "slug": "orders"})).status_code == 200
    carol = await visitor(http, base, CAROL)
    shown = await page(http, carol, "/integrations/orders")
    assert f'<p class="notice" id="manage-refused">{NOT_ADMIN}.</p>' in shown
    assert shown.count("<fieldset disabled>") == 2  # the name and the spec
    assert '<button type="button" id="refresh" class="secondary" disabled>' in shown
    assert 'id="remove-integration" class="danger" disabled>' in shown
    for method, path, body in (
        ("POST", "/api/openapi/integrations/orders/spec", {}),
        ("PATCH", "/api/integrations/orders", {"name": "Mine"}),
        ("DELETE", "/api/integrations/orders", None),
    ):
        refused = await call(http, carol, method, path, body)
        assert refused.status_code == 403, path
        assert refused.json()["message"] == NOT_ADMIN
    mcp = await page(http, carol, "/integrations")
    assert mcp.count("<fieldset disabled>") == 3  # the spec, MCP and GraphQL forms


async def test_a_graphql_endpoints_query_token_is_prefilled_for_an_admin_and_never_shown_to_a_member(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    alice = await visitor(http, base, ALICE)
    endpoint = f"http://127.0.0.1:9/graphql?key={KEY}"
    added = await call(http, alice, "POST", "/api/graphql/integrations", {"endpoint": endpoint, "slug": "shop"})
    assert added.json() == {"slug": "shop", "toolCount": 0}
    shown = await page(http, alice, "/integrations/shop")
    assert attribute(shown, "update-endpoint", "data-path") == "/api/graphql/integrations/shop/config"
    assert f'value="http://127.0.0.1:9/graphql?key={KEY}"' in shown
    assert attribute(shown, "manage", "data-refresh") == "connections"  # each connection introspects
    assert 'id="refresh" class="secondary" disabled>' in shown
    assert 'id="nothing-to-refresh"' in shown
    moved = await call(
        http, alice, "POST", "/api/graphql/integrations/shop/config", {"endpoint": "http://127.0.0.1:8/g"}
    )
    assert moved.json()["endpoint"] == "http://127.0.0.1:8/g"
    assert 'value="http://127.0.0.1:8/g"' in await page(http, alice, "/integrations/shop")
    await call(http, alice, "POST", "/api/graphql/integrations/shop/config", {"endpoint": endpoint})
    carol = await visitor(http, base, CAROL)
    assert KEY not in await page(http, carol, "/integrations/shop")
