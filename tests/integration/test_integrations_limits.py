"""What one member may not do to everyone: bind the operator's env secrets, or grow the org's catalog
without bound. Against a real server with bearers and an org-admin claim."""

import json
from pathlib import Path

import httpx
import pytest
import trio

from executor_mcp.integrations.connections import MAX_CONNECTIONS_PER_INTEGRATION
from tests.auth_support import SECRET as HS256_KEY
from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest, start_server

SPEC = {
    "openapi": "3.0.3",
    "info": {"title": "Tiny", "version": "1"},
    "servers": [{"url": "https://tiny.example"}],
    "paths": {"/ping": {"get": {"operationId": "ping", "tags": ["ping"], "responses": {"200": {"description": "ok"}}}}},
    "security": [{"key": []}],
    "components": {"securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "x-key"}}},
}


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> ServerUnderTest:
    key = tmp_path / "hs256.key"
    key.write_bytes(HS256_KEY)
    return await start_server(nursery, data_dir, auth="jwt", jwt_secret_file=key, org_admin_claim=("role", "admin"))


# Minted when the suite is collected, long before these tests run on a slow machine: valid for a day.
ADMIN = bearer(mint("ops", "acme", role="admin", expires_in=24 * 3600))
MEMBER = bearer(mint("bob", "acme", expires_in=24 * 3600))


async def add_tiny(http: httpx.AsyncClient, executor: ServerUnderTest) -> None:
    added = await http.post(
        executor.running.url + "/api/openapi/specs",
        json={"spec": {"kind": "blob", "value": json.dumps(SPEC)}, "slug": "tiny"},
        headers=ADMIN,
    )
    assert added.status_code == 200, added.text


async def test_only_an_org_admin_binds_or_lists_the_servers_env_secrets(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    await add_tiny(http, executor)
    reference = {"provider": "env", "id": "EXECUTOR_MCP_SECRET_TINY"}
    request = {"owner": "user", "name": "mine", "integration": "tiny", "template": "apikey-0", "from": reference}
    refused = await http.post(executor.running.url + "/api/connections", json=request, headers=MEMBER)
    assert refused.status_code == 403, refused.text
    assert refused.json()["_tag"] == "ForbiddenError"
    listed = await http.get(executor.running.url + "/api/providers/env/items", headers=MEMBER)
    assert listed.status_code == 403
    allowed = await http.post(
        executor.running.url + "/api/connections", json={**request, "owner": "org"}, headers=ADMIN
    )
    assert allowed.status_code == 200, allowed.text


async def test_one_owner_holds_a_bounded_number_of_connections_to_one_integration(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    await add_tiny(http, executor)
    for index in range(MAX_CONNECTIONS_PER_INTEGRATION + 1):
        created = await http.post(
            executor.running.url + "/api/connections",
            json={"owner": "user", "name": f"c{index}", "integration": "tiny", "template": "none"},
            headers=MEMBER,
        )
        if index < MAX_CONNECTIONS_PER_INTEGRATION:
            assert created.status_code == 200, created.text
    assert created.status_code == 400
    assert created.json()["message"] == (
        f"At most {MAX_CONNECTIONS_PER_INTEGRATION} connections per owner to one integration"
    )
    again = await http.post(
        executor.running.url + "/api/connections",
        json={"owner": "user", "name": "c0", "integration": "tiny", "template": "none", "description": "replaced"},
        headers=MEMBER,
    )
    assert again.status_code == 200, again.text  # replacing one is not one more


def spec_with_operations(count: int, description: str = "Many") -> dict:
    paths = {
        f"/op{index}": {"get": {"operationId": f"op{index}", "responses": {"200": {"description": "ok"}}}}
        for index in range(count)
    }
    return {**SPEC, "info": {"title": "Many", "version": "1", "description": description}, "paths": paths}


async def test_a_document_past_the_operations_bound_is_refused_naming_the_option(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    server = await start_server(nursery, data_dir, integration_max_operations=3)
    url = server.running.url + "/api/openapi/specs"
    refused = await http.post(url, json={"spec": {"kind": "blob", "value": json.dumps(spec_with_operations(4))}})
    assert refused.status_code == 400, refused.text
    assert refused.json()["message"] == (
        "The document has 4 operations; an integration holds at most 3 (--integration-max-operations)"
    )
    added = await http.post(url, json={"spec": {"kind": "blob", "value": json.dumps(spec_with_operations(3))}})
    assert added.status_code == 200, added.text
    assert added.json()["toolCount"] == 3


async def test_a_document_padded_with_a_huge_description_keeps_a_bounded_one(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    # Every listing of the org's integrations reads the description: megabytes of it cost every caller.
    server = await start_server(nursery, data_dir)
    padded = spec_with_operations(2, "d" * 3_000_000)
    url = server.running.url + "/api/openapi"
    preview = await http.post(url + "/preview", json={"spec": {"kind": "blob", "value": json.dumps(padded)}})
    assert preview.status_code == 200, preview.text
    assert len(preview.json()["description"]) == 4000
    assert preview.json()["operationCount"] == 2
    added = await http.post(
        url + "/specs", json={"spec": {"kind": "blob", "value": json.dumps(padded)}, "slug": "many"}
    )
    assert added.status_code == 200, added.text
    (listed,) = [
        row for row in (await http.get(server.running.url + "/api/integrations")).json() if row["slug"] == "many"
    ]
    assert len(listed["description"]) == 4000
