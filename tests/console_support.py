"""Signing in to the web console from tests: in a real browser through the sign-in page, or over raw httpx
(the cookie and the page's CSRF token), against a server started with `--auth jwt`."""

import re
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from tests.browser import Page
from tests.conftest import ServerUnderTest, jwt_server

CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]*)">')


async def console_server(nursery: trio.Nursery, data_dir: Path, tmp_path: Path, **overrides: Any) -> ServerUnderTest:
    """A `--auth jwt` server (bearers from `tests.auth_support.mint`) that may reach local upstreams."""
    return await jwt_server(nursery, data_dir, tmp_path, allow_local_network=True, **overrides)


async def sign_in(page: Page, base_url: str, token: str, then: str = "/") -> None:
    """Sign in through the page as a person would, landing on `then`."""
    await page.navigate(f"{base_url}/signin?next={then}")
    await page.evaluate(
        f"document.getElementById('token').value = {token!r};document.getElementById('sign-in').requestSubmit();"
    )
    await page.wait_for(f"location.pathname === {then!r} && document.readyState === 'complete'")


@attrs.frozen
class Visitor:
    """A signed-in console visitor over httpx: its cookie and CSRF token, and the headers a page's script sends."""

    base_url: str
    cookie: str
    csrf: str

    def headers(self, *, csrf: bool = True) -> dict[str, str]:
        headers = {"cookie": self.cookie, "origin": self.base_url}
        return {**headers, "x-csrf-token": self.csrf} if csrf else headers


async def visitor(http: httpx.AsyncClient, base_url: str, token: str) -> Visitor:
    signed = await http.post(f"{base_url}/signin", json={"token": token}, headers={"origin": base_url})
    assert signed.status_code == 200, signed.text
    cookie = signed.headers["set-cookie"].split(";")[0]
    http.cookies.clear()  # each visitor sends its own cookie, never the client's jar
    page = await http.get(f"{base_url}/", headers={"cookie": cookie})
    assert page.status_code == 200
    match = CSRF_META.search(page.text)
    assert match is not None
    assert match.group(1)
    return Visitor(base_url, cookie, match.group(1))


async def call(http: httpx.AsyncClient, who: Visitor, method: str, path: str, body: object = None) -> httpx.Response:
    """An `/api` request as `who` (their cookie and CSRF token, or their bearer)."""
    return await http.request(method, who.base_url + path, json=body, headers=who.headers())
