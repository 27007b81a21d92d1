"""The integrations HTTP API against a real server and a real upstream on 127.0.0.1: round trips of specs,
integrations and connections, the tool listing and schemas, providers, who sees what, and the error
envelopes of hostile or malformed requests. A pasted secret never comes back, nor reaches the log."""

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.auth_support import SECRET as HS256_KEY
from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest, start_server
from tests.sdk import connect, text_of
from tests.upstream import Answer, Received, Upstream, start_upstream

SECRET = "sk-items-0f1e2d3c4b5a69788796a5b4"
OTHER_SECRET = "sk-items-replacement-77665544"


def items_spec(server_url: str, *, extra_paths: dict[str, Any] | None = None) -> dict[str, Any]:
    item_id = {"name": "itemId", "in": "path", "required": True, "schema": {"type": "string"}}
    item = {"application/json": {"schema": {"$ref": "#/components/schemas/Item"}}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "Items API", "version": "1.0.0", "description": "Items of the warehouse."},
        "servers": [{"url": server_url}],
        "security": [{"apiKey": []}],
        "paths": {
            "/items/{itemId}": {
                "get": {
                    "operationId": "getItem",
                    "tags": ["items"],
                    "description": "Fetch one item by id.",
                    "parameters": [item_id],
                    "responses": {"200": {"description": "The item", "content": item}},
                }
            },
            "/items": {
                "post": {
                    "operationId": "createItem",
                    "tags": ["items"],
                    "summary": "Create an item",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"type": "object", "properties": {"name": {"type": "string"}}}
                            }
                        },
                    },
                    "responses": {"201": {"description": "Created", "content": item}},
                }
            },
            **(extra_paths or {}),
        },
        "components": {
            "schemas": {
                "Item": {
                    "type": "object",
                    "properties": {"id": {"type": "string"}, "name": {"type": "string"}},
                    "required": ["id"],
                }
            },
            "securitySchemes": {"apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"}},
        },
    }


def warehouse(request: Received) -> Answer:
    if request.path == "/spec":
        return Answer(body=json.dumps(items_spec("http://" + request.headers["host"])).encode())
    if request.path.startswith("/items/"):
        return Answer(body=json.dumps({"id": request.path.rsplit("/", 1)[-1], "name": "bolt"}).encode())
    return Answer(status=404, body=b'{"message": "no such route"}')


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    return await start_upstream(nursery, warehouse)


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, allow_local_network=True)


def blob(upstream: Upstream, **changes: Any) -> dict[str, Any]:
    return {"kind": "blob", "value": json.dumps(items_spec(upstream.url, **changes))}


async def call(
    http: httpx.AsyncClient,
    server: ServerUnderTest,
    method: str,
    path: str,
    body: Any = None,
    *,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> Any:
    response = await http.request(method, server.running.url + path, json=body, headers=headers)
    assert response.status_code == status, (response.status_code, response.text)
    assert SECRET not in response.text
    assert OTHER_SECRET not in response.text
    return response.json() if response.content else None


async def add_items(http: httpx.AsyncClient, server: ServerUnderTest, upstream: Upstream, **headers: str) -> None:
    added = await call(
        http, server, "POST", "/api/openapi/specs", {"spec": blob(upstream), "slug": "items"}, headers=headers
    )
    assert added == {"slug": "items", "toolCount": 2}


async def connect_items(http: httpx.AsyncClient, server: ServerUnderTest, name: str = "main", **fields: Any) -> Any:
    body = {"owner": "org", "name": name, "integration": "items", "template": "apikey-0", "value": SECRET, **fields}
    return await call(http, server, "POST", "/api/connections", body)


async def test_integrations_round_trip_from_a_blob_and_a_url(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    await add_items(http, executor, upstream)
    by_url = {"spec": {"kind": "url", "url": upstream.url + "/spec"}, "slug": "items_url"}
    assert await call(http, executor, "POST", "/api/openapi/specs", by_url) == {"slug": "items_url", "toolCount": 2}
    listed = await call(http, executor, "GET", "/api/integrations")
    assert listed[0]["slug"] == "executor"
    assert (listed[0]["kind"], listed[0]["canRemove"]) == ("built-in", False)
    assert sorted(entry["slug"] for entry in listed[1:]) == ["items", "items_url"]
    items = await call(http, executor, "GET", "/api/integrations/items")
    assert items["name"] == "Items API"
    assert (items["kind"], items["canRemove"], items["canRefresh"]) == ("openapi", True, False)
    assert [method["template"] for method in items["authMethods"]] == ["apikey-0"]
    assert await call(http, executor, "GET", "/api/openapi/integrations/items_url") == {
        "slug": "items_url",
        "description": items["description"],
        "kind": "openapi",
        "canRemove": True,
        "canRefresh": True,
    }
    assert await call(http, executor, "GET", "/api/integrations/executor") == listed[0]

    patched = await call(
        http, executor, "PATCH", "/api/integrations/items", {"name": "Warehouse", "description": "Bolts and nuts."}
    )
    assert (patched["name"], patched["description"]) == ("Warehouse", "Bolts and nuts.")
    again = await call(http, executor, "GET", "/api/integrations/items")
    assert (again["name"], again["description"]) == ("Warehouse", "Bolts and nuts.")

    taken = await call(
        http, executor, "POST", "/api/openapi/specs", {"spec": blob(upstream), "slug": "items"}, status=409
    )
    assert taken["_tag"] == "IntegrationAlreadyExistsError"
    assert taken["slug"] == "items"
    assert isinstance(taken["message"], str)

    assert await call(http, executor, "DELETE", "/api/integrations/items") == {"removed": True}
    gone = await call(http, executor, "GET", "/api/integrations/items", status=404)
    assert gone["_tag"] == "IntegrationNotFoundError"
    assert await call(http, executor, "GET", "/api/openapi/integrations/items") is None
    assert (await call(http, executor, "DELETE", "/api/integrations/items", status=404))["_tag"] == (
        "IntegrationNotFoundError"
    )
    built_in = await call(http, executor, "DELETE", "/api/integrations/executor", status=409)
    assert built_in["_tag"] == "IntegrationRemovalNotAllowedError"

    assert await call(http, executor, "DELETE", "/api/openapi/integrations/items_url", status=204) is None
    assert [entry["slug"] for entry in await call(http, executor, "GET", "/api/integrations")] == ["executor"]


async def test_a_preview_counts_operations_without_listing_them(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    preview = await call(http, executor, "POST", "/api/openapi/preview", {"spec": blob(upstream)})
    assert preview["operationCount"] == 2
    assert "operations" not in preview
    assert preview["title"] == "Items API"
    assert [entry["slug"] for entry in await call(http, executor, "GET", "/api/integrations")] == ["executor"]


async def test_config_and_spec_updates(executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient) -> None:
    await add_items(http, executor, upstream)
    config = await call(http, executor, "GET", "/api/openapi/integrations/items/config")
    assert "specUrl" not in config
    (derived,) = config["authenticationTemplate"]
    assert derived["slug"] == "apikey-0"
    assert derived["placements"] == [{"carrier": "header", "name": "x-api-key", "prefix": ""}]
    bearer_method = {
        "slug": "bearer",
        "type": "apiKey",
        "headers": {"Authorization": ["Bearer ", {"type": "variable", "name": "token"}]},
    }
    configured = await call(
        http,
        executor,
        "POST",
        "/api/openapi/integrations/items/config",
        {"authenticationTemplate": [bearer_method], "baseUrl": upstream.url + "/v2"},
    )
    assert [method["slug"] for method in configured["authenticationTemplate"]] == ["apikey-0", "bearer"]
    assert configured["authenticationTemplate"][1]["placements"] == [
        {"carrier": "header", "name": "Authorization", "prefix": "Bearer "}
    ]
    assert (await call(http, executor, "GET", "/api/openapi/integrations/items/config"))["baseUrl"] == (
        upstream.url + "/v2"
    )

    extra = {
        "/stock": {"get": {"operationId": "listStock", "tags": ["stock"], "responses": {"200": {"description": "ok"}}}}
    }
    updated = await call(
        http, executor, "POST", "/api/openapi/integrations/items/spec", {"spec": blob(upstream, extra_paths=extra)}
    )
    assert updated == {"slug": "items", "toolCount": 3, "addedTools": ["stock.listStock"], "removedTools": []}
    pasted = await call(http, executor, "POST", "/api/openapi/integrations/items/spec", {}, status=400)
    assert pasted["message"].startswith("This integration's spec was pasted inline")
    missing = await call(http, executor, "POST", "/api/openapi/integrations/nothing/spec", {}, status=404)
    assert missing["_tag"] == "IntegrationNotFoundError"


async def test_a_pasted_secret_is_never_echoed_nor_logged(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await add_items(http, executor, upstream)
    created = await connect_items(http, executor, "My Main Key", description="The main key")
    assert created["address"] == "tools.items.org.myMainKey"
    assert (created["owner"], created["template"], created["description"]) == ("org", "apikey-0", "The main key")
    assert created["provider"] is not None
    assert created["missingOAuthScopes"] == []
    listed = await call(http, executor, "GET", "/api/connections")
    assert [entry["address"] for entry in listed] == ["tools.items.org.myMainKey"]
    assert await call(http, executor, "GET", "/api/connections/org/items/myMainKey") == created

    replaced = await connect_items(http, executor, "My Main Key", value=OTHER_SECRET)
    assert replaced["description"] == "The main key"
    async with connect(executor.url, mode="legacy") as (client, _):
        result = await client.call_tool(
            "execute", {"code": 'return await tools.items.org.myMainKey.items.getItem({ itemId: "7" });'}
        )
    assert result.structured_content["result"]["data"] == {"id": "7", "name": "bolt"}
    (request,) = upstream.calls("/items")
    assert request.headers["x-api-key"] == OTHER_SECRET
    assert SECRET not in text_of(result)
    assert OTHER_SECRET not in text_of(result)

    patched = await call(
        http,
        executor,
        "PATCH",
        "/api/connections/org/items/myMainKey",
        {"description": "Rotated", "identityLabel": "ops"},
    )
    assert (patched["description"], patched["identityLabel"]) == ("Rotated", "ops")
    assert await call(http, executor, "DELETE", "/api/connections/org/items/myMainKey") == {"removed": True}
    gone = await call(http, executor, "GET", "/api/connections/org/items/myMainKey", status=404)
    assert gone["_tag"] == "ConnectionNotFoundError"
    assert await call(http, executor, "GET", "/api/connections") == []
    assert SECRET not in caplog.text
    assert OTHER_SECRET not in caplog.text


async def test_connection_filters_and_bad_connection_requests(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    await add_items(http, executor, upstream)
    await connect_items(http, executor, "shared")
    await connect_items(http, executor, "mine", owner="user")
    await call(
        http,
        executor,
        "POST",
        "/api/connections",
        {"owner": "org", "name": "public", "integration": "items", "template": "none"},
    )

    def addresses(rows: list[dict[str, Any]]) -> list[str]:
        return sorted(row["address"] for row in rows)

    assert addresses(await call(http, executor, "GET", "/api/connections?owner=user")) == ["tools.items.user.mine"]
    assert addresses(await call(http, executor, "GET", "/api/connections?owner=org&integration=items")) == [
        "tools.items.org.public",
        "tools.items.org.shared",
    ]
    assert await call(http, executor, "GET", "/api/connections?integration=other") == []
    bad_owner = await call(http, executor, "GET", "/api/connections?owner=team", status=400)
    assert bad_owner["_tag"] == "InvalidInputError"

    two_origins = {"owner": "org", "name": "x", "integration": "items", "template": "apikey-0"}
    refused = await call(http, executor, "POST", "/api/connections", two_origins, status=400)
    assert refused == {"_tag": "InvalidConnectionInputError", "message": "Expected exactly one credential origin"}
    nowhere = await call(
        http, executor, "POST", "/api/connections", {**two_origins, "integration": "nothing", "value": "v"}, status=404
    )
    assert nowhere["_tag"] == "IntegrationNotFoundError"


async def test_a_connection_names_one_of_its_integrations_templates(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    """A typo in the template used to be saved, and every call then went out without the credential."""
    await add_items(http, executor, upstream)
    typo = await call(
        http,
        executor,
        "POST",
        "/api/connections",
        {"owner": "org", "name": "main", "integration": "items", "template": "apikey-9", "value": SECRET},
        status=400,
    )
    assert typo == {
        "_tag": "InvalidConnectionInputError",
        "message": 'unknown template "apikey-9" for integration "items"; valid templates: apikey-0, none',
    }
    assert await call(http, executor, "GET", "/api/connections") == []

    # Clients send `values` whatever the template: an empty map carries no credential, a filled one does.
    no_auth = {"owner": "org", "name": "public", "integration": "items", "template": "none"}
    created = await call(http, executor, "POST", "/api/connections", {**no_auth, "values": {}})
    assert (created["address"], created["provider"]) == ("tools.items.org.public", None)
    filled = await call(
        http, executor, "POST", "/api/connections", {**no_auth, "values": {"token": SECRET}}, status=400
    )
    assert filled["message"] == 'A no-auth connection (template "none") takes no provider credential origin'


async def test_slugs_are_javascript_path_segments(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    """`tools.127_0_0_1.…` is a syntax error in the sandbox: a slug is never derived so, nor taken so."""
    given = await call(
        http, executor, "POST", "/api/openapi/specs", {"spec": blob(upstream), "slug": "2nd_items"}, status=400
    )
    assert given == {
        "_tag": "InvalidInputError",
        "message": "Invalid slug '2nd_items': start with a letter or '_', then up to 63 letters, digits, '_' or '-'",
    }
    added = await call(http, executor, "POST", "/api/openapi/specs", {"spec": blob(upstream), "name": "2nd Items"})
    assert added == {"slug": "openapi_2nd_items", "toolCount": 2}
    body = {"owner": "org", "name": "main", "integration": "openapi_2nd_items", "template": "apikey-0", "value": SECRET}
    await call(http, executor, "POST", "/api/connections", body)
    async with connect(executor.url, mode="legacy") as (client, _):
        result = await client.call_tool(
            "execute", {"code": 'return await tools.openapi_2nd_items.org.main.items.getItem({ itemId: "3" });'}
        )
    assert result.structured_content["result"]["data"] == {"id": "3", "name": "bolt"}, text_of(result)


async def test_tools_and_their_schemas(executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient) -> None:
    await add_items(http, executor, upstream)
    assert await call(http, executor, "GET", "/api/tools") == []
    await connect_items(http, executor)
    rows = await call(http, executor, "GET", "/api/tools")
    assert [row["address"] for row in rows] == [
        "tools.items.org.main.items.createItem",
        "tools.items.org.main.items.getItem",
    ]
    get_item = rows[1]
    assert get_item == {
        "address": "tools.items.org.main.items.getItem",
        "owner": "org",
        "integration": "items",
        "connection": "main",
        "name": "items.getItem",
        "pluginId": "openapi",
        "description": "Fetch one item by id.",
    }
    assert [row["name"] for row in await call(http, executor, "GET", "/api/tools?query=FETCH")] == ["items.getItem"]
    assert await call(http, executor, "GET", "/api/tools?owner=user") == []
    assert await call(http, executor, "GET", "/api/tools?connection=other") == []
    annotated = await call(http, executor, "GET", "/api/tools?integration=items&includeAnnotations=true")
    assert annotated[0]["requiresApproval"] is True
    assert annotated[0]["approvalDescription"] == "POST /items"
    assert "requiresApproval" not in annotated[1]
    refreshed = await call(http, executor, "POST", "/api/connections/org/items/main/refresh")
    assert refreshed == rows

    schema = await call(http, executor, "GET", "/api/tools/schema?address=tools.items.org.main.items.getItem")
    assert schema["address"] == "tools.items.org.main.items.getItem"
    assert schema["name"] == "items.getItem"
    assert schema["inputSchema"]["properties"]["itemId"] == {"type": "string"}
    assert "Item" in schema["schemaDefinitions"]
    assert "itemId: string" in schema["inputTypeScript"]
    assert "ok: true" not in schema["outputTypeScript"]
    assert "Item" in schema["typeScriptDefinitions"]
    unknown = await call(http, executor, "GET", "/api/tools/schema?address=tools.items.org.main.nope", status=404)
    assert unknown["_tag"] == "ToolNotFoundError"
    assert (await call(http, executor, "GET", "/api/tools/schema", status=404))["_tag"] == "ToolNotFoundError"

    rule = {"owner": "org", "pattern": "items.org.main.items.createItem", "action": "block"}
    await call(http, executor, "POST", "/api/policies", rule)
    assert [row["name"] for row in await call(http, executor, "GET", "/api/tools")] == ["items.getItem"]
    assert len(await call(http, executor, "GET", "/api/tools?includeBlocked=true")) == 2
    blocked = "/api/tools/schema?address=tools.items.org.main.items.createItem"
    assert (await call(http, executor, "GET", blocked, status=404))["_tag"] == "ToolNotFoundError"


async def test_providers_list_keys_and_item_names_only(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    providers = await call(http, executor, "GET", "/api/providers")
    assert "encrypted" in providers
    await add_items(http, executor, upstream)
    await connect_items(http, executor)
    for key in providers:
        items = await call(http, executor, "GET", f"/api/providers/{key}/items")
        assert all(set(item) == {"id", "name"} for item in items)
    unknown = await call(http, executor, "GET", "/api/providers/vault/items", status=409)
    assert unknown["_tag"] == "CredentialProviderNotRegisteredError"


async def test_malformed_requests_get_the_tagged_envelope(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    url = executor.running.url
    not_json = await http.post(url + "/api/connections", content=b"owner=org", headers={"content-type": "text/plain"})
    assert not_json.status_code == 415
    assert not_json.json()["_tag"] == "UnsupportedMediaTypeError"
    oversized = await http.post(url + "/api/connections", json={"name": "x" * 70_000})
    assert oversized.status_code == 413
    assert oversized.json() == {
        "_tag": "RequestTooLargeError",
        "message": "Request body too large. Maximum size is 65536 bytes",
    }
    bad_json = await http.post(url + "/api/connections", content=b"{nope", headers={"content-type": "application/json"})
    assert bad_json.status_code == 400
    assert bad_json.json() == {"_tag": "InvalidInputError", "message": "The request body must be JSON"}
    array = await http.post(url + "/api/openapi/preview", json=[1, 2])
    assert array.json() == {"_tag": "InvalidInputError", "message": "The request body must be a JSON object"}
    unknown = await http.post(url + "/api/openapi/specs", json={"spec": blob(upstream), "bogus": 1})
    assert unknown.status_code == 400
    assert unknown.json() == {"_tag": "InvalidInputError", "message": "Unknown field: bogus"}
    not_openapi = await http.post(url + "/api/openapi/preview", json={"spec": {"kind": "blob", "value": "hello"}})
    assert not_openapi.status_code == 400
    assert not_openapi.json()["_tag"] == "OpenApiParseError"

    # A spec route takes a whole document, far past 64 KiB, but not past 32 MiB.
    long = items_spec(upstream.url)
    long["info"]["description"] = "d" * 200_000
    large = await http.post(url + "/api/openapi/preview", json={"spec": {"kind": "blob", "value": json.dumps(long)}})
    assert large.status_code == 200, large.text
    huge = await http.post(
        url + "/api/openapi/specs", content=b" " * (32 * 1024 * 1024 + 1), headers={"content-type": "application/json"}
    )
    assert huge.status_code == 413
    assert huge.json()["message"] == f"Request body too large. Maximum size is {32 * 1024 * 1024} bytes"

    wrong_method = await http.put(url + "/api/integrations", json={})
    assert wrong_method.status_code == 405
    assert wrong_method.headers["allow"] == "GET, HEAD, OPTIONS"
    assert wrong_method.json()["_tag"] == "MethodNotAllowedError"
    preflight = await http.options(url + "/api/connections/org/items/main", headers={"origin": url})
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-methods"] == "GET, HEAD, PATCH, DELETE, OPTIONS"
    head = await http.head(url + "/api/integrations")
    assert (head.status_code, head.content) == (200, b"")


async def test_who_sees_what_with_bearers(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    key = tmp_path / "hs256.key"
    key.write_bytes(HS256_KEY)
    server = await start_server(
        nursery, data_dir, auth="jwt", jwt_secret_file=key, org_admin_claim=("role", "admin"), allow_local_network=True
    )
    alice = bearer(mint("alice", "acme", role="admin"))
    bob = bearer(mint("bob", "acme"))
    eve = bearer(mint("eve", "evil", role="admin"))

    anonymous = await http.get(server.running.url + "/api/integrations")
    assert anonymous.status_code == 401
    assert anonymous.json()["_tag"] == "UnauthorizedError"
    assert "www-authenticate" in anonymous.headers

    await add_items(http, server, upstream, **alice)
    forbidden = await call(
        http, server, "POST", "/api/openapi/specs", {"spec": blob(upstream), "slug": "b"}, status=403, headers=bob
    )
    assert forbidden["_tag"] == "ForbiddenError"
    personal = {"owner": "user", "name": "mine", "integration": "items", "template": "apikey-0", "value": SECRET}
    await call(http, server, "POST", "/api/connections", personal, headers=alice)
    org_wide = {**personal, "owner": "org", "name": "shared"}
    assert (await call(http, server, "POST", "/api/connections", org_wide, status=403, headers=bob))["_tag"] == (
        "ForbiddenError"
    )
    await call(http, server, "POST", "/api/connections", {**personal, "value": OTHER_SECRET}, headers=bob)

    mine = await call(http, server, "GET", "/api/connections", headers=alice)
    assert [(row["address"], row["owner"]) for row in mine] == [("tools.items.user.mine", "user")]
    theirs = await call(http, server, "GET", "/api/connections", headers=bob)
    assert len(theirs) == 1
    assert await call(http, server, "GET", "/api/tools", headers=bob) != []
    assert await call(http, server, "DELETE", "/api/connections/user/items/mine", headers=bob) == {"removed": True}
    assert len(await call(http, server, "GET", "/api/connections", headers=alice)) == 1
    assert await call(http, server, "GET", "/api/connections", headers=bob) == []
    assert await call(http, server, "GET", "/api/tools", headers=bob) == []
    assert len(await call(http, server, "GET", "/api/tools", headers=alice)) == 2

    assert [row["slug"] for row in await call(http, server, "GET", "/api/integrations", headers=eve)] == ["executor"]
    assert (await call(http, server, "GET", "/api/integrations/items", status=404, headers=eve))["_tag"] == (
        "IntegrationNotFoundError"
    )
    assert await call(http, server, "GET", "/api/connections", headers=eve) == []
    schema = "/api/tools/schema?address=tools.items.user.mine.items.getItem"
    assert (await call(http, server, "GET", schema, status=404, headers=eve))["_tag"] == "ToolNotFoundError"
    assert (await call(http, server, "GET", schema, headers=alice))["name"] == "items.getItem"


async def test_other_api_paths_keep_their_error_form(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    assert (await http.get(executor.running.url + "/api/nothing")).json() == {"error": "Not Found"}
    refused = await http.post(
        executor.running.url + "/api/policies", content=b"x", headers={"content-type": "text/plain"}
    )
    assert refused.json() == {"error": "Unsupported Media Type: Content-Type must be application/json"}
