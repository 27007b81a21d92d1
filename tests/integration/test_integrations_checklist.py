"""The wire details agents depend on (upstream-integrations §7.3), item by item, against a real server and a
real upstream; and hostile specs refused at the API with one line, leaving what exists untouched."""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp import Client

from tests.conftest import ServerUnderTest, start_server
from tests.sdk import execution_id, text_of
from tests.upstream import Answer, Received, Upstream, start_upstream

KEY = "key-checklist-5b8e1f"
STATIC = "static-header-value"
REGION = {"default": "us", "enum": ["us", "eu", "ap"]}


def spec(server_url: str) -> dict[str, Any]:
    item_id = {"name": "itemId", "in": "path", "required": True, "schema": {"type": "string"}}
    ok = {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Checklist", "version": "1"},
        "servers": [{"url": server_url}],
        "security": [{"key": []}],
        "components": {"securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "x-api-key"}}},
        "paths": {
            "/items/{itemId}": {
                "get": {"operationId": "getItem", "tags": ["items"], "parameters": [item_id], "responses": ok},
                "put": {
                    "operationId": "putItem",
                    "servers": [
                        {"url": server_url},
                        {"url": server_url + "/{region}", "variables": {"region": REGION}},
                    ],
                    "tags": ["items"],
                    "parameters": [item_id],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": {"type": "object"}},
                            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                        },
                    },
                    "responses": {"204": {"description": "stored"}},
                },
            },
            "/plain": {
                "get": {"operationId": "plain", "tags": ["misc"], "responses": {"200": {"description": "text"}}}
            },
            "/nothing": {
                "get": {"operationId": "nothing", "tags": ["misc"], "responses": {"204": {"description": "no"}}}
            },
            "/echo-header": {
                "get": {
                    "operationId": "echoHeader",
                    "tags": ["misc"],
                    "parameters": [{"name": "x-api-key", "in": "header", "schema": {"type": "string"}}],
                    "responses": ok,
                }
            },
        },
    }


def respond(request: Received) -> Answer:
    if request.path == "/plain":
        return Answer(body=b"just text", content_type="text/plain", headers=(("X-Custom", "Yes"),))
    if request.path == "/nothing" or request.method == "PUT":
        return Answer(status=204, content_type="")
    return Answer(body=json.dumps({"path": request.path}).encode())


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, allow_local_network=True)


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    return await start_upstream(nursery, respond)


@pytest.fixture
async def connected(executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient) -> ServerUnderTest:
    base = executor.running.url
    added = await http.post(
        base + "/api/openapi/specs",
        json={
            "spec": {"kind": "blob", "value": json.dumps(spec(upstream.url))},
            "slug": "check",
            "headers": {"x-static": STATIC},
        },
    )
    assert added.status_code == 200, added.text
    created = await http.post(
        base + "/api/connections",
        json={"owner": "org", "name": "Main Key", "integration": "check", "template": "apikey-0", "value": KEY},
    )
    assert created.status_code == 200, created.text
    return executor


async def run(client: Client, code: str) -> Any:
    result = await client.call_tool("execute", {"code": code})
    assert not result.is_error, text_of(result)
    return result.structured_content["result"]


async def test_1_the_address_grammar(connected: ServerUnderTest, client: Client) -> None:
    found = await run(client, 'return await tools.search({ namespace: "check", query: "getItem" });')
    assert found["items"][0]["path"] == "check.org.mainKey.items.getItem"  # the tool name keeps its dot
    for path in ("check.team.mainKey.items.getItem", "check.org.mainKey", "check..mainKey.items.getItem"):
        missing = await run(client, f"return await tools[{json.dumps(path)}]({{}});")
        assert missing["error"]["code"] == "tool_not_found"


async def test_3_success_envelopes(connected: ServerUnderTest, client: Client) -> None:
    text = await run(client, "return await tools.check.org.mainKey.misc.plain({});")
    assert text["data"] == "just text"
    assert text["http"]["headers"]["x-custom"] == "Yes"
    assert {"content-type", "date", "server"} <= set(text["http"]["headers"])
    empty = await run(client, "return await tools.check.org.mainKey.misc.nothing({});")
    assert empty == {"ok": True, "data": None, "http": empty["http"]}
    assert empty["http"]["status"] == 204


async def test_5_pre_flight_messages(connected: ServerUnderTest, client: Client, upstream: Upstream) -> None:
    no_id = await run(client, "return await tools.check.org.mainKey.items.getItem({});")
    assert no_id["error"] == {"code": "invalid_tool_arguments", "message": "Missing required path parameter: itemId"}
    no_body = await run(client, 'return await tools.check.org.mainKey.items.putItem({ itemId: "1" });')
    assert no_body["error"]["code"] == "invalid_tool_arguments"
    assert no_body["error"]["message"].startswith("Missing required request body")
    assert upstream.calls("/items") == []


async def test_6_and_7_input_schema_and_typescript(
    connected: ServerUnderTest, client: Client, http: httpx.AsyncClient, upstream: Upstream
) -> None:
    schema = await http.get(
        connected.running.url + "/api/tools/schema", params={"address": "tools.check.org.mainKey.items.putItem"}
    )
    assert schema.status_code == 200, schema.text
    properties = schema.json()["inputSchema"]["properties"]
    assert {"itemId", "body", "bodyBase64", "contentType", "server"} <= set(properties)
    assert schema.json()["inputSchema"]["additionalProperties"] is False
    server_url = properties["server"]["properties"]["url"]
    assert (server_url["enum"], server_url["default"]) == ([upstream.url, upstream.url + "/{region}"], upstream.url)
    assert properties["server"]["properties"]["variables"]["properties"]["region"]["enum"] == ["us", "eu", "ap"]
    described = await run(client, 'return await tools.describe.tool({ path: "check.org.mainKey.misc.nothing" });')
    assert "inputTypeScript" not in described
    assert (
        described["outputTypeScript"]
        == "{ ok: true; data: unknown; http?: ToolHttpMeta } | { ok: false; error: ToolError }"
    )
    assert {"ToolError", "ToolHttpMeta", "ToolFile"} <= set(described["typeScriptDefinitions"])


async def test_9_writes_and_catalog_changes_ask_for_approval(connected: ServerUnderTest, client: Client) -> None:
    paused = await client.call_tool(
        "execute", {"code": 'return await tools.check.org.mainKey.items.putItem({ itemId: "1", body: { a: 1 } });'}
    )
    assert text_of(paused).startswith("Execution paused: PUT /items/{itemId}\n\nArguments:\n")
    await client.call_tool("resume", {"executionId": execution_id(paused), "action": "decline"})
    gated = {
        "tools.executor.openapi.addSpec({ spec: { kind: 'blob', value: '{}' } })": "Add an OpenAPI integration",
        "tools.executor.coreTools.connections.remove({ owner: 'org', integration: 'check', name: 'mainKey' })": (
            "Approve executor.coreTools.connections.remove?"
        ),
        "tools.executor.coreTools.connections.refresh({ owner: 'org', integration: 'check', name: 'mainKey' })": (
            "Approve executor.coreTools.connections.refresh?"
        ),
    }
    for call, head in gated.items():
        paused = await client.call_tool("execute", {"code": f"return await {call};"})
        assert text_of(paused).startswith(f"Execution paused: {head}"), text_of(paused)
        await client.call_tool("resume", {"executionId": execution_id(paused), "action": "decline"})


async def test_10_and_11_no_value_through_the_agent_and_none_comes_back(
    connected: ServerUnderTest, client: Client
) -> None:
    refused = await run(
        client,
        "return await tools.executor.coreTools.connections.create({ owner: 'org', name: 'x', integration: 'check', "
        "template: 'apikey-0', value: 'pasted-by-the-agent' });",
    )
    assert refused["ok"] is False
    assert "pasted-by-the-agent" not in json.dumps(refused)
    listed = await run(client, "return await tools.executor.coreTools.connections.list({});")
    (connection,) = listed["data"]["connections"]
    assert connection["address"] == "tools.check.org.mainKey"
    assert KEY not in json.dumps(listed)


async def test_12_static_and_auth_headers_beat_the_agents(
    connected: ServerUnderTest, client: Client, upstream: Upstream
) -> None:
    result = await run(
        client,
        "return await tools.check.org.mainKey.misc.echoHeader("
        '{ "x-api-key": "evil", headers: { "x-static": "evil" } });',
    )
    assert result["ok"] is True, result
    (request,) = upstream.calls("/echo-header")
    assert request.headers["x-api-key"] == KEY
    assert request.headers["x-static"] == STATIC


HOSTILE = {
    "invalid YAML": "openapi: 3.0.0\ninfo: [unclosed\n",
    "a $ref loop": json.dumps(
        {
            "openapi": "3.0.0",
            "info": {"title": "x", "version": "1"},
            "paths": {"/a": {"get": {"parameters": [{"$ref": "#/components/parameters/A"}], "responses": {}}}},
            "components": {
                "parameters": {"A": {"$ref": "#/components/parameters/B"}, "B": {"$ref": "#/components/parameters/A"}}
            },
        }
    ),
    "10,000 nested schemas": '{"openapi": "3.0.0", "info": {"title": "x", "version": "1"}, "paths": {}, "x": '
    + '{"a": ' * 10_000
    + "1"
    + "}" * 10_001,
    "a remote $ref": json.dumps(
        {
            "openapi": "3.0.0",
            "info": {"title": "x", "version": "1"},
            "paths": {"/a": {"get": {"responses": {"200": {"$ref": "https://example.invalid/r.json"}}}}},
        }
    ),
    "a file $ref": json.dumps(
        {
            "openapi": "3.0.0",
            "info": {"title": "x", "version": "1"},
            "paths": {"/a": {"get": {"responses": {"200": {"$ref": "/etc/passwd"}}}}},
        }
    ),
    "Swagger 2": json.dumps({"swagger": "2.0", "info": {"title": "x", "version": "1"}, "paths": {}}),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
async def test_a_hostile_spec_is_refused_in_one_line_and_what_exists_keeps_working(
    kind: str, connected: ServerUnderTest, client: Client, http: httpx.AsyncClient
) -> None:
    refused = await http.post(
        connected.running.url + "/api/openapi/specs",
        json={"spec": {"kind": "blob", "value": HOSTILE[kind]}, "slug": "bad"},
    )
    assert refused.status_code == 400, refused.text
    message = refused.json()["message"]
    assert message
    assert "\n" not in message
    assert "Traceback" not in message
    listed = await http.get(connected.running.url + "/api/integrations")
    assert [integration["slug"] for integration in listed.json()] == ["executor", "check"]
    still = await run(client, 'return await tools.check.org.mainKey.items.getItem({ itemId: "1" });')
    assert still["ok"] is True


async def test_a_hundred_megabyte_spec_is_refused_without_being_read_whole(
    connected: ServerUnderTest, http: httpx.AsyncClient, nursery: trio.Nursery
) -> None:
    huge = b'{"openapi": "3.0.0", "paths": {}, "pad": "' + b"x" * (100 * 1024 * 1024) + b'"}'
    source = await start_upstream(nursery, lambda request: Answer(body=huge))
    refused = await http.post(
        connected.running.url + "/api/openapi/specs", json={"spec": {"kind": "url", "url": source.url + "/spec"}}
    )
    assert refused.status_code == 400, refused.text
    assert "\n" not in refused.json()["message"]
    direct = await http.post(
        connected.running.url + "/api/openapi/specs",
        content=b'{"spec": {"kind": "blob", "value": "' + b"x" * (40 * 1024 * 1024) + b'"}}',
        headers={"content-type": "application/json"},
    )
    assert direct.status_code == 413
