"""GraphQL endpoints as integrations, end to end: our server, a graphql-core shop on 127.0.0.1 that records
what reached it, the HTTP API, the CLI and the sandbox's core tools to add them, and the official MCP client
running code that finds, describes and calls `query.*` and `mutation.*` tools."""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp import Client

from tests.conftest import ServerUnderTest, start_server
from tests.graphql_upstream import SDL, TOKEN, GraphqlShop, start_graphql_shop
from tests.integration.test_integrations_cli import cli
from tests.sdk import execution_id, text_of

BEARER = [
    {
        "slug": "bearer",
        "kind": "apikey",
        "placements": [{"carrier": "header", "name": "Authorization", "prefix": "Bearer "}],
    }
]
SHOP = "tools.shop.org.main"
ORDER_O1 = {
    "id": "o-1",
    "status": "SHIPPED",
    "total": 12.5,
    "customer": {"id": "c-1", "name": "Ada"},
    "items": [{"sku": "tea", "quantity": 2}],
}


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, allow_local_network=True)


@pytest.fixture
async def shop(nursery: trio.Nursery) -> GraphqlShop:
    return await start_graphql_shop(nursery)


async def api(
    http: httpx.AsyncClient, server: ServerUnderTest, method: str, path: str, body: Any = None, status: int = 200
) -> Any:
    response = await http.request(method, server.running.url + path, json=body)
    assert response.status_code == status, (response.status_code, response.text)
    assert TOKEN not in response.text
    return response.json()


async def run(client: Client, code: str) -> Any:
    result = await client.call_tool("execute", {"code": code})
    assert not result.is_error, text_of(result)
    return result.structured_content["result"]


async def add_shop(http: httpx.AsyncClient, server: ServerUnderTest, shop: GraphqlShop, **extra: Any) -> Any:
    body = {"endpoint": shop.url, "slug": "shop", "name": "Shop", "authenticationTemplate": BEARER, **extra}
    return await api(http, server, "POST", "/api/graphql/integrations", body)


async def connect_shop(http: httpx.AsyncClient, server: ServerUnderTest, token: str = TOKEN) -> Any:
    body = {"owner": "org", "name": "main", "integration": "shop", "template": "bearer", "value": token}
    return await api(http, server, "POST", "/api/connections", body)


async def test_a_connection_introspects_with_its_bearer_and_its_tools_are_found_and_described(
    executor: ServerUnderTest, shop: GraphqlShop, http: httpx.AsyncClient, client: Client
) -> None:
    assert await add_shop(http, executor, shop) == {"slug": "shop", "toolCount": 0}
    assert shop.received == []  # nothing is introspected before a connection brings its credential
    connection = await connect_shop(http, executor)
    assert connection["address"] == SHOP
    (introspected,) = shop.received
    assert introspected.method == "POST"
    assert introspected.headers["content-type"] == "application/json"
    assert introspected.headers["accept"] == "application/json"
    assert introspected.headers["user-agent"] == "executor-graphql"
    assert introspected.headers["authorization"] == f"Bearer {TOKEN}"
    assert "__schema" in json.loads(introspected.body)["query"]

    found = await run(client, 'return await tools.search({ namespace: "shop", query: "order" });')
    paths = [item["path"] for item in found["items"]]
    assert "shop.org.main.query.order" in paths
    assert "shop.org.main.mutation.cancelOrder" in paths
    described = await run(
        client,
        """
        const order = await tools.describe.tool({ path: "shop.org.main.query.order" });
        const cancel = await tools.describe.tool({ path: "shop.org.main.mutation.cancelOrder" });
        const orders = await tools.describe.tool({ path: "shop.org.main.query.orders" });
        return { order, cancel, orders };
        """,
    )
    assert described["order"]["description"] == "Fetch one order by id."
    assert described["order"]["inputTypeScript"] == (
        "{ id: string; select?: string; variables?: { [k: string]: unknown; }; }"
    )
    assert "reason?: string" in described["cancel"]["inputTypeScript"]
    assert described["cancel"]["description"] == "GraphQL mutation: cancelOrder -> Order"
    assert "status?: OrderStatus" in described["orders"]["inputTypeScript"]
    assert "filter?: OrderFilter" in described["orders"]["inputTypeScript"]
    definitions = described["orders"]["typeScriptDefinitions"]
    assert definitions["OrderStatus"] == '"PENDING" | "SHIPPED" | "CANCELLED"'

    summary = await api(http, executor, "GET", "/api/graphql/integrations/shop")
    assert summary["endpoint"] == shop.url
    assert summary["introspection"] == "connection"
    assert summary["canRefresh"] is True
    assert await api(http, executor, "GET", "/api/graphql/integrations/nope") is None
    (listed,) = [row for row in await api(http, executor, "GET", "/api/integrations") if row["slug"] == "shop"]
    assert (listed["kind"], listed["displayUrl"]) == ("graphql", shop.url)


async def test_queries_send_the_operation_and_variables_and_map_every_answer(
    executor: ServerUnderTest, shop: GraphqlShop, http: httpx.AsyncClient, client: Client
) -> None:
    await add_shop(http, executor, shop)
    await connect_shop(http, executor)
    called = await run(client, f'return await {SHOP}.query.order({{ id: "o-1" }});')
    assert called == {"ok": True, "data": {"order": ORDER_O1}}
    assert shop.operations()[-1] == {
        "query": (
            "query Order($id: ID!) { order(id: $id) { id status total customer { id name } items { sku quantity } } }"
        ),
        "variables": {"id": "o-1"},
        "operationName": "Order",
    }
    assert shop.received[-1].headers["authorization"] == f"Bearer {TOKEN}"

    selected = await run(
        client, f'return await {SHOP}.query.order({{ id: "o-1", select: "status customer {{ name }}" }});'
    )
    assert selected == {"ok": True, "data": {"order": {"status": "SHIPPED", "customer": {"name": "Ada"}}}}

    listed = await run(
        client, f'return await {SHOP}.query.orders({{ status: "PENDING", filter: {{ minTotal: 50 }}, select: "id" }});'
    )
    assert listed == {"ok": True, "data": {"orders": [{"id": "o-2"}]}}
    assert shop.operations()[-1]["variables"] == {"status": "PENDING", "filter": {"minTotal": 50}}

    sent = len(shop.received)
    refused = await run(
        client,
        f'return await {SHOP}.query.order({{ id: "o-1", select: "id }} }} mutation {{ cancelOrder(id: 1) {{ id" }});',
    )
    assert refused == {
        "ok": False,
        "error": {"code": "graphql_invalid_selection", "message": "`select` is not a valid GraphQL selection set"},
    }
    unknown = await run(client, f'return await {SHOP}.query.order({{ id: "o-1", doesNotExist: "nope" }});')
    assert unknown["ok"] is False
    assert unknown["error"]["code"] == "invalid_tool_arguments"
    assert "doesNotExist" in unknown["error"]["message"]
    assert len(shop.received) == sent  # neither reached the upstream

    failing = await run(client, f"return await {SHOP}.query.failing({{}});")
    assert failing["ok"] is False
    assert failing["error"]["code"] == "graphql_errors"
    assert failing["error"]["message"] == "the warehouse is on fire"
    assert failing["error"]["details"]["errors"][0]["path"] == ["failing"]
    invalid = await run(client, f'return await {SHOP}.query.order({{ id: "o-1", select: "nope" }});')
    assert invalid["error"]["code"] == "graphql_errors"
    assert "Cannot query field 'nope'" in invalid["error"]["message"]


async def test_a_mutation_pauses_for_approval_runs_once_when_accepted_and_never_when_declined(
    executor: ServerUnderTest, shop: GraphqlShop, http: httpx.AsyncClient, client: Client
) -> None:
    await add_shop(http, executor, shop)
    await connect_shop(http, executor)
    code = f'return await {SHOP}.mutation.cancelOrder({{ id: "o-2", reason: "late" }});'
    paused = await client.call_tool("execute", {"code": code})
    assert text_of(paused).startswith("Execution paused: mutation cancelOrder")
    assert shop.cancelled == []
    resumed = await client.call_tool("resume", {"executionId": execution_id(paused), "action": "accept"})
    result = resumed.structured_content["result"]
    assert result["ok"] is True
    assert result["data"]["cancelOrder"]["status"] == "CANCELLED"
    assert shop.cancelled == [("o-2", "late")]
    assert shop.operations()[-1]["query"].startswith("mutation CancelOrder($id: ID!, $reason: String) {")

    again = await client.call_tool("execute", {"code": code.replace("o-2", "o-1")})
    declined = await client.call_tool("resume", {"executionId": execution_id(again), "action": "decline"})
    assert "declined" in text_of(declined).lower()
    assert shop.cancelled == [("o-2", "late")]

    sent = len(shop.received)
    bad = await run(client, f'return await {SHOP}.mutation.cancelOrder({{ id: "o-1", select: "id }}" }});')
    assert bad["error"]["code"] == "graphql_invalid_selection"  # refused before any approval is asked
    assert len(shop.received) == sent


async def test_an_sdl_integration_works_with_introspection_off_and_a_rejected_credential_is_typed(
    executor: ServerUnderTest, nursery: trio.Nursery, http: httpx.AsyncClient, client: Client
) -> None:
    closed = await start_graphql_shop(nursery, introspection=False)
    assert await add_shop(http, executor, closed, sdl=SDL) == {"slug": "shop", "toolCount": 4}
    assert (await api(http, executor, "GET", "/api/graphql/integrations/shop"))["introspection"] == "snapshot"
    await connect_shop(http, executor)
    assert closed.received == []  # the schema is the SDL's: no introspection
    assert await run(client, f'return await {SHOP}.query.order({{ id: "o-1" }});') == {
        "ok": True,
        "data": {"order": ORDER_O1},
    }
    await connect_shop(http, executor, token="wrong-token")
    rejected = await run(client, f'return await {SHOP}.query.order({{ id: "o-1" }});')
    assert rejected["ok"] is False
    assert rejected["error"]["code"] == "connection_rejected"
    assert rejected["error"]["status"] == 401


async def test_introspection_off_without_an_sdl_fails_the_connection_s_discovery_with_upstream_s_message(
    executor: ServerUnderTest, nursery: trio.Nursery, http: httpx.AsyncClient, data_dir: Path
) -> None:
    closed = await start_graphql_shop(nursery, introspection=False)
    await add_shop(http, executor, closed)
    reason = (
        "Introspection failed with status 400: GraphQL introspection has been disabled, but the requested "
        "query contained the field '__schema'."
    )
    # The connection stands, without tools, and says why in upstream's shape.
    connected = await connect_shop(http, executor)
    assert connected["lastHealth"] == {"status": "degraded", "detail": f"Tool sync failing: {reason}"}
    assert await api(http, executor, "GET", "/api/tools?integration=shop") == []
    failed = await api(http, executor, "POST", "/api/connections/org/shop/main/refresh", status=502)
    assert failed == {"_tag": "ToolDiscoveryError", "message": reason}

    # The CLI saves it alike, but no longer says only "saved connection" with exit 0.
    added = await cli(
        data_dir, "connections", "add", "--integration", "shop", "--name", "cli", "--template", "bearer",
        stdin=TOKEN.encode(),
    )  # fmt: skip
    assert added.returncode == 1
    assert added.stdout == b""
    assert (
        f"executor-mcp: error: saved connection tools.shop.org.cli, but listing its tools failed: {reason} It has "
        "no tools until a listing succeeds"
    ) in added.stderr.decode()
    assert "`executor-mcp connections refresh tools.shop.org.cli`" in added.stderr.decode()
    shown = await api(http, executor, "GET", "/api/connections/org/shop/cli")
    assert shown["lastHealth"] == {"status": "degraded", "detail": f"Tool sync failing: {reason}"}


@pytest.mark.slow  # CLI processes, about 0.7 s each
async def test_the_cli_derives_a_slug_the_sandbox_can_name(
    executor: ServerUnderTest, nursery: trio.Nursery, client: Client, data_dir: Path
) -> None:
    """From a host, the slug used to be `127_0_0_1`, and `tools.127_0_0_1.…` is a syntax error in the sandbox."""
    open_shop = await start_graphql_shop(nursery, auth=None)
    numbered = await cli(data_dir, "integrations", "add-graphql", "--endpoint", open_shop.url, "--slug", "127_0_0_1")
    assert numbered.returncode == 2
    assert b"Invalid slug '127_0_0_1': start with a letter or '_'" in numbered.stderr
    added = await cli(data_dir, "integrations", "add-graphql", "--endpoint", open_shop.url)
    assert added.returncode == 0, added.stderr
    assert added.stdout == b"graphql_127_0_0_1\n"
    connected = await cli(
        data_dir, "connections", "add", "--integration", "graphql_127_0_0_1", "--name", "main", "--template", "none"
    )
    assert connected.returncode == 0, connected.stderr
    called = await run(client, 'return await tools.graphql_127_0_0_1.org.main.query.order({ id: "o-1" });')
    assert called == {"ok": True, "data": {"order": ORDER_O1}}


async def test_a_query_parameter_credential_is_placed_in_the_query_and_shown_as_a_placement(
    executor: ServerUnderTest, nursery: trio.Nursery, http: httpx.AsyncClient, client: Client
) -> None:
    keyed = await start_graphql_shop(nursery, auth="query")
    template = [{"slug": "key", "kind": "apikey", "placements": [{"carrier": "query", "name": "api_key"}]}]
    await api(
        http,
        executor,
        "POST",
        "/api/graphql/integrations",
        {"endpoint": keyed.url, "slug": "shop", "authenticationTemplate": template, "headers": {"X-Team": "t-1"}},
    )
    (integration,) = [row for row in await api(http, executor, "GET", "/api/integrations") if row["slug"] == "shop"]
    assert integration["authMethods"][0]["placements"] == [{"carrier": "query", "name": "api_key", "prefix": ""}]
    body = {"owner": "org", "name": "main", "integration": "shop", "template": "key", "value": TOKEN}
    await api(http, executor, "POST", "/api/connections", body)
    assert keyed.received[0].query == f"api_key={TOKEN}"
    assert await run(client, f'return await {SHOP}.query.order({{ id: "o-2", select: "id" }});') == {
        "ok": True,
        "data": {"order": {"id": "o-2"}},
    }
    assert keyed.received[-1].headers["x-team"] == "t-1"

    config = await api(http, executor, "GET", "/api/graphql/integrations/shop/config")
    assert config["endpoint"] == keyed.url
    assert config["headers"] == {"X-Team": "t-1"}
    assert config["authenticationTemplate"][0]["placements"] == [{"carrier": "query", "name": "api_key", "prefix": ""}]
    changed = await api(
        http, executor, "POST", "/api/graphql/integrations/shop/config", {"headers": None, "queryParams": {"v": "2"}}
    )
    assert "headers" not in changed
    assert changed["queryParams"] == {"v": "2"}
    await run(client, f'return await {SHOP}.query.order({{ id: "o-2", select: "id" }});')
    assert keyed.received[-1].query == f"v=2&api_key={TOKEN}"
    assert "x-team" not in keyed.received[-1].headers


async def test_code_adds_an_integration_with_approval_and_reads_it_back(
    executor: ServerUnderTest, shop: GraphqlShop, client: Client
) -> None:
    code = (
        f"return await tools.executor.graphql.addIntegration({{ endpoint: {json.dumps(shop.url)}, slug: 'shop', "
        f"sdl: {json.dumps(SDL)} }});"
    )
    paused = await client.call_tool("execute", {"code": code})
    assert text_of(paused).startswith("Execution paused: Add a GraphQL integration")
    resumed = await client.call_tool("resume", {"executionId": execution_id(paused), "action": "accept"})
    assert resumed.structured_content["result"] == {"ok": True, "data": {"slug": "shop", "toolCount": 4}}
    shown = await run(client, "return await tools.executor.graphql.getIntegration({ slug: 'shop' });")
    assert shown["ok"] is True
    assert (shown["data"]["slug"], shown["data"]["introspection"]) == ("shop", "snapshot")
    refused = await run(client, "return await tools.executor.graphql.addIntegration({ slug: 'x' });")
    assert refused["ok"] is False  # no endpoint: refused before any approval is asked


@pytest.mark.slow  # CLI processes, about 0.7 s each
async def test_the_cli_adds_an_sdl_integration_the_server_serves(
    executor: ServerUnderTest, shop: GraphqlShop, http: httpx.AsyncClient, data_dir: Path, tmp_path: Path
) -> None:
    sdl = tmp_path / "shop.graphql"
    sdl.write_text(SDL)
    added = await cli(
        data_dir, "integrations", "add-graphql", "--endpoint", shop.url, "--sdl", str(sdl), "--slug", "shop",
        "--header-auth", "Authorization:Bearer ",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stdout == b"shop\n"
    assert b"4 tools" in added.stderr
    listed = await cli(data_dir, "integrations", "list")
    assert listed.stdout.decode().splitlines()[1].split() == ["shop", "graphql", "shop", shop.url]
    shown = json.loads((await cli(data_dir, "integrations", "show", "shop", "--json")).stdout)
    assert shown["authMethods"][0]["placements"] == [
        {"carrier": "header", "name": "Authorization", "prefix": "Bearer "}
    ]
    body = {"owner": "org", "name": "main", "integration": "shop", "template": "apikey", "value": TOKEN}
    await api(http, executor, "POST", "/api/connections", body)
    rows = await api(http, executor, "GET", "/api/tools?integration=shop")
    assert [row["name"] for row in rows] == ["mutation.cancelOrder", "query.failing", "query.order", "query.orders"]
