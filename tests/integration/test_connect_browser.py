"""The connect page in a real browser (headless Chromium over CDP): the person opens the link, pastes the
key, submits, sees the address, and the agent's next call reaches the upstream with that key.

This test fails, never skips, when Chromium is missing: `scripts/test` installs it with
`scripts/install-browser`, so a missing browser is a broken setup to see, not a test to lose quietly.
"""

import json
from pathlib import Path

import httpx
import pytest
import trio
from mcp import Client

from tests.browser import chromium
from tests.conftest import ServerUnderTest, start_server
from tests.integration.test_connect_handoff import handoff
from tests.integration.test_integrations_e2e import SECRET, add_orders_spec, run, shop
from tests.upstream import Upstream, start_upstream

pytestmark = pytest.mark.slow


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, allow_local_network=True)


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    return await start_upstream(nursery, shop)


async def test_a_person_pastes_the_key_in_a_browser_and_the_agent_calls_with_it(
    executor: ServerUnderTest, upstream: Upstream, http: httpx.AsyncClient, client: Client
) -> None:
    await add_orders_spec(http, executor, upstream)
    data = await handoff(client, integration="orders", label="Shop key")
    async with chromium() as browser:
        page = await browser.new_page()
        await page.navigate(data["url"])
        assert await page.evaluate("document.title") == "Connect Orders API \u00b7 executor-mcp"
        fields = await page.evaluate(
            "Array.from(document.querySelectorAll('input')).map((field) => [field.id, field.type])"
        )
        assert fields == [["name", "text"], ["input-0", "password"]]
        assert await page.evaluate("document.getElementById('name').value") == "Shop key"
        await page.screenshots("connect-page")
        await page.evaluate(
            f"document.querySelector('input[data-input=\"token\"]').value = {json.dumps(SECRET + chr(10))};"
            "document.getElementById('connect').requestSubmit();"
        )
        address = await page.wait_for("document.getElementById('address')?.textContent")
        assert address == "tools.orders.user.shopKey"
        assert await page.evaluate("document.getElementById('connect').hidden") is True
        assert await page.evaluate("document.querySelector('input[data-input]').value") == ""
        await page.screenshots("connect-page-done")
        violations = [entry for entry in page.log if "Content Security Policy" in json.dumps(entry)]
        assert violations == []
        await page.navigate(data["url"])
        assert await page.evaluate("document.title") == "Connect link not valid \u00b7 executor-mcp"
        await page.screenshots("connect-not-valid")
    called = await run(client, 'return await tools.orders.user.shopKey.orders.getOrder({ orderId: "9" });')
    assert called["ok"] is True
    assert called["data"] == {"id": "9", "status": "shipped"}
    (request,) = upstream.calls("/orders")
    assert request.headers["x-api-key"] == SECRET  # trimmed by the page: the pasted newline is gone
