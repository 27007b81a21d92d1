"""Console single sign-on with a real OpenID Connect provider (`tests/oauth_provider.py`, npm oidc-provider):
Chromium starts at the console's "sign in with your organization's account", signs in at the provider, and comes
back signed in as the account and org the ID token names; an account of a domain not on the allowlist is
refused, and nothing is signed in. The flow's state and nonce are checked: a callback without the flow's own
cookie, or with another state, signs nobody in."""

from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import httpx
import pytest
import trio

from tests.browser import chromium
from tests.conftest import ServerUnderTest, jwt_server
from tests.oauth_provider import OAuthProvider, SsoClient, oauth_provider
from tests.recording_upstream import listen_port

pytestmark = pytest.mark.slow

CLIENT_ID = "executor-console"
CLIENT_SECRET = "a console secret of enough length"


@attrs.frozen
class Sso:
    executor: ServerUnderTest
    provider: OAuthProvider

    @property
    def url(self) -> str:
        return self.executor.running.url


@pytest.fixture
async def sso(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> AsyncIterator[Sso]:
    port = listen_port()
    public = f"http://127.0.0.1:{port}"
    secret = tmp_path / "oidc-secret"
    secret.write_text(CLIENT_SECRET + "\n")
    client = SsoClient(CLIENT_ID, CLIENT_SECRET, (public + "/signin/sso/callback",))
    async with oauth_provider(sso_client=client) as provider:
        executor = await jwt_server(
            nursery,
            data_dir,
            tmp_path,
            port=port,
            public_url=public,
            oidc_issuer=provider.issuer,
            oidc_client_id=CLIENT_ID,
            oidc_client_secret_file=secret,
            oidc_allowed_domain=("acme.test",),
        )
        yield Sso(executor, provider)
        executor.running.stop.set()
        await executor.done.wait()


async def test_oauth_sso_signs_in_an_allowed_account_as_its_org(sso: Sso) -> None:
    async with chromium() as browser:
        page = await browser.new_page()
        await page.navigate(sso.url + "/signin")
        assert await page.wait_for("document.querySelector('#sign-in-sso') !== null")
        landed = await sso.provider.sign_in(
            sso.url + "/signin/sso?next=/policies", "alice@acme.test", follow=True, page=page
        )
        assert landed.startswith(sso.url + "/"), landed  # our callback, or already the page it moved on to
        # Our page moves on to where the sign-in started, signed in (the console's cookie rides on it).
        await page.wait_for("location.pathname === '/policies'")
        who = await page.wait_for("document.body?.innerText.includes('alice@acme.test') && document.body.innerText")
        assert "acme" in who
        status = await page.evaluate(
            "fetch('/api/policies', {headers: {'x-csrf-token': document.querySelector('meta[name=csrf-token]')"
            "?.content || ''}}).then(r => r.status)"
        )
        assert status == 200


async def test_oauth_sso_refuses_an_account_of_another_domain(sso: Sso) -> None:
    async with chromium() as browser:
        page = await browser.new_page()
        landed = await sso.provider.sign_in(sso.url + "/signin/sso", "eve@other.test", follow=True, page=page)
        assert landed.startswith(sso.url + "/"), landed  # our callback, or already the page it moved on to
        text = await page.wait_for("document.body?.innerText.includes('Sign-in failed') && document.body.innerText")
        assert "Accounts of other.test may not sign in here" in text
        cookies = await page.send("Network.getCookies", {"urls": [sso.url]})
        assert [c["name"] for c in cookies["cookies"] if c["name"].startswith("executor_console")] == []


async def test_oauth_sso_callback_without_its_flow_signs_nobody_in(sso: Sso) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        started = await http.get(sso.url + "/signin/sso")
        assert started.status_code == 303
        assert started.headers["location"].startswith(sso.provider.issuer)
        assert "nonce=" in started.headers["location"]
        flow_cookie = started.headers["set-cookie"]
        assert "HttpOnly" in flow_cookie
        assert "SameSite=Lax" in flow_cookie
        forged = await http.get(sso.url + "/signin/sso/callback", params={"state": "forged", "code": "x"})
        assert forged.status_code == 400
        assert "set-cookie" not in forged.headers or "Max-Age=0" in forged.headers["set-cookie"]
        # The flow's own cookie, another state: refused too.
        cookie = flow_cookie.split(";")[0]
        wrong = await http.get(
            sso.url + "/signin/sso/callback", params={"state": "not-it", "code": "x"}, headers={"cookie": cookie}
        )
        assert wrong.status_code == 400
