"""The integrations and connections pages in a real headless Chromium: a person adds an OpenAPI integration by
URL and by file (previewing each), reads its typed tools, pastes a key into a new connection and makes a connect
link; then an agent's `execute` calls the tool and the upstream receives that key. Screenshots of every page at
desktop and phone widths.

Fails, never skips, without Chromium: `scripts/test` installs it.
"""

import json
from pathlib import Path

import httpx
import pytest
import trio

from tests.auth_support import bearer, mint
from tests.browser import Page, chromium
from tests.conftest import ServerUnderTest
from tests.console_support import console_server, sign_in
from tests.integration.test_integrations_e2e import SECRET, orders_spec, run, shop
from tests.sdk import connect
from tests.upstream import Answer, Received, Upstream, start_upstream

pytestmark = pytest.mark.slow

SPEC_PATH = "/spec/orders.json"


def shop_with_spec(request: Received) -> Answer:
    """The shop's API, and its spec (naming this very server) at `SPEC_PATH`."""
    if request.path == SPEC_PATH:
        return Answer(body=json.dumps(orders_spec("http://" + request.headers["host"])).encode())
    return shop(request)


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> ServerUnderTest:
    return await console_server(nursery, data_dir, tmp_path)


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> Upstream:
    return await start_upstream(nursery, shop_with_spec)


async def preview_and_add(page: Page, slug: str) -> list[str]:
    """Preview what the form names, then add it under `slug`; the preview's tool names."""
    await page.evaluate("document.getElementById('preview').click()")
    await page.wait_for("!document.getElementById('preview-box').hidden && !document.getElementById('add').disabled")
    names = await page.evaluate("Array.from(document.querySelectorAll('#preview-tools code'), (n) => n.textContent)")
    facts = await page.evaluate("document.getElementById('preview-box').textContent")
    assert "Orders API" in facts
    assert "1.0.0" in facts
    assert "x-api-key" in facts
    await page.evaluate(
        f"document.getElementById('spec-slug').value = {slug!r};document.getElementById('add-spec').requestSubmit();"
    )
    await page.wait_for(f"location.pathname === '/integrations/{slug}' && document.readyState === 'complete'")
    return names


async def test_a_person_adds_a_spec_and_a_connection_in_the_pages_and_the_agent_calls_with_the_pasted_key(
    executor: ServerUnderTest, upstream: Upstream, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    token = mint("alice", "acme")
    spec_file = tmp_path / "orders.json"
    spec_file.write_text(json.dumps(orders_spec(upstream.url)))
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, base, token, then="/integrations")
        await page.screenshots("catalog-integrations-empty")
        await page.evaluate(f"document.getElementById('spec-url').value = {upstream.url + SPEC_PATH!r}")
        names = await preview_and_add(page, "orders")
        assert names == ["orders.createOrder", "orders.getOrder", "orders.getOrderInvoice"]
        assert await page.evaluate("document.getElementById('integration-name').textContent") == "Orders API"
        tools = await page.evaluate("document.getElementById('tools').textContent")
        assert "orders.getOrder" in tools
        assert '{ orderId: string; include?: ("items" | "customer")[];' in tools
        assert "type Order = { id: string;" in tools
        await page.screenshots("catalog-integration")

        await page.navigate(base + "/integrations")
        document = await page.send("DOM.getDocument", {"depth": 0})
        found = await page.send("DOM.querySelector", {"nodeId": document["root"]["nodeId"], "selector": "#spec-file"})
        await page.send("DOM.setFileInputFiles", {"files": [str(spec_file)], "nodeId": found["nodeId"]})
        assert await page.evaluate("document.getElementById('spec-file').files[0].name") == "orders.json"
        await preview_and_add(page, "orders_file")
        assert await page.evaluate("document.getElementById('integration-slug').textContent") == "orders_file"
        await page.navigate(base + "/integrations/orders?query=invoice")
        assert await page.evaluate("document.querySelectorAll('#tools .tool').length") == 1
        await page.navigate(base + "/integrations")
        rows = "document.querySelectorAll('#integrations tbody tr')"
        slugs = await page.evaluate(f"Array.from({rows}, (r) => r.dataset.slug)")
        assert slugs == ["executor", "orders", "orders_file"]
        await page.screenshots("catalog-integrations")

        await page.navigate(base + "/connections?integration=orders")
        assert await page.evaluate("document.getElementById('connection-integration').value") == "orders"
        assert await page.evaluate("document.getElementById('connection-template').value") == "apikey-0"
        await page.screenshots("catalog-connections-empty")
        await page.evaluate(
            "document.getElementById('connection-name').value = 'Shop';"
            f"document.querySelector('#secret-fields input[data-input=\"token\"]').value = {SECRET!r};"
            "document.getElementById('new-connection').requestSubmit();"
        )
        await page.wait_for("location.search.startsWith('?created=') && document.readyState === 'complete'")
        assert "tools.orders.user.shop" in await page.evaluate("document.getElementById('created').textContent")
        html = await page.evaluate("document.documentElement.outerHTML")
        assert SECRET not in html
        await page.evaluate(
            "document.getElementById('link-label').value = 'Spare key';"
            "document.getElementById('new-link').requestSubmit();"
        )
        url = await page.wait_for("document.getElementById('link-url').value")
        assert url.startswith(base + "/connect/")
        assert "label=Spare+key" in url
        assert await page.evaluate("document.getElementById('link-box').hidden") is False
        await page.screenshots("catalog-connections")
        violations = [entry for entry in page.log if "Content Security Policy" in json.dumps(entry)]
        assert violations == []

        async with connect(executor.url, headers=bearer(token), mode="legacy") as (client, _):
            called = await run(client, 'return await tools.orders.user.shop.orders.getOrder({ orderId: "9" });')
        assert called["ok"] is True
        assert called["data"] == {"id": "9", "status": "shipped"}
        (request,) = upstream.calls("/orders")
        assert request.headers["x-api-key"] == SECRET

        await page.evaluate("document.querySelector('#connections button.remove').click()")
        await page.evaluate("document.querySelector('#connections button.remove').click()")
        await page.wait_for("document.querySelectorAll('#connections tbody tr').length === 0")
    listed = await http.get(base + "/api/connections", headers=bearer(token))
    assert listed.json() == []
