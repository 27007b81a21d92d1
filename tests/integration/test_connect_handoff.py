"""Upstream's `connect-handoff` scenario and the connect page's rules, over real HTTP: a real server, the
recording upstream, the official MCP client asking for the link, and httpx playing the person's browser
(the real browser's turn is in `test_connect_browser.py`)."""

import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from mcp import Client

from executor_mcp.integrations.handoff import INSTRUCTIONS, HandoffBook
from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest, jwt_server, start_server
from tests.integration.test_integrations_e2e import SECRET, add_orders_spec, run, shop
from tests.sdk import connect
from tests.upstream import Answer, Upstream, start_upstream

TTL = 60.0


@attrs.define
class Clock:
    """The book's clock, moved by the test: expiry without waiting."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, clock: Clock) -> ServerUnderTest:
    return await start_server(nursery, data_dir, allow_local_network=True, handoffs=HandoffBook(ttl=TTL, clock=clock))


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    return await start_upstream(nursery, shop)


async def handoff(client: Client, **args: Any) -> dict[str, Any]:
    answer = await run(client, f"return await tools.executor.coreTools.connections.createHandoff({json.dumps(args)});")
    assert answer["ok"] is True, answer
    return answer["data"]


def post(http: httpx.AsyncClient, url: str, body: Any, **headers: str):
    return http.post(url.split("?")[0], json=body, headers=headers)


async def test_an_agent_hands_off_a_key_and_its_next_call_reaches_the_upstream_with_it(
    executor: ServerUnderTest,
    upstream: Upstream,
    http: httpx.AsyncClient,
    client: Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    await add_orders_spec(http, executor, upstream)
    data = await handoff(client, integration="orders")
    assert data["instructions"] == INSTRUCTIONS
    url = urllib.parse.urlsplit(data["url"])
    assert f"{url.scheme}://{url.netloc}" == executor.running.url
    assert url.path.startswith("/connect/")
    token = url.path.removeprefix("/connect/")
    assert len(token) >= 43
    assert urllib.parse.parse_qs(url.query) == {"addAccount": ["1"], "owner": ["user"], "template": ["apikey-0"]}

    page = await http.get(data["url"])
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["x-frame-options"] == "DENY"
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "script-src 'self';" in csp
    assert "style-src 'self';" in csp
    assert "frame-ancestors 'none'" in csp
    assert "'unsafe-inline'" not in csp
    assert "nonce-" not in csp
    # No inline script or style: every script is a packaged file, and nothing styles itself.
    assert re.findall(r"<script[^>]*>", page.text) == [
        '<script src="/static/console.js" defer>',
        '<script src="/static/connect.js" defer>',
    ]
    assert page.text.count("</script>") == 2
    assert "<style" not in page.text
    assert " style=" not in page.text
    assert re.search(r'<input id="input-0" type="password" data-input="token"', page.text)
    assert "Orders API" in page.text
    assert "apikey-0" in page.text
    assert "header x-api-key" in page.text
    assert token not in page.text
    assert "http://" not in page.text  # no external asset of any kind
    assert "https://" not in page.text
    assert "access-control-allow-origin" not in page.headers

    refused = await http.post(data["url"], content=json.dumps({"values": {"token": SECRET}}), headers={})
    assert refused.status_code == 415
    assert "text/plain" not in refused.text

    created = await post(http, data["url"], {"values": {"token": SECRET}})
    assert created.status_code == 200, created.text
    connection = created.json()
    assert connection["address"] == "tools.orders.user.main"
    assert connection["owner"] == "user"
    assert created.headers["cache-control"] == "no-store"

    again = await post(http, data["url"], {"values": {"token": "another"}})
    assert again.status_code == 404
    assert "already used" in again.json()["error"]
    assert (await http.get(data["url"])).status_code == 404

    result = await run(
        client,
        """
        const found = await tools.search({ query: "fetch one order" });
        const path = found.items[0].path;
        const parts = path.split(".");
        let tool = tools;
        for (const part of parts) tool = tool[part];
        return { path, called: await tool({ orderId: "42" }) };
        """,
    )
    assert result["path"] == "orders.user.main.orders.getOrder"
    assert result["called"]["ok"] is True
    assert result["called"]["data"] == {"id": "42", "status": "shipped"}
    (request,) = upstream.calls("/orders")
    assert request.headers["x-api-key"] == SECRET

    listed = await run(client, 'return await tools.executor.coreTools.connections.list({ integration: "orders" });')
    assert [c["address"] for c in listed["data"]["connections"]] == ["tools.orders.user.main"]
    everything = json.dumps([data, connection, listed, result]) + page.text + refused.text + again.text
    assert SECRET not in everything
    assert SECRET not in caplog.text
    # The client's own debug logs print the tool's answer, link included; the server's never hold the token.
    server_log = "\n".join(
        record.getMessage() for record in caplog.records if record.name.startswith(("executor_mcp", "hypercorn"))
    )
    assert "handoff " in server_log
    assert token not in server_log


async def test_a_link_expires_after_its_ttl(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, client: Client, clock: Clock
) -> None:
    await add_orders_spec(http, executor, upstream)
    data = await handoff(client, integration="orders", owner="org", label="Billing Team")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(data["url"]).query)
    assert query == {"addAccount": ["1"], "owner": ["org"], "template": ["apikey-0"], "label": ["Billing Team"]}
    page = await http.get(data["url"])
    assert 'value="Billing Team"' in page.text
    assert "at most 1 more minute" in page.text
    clock.now += TTL + 1
    gone = await http.get(data["url"])
    assert gone.status_code == 404
    assert "not valid" in gone.text
    assert gone.headers["cache-control"] == "no-store"
    assert (await post(http, data["url"], {"values": {"token": SECRET}})).status_code == 404
    assert (await http.get(executor.running.url + "/api/connections")).json() == []


async def test_of_two_concurrent_posts_exactly_one_creates_the_connection(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, client: Client
) -> None:
    await add_orders_spec(http, executor, upstream)
    data = await handoff(client, integration="orders")
    statuses: list[int] = []

    async def submit(name: str) -> None:
        statuses.append((await post(http, data["url"], {"name": name, "values": {"token": SECRET}})).status_code)

    async with trio.open_nursery() as racing:
        for name in ("first", "second", "third"):
            racing.start_soon(submit, name)
    assert sorted(statuses) == [200, 404, 404]
    connections = (await http.get(executor.running.url + "/api/connections")).json()
    assert len(connections) == 1


async def test_a_mistake_on_the_page_costs_no_link_and_never_echoes_the_value(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, client: Client
) -> None:
    await add_orders_spec(http, executor, upstream)
    await http.post(
        executor.running.url + "/api/connections",
        json={"owner": "user", "name": "main", "integration": "orders", "template": "apikey-0", "value": "old"},
    )
    data = await handoff(client, integration="orders")
    page = await http.get(data["url"])
    assert 'value="main 2"' in page.text  # the default name is a free one
    mistakes = [
        ({"values": {}}, 400, "Enter a value for token"),
        ({"values": {"token": SECRET, "other": SECRET}}, 400, "Unknown credential input: other"),
        ({"values": {"token": SECRET}, "owner": "org"}, 400, "Unknown field: owner"),
        ({"values": {"token": SECRET * 2000}}, 400, "at most"),
        ({"name": "Main", "values": {"token": SECRET}}, 409, "main already exists"),
        ([SECRET], 400, "JSON object"),
    ]
    for body, status, message in mistakes:
        answer = await post(http, data["url"], body)
        assert answer.status_code == status, (body, answer.text)
        assert message in answer.json()["error"]
        assert SECRET not in answer.text
    broken = await http.post(data["url"].split("?")[0], content=b"{nope", headers={"content-type": "application/json"})
    assert broken.status_code == 400
    foreign = await post(http, data["url"], {"values": {"token": SECRET}}, origin="https://evil.example")
    assert foreign.status_code == 403
    created = await post(http, data["url"], {"values": {"token": SECRET}})
    assert created.status_code == 200, created.text
    assert created.json()["address"] == "tools.orders.user.main2"


async def test_the_handoff_is_checked_when_asked_for(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, client: Client
) -> None:
    await add_orders_spec(http, executor, upstream)

    async def refused(args: dict[str, Any]) -> str:
        answer = await run(
            client, f"return await tools.executor.coreTools.connections.createHandoff({json.dumps(args)});"
        )
        assert answer["ok"] is False, answer
        return answer["error"]["message"]

    assert await refused({"integration": "nothing"}) == "Integration not found: nothing"
    assert "no auth template 'nope'" in await refused({"integration": "orders", "template": "nope"})
    assert "needs no handoff" in await refused({"integration": "orders", "template": "none"})
    assert 'owner must be "org" or "user"' in await refused({"integration": "orders", "owner": "root"})
    for bad in ("", "x" * 43, "%2e%2e", "a/b"):
        assert (await http.get(executor.running.url + "/connect/" + bad)).status_code == 404


async def test_with_bearers_the_link_is_the_credential_and_connects_its_issuer_only(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, upstream: Upstream, http: httpx.AsyncClient
) -> None:
    server = await jwt_server(nursery, data_dir, tmp_path, allow_local_network=True)
    alice, bob = bearer(mint("alice", "acme")), bearer(mint("bob", "acme"))
    await add_orders_spec(http, server, upstream, **alice)
    async with connect(server.url, mode="legacy", headers=alice) as (client, _):
        data = await handoff(client, integration="orders")
    page = await http.get(data["url"])  # no bearer
    assert page.status_code == 200
    assert "<code>alice</code>" in page.text
    assert "access-control-allow-origin" not in page.headers
    preflight = await http.options(
        data["url"].split("?")[0],
        headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
    )
    assert preflight.status_code == 405
    assert not [name for name in preflight.headers if name.startswith("access-control-")]
    created = await post(http, data["url"], {"values": {"token": SECRET}})
    assert created.status_code == 200, created.text
    mine = await http.get(server.running.url + "/api/connections", headers=alice)
    assert [c["address"] for c in mine.json()] == ["tools.orders.user.main"]
    theirs = await http.get(server.running.url + "/api/connections", headers=bob)
    assert theirs.json() == []


def openapi_document(title: str) -> bytes:
    return json.dumps({"openapi": "3.0.3", "info": {"title": title, "version": "1"}, "paths": {}}).encode()


async def test_detect_names_an_openapi_document_and_finds_nothing_elsewhere(
    executor: ServerUnderTest, nursery: trio.Nursery, client: Client, http: httpx.AsyncClient
) -> None:
    def serve(request: Any) -> Answer:
        if request.path == "/openapi.json":
            return Answer(body=openapi_document("Pet Store API"))
        if request.path == "/swagger.json":
            return Answer(body=b'{"swagger": "2.0", "info": {"title": "old"}, "paths": {}}')
        if request.path == "/page":
            return Answer(body=b"<html>hello</html>", content_type="text/html")
        return Answer(status=404, body=b"{}")

    site = await start_upstream(nursery, serve)

    async def detect(url: str) -> Any:
        return await run(
            client, f"return await tools.executor.coreTools.integrations.detect({{ url: {json.dumps(url)} }});"
        )

    found = await detect(site.url + "/openapi.json")
    assert found == {
        "ok": True,
        "data": {
            "results": [
                {
                    "kind": "openapi",
                    "confidence": "high",
                    "endpoint": site.url + "/openapi.json",
                    "name": "Pet Store API",
                    "slug": "pet_store_api",
                }
            ]
        },
    }
    for nothing in ("/swagger.json", "/page", "/missing"):
        assert await detect(site.url + nothing) == {"ok": True, "data": {"results": []}}
    over_http = await http.post(
        executor.running.url + "/api/integrations/detect", json={"url": site.url + "/openapi.json"}
    )
    assert over_http.status_code == 200
    assert over_http.json() == found["data"]["results"]
    assert (await http.get(executor.running.url + "/api/integrations/detect")).status_code == 404
    with trio.socket.socket() as unused:
        await unused.bind(("127.0.0.1", 0))
        closed_port = unused.getsockname()[1]
    assert await detect(f"http://127.0.0.1:{closed_port}/openapi.json") == {"ok": True, "data": {"results": []}}
    malformed = await detect("file:///etc/passwd")
    assert malformed["ok"] is False
    assert "http(s) URL" in malformed["error"]["message"]
    too_long = await detect("http://example.com/" + "a" * 2048)
    assert too_long["ok"] is False


async def test_detect_goes_through_the_ssrf_guard(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    site = await start_upstream(nursery, lambda request: Answer(body=openapi_document("Internal")))
    server = await start_server(nursery, data_dir)
    async with connect(server.url, mode="legacy") as (client, _):
        blocked = await run(
            client, f"return await tools.executor.coreTools.integrations.detect({{ url: '{site.url}/openapi.json' }});"
        )
    assert blocked == {"ok": True, "data": {"results": []}}
    assert site.received == []
