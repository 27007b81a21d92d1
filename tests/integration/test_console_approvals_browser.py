"""Browser approvals in a real headless Chromium: a person signed in to the console sees the approvals an MCP
client's `execute` just created appear in the already open list, opens one, approves it, and the client's
browser-mode `resume` gets the completed result; a declined one gives the declined error; another account's
approval URL is the 404 page; a plain HTML form post (no CSRF token) is refused.

This test fails, never skips, when Chromium is missing (see `tests/integration/test_connect_browser.py`).
"""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp import Client

from tests.auth_support import bearer, mint
from tests.browser import BrowserError, Page, chromium
from tests.conftest import ServerUnderTest
from tests.console_support import console_server, sign_in, visitor
from tests.sdk import connect, text_of

pytestmark = pytest.mark.slow

GATED = "executor.coreTools.policies.list"
LIST = f"return (await tools.{GATED}({{}})).data.policies.length;"
DECLINED = f'Tool "{GATED}" requires approval but the request was declined by the user.'
ALICE = mint("alice", "acme")
WAIT = 15.0
FORM_REFUSALS = ("Forbidden: Origin not allowed", "Forbidden: missing or invalid CSRF token")


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> ServerUnderTest:
    return await console_server(nursery, data_dir, tmp_path)


async def pause(client: Client) -> dict[str, Any]:
    result = await client.call_tool("execute", {"code": LIST})
    assert result.structured_content["status"] == "user_approval_required", text_of(result)
    return result.structured_content


async def settle(page: Page, expression: str) -> Any:
    """`expression`'s first truthy value on a page that may be navigating (a form post): a look that lands
    between two documents is just a look too early."""
    with trio.fail_after(WAIT):
        while True:
            try:
                value = await page.evaluate(expression)
            except BrowserError:
                value = None
            if value:
                return value
            await trio.sleep(0.05)


async def test_a_person_approves_and_declines_in_the_browser_and_the_agents_resume_gets_it(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    rule = {"owner": "org", "pattern": GATED, "action": "require_approval"}
    created = await http.post(f"{base}/api/policies", json=rule, headers=bearer(ALICE))
    assert created.status_code == 200
    policy_id = created.json()["id"]
    async with (
        chromium() as browser,
        connect(executor.url + "?elicitation_mode=browser", headers=bearer(ALICE), mode="legacy") as (client, _),
    ):
        page = await browser.new_page()
        await sign_in(page, base, ALICE, then="/approvals")
        await page.wait_for("document.getElementById('empty').hidden === false")
        await page.evaluate("window.stillTheSamePage = true")

        first, second = await pause(client), await pause(client)
        assert first["approvalUrl"] == f"{base}/approvals/{first['executionId']}"
        listed = await page.wait_for(
            "(() => { const ids = Array.from(document.querySelectorAll('#approvals li'))"
            ".map((li) => li.dataset.executionId); return ids.length === 2 && ids.join(' '); })()"
        )
        assert listed == f"{second['executionId']} {first['executionId']}"  # newest first
        assert await page.evaluate("window.stillTheSamePage") is True  # no reload
        assert await page.evaluate("document.getElementById('empty').hidden") is True
        assert await page.evaluate("document.querySelector('#approvals .tool').textContent") == GATED
        await page.screenshots("approvals-list")

        # A plain HTML form, posted the old way (no script, so no CSRF token), is refused: for its `Origin`
        # (a form post from a no-referrer page says `null`) or, failing that, for the missing token.
        await page.evaluate(
            "(() => { const form = document.createElement('form'); form.method = 'POST';"
            f" form.action = {json.dumps('/api/approvals/' + second['executionId'])};"
            " const field = document.createElement('input'); field.name = 'action'; field.value = 'accept';"
            " form.append(field); document.body.append(form); form.submit(); })()"
        )
        refused = await settle(
            page, "document.body && document.body.innerText.includes('Forbidden') && document.body.innerText"
        )
        assert json.loads(refused)["error"] in FORM_REFUSALS
        alice = await visitor(http, base, ALICE)
        still = await http.get(f"{base}/api/approvals/{second['executionId']}", headers=alice.headers())
        assert still.json()["outcome"] == "pending"

        await page.navigate(first["approvalUrl"])
        assert await page.evaluate("document.getElementById('tool').textContent") == GATED
        assert await page.evaluate("document.getElementById('arguments').textContent") == "{}"
        assert await page.evaluate("document.getElementById('policy').textContent") == (
            f"org policy {GATED} ({policy_id})"
        )
        assert (await page.evaluate("document.getElementById('question').textContent")).startswith(f"Approve {GATED}?")
        await page.screenshots("approvals-detail")

        results: dict[str, Any] = {}

        async def resume(execution: str) -> None:
            results[execution] = await client.call_tool("resume", {"executionId": execution})

        async with trio.open_nursery() as waiting:
            waiting.start_soon(resume, first["executionId"])
            await page.evaluate("document.getElementById('approve').click()")
            outcome = await page.wait_for(
                "document.getElementById('outcome').textContent.startsWith('Approved') && "
                "document.getElementById('outcome').textContent"
            )
        approved = results[first["executionId"]]
        assert not approved.is_error
        assert approved.structured_content["status"] == "completed"
        assert approved.structured_content["result"] == 1
        assert "the agent gets the result" in outcome
        assert await page.evaluate("getComputedStyle(document.getElementById('decide')).display") == "none"
        assert await page.evaluate("document.querySelector('h1').textContent") == "Approval"
        await page.wait_for("document.getElementById('then').textContent.includes('finished')")
        await page.screenshots("approvals-approved")

        await page.navigate(second["approvalUrl"])
        async with trio.open_nursery() as waiting:
            waiting.start_soon(resume, second["executionId"])
            await page.evaluate("document.getElementById('decline').click()")
            await page.wait_for("document.getElementById('outcome').textContent.startsWith('Declined')")
        declined = results[second["executionId"]]
        assert declined.is_error
        assert text_of(declined).startswith(f"Error: {DECLINED}")

        await page.navigate(f"{base}/approvals")
        await page.wait_for("document.getElementById('empty').hidden === false")

        # Another account signs in in this browser: alice's approval URL is the 404 page, naming nothing.
        await sign_in(page, base, mint("bob", "acme"), then="/approvals")
        await page.navigate(first["approvalUrl"])
        assert await page.evaluate("document.querySelector('h1').textContent") == "Approval not found"
        body = await page.evaluate("document.body.innerText")
        assert GATED not in body
        assert first["executionId"] not in body
        await page.screenshots("approvals-not-found")

        violations = [entry for entry in page.log if "Content Security Policy" in json.dumps(entry)]
        assert violations == []
