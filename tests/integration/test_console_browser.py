"""Signing in and out of the web console in a real browser (headless Chromium over CDP).

Fails, never skips, without Chromium: `scripts/test` installs it (`scripts/install-browser`)."""

import json
from pathlib import Path

import pytest
import trio

from tests.auth_support import mint
from tests.browser import chromium
from tests.conftest import ServerUnderTest
from tests.console_support import console_server, sign_in

pytestmark = pytest.mark.slow


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> ServerUnderTest:
    return await console_server(nursery, data_dir, tmp_path)


async def test_a_person_signs_in_with_a_bearer_and_out_again(executor: ServerUnderTest) -> None:
    base = executor.running.url
    async with chromium() as browser:
        page = await browser.new_page()
        await page.navigate(f"{base}/")
        assert await page.evaluate("location.pathname") == "/signin"
        await page.screenshots("console-signin")
        await page.evaluate(
            "document.getElementById('token').value = 'exk_wrong_key';"
            "document.getElementById('sign-in').requestSubmit();"
        )
        refused = await page.wait_for("document.getElementById('status').className === 'error'")
        assert refused is True
        assert "not valid" in await page.evaluate("document.getElementById('status').textContent")
        assert await page.evaluate("document.getElementById('token').value") == ""
        await sign_in(page, base, mint("alice", "acme"))
        who = await page.evaluate("document.querySelector('.who').textContent")
        assert "alice" in who
        assert "acme" in who
        assert await page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
        assert await page.evaluate("document.getElementById('mcp-url').textContent") == f"{base}/mcp"
        await page.screenshots("console-home")
        await page.evaluate("document.getElementById('sign-out').click()")
        await page.wait_for("location.pathname === '/signin'")
        await page.navigate(f"{base}/")
        assert await page.evaluate("location.pathname") == "/signin"
        violations = [entry for entry in page.log if "Content Security Policy" in json.dumps(entry)]
        assert violations == []
