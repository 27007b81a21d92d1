"""`/api/policies` against hostile callers: methods, content types, sizes, counts, other orgs."""

import json
from pathlib import Path

import httpx
import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest, jwt_server, start_server
from tests.sdk import connect

RULE = {"owner": "org", "pattern": "github.*", "action": "block"}
CREATE_FROM_CODE = (
    'return await tools.executor.coreTools.policies.create({ owner: "org", pattern: "tool.code", action: "block" });'
)
LIST = "return (await tools.executor.coreTools.policies.list({})).data.policies.length;"


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir)


def api_of(server: ServerUnderTest) -> str:
    return server.running.url + "/api/policies"


async def test_head_with_a_body_writes_nothing(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    api = api_of(executor)
    head = await http.request("HEAD", api, json=RULE)
    assert head.status_code == 200
    assert head.content == b""
    assert (await http.get(api)).json() == []


@pytest.mark.parametrize(("method", "path"), [("PUT", ""), ("DELETE", ""), ("GET", "/pol_x"), ("HEAD", "/pol_x")])
async def test_other_methods_are_405_with_the_api_error(
    executor: ServerUnderTest, http: httpx.AsyncClient, method: str, path: str
) -> None:
    refused = await http.request(method, api_of(executor) + path, json=RULE)
    assert refused.status_code == 405
    assert refused.headers["content-type"] == "application/json"
    if method != "HEAD":
        assert refused.json() == {"error": "Method not allowed"}
    assert (await http.get(api_of(executor))).json() == []


async def test_a_chunked_body_is_bounded_too(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    async def chunks():
        yield json.dumps({**RULE, "position": ""})[:-2].encode()  # up to the opening quote of the position
        for _ in range(100):
            yield b"9" * 1024
        yield b'"}'

    body = chunks()
    try:
        refused = await http.post(api_of(executor), content=body, headers={"content-type": "application/json"})
    finally:
        await body.aclose()  # the server refuses before the end: close what httpx left unread, not the GC
    assert "content-length" not in refused.request.headers
    assert (refused.status_code, refused.json()) == (
        413,
        {"error": "Request body too large. Maximum size is 65536 bytes"},
    )
    assert (await http.get(api_of(executor))).json() == []


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_changes_need_a_json_body(
    executor: ServerUnderTest, http: httpx.AsyncClient, content_type: str | None
) -> None:
    api = api_of(executor)
    kept = (await http.post(api, json=RULE)).json()
    extra = {"content-type": content_type} if content_type else {}
    for method, url, body in (
        ("POST", api, RULE),
        ("PATCH", f"{api}/{kept['id']}", {"owner": "org", "action": "approve"}),
        ("DELETE", f"{api}/{kept['id']}", {"owner": "org"}),
    ):
        refused = await http.request(method, url, content=json.dumps(body), headers=extra)
        assert refused.status_code == 415, (method, refused.text)
        assert refused.json() == {"error": "Unsupported Media Type: Content-Type must be application/json"}
    assert (await http.get(api)).json() == [kept]
    with_charset = {"content-type": "application/json; charset=utf-8"}
    accepted = await http.post(api, content=json.dumps({**RULE, "pattern": "a.b"}), headers=with_charset)
    assert accepted.status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({**RULE, "position": "9" * (4 * 1024 * 1024)}, 413, "Request body too large. Maximum size is 65536 bytes"),
        ({**RULE, "pattern": "a" * (1024 * 1024)}, 413, "Request body too large. Maximum size is 65536 bytes"),
        ({**RULE, "pattern": "a" * 10_000}, 400, "pattern must be at most 512 characters"),
        ({**RULE, "position": "9" * 100}, 400, "position must be at most 64 characters"),
        ({**RULE, "pattern": "a.\ud800"}, 400, "pattern must be printable text"),
    ],
    ids=["4mb-position", "1mb-pattern", "long-pattern", "long-position", "surrogate"],
)
async def test_sizes_are_bounded(
    executor: ServerUnderTest, http: httpx.AsyncClient, body: dict, status: int, message: str
) -> None:
    api = api_of(executor)
    refused = await http.post(api, content=json.dumps(body), headers={"content-type": "application/json"})
    assert (refused.status_code, refused.json()) == (status, {"error": message})
    assert (await http.get(api)).json() == []


async def test_the_number_of_rules_is_bounded_per_owner(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    api = api_of(executor)
    created = []
    for index in range(256):
        response = await http.post(api, json={**RULE, "pattern": f"tool.n{index}"})
        assert response.status_code == 200, response.text
        created.append(response.json()["id"])
    refused = await http.post(api, json={**RULE, "pattern": "tool.more"})
    assert (refused.status_code, refused.json()) == (
        400,
        {"error": "At most 256 org rules are allowed; remove one first"},
    )
    approve = {"owner": "user", "pattern": "executor.coreTools.policies.create", "action": "approve"}
    assert (await http.post(api, json=approve)).status_code == 200
    # From the sandbox the same limit is a value the code can read.
    async with connect(executor.url, mode="legacy") as (client, _):
        result = await client.call_tool("execute", {"code": CREATE_FROM_CODE})
    assert result.structured_content["result"] == {
        "ok": False,
        "error": {"code": "policy_refused", "message": "At most 256 org rules are allowed; remove one first"},
    }
    removed = await http.request("DELETE", f"{api}/{created[0]}", json={"owner": "org"})
    assert removed.status_code == 200
    assert (await http.post(api, json={**RULE, "pattern": "tool.more"})).status_code == 200
    assert len((await http.get(api)).json()) == 257


async def test_one_orgs_writes_cost_another_org_nothing(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    server = await jwt_server(nursery, data_dir, tmp_path)
    api, evil = api_of(server), bearer(mint("eve", "evil"))
    acme_http = httpx2.AsyncClient(headers=bearer(mint("alice", "acme")))
    acme = Client(streamable_http_client(server.url, http_client=acme_http), mode="legacy")
    async with acme_http, acme:
        assert (await acme.call_tool("execute", {"code": LIST})).structured_content["result"] == 0
        statuses: list[int] = []

        async def write(body: dict) -> None:
            response = await http.post(
                api, content=json.dumps(body), headers={**evil, "content-type": "application/json"}
            )
            statuses.append(response.status_code)

        with trio.fail_after(60):
            async with trio.open_nursery() as writers:
                for index in range(30):
                    writers.start_soon(write, {**RULE, "pattern": f"p{index}." + "a" * 100_000})
                    writers.start_soon(write, {**RULE, "position": "9" * 10_000})
        assert sorted(statuses) == [400] * 30 + [413] * 30
        # What evil may legitimately store is bounded too, and acme's tool calls never read it.
        for index in range(256):
            body = {**RULE, "pattern": f"p{index}." + "a" * 500}
            assert (await http.post(api, json=body, headers=evil)).status_code == 200
        started = trio.current_time()
        assert (await acme.call_tool("execute", {"code": LIST})).structured_content["result"] == 0
        assert trio.current_time() - started < 5
