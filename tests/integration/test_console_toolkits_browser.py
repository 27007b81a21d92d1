"""The toolkits page in a real headless Chromium: an org admin creates a toolkit, lists a connection pattern,
changes its level, adds a rule of the toolkit's own and removes it; a member sees the org toolkit read-only; an
agent on the toolkit's endpoint sees what the page set, at once.

Fails, never skips, when Chromium is missing (`scripts/install-browser` installs it)."""

import json
from pathlib import Path

import pytest
import trio

from tests.auth_support import mint
from tests.browser import Page, chromium
from tests.conftest import ServerUnderTest
from tests.console_support import console_server, sign_in
from tests.integration.test_console_governance import ADMIN_CLAIM
from tests.integration.test_console_governance_browser import csp_violations
from tests.sdk import connect

pytestmark = pytest.mark.slow

KIT = "article.toolkit[data-slug='support']"
LIST = "return (await tools.executor.coreTools.policies.list({})).error?.code ?? 'ok';"


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> ServerUnderTest:
    return await console_server(nursery, data_dir, tmp_path, org_admin_claim=ADMIN_CLAIM)


async def submit(page: Page, form: str, **fields: str) -> None:
    sets = "".join(f"form.elements[{json.dumps(name)}].value = {json.dumps(value)};" for name, value in fields.items())
    await page.evaluate(f"{{ const form = document.querySelector({json.dumps(form)}); {sets} form.requestSubmit(); }}")


async def text(page: Page, selector: str) -> str:
    return await page.evaluate(f"document.querySelector({json.dumps(selector)})?.textContent ?? ''")


async def test_an_admin_shapes_a_toolkit_and_an_agent_sees_it(executor: ServerUnderTest) -> None:
    base = executor.running.url
    admin = mint("alice", "acme", role="admin")
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, base, admin, then="/toolkits")
        await page.wait_for("document.querySelector('#toolkit-list p.empty')?.textContent.startsWith('No toolkits')")
        await submit(page, "#add-toolkit", owner="org", name="Support")
        await page.wait_for(f"!!document.querySelector({json.dumps(KIT)})")
        assert await text(page, f"{KIT} code.endpoint") == f"{base}/mcp/toolkits/support"

        await submit(page, f"{KIT} form.add-connection", pattern="executor.coreTools.policies.*", level="read")
        row = f"{KIT} tr[data-kind='connection']"
        await page.wait_for(f"document.querySelector({json.dumps(row + ' select')})?.value === 'read'")
        headers = {"authorization": f"Bearer {admin}"}
        async with connect(executor.url + "/toolkits/support", headers=headers) as (agent, _):
            ran = await agent.call_tool("execute", {"code": LIST})
            assert ran.structured_content["result"] == "ok"  # a read tool, at read

            await page.evaluate(
                f"{{ const level = document.querySelector({json.dumps(row + ' select')});"
                " level.value = 'off'; level.dispatchEvent(new Event('change')); }"
            )
            await page.wait_for("document.getElementById('toolkits-status').textContent.endsWith(': off')")
            ran = await agent.call_tool("execute", {"code": LIST})
            assert ran.structured_content["result"] == "tool_not_found"

            await page.evaluate(
                f"{{ const level = document.querySelector({json.dumps(row + ' select')});"
                " level.value = 'full'; level.dispatchEvent(new Event('change')); }"
            )
            await page.wait_for("document.getElementById('toolkits-status').textContent.endsWith(': full')")
            await submit(page, f"{KIT} form.add-rule", pattern="executor.*", action="block")
            await page.wait_for(f"!!document.querySelector({json.dumps(KIT + ' tr[data-kind=rule]')})")
            ran = await agent.call_tool("execute", {"code": LIST})
            assert ran.structured_content["result"] == "tool_blocked"

        await page.evaluate(f"document.querySelector({json.dumps(KIT + ' button[data-action=remove-rule]')}).click()")
        await page.wait_for(f"!document.querySelector({json.dumps(KIT + ' tr[data-kind=rule]')})")
        assert csp_violations(page) == []

        member = await browser.new_page()
        await sign_in(member, base, mint("bob", "acme"), then="/toolkits")
        await member.wait_for(f"!!document.querySelector({json.dumps(KIT)})")
        assert await member.evaluate(f"document.querySelector({json.dumps(KIT + ' select')}).disabled")
        assert not await member.evaluate(f"!!document.querySelector({json.dumps(KIT + ' form')})")
        assert "Only an organization admin" in await text(member, f"{KIT} p.hint")
