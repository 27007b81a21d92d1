"""Toolkits end to end: a real server, the official client at `/mcp/toolkits/<slug>` in both eras and in
passthrough, a real upstream behind an OpenAPI integration. The API's shapes and refusals, what a toolkit shows at
each level (changed while a session is open), its endpoint's refusals, and an API key bound to one toolkit."""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp import Client, MCPError

from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest, jwt_server
from tests.integration.test_passthrough import executor as executor
from tests.integration.test_passthrough import orders as orders
from tests.integration.test_passthrough import upstream as upstream
from tests.mcp_http import envelope, headers, initialize_body
from tests.process import run_cli
from tests.sdk import connect, text_of

GET_ORDER = "orders.org.myMainKey.orders.getOrder"
INVOICE = "orders.org.myMainKey.orders.getOrderInvoice"
CREATE_ORDER = "orders.org.myMainKey.orders.createOrder"


async def api(http: httpx.AsyncClient, server: ServerUnderTest, method: str, path: str, body: Any = None) -> Any:
    response = await http.request(method, server.running.url + "/api/toolkits" + path, json=body)
    assert response.status_code == 200, (response.status_code, response.text)
    return response.json()


async def toolkit(http: httpx.AsyncClient, server: ServerUnderTest, slug: str, *levels: tuple[str, str]) -> str:
    made = await api(http, server, "POST", "", {"owner": "org", "name": slug.upper(), "slug": slug})
    for pattern, level in levels:
        await api(http, server, "POST", f"/{made['id']}/connections", {"pattern": pattern, "level": level})
    return made["id"]


async def run(client: Client, code: str) -> Any:
    result = await client.call_tool("execute", {"code": code})
    assert not result.is_error, text_of(result)
    return result.structured_content["result"]


def searched(found: dict[str, Any]) -> list[str]:
    return sorted(item["path"] for item in found["items"])


# -- the API --------------------------------------------------------------------------------------


async def test_the_api_has_upstreams_shapes_with_a_level_on_each_connection(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    made = await api(http, executor, "POST", "", {"owner": "org", "name": "Sales CRM"})
    assert made["id"].startswith("tk_")
    assert {key: made[key] for key in ("owner", "slug", "name")} == {
        "owner": "org",
        "slug": "sales-crm",
        "name": "Sales CRM",
    }
    assert (await api(http, executor, "GET", "")) == {"toolkits": [made]}
    tid = made["id"]
    first = await api(http, executor, "POST", f"/{tid}/policies", {"pattern": "orders.*", "action": "block"})
    second = await api(http, executor, "POST", f"/{tid}/policies", {"pattern": "*", "action": "require_approval"})
    assert first["id"].startswith("tkpol_")
    listed = await api(http, executor, "GET", f"/{tid}/policies")
    assert [row["id"] for row in listed["policies"]] == [second["id"], first["id"]]  # a new rule goes first
    row = await api(http, executor, "POST", f"/{tid}/connections", {"pattern": "orders.*", "level": "read"})
    assert (row["id"][:7], row["level"], row["toolkitId"]) == ("tkconn_", "read", tid)
    again = await api(http, executor, "POST", f"/{tid}/connections", {"pattern": "orders.*"})
    assert again == row  # idempotent on the pattern
    changed = await api(http, executor, "PATCH", f"/{tid}/connections/{row['id']}", {"level": "full"})
    assert changed["level"] == "full"
    renamed = await api(http, executor, "PATCH", f"/{tid}", {"name": "CRM", "slug": "crm"})
    assert (renamed["name"], renamed["slug"]) == ("CRM", "crm")
    assert await api(http, executor, "DELETE", f"/{tid}/policies/{first['id']}") == {"removed": True}
    assert await api(http, executor, "DELETE", f"/{tid}") == {"removed": True}
    assert (await api(http, executor, "GET", "")) == {"toolkits": []}


@pytest.mark.parametrize(
    ("method", "path", "body", "message"),
    [
        ("POST", "", {"owner": "org", "name": " "}, "Toolkit name is required."),
        ("POST", "", {"owner": "org", "name": "x", "slug": "Not A Slug"}, "slug must be 1-63 lowercase"),
        ("POST", "", {"owner": "team", "name": "x"}, 'owner must be "org" or "user"'),
        ("PATCH", "/tk_missing", {"name": "y"}, "Toolkit not found."),
        ("POST", "/tk_missing/policies", {"pattern": "*", "action": "block"}, "Toolkit not found."),
    ],
)
async def test_a_bad_request_is_a_toolkit_error_and_writes_nothing(
    executor: ServerUnderTest, http: httpx.AsyncClient, method: str, path: str, body: Any, message: str
) -> None:
    refused = await http.request(method, executor.running.url + "/api/toolkits" + path, json=body)
    assert refused.status_code == 400
    assert refused.json()["_tag"] == "ToolkitError"
    assert refused.json()["message"].startswith(message)
    assert (await api(http, executor, "GET", "")) == {"toolkits": []}


async def test_a_slug_is_one_toolkits_and_a_bad_pattern_is_named(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    tid = await toolkit(http, executor, "crm")
    taken = await http.post(executor.running.url + "/api/toolkits", json={"owner": "org", "name": "crm"})
    assert taken.json() == {"_tag": "ToolkitError", "message": 'Toolkit slug "crm" is already in use.'}
    bad = await http.post(
        executor.running.url + f"/api/toolkits/{tid}/policies", json={"pattern": "me*", "action": "block"}
    )
    assert bad.json() == {"_tag": "ToolkitError", "message": "Invalid toolkit policy pattern: me*"}


# -- what a toolkit shows -------------------------------------------------------------------------


async def test_a_toolkit_shows_its_connections_at_their_levels_as_they_change(
    orders: None, executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    tid = await toolkit(http, executor, "crm", ("orders.*", "read"))
    row = (await api(http, executor, "GET", f"/{tid}/connections"))["connections"][0]
    search = 'return await tools.search({ namespace: "orders", query: "" });'
    call_create = f"return await tools.{CREATE_ORDER}({{ items: [] }});"
    async with connect(executor.url + "/toolkits/crm", mode="legacy") as (client, _):
        assert searched(await run(client, search)) == [GET_ORDER, INVOICE]  # GETs only
        assert (await run(client, call_create))["error"]["code"] == "tool_not_found"
        hidden = await run(client, "return await tools.executor.coreTools.policies.list({});")
        assert hidden["error"]["code"] == "tool_not_found"  # no pattern shows the built-in tools
        listed = await run(client, "return await tools.executor.integrations.list({});")
        assert [(item["id"], item["toolCount"]) for item in listed["items"]] == [("orders", 2)]
        described = await run(client, f'return await tools.describe.tool({{ path: "{CREATE_ORDER}" }});')
        assert described["error"]["code"] == "tool_not_found"
        assert "orders" in (await client.list_tools()).tools[0].description  # execute names what it shows

        await api(http, executor, "PATCH", f"/{tid}/connections/{row['id']}", {"level": "full"})
        assert searched(await run(client, search)) == [CREATE_ORDER, GET_ORDER, INVOICE]  # the open session sees it
        await api(http, executor, "PATCH", f"/{tid}/connections/{row['id']}", {"level": "off"})
        assert searched(await run(client, search)) == []
        assert (await run(client, f'return await tools.{GET_ORDER}({{ orderId: "1" }});'))["error"]["code"] == (
            "tool_not_found"
        )
        await api(http, executor, "DELETE", f"/{tid}")  # gone: its endpoint is not found, open session or not
        with pytest.raises(MCPError, match="Toolkit not found"):
            await run(client, search)
    async with connect(executor.url) as (default, _):  # the default endpoint never changed
        assert searched(await run(default, search)) == [CREATE_ORDER, GET_ORDER, INVOICE]


async def test_passthrough_and_2026_on_a_toolkit_show_the_same(
    orders: None, executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    await toolkit(http, executor, "crm", ("orders.*", "read"), ("executor.coreTools.policies.list", "full"))
    async with connect(executor.url + "/toolkits/crm?mode=passthrough") as (passthrough, _):
        found = await passthrough.call_tool("search", {"namespace": "orders", "query": ""})
        assert GET_ORDER in text_of(found)
        assert CREATE_ORDER not in text_of(found)
        refused = await passthrough.call_tool("invoke", {"path": CREATE_ORDER, "args": {"items": []}})
        assert refused.structured_content["result"]["error"]["code"] == "tool_not_found"
        listed = await passthrough.call_tool("invoke", {"path": "executor.coreTools.policies.list"})
        assert listed.structured_content["result"]["ok"] is True
    async with connect(executor.url + "/toolkits/crm") as (modern, recorder):
        assert modern.protocol_version == "2026-07-28"
        assert recorder.session_id is None
        assert searched(await run(modern, 'return await tools.search({ namespace: "orders", query: "" });')) == [
            GET_ORDER,
            INVOICE,
        ]


# -- the endpoint ---------------------------------------------------------------------------------


async def test_an_unknown_toolkit_is_not_found_and_sessions_stay_on_their_endpoint(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    for path in ("/mcp/toolkits/nope", "/mcp/toolkits/Not_A_Slug"):
        refused = await http.post(executor.running.url + path, json=initialize_body(), headers=headers())
        assert envelope(refused) == (404, -32000, "Toolkit not found"), path
    await toolkit(http, executor, "crm")
    opened = await http.post(executor.url, json=initialize_body(), headers=headers())
    session_id = opened.headers["mcp-session-id"]
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    elsewhere = await http.post(executor.url + "/toolkits/crm", json=ping, headers=headers(session_id))
    assert envelope(elsewhere) == (403, -32003, "MCP session does not belong to the current bearer")
    metadata = await http.get(executor.running.url + "/.well-known/oauth-protected-resource/mcp/toolkits/crm")
    assert metadata.json()["resource"] == executor.url + "/toolkits/crm"


async def test_a_key_bound_to_a_toolkit_opens_that_endpoint_and_nothing_else(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    server = await jwt_server(nursery, data_dir, tmp_path)
    created = await run_cli(
        "keys", "create", "--user", "bot", "--org", "acme", "--toolkit", "crm", "--data-dir", str(data_dir)
    )
    assert created.returncode == 0, created.stderr
    assert b"bound to toolkit crm" in created.stderr
    key = created.stdout.decode().strip()
    auth = {"authorization": f"Bearer {key}"}

    challenge = await http.post(server.url + "/toolkits/crm", json=initialize_body(), headers=headers())
    assert "oauth-protected-resource/mcp/toolkits/crm" in challenge.headers["www-authenticate"]
    not_yet = await http.post(server.url + "/toolkits/crm", json=initialize_body(), headers=headers(**auth))
    assert envelope(not_yet) == (404, -32000, "Toolkit not found")
    bound = "This API key is bound to a toolkit: use its endpoint, /mcp/toolkits/crm"
    for path in ("", "/toolkits/other"):
        refused = await http.post(server.url + path, json=initialize_body(), headers=headers(**auth))
        assert envelope(refused) == (403, -32001, bound), path
    api_refused = await http.get(server.running.url + "/api/policies", headers=auth)
    assert (api_refused.status_code, api_refused.json()) == (403, {"error": bound})
    made = await http.post(server.running.url + "/api/toolkits", json={"owner": "org", "name": "crm"}, headers=auth)
    assert made.status_code == 403  # nor may it make its own toolkit

    admin = bearer(mint("alice", "acme"))
    made = await http.post(server.running.url + "/api/toolkits", json={"owner": "org", "name": "crm"}, headers=admin)
    assert made.status_code == 200, made.text
    opened = await http.post(server.url + "/toolkits/crm", json=initialize_body(), headers=headers(**auth))
    assert opened.status_code == 200, opened.text

    listed = await run_cli("keys", "list", "--json", "--data-dir", str(data_dir))
    assert [row["toolkit"] for row in json.loads(listed.stdout)] == ["crm"]
