"""What the CLI does for integrations and approvals, done in the console in a real headless Chromium: a person adds
MCP servers (a remote one with a credential header, and a stdio command) and GraphQL APIs (introspected, and from
an SDL file) through the forms, refreshes their connections' tools, refreshes and updates an OpenAPI spec, renames,
moves and removes an integration, approves and declines from the approvals list while the agent's `resume` waits,
and reads both answers on the audit page.

The upstreams are real: the official SDK's MCP server (`tests/mcp_downstream.py`, which refuses a request without
its bearer), a graphql-core shop that does too, and the recording HTTP upstream serving an OpenAPI spec.

Fails, never skips, without Chromium: `scripts/test` installs it.
"""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.auth_support import bearer, mint
from tests.browser import Page, chromium
from tests.conftest import ServerUnderTest
from tests.console_support import console_server, sign_in
from tests.graphql_upstream import SDL, TOKEN, start_graphql_shop
from tests.integration.test_console_catalog_browser import SPEC_PATH, shop_with_spec
from tests.mcp_support import downstream
from tests.sdk import connect, text_of
from tests.upstream import start_upstream

pytestmark = pytest.mark.slow

ALICE = mint("alice", "acme")
MCP_TOKEN = "downstream-token-0123456789"
GATED = "executor.coreTools.policies.list"
STATUS = "document.getElementById('status').textContent"
SLUG_REFUSED = (
    "((value) => { const field = document.getElementById('mcp-slug'); field.value = value;"
    " const refused = field.validity.patternMismatch; field.value = ''; return refused; })"
)
# The page's polls of the list, each held 1.5 s after its answer came: one that left before a decision lands after it.
SLOW_POLLS = """
(() => {
  const real = window.fetch;
  window.fetch = async (path, init) => {
    const polling = path === "/api/approvals" && init.method === "GET";
    if (polling) window.polling = true;
    const answer = await real(path, init);
    if (polling) await new Promise((done) => setTimeout(done, 1500));
    if (polling) window.polling = false;
    return answer;
  };
})()
"""


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> ServerUnderTest:
    return await console_server(nursery, data_dir, tmp_path, allow_stdio_mcp=True)


async def fill(page: Page, values: dict[str, str], submit: str) -> None:
    """Set the fields by id, then submit the form `submit` as a person's click would."""
    script = "".join(f"document.getElementById({key!r}).value = {value!r};" for key, value in values.items())
    await page.evaluate(script + f"document.getElementById({submit!r}).requestSubmit();")


async def choose_file(page: Page, selector: str, path: Path) -> None:
    document = await page.send("DOM.getDocument", {"depth": 0})
    found = await page.send("DOM.querySelector", {"nodeId": document["root"]["nodeId"], "selector": selector})
    await page.send("DOM.setFileInputFiles", {"files": [str(path)], "nodeId": found["nodeId"]})


async def connection(http: httpx.AsyncClient, base: str, integration: str, template: str, value: str) -> None:
    body = {"owner": "org", "name": "main", "integration": integration, "template": template, "value": value}
    made = await http.post(base + "/api/connections", json=body, headers=bearer(ALICE))
    assert made.status_code == 200, made.text


async def landed(page: Page, slug: str) -> None:
    await page.wait_for(f"location.pathname === '/integrations/{slug}' && document.readyState === 'complete'")


async def test_a_person_adds_refreshes_updates_and_removes_integrations_of_every_kind(
    nursery: trio.Nursery, executor: ServerUnderTest, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    shop = await start_graphql_shop(nursery)
    spec_server = await start_upstream(nursery, shop_with_spec)
    sdl = tmp_path / "shop.graphql"
    sdl.write_text(SDL)
    async with chromium() as browser, downstream(tmp_path / "state", token=MCP_TOKEN) as mcp:
        page = await browser.new_page()
        await sign_in(page, base, ALICE, then="/integrations")
        # The form refuses what the service would, before any request (a `-` unescaped in `pattern` voids it).
        refused = [await page.evaluate(f"{SLUG_REFUSED}({slug!r})") for slug in ("1password", "one-pass_2")]
        assert refused == [True, False]
        await fill(
            page,
            {
                "mcp-name": "Down Stream",
                "mcp-url": mcp.url,
                "mcp-auth-header": "Authorization",
                "mcp-auth-prefix": "Bearer ",
            },
            "add-mcp",
        )
        await landed(page, "down_stream")
        assert "header Authorization: Bearer <token>" in await page.evaluate(
            "document.getElementById('templates').textContent"
        )
        # The downstream answers only its bearer: the connection lists tools only if the form placed it right.
        await connection(http, base, "down_stream", "header", MCP_TOKEN)
        await page.navigate(base + "/integrations/down_stream")
        await page.evaluate("document.getElementById('refresh').click()")
        refreshed = await page.wait_for(f"{STATUS}.includes('tools.down_stream.org.main: 6 tools') && {STATUS}")
        assert "error" not in await page.evaluate("document.getElementById('status').className")
        await page.screenshots("parity-mcp")
        assert refreshed.endswith("Show the tools")

        await fill(page, {"update-endpoint-url": "http://127.0.0.1:9/mcp"}, "update-endpoint")
        await page.wait_for(f"{STATUS}.startsWith('Saved.')")
        moved = await http.get(base + "/api/mcp/servers/down_stream", headers=bearer(ALICE))
        assert moved.json()["config"]["endpoint"] == "http://127.0.0.1:9/mcp"
        await fill(page, {"rename-name": "Renamed", "rename-description": "<b>not bold</b>"}, "rename")
        await page.wait_for("document.getElementById('integration-name').textContent === 'Renamed'")
        await page.evaluate("document.getElementById('remove-integration').click()")
        assert "sure?" in await page.evaluate("document.getElementById('remove-integration').textContent")
        listed = await http.get(base + "/api/integrations/down_stream", headers=bearer(ALICE))
        assert listed.json()["description"] == "<b>not bold</b>"  # one click removes nothing
        await page.evaluate("document.getElementById('remove-integration').click()")
        await page.wait_for("location.pathname === '/integrations' && document.readyState === 'complete'")
        gone = await http.get(base + "/api/integrations/down_stream", headers=bearer(ALICE))
        assert gone.status_code == 404
        assert (await http.get(base + "/api/connections", headers=bearer(ALICE))).json() == []

        # A stdio server: its command, arguments one a line, and the variables each connection supplies.
        await page.evaluate(
            "const where = document.getElementById('mcp-where'); where.value = 'stdio';"
            "where.dispatchEvent(new Event('change'));"
        )
        assert await page.evaluate("document.getElementById('mcp-remote').hidden") is True
        await fill(
            page,
            {"mcp-name": "Local", "mcp-command": "/usr/bin/env", "mcp-args": "a b\n--flag\n"}
            | {"mcp-env-vars": "API_TOKEN, OTHER"},
            "add-mcp",
        )
        await landed(page, "local")
        server = (await http.get(base + "/api/mcp/servers/local", headers=bearer(ALICE))).json()
        assert (server["config"]["command"], server["config"]["args"]) == ("/usr/bin/env", ["a b", "--flag"])
        assert [method["template"] for method in server["authenticationTemplate"]] == ["env"]
        assert "env API_TOKEN: <API_TOKEN>" in await page.evaluate("document.getElementById('templates').textContent")
        await fill(page, {"update-command-args": "--other"}, "update-command")
        await page.wait_for(f"{STATUS}.startsWith('Saved.')")
        server = (await http.get(base + "/api/mcp/servers/local", headers=bearer(ALICE))).json()
        assert server["config"]["args"] == ["--other"]
        await page.navigate(base + "/integrations")

        # GraphQL introspected at each connection, with its credential header; then one from an SDL file.
        await fill(
            page,
            {"graphql-endpoint": shop.url, "graphql-slug": "shop", "graphql-auth-header": "Authorization"}
            | {"graphql-auth-prefix": "Bearer "},
            "add-graphql",
        )
        await landed(page, "shop")
        await connection(http, base, "shop", "apikey", TOKEN)
        await page.navigate(base + "/integrations/shop")
        await page.evaluate("document.getElementById('refresh').click()")
        await page.wait_for(f"/tools\\.shop\\.org\\.main: [1-9][0-9]* tools/.test({STATUS})")
        await page.navigate(base + "/integrations")
        await choose_file(page, "#graphql-schema", sdl)
        await fill(page, {"graphql-endpoint": shop.url, "graphql-name": "Shop SDL"}, "add-graphql")
        await landed(page, "shop_sdl")
        assert await page.evaluate("document.querySelectorAll('#tools .tool').length") > 0

        # OpenAPI from a URL: fetched again on Refresh, then replaced by a file.
        spec = {"spec": {"kind": "url", "url": spec_server.url + SPEC_PATH}, "slug": "orders"}
        assert (await http.post(base + "/api/openapi/specs", json=spec, headers=bearer(ALICE))).status_code == 200
        await page.navigate(base + "/integrations/orders")
        await page.evaluate("document.getElementById('refresh').click()")
        await page.wait_for(f"{STATUS}.startsWith('Updated: 3 tools; none added or removed.')")
        smaller = tmp_path / "smaller.json"
        smaller.write_text(json.dumps({"openapi": "3.0.0", "info": {"title": "S", "version": "1"}, "paths": {}}))
        await choose_file(page, "#update-spec-file", smaller)
        await page.evaluate("document.getElementById('update-spec').requestSubmit()")
        removed = await page.wait_for(f"{STATUS}.startsWith('Updated: 0 tools') && {STATUS}")
        assert "removed: orders.createOrder, orders.getOrder, orders.getOrderInvoice" in removed
        await page.evaluate("document.getElementById('reload').click()")
        await page.wait_for("document.getElementById('no-tools') !== null")
        violations = [entry for entry in page.log if "Content Security Policy" in json.dumps(entry)]
        assert violations == []


async def test_a_person_approves_and_declines_from_the_list_while_the_agent_waits(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    rule = {"owner": "org", "pattern": GATED, "action": "require_approval"}
    assert (await http.post(f"{base}/api/policies", json=rule, headers=bearer(ALICE))).status_code == 200
    code = f"return (await tools.{GATED}({{}})).data.policies.length;"
    async with (
        chromium() as browser,
        connect(executor.url + "?elicitation_mode=browser", headers=bearer(ALICE), mode="legacy") as (client, _),
    ):
        page = await browser.new_page()
        await sign_in(page, base, ALICE, then="/approvals")
        await page.evaluate(SLOW_POLLS)
        results: dict[str, Any] = {}

        async def resume(execution: str) -> None:
            results[execution] = await client.call_tool("resume", {"executionId": execution})

        for action, label in (("accept", "Approved"), ("decline", "Declined")):
            paused = await client.call_tool("execute", {"code": code})
            execution = paused.structured_content["executionId"]
            button = (
                f'document.querySelector(\'#approvals li[data-execution-id="{execution}"] [data-action="{action}"]\')'
            )
            await page.wait_for(f"{button} !== null")
            assert await page.evaluate("document.querySelector('#approvals pre').textContent") == "{}"
            await page.screenshots(f"parity-approvals-list-{action}")
            await page.wait_for("window.polling === true")  # a poll that still lists it is on its way
            async with trio.open_nursery() as waiting:
                waiting.start_soon(resume, execution)
                await page.evaluate(f"{button}.click()")
                said = await page.wait_for(f"{STATUS}.startsWith('{GATED}: {label}.') && {STATUS}")
            with trio.move_on_after(2):  # past that poll's answer: the answered approval does not come back
                while True:
                    assert await page.evaluate("document.querySelectorAll('#approvals li').length") == 0
                    await trio.sleep(0.05)
            assert await page.evaluate("document.getElementById('empty').hidden") is False
            if action == "accept":
                assert "the agent gets the result" in said
                assert results[execution].structured_content["status"] == "completed"
            else:
                assert "declined by the user" in text_of(results[execution])
        assert (await page.evaluate(STATUS)).startswith(f"{GATED}: Declined.")  # the polls since left it said

        # The audit page lists both calls, newest first, with how each approval was answered and by whom.
        await page.navigate(base + "/audit")
        rows = "Array.from(document.querySelectorAll('#calls tbody tr'), (row) => row.innerText)"
        listed = await page.wait_for(f"{rows}.length === 2 && {rows}")
        assert [("declined by the console" in row, "approved by the console" in row) for row in listed] == [
            (True, False),
            (False, True),
        ]
        await page.screenshots("parity-audit")
        violations = [entry for entry in page.log if "Content Security Policy" in json.dumps(entry)]
        assert violations == []
