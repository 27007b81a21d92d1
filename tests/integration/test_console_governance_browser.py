"""The policies and sessions pages in a real headless Chromium: a person signs in, adds rules, moves one, asks
what a tool path would get, removes a rule; sees the MCP session an official client just opened as live,
terminates it from the page, and the client's next call fails with the session error.

Fails, never skips, when Chromium is missing (`scripts/install-browser` installs it)."""

import json
from pathlib import Path

import httpx
import pytest
import trio
from mcp import MCPError

from tests.auth_support import mint
from tests.browser import Page, chromium
from tests.conftest import ServerUnderTest
from tests.console_support import console_server, sign_in
from tests.integration.test_console_governance import ADMIN_CLAIM, SESSION_GONE, open_session
from tests.sdk import connect

pytestmark = pytest.mark.slow


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> ServerUnderTest:
    return await console_server(nursery, data_dir, tmp_path, org_admin_claim=ADMIN_CLAIM)


USER_PATTERNS = "Array.from(document.querySelectorAll('#rules tr[data-owner=\"user\"] code.pattern'))" + (
    ".map((code) => code.textContent)"
)


async def add_rule(page: Page, owner: str, pattern: str, action: str) -> None:
    await page.evaluate(
        "{ const form = document.getElementById('add-rule');"
        f"form.elements.owner.value = {json.dumps(owner)};"
        f"form.elements.pattern.value = {json.dumps(pattern)};"
        f"form.elements.action.value = {json.dumps(action)};"
        "form.requestSubmit(); }"
    )
    await page.wait_for(
        f"Array.from(document.querySelectorAll('#rules tr[data-owner={json.dumps(owner)}] code.pattern'))"
        f".some((code) => code.textContent === {json.dumps(pattern)})"
    )


async def click_in_row(page: Page, row: str, action: str) -> None:
    await page.evaluate(f"document.querySelector({json.dumps(row + ' button[data-action=' + action + ']')}).click()")


async def ask(page: Page, path: str) -> dict[str, str]:
    await page.evaluate(
        "document.getElementById('verdict').hidden = true;"
        f"{{ const form = document.getElementById('evaluate'); form.elements.path.value = {json.dumps(path)};"
        "form.requestSubmit(); }"
    )
    await page.wait_for("!document.getElementById('verdict').hidden")
    return await page.evaluate(
        "({action: document.getElementById('verdict').dataset.action,"
        " shown: document.getElementById('verdict-action').textContent,"
        " reason: document.getElementById('verdict-reason').textContent})"
    )


def csp_violations(page: Page) -> list[object]:
    return [entry for entry in page.log if "Content Security Policy" in json.dumps(entry)]


async def test_a_person_manages_rules_and_asks_what_a_path_would_get(executor: ServerUnderTest) -> None:
    base = executor.running.url
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, base, mint("alice", "acme", role="admin"), then="/policies")
        await page.wait_for("document.querySelector('#rules td.empty')?.textContent.startsWith('No rules')")
        await add_rule(page, "user", "executor.coreTools.policies.*", "approve")
        await add_rule(page, "user", "github.*", "block")
        await add_rule(page, "org", "executor.*", "require_approval")
        await add_rule(page, "org", "*", "approve")
        assert await page.evaluate(USER_PATTERNS) == ["executor.coreTools.policies.*", "github.*"]

        await click_in_row(page, '#rules tr[data-owner="user"]', "down")  # the first user rule
        await page.wait_for(
            f"JSON.stringify({USER_PATTERNS}) === JSON.stringify(['github.*', 'executor.coreTools.policies.*'])"
        )
        owners = await page.evaluate(
            "Array.from(document.querySelectorAll('#rules tbody tr')).map((r) => r.dataset.owner)"
        )
        assert owners == ["org", "org", "user", "user"]  # org rules first, moves stay within an owner

        verdict = await ask(page, "executor.coreTools.policies.create")
        assert verdict["action"] == "require_approval"
        assert verdict["shown"] == "require approval"
        assert 'The first org rule that matches, "executor.*"' in verdict["reason"]
        assert "outranks the first matching user rule" in verdict["reason"]
        await page.screenshots("governance-policies")

        org_row = '#rules tr[data-owner="org"]'
        await click_in_row(page, org_row, "remove")
        await page.wait_for(f"document.querySelectorAll({json.dumps(org_row)}).length === 1")
        verdict = await ask(page, "tools.executor.coreTools.policies.create")
        assert verdict["action"] == "approve"
        assert "turns the tool's own approval annotation off" in verdict["reason"]
        last = '#rules tr[data-owner="user"]:last-child'
        await click_in_row(page, last, "remove")
        await page.wait_for(f"JSON.stringify({USER_PATTERNS}) === JSON.stringify(['github.*'])")
        assert "Removed: executor.coreTools.policies.*" in await page.evaluate(
            "document.getElementById('rules-status').textContent"
        )
        assert csp_violations(page) == []


async def test_a_person_terminates_a_live_session_from_the_page(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    token = mint("alice", "acme", role="admin")
    before = await console_server(nursery, data_dir, tmp_path, org_admin_claim=ADMIN_CLAIM)
    bystander = await open_session(http, before.url, token)  # stored when that server stops: disposed here
    await before.stop()
    executor = await console_server(nursery, data_dir, tmp_path, org_admin_claim=ADMIN_CLAIM)
    base = executor.running.url
    headers = {"authorization": f"Bearer {token}"}
    async with connect(executor.url, headers=headers, mode="legacy") as (client, recorder), chromium() as browser:
        session_id = recorder.session_id
        assert session_id is not None
        page = await browser.new_page()
        await sign_in(page, base, token, then="/sessions")
        row = f'#sessions tr[data-id="{session_id}"]'
        await page.wait_for(f"document.querySelector({json.dumps(row)})?.dataset.state === 'live'")
        shown = await page.evaluate(
            f"(() => {{ const row = document.querySelector({json.dumps(row)});"
            " return {id: row.querySelector('code').title, short: row.querySelector('code').textContent,"
            " client: row.children[2].textContent}; })()"
        )
        assert shown["id"] == session_id
        assert shown["short"] == session_id[:12] + "\u2026"
        assert shown["client"].startswith("mcp")
        stored = f'#sessions tr[data-id="{bystander}"]'
        assert await page.evaluate(f"document.querySelector({json.dumps(stored)}).dataset.state") == "disposed"
        assert await page.evaluate(f"document.querySelector({json.dumps(stored)}).children[2].textContent") == "tests 0"
        await page.screenshots("governance-sessions")

        await click_in_row(page, row, "terminate")
        await page.wait_for(
            f"(() => {{ const row = document.querySelector({json.dumps(row)});"
            " return !row || row.dataset.state === 'condemned'; })()"
        )
        assert (await page.evaluate("document.getElementById('sessions-status').textContent")).startswith(
            "Terminated session"
        )
        with pytest.raises(MCPError) as caught:
            await client.list_tools()
        assert caught.value.error.code == -32001
        assert caught.value.error.message in SESSION_GONE
        assert await page.evaluate(f"document.querySelector({json.dumps(stored)}).dataset.state") == "disposed"
        assert csp_violations(page) == []
