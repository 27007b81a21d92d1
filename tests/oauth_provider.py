"""A real OAuth 2.1 / OpenID Connect authorization server for tests: `tests/oauth_provider/provider.mjs`
(oidc-provider, pinned in `tests/oauth_provider/package-lock.json`, installed by `scripts/install-node-tools`)
run with the suite's pinned Node 22 as a child of the test, and ended with the block.

    async with oauth_provider(access_token_ttl=2) as provider:
        provider.issuer                      # http://127.0.0.1:<port>, discovery under /.well-known/
        url = await provider.sign_in(authorization_url, "alice@acme.test")  # Chromium: login + consent
        # ...: the redirect URI with code, state and iss, not visited (follow=True: visited, cookies and all)
        await provider.revoke_refresh_tokens("alice@acme.test")
        await provider.token_requests()      # {"authorization_code": 1, "refresh_token": 2}

What the server offers, and its rules, are described at the top of `provider.mjs`.
"""

import json
import os
import re
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import httpx
import trio

from tests.browser import BrowserError, Page, chromium
from tests.node_tools import NODE, require

PROVIDER_DIR = Path(__file__).resolve().parent / "oauth_provider"
PROVIDER = PROVIDER_DIR / "provider.mjs"
_ANNOUNCE = re.compile(rb"ISSUER: (http://\S+)\n")
# Generous next to the ~0.3 s a start and the ~1 s a sign-in take on an idle machine.
STARTUP_BOUND = 30
SIGN_IN_BOUND = 30

# The cookie that makes the provider show the authorization response instead of redirecting (provider.mjs).
INTERCEPT_COOKIE = "intercept-authorization-response"
# One step of a sign-in, evaluated in each provider page until the browser leaves the provider: answer the
# intercepted authorization response's URL, or the error page's text, or fill in the login form, or press the
# consent button. Each document is driven once (a click's navigation takes a moment).
_STEP = """(() => {
  const response = document.getElementById('authorization-response');
  if (response) return {landed: response.getAttribute('href')};
  const error = document.getElementById('error');
  if (error) return {error: error.textContent};
  if (window.__signInStepTaken) return null;
  const login = document.querySelector('input[name=login]');
  const submit = document.getElementById('submit');
  const consent = document.getElementById(%(consent)s);
  if (login && submit) {
    login.value = %(login)s;
    window.__signInStepTaken = true;
    submit.click();
  } else if (consent) {
    window.__signInStepTaken = true;
    consent.click();
  }
  return null;
})()"""


@attrs.frozen
class SsoClient:
    """A confidential client registered at start (for console single sign-on)."""

    client_id: str
    client_secret: str
    redirect_uris: tuple[str, ...]
    token_endpoint_auth_method: str = "client_secret_basic"


@attrs.define
class OAuthProvider:
    issuer: str
    stderr: bytearray  # what the provider logged (oidc-provider's warnings, failed interactions), growing

    async def revoke_refresh_tokens(self, sub: str) -> int:
        """Revoke every grant of account `sub` (its refresh tokens, codes and opaque access tokens go with
        them; JWT access tokens stay valid until they expire); the number of grants revoked."""
        async with httpx.AsyncClient() as http:
            answer = await http.post(f"{self.issuer}/test/revoke-refresh-tokens", params={"sub": sub})
        answer.raise_for_status()
        return int(answer.json()["revoked_grants"])

    async def token_requests(self) -> dict[str, int]:
        """Token endpoint requests so far (successful or not), by grant_type."""
        async with httpx.AsyncClient() as http:
            answer = await http.get(f"{self.issuer}/test/stats")
        answer.raise_for_status()
        return {str(grant): int(count) for grant, count in answer.json().items()}

    async def sign_in(
        self, url: str, login: str, *, narrow: bool = False, follow: bool = False, page: Page | None = None
    ) -> str:
        """Open `url` (an authorization URL, or a page of the app under test that leads to one) in Chromium, sign
        in as `login` and consent: to every scope, or with `narrow` to orders:read alone of the resource scopes.

        By default the provider is told (a cookie on its origin) to show its authorization response instead of
        redirecting: the answer is that response, the client's redirect URI with `code`, `state` and `iss` (or
        `error`), which neither the browser nor anything else has visited, so it need not be served and the code
        is the test's to exchange. With `follow`, the browser is redirected as usual, and the answer is the URL of
        the first page it commits outside the provider (where the app's callback sent it, say): for an app whose
        callback needs the browser's own cookies, as a console sign-in does.

        Without `page`, a fresh Chromium (no session) runs for this sign-in alone. A `page` passed in keeps its
        browser's cookies: the provider's session may skip the login form (signing in as the earlier account),
        and consent when the grant already covers the request. A provider error page fails the sign-in."""
        if page is None:
            async with chromium() as browser:
                outcome = await self._drive(await browser.new_page(), url, login, narrow=narrow, follow=follow)
        else:
            outcome = await self._drive(page, url, login, narrow=narrow, follow=follow)
        # Raised here, out of the browser's nursery: a plain AssertionError, not one wrapped in a group.
        if "error" in outcome:
            raise AssertionError(f"the provider answered an error page: {outcome['error']}")
        return outcome["landed"]

    async def _drive(self, page: Page, url: str, login: str, *, narrow: bool, follow: bool) -> dict[str, str]:
        """`{"landed": url}`, or `{"error": text}` for a provider error page."""
        cookie = {"name": INTERCEPT_COOKIE, "url": self.issuer}
        if follow:
            await page.send("Network.deleteCookies", cookie)
        else:
            await page.send("Network.setCookie", {**cookie, "value": "1"})
        step = _STEP % {"login": json.dumps(login), "consent": json.dumps("consent-narrow" if narrow else "consent")}
        # Whether the browser went through the provider: `url` is at it, it showed a page, or (its session and
        # grant already covering the request) it passed straight through to the app, which then shows a page
        # other than `url`.
        at_provider = url.startswith(f"{self.issuer}/")
        with trio.fail_after(SIGN_IN_BOUND):
            await page.send("Page.navigate", {"url": url})
            while True:
                try:
                    current = await _current_url(page)
                    if current.startswith(f"{self.issuer}/"):
                        at_provider = True
                        if found := await page.evaluate(step):
                            return {key: str(value) for key, value in found.items()}
                    elif follow and current != "about:blank" and (at_provider or current != url):
                        return {"landed": current}
                except BrowserError:
                    pass  # the page was between documents (a navigation under way): look again
                await trio.sleep(0.05)


async def _current_url(page: Page) -> str:
    """The URL of the page's current navigation entry (for a navigation that failed, the URL it failed at)."""
    history = await page.send("Page.getNavigationHistory")
    return str(history["entries"][history["currentIndex"]]["url"])


@asynccontextmanager
async def oauth_provider(
    *, access_token_ttl: int = 3600, sso_client: SsoClient | None = None, metadata_documents_ca: Path | None = None
) -> AsyncIterator[OAuthProvider]:
    """The provider on a free loopback port until the block ends (it keeps everything in memory). With
    `metadata_documents_ca`, it takes clients' metadata document URLs as client ids, trusting that CA's https."""
    env = {**os.environ, "ACCESS_TOKEN_TTL": str(access_token_ttl)}
    for name in ("SSO_CLIENT_ID", "SSO_CLIENT_SECRET", "SSO_REDIRECT_URIS", "SSO_TOKEN_AUTH_METHOD"):
        env.pop(name, None)  # only what this call asks for
    if metadata_documents_ca is not None:
        env |= {"METADATA_DOCUMENTS": "1", "NODE_EXTRA_CA_CERTS": str(metadata_documents_ca)}
    if sso_client is not None:
        env |= {
            "SSO_CLIENT_ID": sso_client.client_id,
            "SSO_CLIENT_SECRET": sso_client.client_secret,
            "SSO_REDIRECT_URIS": ",".join(sso_client.redirect_uris),
            "SSO_TOKEN_AUTH_METHOD": sso_client.token_endpoint_auth_method,
        }
    require(PROVIDER_DIR / "node_modules" / "oidc-provider" / "package.json")
    process = await trio.lowlevel.open_process(
        [str(require(NODE)), str(PROVIDER), "0"],
        cwd=PROVIDER_DIR,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    stdout, stderr = bytearray(), bytearray()

    async def drain(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
        while chunk := await stream.receive_some():
            into.extend(chunk)

    try:
        with trio.fail_after(STARTUP_BOUND):
            while (match := _ANNOUNCE.search(stdout)) is None:
                chunk = await process.stdout.receive_some()
                if not chunk:
                    await drain(process.stderr, stderr)
                    raise AssertionError(f"oauth provider exited before listening: {stderr.decode(errors='replace')}")
                stdout += chunk
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, process.stdout, stdout)
            nursery.start_soon(drain, process.stderr, stderr)
            yield OAuthProvider(issuer=match.group(1).decode(), stderr=stderr)
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
