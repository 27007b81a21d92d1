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

from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest, jwt_server, start_server
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
    if request.path == "/orders/moved":
        return Answer(status=302, headers=(("location", "http:127.0.0.1/"),))
    if request.path.startswith("/orders") and request.path.endswith("/invoice"):
        return Answer(body=b"%PDF-1.4 invoice", content_type="application/pdf")
    if request.method == "POST" and request.path == "/orders":
        return Answer(status=201, body=json.dumps({"id": "o-2", "status": "pending"}).encode())
    if request.path.startswith("/orders/"):
        if request.headers.get("x-api-key") != SECRET:
            return Answer(status=401, body=b'{"message": "bad key"}')
        # A session cookie, as many APIs set: it must never ride along on another caller's request.
        cookie = (("set-cookie", f"tracking={request.path.rsplit('/', 1)[-1]}; Path=/"),)
        return Answer(
            body=json.dumps({"id": request.path.rsplit("/", 1)[-1], "status": "shipped"}).encode(), headers=cookie
        )
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


async def add_orders_spec(
    http: httpx.AsyncClient, server: ServerUnderTest, upstream: Upstream, **headers: str
) -> dict[str, Any]:
    """The orders integration, as a blob, added by whoever `headers` authenticate."""
    spec = json.dumps(orders_spec(upstream.url))
    added = await http.post(
        server.running.url + "/api/openapi/specs",
        json={"spec": {"kind": "blob", "value": spec}, "slug": "orders"},
        headers=headers,
    )
    assert added.status_code == 200, added.text
    return added.json()


async def add_orders(http: httpx.AsyncClient, server: ServerUnderTest, upstream: Upstream) -> None:
    """The orders integration and an org connection to it."""
    assert await add_orders_spec(http, server, upstream) == {"slug": "orders", "toolCount": 3}
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


async def test_an_invalid_redirect_is_a_typed_failure_and_no_cookie_is_kept_between_calls(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, client: Client
) -> None:
    await add_orders(http, executor, upstream)
    moved = await run(client, 'return await tools.orders.org.myMainKey.orders.getOrder({ orderId: "moved" });')
    assert moved["ok"] is False
    assert moved["error"]["code"] == "upstream_unreachable"
    assert moved["error"]["message"] == f"Upstream {upstream.url} sent an invalid redirect."
    for order in ("first", "second"):
        called = await run(
            client, f'return await tools.orders.org.myMainKey.orders.getOrder({{ orderId: "{order}" }});'
        )
        assert called["ok"] is True
    assert [request.headers.get("cookie") for request in upstream.calls("/orders/")] == [None, None, None]


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


def ndjson_spec(server_url: str) -> str:
    return json.dumps(
        {
            "openapi": "3.0.3",
            "info": {"title": "Builds", "version": "1"},
            "servers": [{"url": server_url}],
            "paths": {
                "/logs": {
                    "get": {
                        "operationId": "streamLogs",
                        "tags": ["logs"],
                        "responses": {
                            "200": {
                                "description": "One JSON line per event",
                                "content": {
                                    "application/x-ndjson": {
                                        "schema": {
                                            "type": "object",
                                            "properties": {"level": {"type": "string"}, "message": {"type": "string"}},
                                        }
                                    }
                                },
                            }
                        },
                    }
                }
            },
        }
    )


def builds(request: Received) -> Answer:
    lines = [{"level": "info", "message": "build started"}, {"level": "info", "message": "step"}, {"level": "ok"}]
    body = "".join(json.dumps(line) + "\n" for line in lines).encode()
    return Answer(body=body, content_type="application/x-ndjson")


async def accept_all(client: Client, code: str) -> Any:
    """Run code, approving every pause it makes (at most ten), as upstream's `executeJson` does."""
    result = await client.call_tool("execute", {"code": code})
    for _ in range(10):
        if "executionId:" not in text_of(result):
            break
        result = await client.call_tool("resume", {"executionId": execution_id(result), "action": "accept"})
    assert not result.is_error, text_of(result)
    return result.structured_content["result"]


async def test_code_alone_adds_a_spec_connects_without_auth_and_reads_an_ndjson_stream(
    executor: ServerUnderTest, nursery: trio.Nursery, client: Client
) -> None:
    logs = await start_upstream(nursery, builds)
    blob = json.dumps(ndjson_spec(logs.url))
    added = await accept_all(
        client,
        f"return await tools.executor.openapi.addSpec({{ spec: {{ kind: 'blob', value: {blob} }}, slug: 'builds' }});",
    )
    assert added == {"ok": True, "data": {"slug": "builds", "toolCount": 1}}
    refused = await run(
        client,
        "return await tools.executor.coreTools.connections.create({ owner: 'org', name: 'public', "
        "integration: 'builds', template: 'none', inputs: {} });",
    )
    assert refused["ok"] is False
    assert refused["error"]["message"] == 'A no-auth connection (template "none") takes no provider credential origin'
    connected = await accept_all(
        client,
        "return await tools.executor.coreTools.connections.create({ owner: 'org', name: 'public', "
        "integration: 'builds', template: 'none' });",
    )
    assert connected["ok"] is True
    assert connected["data"]["template"] == "none"
    assert connected["data"]["address"] == "tools.builds.org.public"
    rows = await run(
        client,
        """
        const found = await tools.search({ namespace: "builds", query: "" });
        const described = await tools.describe.tool({ path: found.items[0].path });
        const result = await tools.builds.org.public.logs.streamLogs({});
        return { path: found.items[0].path, output: described.outputTypeScript, result };
        """,
    )
    assert rows["path"] == "builds.org.public.logs.streamLogs"
    assert "[]" in rows["output"]
    assert rows["result"]["ok"] is True
    assert rows["result"]["data"][0] == {"level": "info", "message": "build started"}
    assert len(rows["result"]["data"]) == 3


async def test_a_personal_connection_is_private_to_its_account_and_an_org_one_is_shared(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    server = await jwt_server(nursery, data_dir, tmp_path, allow_local_network=True)
    alice, bob = bearer(mint("alice", "acme")), bearer(mint("bob", "acme"))
    await add_orders_spec(http, server, upstream, **alice)
    for who, owner, name in ((alice, "user", "personal"), (alice, "org", "main")):
        created = await http.post(
            server.running.url + "/api/connections",
            json={"owner": owner, "name": name, "integration": "orders", "template": "apikey-0", "value": SECRET},
            headers=who,
        )
        assert created.status_code == 200, created.text

    async def addresses(headers: dict[str, str]) -> list[str]:
        async with connect(server.url, mode="legacy", headers=headers) as (client, _):
            found = await run(client, 'return await tools.search({ namespace: "orders", query: "getOrder" });')
            return sorted({item["path"].rsplit(".", 2)[0] for item in found["items"]})

    assert await addresses(alice) == ["orders.org.main", "orders.user.personal"]
    assert await addresses(bob) == ["orders.org.main"]
    listed = await http.get(server.running.url + "/api/connections", headers=bob)
    assert [connection["address"] for connection in listed.json()] == ["tools.orders.org.main"]


async def test_integrations_and_connections_survive_a_restart_and_secrets_stay_out_of_the_log(
    nursery: trio.Nursery, data_dir: Path, upstream: Upstream, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    first = await start_server(nursery, data_dir, allow_local_network=True)
    await add_orders(http, first, upstream)
    await first.stop()
    second = await start_server(nursery, data_dir, allow_local_network=True)
    async with connect(second.url, mode="legacy") as (client, _):
        called = await run(client, 'return await tools.orders.org.myMainKey.orders.getOrder({ orderId: "7" });')
    assert called["ok"] is True
    assert upstream.calls("/orders")[-1].headers["x-api-key"] == SECRET
    assert SECRET not in caplog.text


async def test_tool_descriptions_come_from_the_spec_and_a_file_says_how_to_emit_it(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, client: Client
) -> None:
    await add_orders(http, executor, upstream)
    (orders,) = [i for i in await api(http, executor, "GET", "/api/integrations") if i["slug"] == "orders"]
    assert (orders["name"], orders["description"]) == ("Orders API", "Orders placed in the shop.")
    rows = {row["name"]: row for row in await api(http, executor, "GET", "/api/tools?integration=orders")}
    assert rows["orders.getOrder"]["description"] == "Fetch one order by id."
    assert rows["orders.createOrder"]["description"] == "Create an order"
    invoice = rows["orders.getOrderInvoice"]["description"]
    assert invoice.startswith("Download the invoice of an order.")
    assert "emit(result.data)" in invoice
    assert "emit(" not in rows["orders.getOrder"]["description"]
    described = await run(
        client, 'return await tools.describe.tool({ path: "orders.org.myMainKey.orders.getOrderInvoice" });'
    )
    assert "emit(result.data)" in described["description"]
    assert "ToolFile" in described["outputTypeScript"]
    result = await run(client, 'return await tools.orders.org.myMainKey.orders.getOrderInvoice({ orderId: "1" });')
    assert result["ok"] is True
    assert result["data"]["_tag"] == "ToolFile"
    assert result["data"]["mimeType"] == "application/pdf"
    assert result["data"]["byteLength"] == len(b"%PDF-1.4 invoice")
