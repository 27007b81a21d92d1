"""Upstream's integration scenarios (upstream-integrations §6), end to end: a real server, a real local
upstream that records what it receives, the HTTP API to add specs and connections, and the official MCP
client running code that finds, describes and calls the tools."""

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp import Client

from tests.conftest import ServerUnderTest, start_server
from tests.sdk import connect, execution_id, text_of
from tests.upstream import Answer, Received, Upstream, start_upstream

SECRET = "sk-live-0123456789abcdef"


def orders_spec(server_url: str) -> dict[str, Any]:
    order_id = {"name": "orderId", "in": "path", "required": True, "schema": {"type": "string"}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "Orders API", "version": "1.0.0", "description": "Orders placed in the shop."},
        "servers": [{"url": server_url}],
        "security": [{"apiKey": []}],
        "paths": {
            "/orders/{orderId}": {
                "get": {
                    "operationId": "getOrder",
                    "tags": ["orders"],
                    "description": "Fetch one order by id.",
                    "parameters": [
                        order_id,
                        {
                            "name": "include",
                            "in": "query",
                            "schema": {"type": "array", "items": {"type": "string", "enum": ["items", "customer"]}},
                        },
                        {"name": "X-Trace", "in": "header", "schema": {"type": "string"}},
                        {"name": "session", "in": "cookie", "schema": {"type": "string"}},
                    ],
                    "responses": {
                        "200": {
                            "description": "The order",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Order"}}},
                        }
                    },
                }
            },
            "/orders": {
                "post": {
                    "operationId": "createOrder",
                    "tags": ["orders"],
                    "summary": "Create an order",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "items": {
                                            "type": "array",
                                            "items": {
                                                "type": "object",
                                                "properties": {
                                                    "sku": {"type": "string"},
                                                    "quantity": {"type": "number"},
                                                },
                                            },
                                        },
                                        "note": {"type": "string"},
                                    },
                                    "required": ["items"],
                                }
                            }
                        },
                    },
                    "responses": {
                        "201": {
                            "description": "Created",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Order"}}},
                        }
                    },
                }
            },
            "/orders/{orderId}/invoice": {
                "get": {
                    "operationId": "getOrderInvoice",
                    "tags": ["orders"],
                    "description": "Download the invoice of an order.",
                    "parameters": [order_id],
                    "responses": {
                        "200": {
                            "description": "The invoice",
                            "content": {"application/pdf": {"schema": {"type": "string", "format": "binary"}}},
                        }
                    },
                }
            },
        },
        "components": {
            "schemas": {
                "Order": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "status": {"type": "string", "enum": ["pending", "shipped", "delivered"]},
                        "total": {"type": "number", "nullable": True},
                    },
                    "required": ["id", "status"],
                }
            },
            "securitySchemes": {"apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"}},
        },
    }


def shop(request: Received) -> Answer:
    if request.path.startswith("/orders") and request.path.endswith("/invoice"):
        return Answer(body=b"%PDF-1.4 invoice", content_type="application/pdf")
    if request.method == "POST" and request.path == "/orders":
        return Answer(status=201, body=json.dumps({"id": "o-2", "status": "pending"}).encode())
    if request.path.startswith("/orders/"):
        if request.headers.get("x-api-key") != SECRET:
            return Answer(status=401, body=b'{"message": "bad key"}')
        return Answer(body=json.dumps({"id": request.path.rsplit("/", 1)[-1], "status": "shipped"}).encode())
    return Answer(status=404, body=b'{"message": "no such route"}')


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, allow_local_network=True)


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    return await start_upstream(nursery, shop)


async def api(http: httpx.AsyncClient, server: ServerUnderTest, method: str, path: str, body: Any = None) -> Any:
    response = await http.request(method, server.running.url + path, json=body)
    assert response.status_code == 200, (response.status_code, response.text)
    return response.json()


async def add_orders(http: httpx.AsyncClient, server: ServerUnderTest, upstream: Upstream) -> None:
    spec = json.dumps(orders_spec(upstream.url))
    added = await api(
        http, server, "POST", "/api/openapi/specs", {"spec": {"kind": "blob", "value": spec}, "slug": "orders"}
    )
    assert added == {"slug": "orders", "toolCount": 3}
    connection = await api(
        http,
        server,
        "POST",
        "/api/connections",
        {"owner": "org", "name": "My Main Key", "integration": "orders", "template": "apikey-0", "value": SECRET},
    )
    assert connection["address"] == "tools.orders.org.myMainKey"
    assert SECRET not in json.dumps(connection)


async def run(client: Client, code: str) -> Any:
    result = await client.call_tool("execute", {"code": code})
    assert not result.is_error, text_of(result)
    return result.structured_content["result"]


async def test_an_agent_finds_describes_and_calls_an_openapi_tool_with_the_connection_credential(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, client: Client
) -> None:
    await add_orders(http, executor, upstream)
    found = await run(client, 'return await tools.search({ namespace: "orders", query: "order" });')
    paths = [item["path"] for item in found["items"]]
    assert "orders.org.myMainKey.orders.getOrder" in paths
    described = await run(client, 'return await tools.describe.tool({ path: "orders.org.myMainKey.orders.getOrder" });')
    assert described["name"] == "orders.getOrder"
    assert described["description"] == "Fetch one order by id."
    assert described["inputTypeScript"] == (
        '{ orderId: string; include?: ("items" | "customer")[]; "X-Trace"?: string; session?: string; }'
    )
    assert described["outputTypeScript"] == (
        "{ ok: true; data: Order; http?: ToolHttpMeta } | { ok: false; error: ToolError }"
    )
    assert described["typeScriptDefinitions"]["Order"] == (
        '{ id: string; status: "pending" | "shipped" | "delivered"; total?: number | null; }'
    )
    called = await run(
        client,
        'return await tools.orders.org.myMainKey.orders.getOrder({ orderId: "a b/c", include: ["items", "customer"], '
        '"X-Trace": "t2" });',
    )
    assert called["ok"] is True
    assert called["data"] == {"id": "a%20b%2Fc", "status": "shipped"}
    assert called["http"]["status"] == 200
    assert called["http"]["headers"]["content-type"] == "application/json"
    (request,) = upstream.calls("/orders")
    assert request.path == "/orders/a%20b%2Fc"
    assert request.query == "include=items&include=customer"
    assert request.headers["x-api-key"] == SECRET
    assert request.headers["x-trace"] == "t2"
    assert SECRET not in json.dumps([found, described, called])


async def test_a_write_pauses_with_its_method_and_path_and_reaches_the_upstream_only_once_approved(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, client: Client
) -> None:
    await add_orders(http, executor, upstream)
    code = (
        'return await tools.orders.org.myMainKey.orders.createOrder({ body: { items: [{ sku: "a", quantity: 2 }] } });'
    )
    paused = await client.call_tool("execute", {"code": code})
    assert text_of(paused).startswith('Execution paused: POST /orders\n\nArguments:\n{\n  "body": {')
    assert upstream.calls("/orders") == []
    resumed = await client.call_tool("resume", {"executionId": execution_id(paused), "action": "accept"})
    result = resumed.structured_content["result"]
    assert result["ok"] is True
    assert result["data"] == {"id": "o-2", "status": "pending"}
    (request,) = upstream.calls("/orders")
    assert request.method == "POST"
    assert json.loads(request.body) == {"items": [{"sku": "a", "quantity": 2}]}
    assert request.headers["content-type"] == "application/json"


async def test_unknown_arguments_are_refused_before_anything_is_sent(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, client: Client
) -> None:
    await add_orders(http, executor, upstream)
    result = await run(
        client, 'return await tools.orders.org.myMainKey.orders.getOrder({ orderId: "2", doesNotExist: "nope" });'
    )
    assert result["ok"] is False
    assert result["error"]["code"] == "invalid_tool_arguments"
    assert "doesNotExist" in result["error"]["message"]
    assert upstream.calls("/orders") == []


async def test_a_namespace_enumerates_in_path_order_and_reconciles_with_the_integration_count(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, client: Client
) -> None:
    await add_orders(http, executor, upstream)
    listed = await run(client, 'return await tools.executor.integrations.list({ query: "orders" });')
    (orders,) = listed["items"]
    assert orders["id"] == "orders"
    assert orders["toolCount"] == 3
    everything = await run(client, 'return await tools.search({ namespace: "orders", query: "" });')
    assert everything["total"] == 3
    paths = [item["path"] for item in everything["items"]]
    assert paths == sorted(paths)
    paged = await run(
        client,
        """
        const paths = [];
        let offset = 0;
        for (let page = 0; page < 5; page++) {
          const found = await tools.search({ namespace: "orders", query: "", limit: 2, offset });
          paths.push(...found.items.map((item) => item.path));
          if (!found.hasMore) break;
          offset = found.nextOffset;
        }
        return paths;
        """,
    )
    assert paged == paths
    nothing = await run(client, 'return await tools.search({ query: "" });')
    assert nothing["total"] == 0


async def test_a_rejected_credential_and_a_missing_one_are_values_with_the_recovery(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, client: Client
) -> None:
    await add_orders(http, executor, upstream)
    providers = await api(http, executor, "GET", "/api/providers")
    await api(
        http,
        executor,
        "POST",
        "/api/connections",
        {
            "owner": "org",
            "name": "missing",
            "integration": "orders",
            "template": "apikey-0",
            "from": {"provider": providers[0], "id": str(uuid.uuid4())},
        },
    )
    missing = await run(client, 'return await tools.orders.org.missing.orders.getOrder({ orderId: "1" });')
    assert missing["ok"] is False
    assert missing["error"]["code"] == "connection_value_missing"
    assert missing["error"]["details"]["category"] == "authentication"
    await api(
        http,
        executor,
        "POST",
        "/api/connections",
        {"owner": "org", "name": "wrong", "integration": "orders", "template": "apikey-0", "value": "not-the-key"},
    )
    rejected = await run(client, 'return await tools.orders.org.wrong.orders.getOrder({ orderId: "1" });')
    assert rejected["ok"] is False
    assert rejected["error"]["code"] == "connection_rejected"
    assert rejected["error"]["status"] == 401
    assert rejected["error"]["message"] == (
        'Upstream rejected credentials for "orders" with HTTP 401. Re-authenticate or update the connection '
        '"wrong" before retrying this tool.'
    )
    assert "not-the-key" not in json.dumps(rejected)


async def test_the_execute_description_lists_connected_integrations(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    async with connect(executor.url, mode="legacy") as (before, _):
        (execute, *_) = (await before.list_tools()).tools
        assert "## Available integrations" not in execute.description
    await add_orders(http, executor, upstream)
    async with connect(executor.url, mode="legacy") as (after, _):
        (execute, *_) = (await after.list_tools()).tools
        inventory = execute.description.split("## Available integrations", 1)[1]
        assert "\n- `orders`" in inventory
        assert ".org." not in inventory


async def test_a_spec_from_a_url_updates_keeping_its_connections(
    executor: ServerUnderTest, nursery: trio.Nursery, http: httpx.AsyncClient, client: Client
) -> None:
    def spec(paths: dict[str, Any]) -> bytes:
        return json.dumps({"openapi": "3.1.0", "info": {"title": "Ping", "version": "1"}, "paths": paths}).encode()

    ping = {"/ping": {"get": {"operationId": "ping", "responses": {"200": {"description": "pong"}}}}}
    legacy = {"/legacy": {"get": {"operationId": "legacyOp", "responses": {"200": {"description": "ok"}}}}}
    widgets = {"/widgets": {"get": {"operationId": "listWidgets", "responses": {"200": {"description": "ok"}}}}}
    served = {"spec": spec({**ping, **legacy})}
    source = await start_upstream(nursery, lambda request: Answer(body=served["spec"]))
    added = await api(
        http,
        executor,
        "POST",
        "/api/openapi/specs",
        {"spec": {"kind": "url", "url": source.url + "/spec"}, "slug": "pinger"},
    )
    assert added["toolCount"] == 2
    await api(
        http,
        executor,
        "POST",
        "/api/connections",
        {"owner": "org", "name": "main", "integration": "pinger", "template": "none", "description": "curated"},
    )
    served["spec"] = spec({**ping, **widgets})
    updated = await api(http, executor, "POST", "/api/openapi/integrations/pinger/spec", {})
    assert updated == {
        "slug": "pinger",
        "toolCount": 2,
        "addedTools": ["widgets.listWidgets"],
        "removedTools": ["legacy.legacyOp"],
    }
    found = await run(client, 'return await tools.search({ namespace: "pinger", query: "" });')
    assert [item["name"] for item in found["items"]] == ["ping.getOperation", "widgets.listWidgets"]
    connections = await api(http, executor, "GET", "/api/connections?integration=pinger")
    assert [(c["name"], c["description"]) for c in connections] == [("main", "curated")]
