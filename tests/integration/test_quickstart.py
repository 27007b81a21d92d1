"""README's Quickstart, step by step, as a person takes it: `serve` (a real process), an API added from its OpenAPI
document and a connection to it with the CLI, an MCP client's code calling one of its writes, and that call approved
on the console. The README's commands are these; when a step changes, this test and the README change together."""

import json
from pathlib import Path

import httpx
import pytest
import trio

from tests.console_support import CSRF_META
from tests.integration.test_integrations_cli import cli
from tests.process import server_process
from tests.sdk import connect
from tests.upstream import Answer, Received, start_upstream

README = Path(__file__).parents[2] / "README.md"
KEY = "sk-quickstart-6e5d4c3b2a19"
CODE = 'return await tools.shop.org.main.orders.createOrder({ body: { item: "bolt", quantity: 2 } });'
# What the README's Quickstart tells a person to run or expect, each taken by the test below.
STEPS = (
    "./scripts/serve",
    "MCP: http://127.0.0.1:4788/mcp\n   Console: http://127.0.0.1:4788/\n",
    "executor-mcp integrations add-openapi --slug shop --file ./openapi.yaml",
    "executor-mcp integrations show shop",
    "--allow-local-network",
    "executor-mcp connections add --integration shop --name main --template apikey-0",
    "`tools.shop.org.main`",
    "http://127.0.0.1:4788/mcp?elicitation_mode=browser",
    CODE.removeprefix("return await ").removesuffix(";"),
    "http://127.0.0.1:4788/approvals/<executionId>",
)
ORDER = {"id": "o-1", "item": "bolt", "quantity": 2}
ORDERED = {"item": {"type": "string"}, "quantity": {"type": "integer"}}
SHOP = {
    "openapi": "3.0.3",
    "info": {"title": "Shop", "version": "1.0.0"},
    "security": [{"apiKey": []}],
    "paths": {
        "/orders": {
            "post": {
                "operationId": "createOrder",
                "tags": ["orders"],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object", "properties": ORDERED}}},
                },
                "responses": {"201": {"description": "The order", "content": {"application/json": {}}}},
            }
        }
    },
    "components": {"securitySchemes": {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}}},
}


def shop(request: Received) -> Answer:
    if (request.method, request.path, request.headers.get("x-api-key")) == ("POST", "/orders", KEY):
        return Answer(status=201, body=json.dumps(ORDER).encode())
    return Answer(status=401, body=b'{"message": "no"}')


def test_the_readme_says_what_this_test_does() -> None:
    quickstart = README.read_text().split("\n## Quickstart\n")[1].split("\n## ")[0]
    for step in STEPS:
        assert step in quickstart, step


@pytest.mark.slow  # a server process, CLI processes and a sandboxed execution
async def test_the_readmes_quickstart(nursery: trio.Nursery, tmp_path: Path, http: httpx.AsyncClient) -> None:
    upstream = await start_upstream(nursery, shop)
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps({**SHOP, "servers": [{"url": upstream.url}]}))
    data_dir = tmp_path / "data"
    # 1. Serve (the API here runs on this machine, so its calls need --allow-local-network).
    async with server_process(data_dir, "--allow-local-network") as running:
        base = running.url.removesuffix("/mcp")
        # 2. Add the API from its OpenAPI document; it says which templates a connection may name.
        added = await cli(data_dir, "integrations", "add-openapi", "--slug", "shop", "--file", str(spec))
        assert added.returncode == 0, added.stderr
        assert b"added integration shop with 1 tools; templates: apikey-0" in added.stderr
        shown = (await cli(data_dir, "integrations", "show", "shop")).stdout.decode()
        assert "template     apikey-0: API key (X-API-Key); inputs: token (header X-API-Key)" in shown.splitlines()
        # 3. A connection: the key, read from standard input here (a prompt that does not echo on a terminal).
        connected = await cli(
            data_dir, "connections", "add", "--integration", "shop", "--name", "main", "--template", "apikey-0",
            stdin=KEY.encode() + b"\n",
        )  # fmt: skip
        assert connected.stdout == b"tools.shop.org.main\n", connected.stderr
        # 4. An MCP client on the URL the README gives, its code calling the API: a write asks first.
        async with connect(running.url + "?elicitation_mode=browser", mode="legacy") as (client, _):
            paused = (await client.call_tool("execute", {"code": CODE})).structured_content
            assert paused is not None
            assert "executionId" in paused, paused
            execution = paused["executionId"]
            assert paused["approvalUrl"] == f"{base}/approvals/{execution}"
            assert upstream.calls("/orders") == []
            # 5. Approve on the console: its page, then what its Approve button sends.
            page = await http.get(paused["approvalUrl"])
            assert page.status_code == 200
            csrf = CSRF_META.search(page.text)
            assert csrf is not None
            approved = await http.post(  # the page's cookie is in the client's jar, as in a browser
                f"{base}/api/approvals/{execution}",
                json={"action": "accept"},
                headers={"origin": base, "x-csrf-token": csrf.group(1)},
            )
            assert approved.status_code == 200, approved.text
            resumed = await client.call_tool("resume", {"executionId": execution})
        assert resumed.structured_content is not None
        assert resumed.structured_content["result"]["data"] == ORDER
        (request,) = upstream.calls("/orders")
        assert json.loads(request.body) == {"item": "bolt", "quantity": 2}
        running.terminate()
        assert await running.wait() == 0
