"""The OAuth callback page and the console's OAuth connections, in a real Chromium against a real authorization
server (`tests/oauth_provider.py`, followed through its redirect so the browser reaches our callback with its own
cookies): the flow completes only for the console visitor who started it (with `--auth none`, the local
principal), never twice, never for a browser with no console session until it signs in (then it comes back by
itself), and across sites (the SameSite=Strict cookie) by a reload of the page. The page is HTML with the console's
headers, shows the provider's words when it refused, and holds no token; no log line holds the code. The
connections page shows an OAuth connection's scopes, expiry, refresh and health, and Reconnect leads to the
provider's sign-in and back.

Fails, never skips, without Chromium or the provider's node modules: `scripts/test` installs both."""

import json
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
import pytest
import trio

from tests.auth_support import mint
from tests.browser import Page, chromium
from tests.conftest import jwt_server, start_server
from tests.console_support import sign_in, visitor
from tests.integration.test_oauth_connections import ADMIN, MEMBER, ResourceServer, World, orders_spec
from tests.oauth_provider import oauth_provider
from tests.upstream import Answer, Received, start_upstream

pytestmark = pytest.mark.slow

ALICE = mint("alice@acme.test", "acme", org_admin=True, expires_in=3600)
BOB = mint("bob@acme.test", "acme", expires_in=3600)
USER_READ = "return await tools.orders.user.main.orders.getOrder({ id: '7' });"
LOCAL_READ = "return await tools.orders.org.main.orders.getOrder({ id: '7' });"
CALLBACK = "/api/oauth/callback"
NOT_IN_PROGRESS = "not in progress for you"
LANDED = "location.pathname === '/api/oauth/callback' && document.readyState === 'complete'"


@asynccontextmanager
async def world_of(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, *, local: bool = False
) -> AsyncIterator[World]:
    """The provider, an API that takes its JWTs, and an executor (`--auth jwt`, or `--auth none` with `local`)
    with the API added as the OpenAPI integration `orders`."""
    async with oauth_provider() as provider, httpx.AsyncClient(timeout=30) as http:
        discovery = (await http.get(provider.issuer + "/.well-known/openid-configuration")).json()
        resource = ResourceServer(provider.issuer)
        resource.keys = jwt.PyJWKSet.from_dict((await http.get(discovery["jwks_uri"])).json())
        resource.upstream = await start_upstream(nursery, resource.respond)
        if local:
            executor = await start_server(nursery, data_dir, allow_local_network=True)
        else:
            executor = await jwt_server(nursery, data_dir, tmp_path, allow_local_network=True)
        spec = orders_spec(resource.upstream.url, discovery["authorization_endpoint"], discovery["token_endpoint"])
        added = await http.post(
            executor.running.url + "/api/openapi/specs",
            json={"spec": {"kind": "blob", "value": json.dumps(spec)}, "slug": "orders"},
            headers={} if local else ADMIN,
        )
        assert added.status_code == 200, added.text
        yield World((executor,), provider, resource.upstream, http, discovery)
        await executor.stop()


@pytest.fixture
async def world(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> AsyncIterator[World]:
    async with world_of(nursery, data_dir, tmp_path) as made:
        yield made


async def start(
    world: World, client: str, auth: dict[str, str], owner: str = "user", redirect: str | None = None
) -> dict[str, Any]:
    body = {
        "client": client,
        "clientOwner": "org",
        "owner": owner,
        "name": "main",
        "integration": "orders",
        "template": "oauth-oauth",
    }
    if redirect is not None:
        body["redirectUri"] = redirect
    started = dict(await world.ok("POST", "/api/oauth/start", body, auth))
    assert started["status"] == "redirect"
    return started


async def outcome(page: Page) -> dict[str, Any]:
    """What the callback page says: title, heading, reason, its whole HTML and its result payload (or None)."""
    return dict(
        await page.evaluate(
            """(() => {
              const data = document.getElementById('oauth-result');
              return {
                title: document.title,
                heading: document.getElementById('outcome').textContent,
                reason: document.getElementById('reason').textContent,
                html: document.documentElement.outerHTML,
                result: data ? JSON.parse(data.textContent) : null,
              };
            })()"""
        )
    )


async def signed_in_at_provider(world: World, page: Page, address: str) -> None:
    """The console sent the page to the provider: alice signs in there, and the callback page says `address` is
    connected, with no content-security violation on the way."""
    await page.wait_for(f"location.href.startsWith({world.provider.issuer + '/'!r})", timeout=20)
    at_provider = await page.evaluate("location.href")
    landed = await world.provider.sign_in(at_provider, "alice@acme.test", follow=True, page=page)
    assert landed.startswith(f"{world.url}{CALLBACK}?")
    await page.wait_for(LANDED)
    shown = await outcome(page)
    assert shown["title"] == "Connected", shown["reason"]
    assert shown["result"]["address"] == address
    assert csp_violations(page) == []


def query_of(url: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}


def csp_violations(page: Page) -> list[dict[str, Any]]:
    return [entry for entry in page.log if "Content Security Policy" in json.dumps(entry)]


def server_log(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        record.getMessage() for record in caplog.records if record.name.startswith(("executor_mcp", "hypercorn"))
    )


async def test_oauth_callback_connects_the_console_visitor_who_started_it(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = await world.client()
    base = world.url
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, base, BOB)
        started = await start(world, client, MEMBER)
        landed = await world.provider.sign_in(started["authorizationUrl"], "bob@acme.test", follow=True, page=page)
        assert landed.startswith(f"{base}{CALLBACK}?")
        code = query_of(landed)["code"]
        await page.wait_for(LANDED)
        shown = await outcome(page)
        assert shown["title"] == "Connected"
        assert shown["heading"] == "Connected"
        assert shown["reason"] == "Authentication complete. This window will close automatically."
        result = shown["result"]
        assert result["type"] == "executor:oauth-result"
        assert result["ok"] is True
        assert result["sessionId"] == started["state"]
        assert result["address"] == "tools.orders.user.main"
        assert result["oauthClient"] == client
        assert set(result["oauthScope"].split()) == {"orders:read", "orders:write"}
        assert code not in shown["html"]
        # Delivered where upstream's console listens for it (the storage key; the opener and channel alike).
        stored = await page.evaluate("JSON.parse(localStorage.getItem('executor:oauth-result'))")
        assert stored == result
        assert csp_violations(page) == []

        # The same answer again: the state was single use, so it is the neutral failure, and the page stays HTML.
        await page.navigate(landed)
        again = await outcome(page)
        assert again["title"] == "Connection failed"
        assert NOT_IN_PROGRESS in again["reason"]
        assert again["result"]["ok"] is False
        assert again["result"]["sessionId"] == started["state"]

    listed = await world.ok("GET", "/api/connections", auth=MEMBER)
    assert [connection["address"] for connection in listed] == ["tools.orders.user.main"]
    called = await world.execute(USER_READ, MEMBER)
    assert called["result"]["ok"] is True, called
    assert called["result"]["data"]["sub"] == "bob@acme.test"
    (reached,) = world.api.calls("/orders/7")
    token = reached.headers["authorization"].removeprefix("Bearer ")
    assert token not in shown["html"]
    assert token not in again["html"]
    logged = server_log(caplog)
    assert f"GET {CALLBACK} 200" in logged  # the access line is there, its query is not
    assert code not in logged
    assert code not in caplog.text
    assert started["state"] not in logged

    # The page's headers: the console's (no CORS, no caching, no referrer, a CSP without inline script).
    cookie = (await visitor(world.http, base, BOB)).cookie
    replayed = await world.http.get(base + CALLBACK, params=query_of(landed), headers={"cookie": cookie})
    assert replayed.status_code == 404
    assert replayed.headers["content-type"].startswith("text/html")
    assert replayed.headers["cache-control"] == "no-store"
    assert replayed.headers["referrer-policy"] == "no-referrer"
    assert replayed.headers["x-frame-options"] == "DENY"
    assert "script-src 'self';" in replayed.headers["content-security-policy"]
    assert "access-control-allow-origin" not in replayed.headers
    assert "<title>Connection failed</title>" in replayed.text


async def test_oauth_callback_in_a_browser_signed_in_as_someone_else_connects_nothing(world: World) -> None:
    client = await world.client()
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, world.url, ALICE)  # same org, another account
        started = await start(world, client, MEMBER)
        landed = await world.provider.sign_in(started["authorizationUrl"], "bob@acme.test", follow=True, page=page)
        await page.wait_for(LANDED)
        shown = await outcome(page)
        assert shown["title"] == "Connection failed"
        assert NOT_IN_PROGRESS in shown["reason"]
        assert shown["result"] == {
            "type": "executor:oauth-result",
            "ok": False,
            "sessionId": started["state"],
            "error": shown["reason"],
        }
    assert await world.ok("GET", "/api/connections", auth=MEMBER) == []
    assert await world.ok("GET", "/api/connections", auth=ADMIN) == []
    # Taken by that attempt: not even its starter can complete it now.
    params = query_of(landed)
    assert (await world.call("POST", "/api/oauth/complete", params, MEMBER)).status_code == 404
    # A state nobody started reads the same.
    bob = await visitor(world.http, world.url, BOB)
    forged = await world.http.get(
        world.url + CALLBACK, params={**params, "state": secrets.token_urlsafe(32)}, headers={"cookie": bob.cookie}
    )
    assert forged.status_code == 404
    assert NOT_IN_PROGRESS in forged.text


async def test_oauth_callback_shows_that_the_provider_refused(world: World) -> None:
    client = await world.client()
    bob = await visitor(world.http, world.url, BOB)
    started = await start(world, client, MEMBER)
    hostile = "The user said <script>alert(1)</script> no"
    # A HEAD (a link checker's) takes nothing: the GET after it still finds the sign-in.
    query = {"state": started["state"], "error": "access_denied", "error_description": hostile}
    head = await world.http.head(world.url + CALLBACK, params=query, headers={"cookie": bob.cookie})
    assert head.status_code == 200
    refused = await world.http.get(
        world.url + CALLBACK,
        params={"state": started["state"], "error": "access_denied", "error_description": hostile},
        headers={"cookie": bob.cookie},
    )
    assert refused.status_code == 400
    assert refused.headers["content-type"].startswith("text/html")
    assert "<title>Connection failed</title>" in refused.text
    assert "The OAuth provider refused the sign-in: access_denied The user said" in refused.text
    assert "<script>alert(1)</script>" not in refused.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in refused.text
    # The refusal ended the sign-in: its code could not be used later.
    assert (
        await world.call("POST", "/api/oauth/complete", {"state": started["state"], "code": "x"}, MEMBER)
    ).status_code == 404
    # In a browser too, the provider's words are shown as text.
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, world.url, BOB)
        started = await start(world, client, MEMBER)
        query = urlencode({"state": started["state"], "error": "access_denied", "error_description": hostile})
        await page.navigate(f"{world.url}{CALLBACK}?{query}")
        shown = await outcome(page)
        assert shown["title"] == "Connection failed"
        assert shown["reason"].startswith(
            "The OAuth provider refused the sign-in: access_denied The user said <script>"
        )
        assert shown["result"]["ok"] is False
        assert await page.evaluate("document.querySelectorAll('script:not([src]):not([type])').length") == 0
        assert csp_violations(page) == []
    assert await world.ok("GET", "/api/connections", auth=MEMBER) == []


async def test_oauth_callback_without_a_console_session_asks_to_sign_in_and_then_completes(world: World) -> None:
    client = await world.client()
    async with chromium() as browser:
        page = await browser.new_page()
        started = await start(world, client, MEMBER)
        landed = await world.provider.sign_in(started["authorizationUrl"], "bob@acme.test", follow=True, page=page)
        await page.wait_for(LANDED)
        assert await page.evaluate("document.getElementById('outcome').textContent") == "Sign in to the console first"
        assert await page.evaluate("document.getElementById('oauth-result')") is None
        href = await page.evaluate("document.getElementById('sign-in-first').getAttribute('href')")
        assert href.startswith("/signin?next=")
        (back,) = parse_qs(urlsplit(href).query)["next"]
        assert urlsplit(back).path == CALLBACK
        assert query_of(back) == query_of(landed)
        assert await world.ok("GET", "/api/connections", auth=MEMBER) == []  # nothing completed
        # Sign in through the link: the console sends the browser back to the callback, which now completes.
        await page.evaluate("document.getElementById('sign-in-first').click()")
        await page.wait_for("location.pathname === '/signin' && document.readyState === 'complete'")
        await page.evaluate(
            f"document.getElementById('token').value = {BOB!r};document.getElementById('sign-in').requestSubmit();"
        )
        await page.wait_for(LANDED + " && document.title === 'Connected'")
        assert (await outcome(page))["result"]["sessionId"] == started["state"]
    listed = await world.ok("GET", "/api/connections", auth=MEMBER)
    assert [connection["address"] for connection in listed] == ["tools.orders.user.main"]


async def test_oauth_callback_from_another_site_reloads_to_carry_the_strict_cookie(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """The provider (127.0.0.1) and the console (localhost) are different sites: the redirect to the callback
    carries no SameSite=Strict cookie, so the page reloads itself from its own origin, cookie and all."""
    base = world.url.replace("127.0.0.1", "localhost")
    redirect = base + CALLBACK
    caplog.set_level(logging.DEBUG)
    client = await world.client(redirect=redirect)
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, base, BOB)
        started = await start(world, client, MEMBER, redirect=redirect)
        landed = await world.provider.sign_in(started["authorizationUrl"], "bob@acme.test", follow=True, page=page)
        assert landed.startswith(redirect + "?")
        await page.wait_for(LANDED + " && document.title === 'Connected'")
        shown = await outcome(page)
        assert shown["result"]["address"] == "tools.orders.user.main"
        assert csp_violations(page) == []
    assert len(await world.ok("GET", "/api/connections", auth=MEMBER)) == 1
    # Twice: the redirect (no cookie: the reload page), then the reload from this origin (completed).
    assert server_log(caplog).count(f"GET {CALLBACK} 200") == 2


async def test_oauth_callback_with_auth_none_completes_the_local_principals_flow(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path
) -> None:
    async with world_of(nursery, data_dir, tmp_path, local=True) as local:
        client = await local.client(auth={})
        started = await start(local, client, {}, owner="org")
        async with chromium() as browser:
            page = await browser.new_page()  # never opened the console: the local principal is who it is
            await local.provider.sign_in(started["authorizationUrl"], "local", follow=True, page=page)
            await page.wait_for(LANDED)
            shown = await outcome(page)
            assert shown["title"] == "Connected", shown["reason"]
            assert shown["result"]["address"] == "tools.orders.org.main"
        called = await local.execute(LOCAL_READ, {})
        assert called["result"]["ok"] is True, called


async def test_oauth_connections_page_shows_the_grant_and_reconnect_signs_in_again(world: World) -> None:
    client = await world.client()
    await world.connect(client)  # alice's org connection, by the API
    base = world.url
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, base, ALICE, then="/connections")
        row = "document.querySelector('#connections tr[data-name=main]')"
        facts = await page.evaluate(f"{row}.querySelector('dl.oauth').textContent")
        assert client in facts
        assert "orders:read" in facts
        assert "orders:write" in facts
        assert "UTC" in await page.evaluate(f"{row}.querySelector('dd.expires').textContent")
        assert "UTC" in await page.evaluate(f"{row}.querySelector('dd.refreshed').textContent")
        assert (await page.evaluate(f"{row}.querySelector('dd.health').textContent")).strip() == "OK"
        assert await page.evaluate(f"{row}.querySelector('dd.missing')") is None
        await page.screenshots("console-connections-oauth")
        await page.evaluate(f"{row}.querySelector('button.reconnect').click()")
        await signed_in_at_provider(world, page, "tools.orders.org.main")
    assert (await world.execute("return await tools.orders.org.main.orders.getOrder({ id: '7' });"))["result"]["ok"]

    # Reconnect is a console change like the others: this origin, the visitor's CSRF token.
    alice = await visitor(world.http, base, ALICE)
    body = {"owner": "org", "integration": "orders", "name": "main"}
    no_token = await world.http.post(base + "/connections/reconnect", json=body, headers=alice.headers(csrf=False))
    assert no_token.status_code == 403
    elsewhere = {**alice.headers(), "origin": "https://evil.example"}
    assert (await world.http.post(base + "/connections/reconnect", json=body, headers=elsewhere)).status_code == 403
    made = await world.http.post(base + "/connections/reconnect", json=body, headers=alice.headers())
    assert made.status_code == 200, made.text
    assert made.json()["authorizationUrl"].startswith(world.discovery["authorization_endpoint"])
    # Another org's visitor reconnects nothing of this org's (it is not found there), nor does anyone a
    # connection that does not exist.
    eve = await visitor(world.http, base, mint("eve@other.test", "other", expires_in=3600))
    refused = await world.http.post(base + "/connections/reconnect", json=body, headers=eve.headers())
    assert refused.status_code == 404, refused.text
    unknown = {**body, "name": "other"}
    assert (
        await world.http.post(base + "/connections/reconnect", json=unknown, headers=alice.headers())
    ).status_code == 404


async def test_oauth_the_console_connects_a_new_oauth_connection_registering_a_client_itself(
    world: World, nursery: trio.Nursery
) -> None:
    """The connections page's form with an OAuth template and no client named: the server discovers the API's
    authorization server (the API's protected-resource metadata names it, and the resource its tokens must be
    for), registers itself there, and sends the browser to sign in; the callback brings it back connected. A
    member connecting next uses the org's client, and a template whose server lets nobody register asks for a
    client first."""
    resource = ResourceServer(
        world.provider.issuer, jwt.PyJWKSet.from_dict((await world.http.get(world.discovery["jwks_uri"])).json())
    )

    def respond(request: Received) -> Answer:
        assert resource.upstream is not None
        if request.path == "/.well-known/oauth-protected-resource":
            metadata = {"resource": resource.upstream.url, "authorization_servers": [world.provider.issuer]}
            return Answer(200, json.dumps(metadata).encode())
        return resource.respond(request)

    resource.upstream = api = await start_upstream(nursery, respond)
    spec = orders_spec(api.url, "unused", "unused")
    del spec["components"], spec["security"]  # nothing in it says how to sign in: the API's metadata does
    await world.ok("POST", "/api/openapi/specs", {"spec": {"kind": "blob", "value": json.dumps(spec)}, "slug": "shop"})
    # The org's client registered by hand for another API at the same server: Connect does not borrow it unasked.
    other = {
        "owner": "org",
        "slug": "other-app",
        "authorizationUrl": world.discovery["authorization_endpoint"],
        "tokenUrl": world.discovery["token_endpoint"],
        "clientId": "other-app",
        "resource": api.url,
    }
    await world.ok("POST", "/api/oauth/clients", other)
    base = world.url
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, base, ALICE, then="/connections")
        await page.navigate(f"{base}/connections?integration=shop")
        await page.wait_for("document.readyState === 'complete' && !!document.querySelector('#oauth-client')")
        assert await page.evaluate("document.querySelector('#connection-template').value") == "oauth2"
        submit = "document.querySelector('#new-connection button[type=submit]')"
        assert await page.evaluate(f"{submit}.textContent") == "Sign in to connect"
        await page.evaluate("document.querySelector('#connection-owner').value = 'org'")
        await page.evaluate(f"{submit}.click()")
        await signed_in_at_provider(world, page, "tools.shop.org.main")
    executed = await world.execute("return await tools.shop.org.main.orders.getOrder({ id: '7' });")
    assert executed["result"]["ok"] is True, executed
    (client,) = [client for client in await world.ok("GET", "/api/oauth/clients") if client["slug"] != "other-app"]
    assert (client["owner"], client["origin"]["kind"], client["resource"]) == (
        "org",
        "dynamic_client_registration",
        api.url,
    )

    bob = await visitor(world.http, base, BOB)
    body = {"owner": "user", "integration": "shop", "template": "oauth2", "name": "mine"}
    started = await world.http.post(base + "/connections/oauth", json=body, headers=bob.headers())
    assert started.status_code == 200, started.text
    assert parse_qs(urlsplit(started.json()["authorizationUrl"]).query)["client_id"] == [client["clientId"]]
    assert len(await world.ok("GET", "/api/oauth/clients", auth=MEMBER)) == 2  # nothing registered for bob
    no_token = await world.http.post(base + "/connections/oauth", json=body, headers=bob.headers(csrf=False))
    assert no_token.status_code == 403

    nowhere = orders_spec(api.url, "https://127.0.0.1:9/authorize", "https://127.0.0.1:9/token")
    await world.ok(
        "POST", "/api/openapi/specs", {"spec": {"kind": "blob", "value": json.dumps(nowhere)}, "slug": "nowhere"}
    )
    body = {**body, "integration": "nowhere", "template": "oauth-oauth"}
    refused = await world.http.post(base + "/connections/oauth", json=body, headers=bob.headers())
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"].startswith("Register an OAuth client for this API first")


async def test_oauth_a_client_handoff_link_opens_the_console_form_and_registers_the_client(world: World) -> None:
    """A person opens `oauth.clients.createHandoff`'s link signed in to the console: the form is open and
    prefilled; they type the secret the provider gave them and register; the client is listed (never its
    secret) and a sign-in starts with it."""
    registered = (
        await world.http.post(
            world.discovery["registration_endpoint"],
            json={
                "redirect_uris": [world.url + CALLBACK],
                "client_name": "by hand",
                "token_endpoint_auth_method": "client_secret_post",
            },
        )
    ).json()
    secret = registered["client_secret"]
    query = urlencode(
        {
            "oauthClient": "1",
            "integration": "orders",
            "owner": "org",
            "slug": "by-hand",
            "clientId": registered["client_id"],
            "authorizationUrl": world.discovery["authorization_endpoint"],
            "tokenUrl": world.discovery["token_endpoint"],
            "resource": world.api.url,
        }
    )
    async with chromium() as browser:
        page = await browser.new_page()
        await sign_in(page, world.url, ALICE, then="/connections")
        await page.navigate(f"{world.url}/connections?{query}")
        await page.wait_for("document.readyState === 'complete' && !!document.querySelector('#new-oauth-client')")
        assert await page.evaluate("document.querySelector('#oauth-client-box').open") is True
        assert await page.evaluate("document.querySelector('#client-id').value") == registered["client_id"]
        await page.evaluate(f"document.querySelector('#client-secret').value = {secret!r}")
        await page.evaluate("document.querySelector('#new-oauth-client button[type=submit]').click()")
        await page.wait_for("document.querySelector('#status').classList.contains('done')")
        assert "by-hand" in await page.evaluate("document.querySelector('#status').textContent")
        assert await page.evaluate("document.querySelector('#client-secret').value") == ""
        assert secret not in await page.evaluate("document.documentElement.outerHTML")
        assert csp_violations(page) == []
    (listed,) = await world.ok("GET", "/api/oauth/clients")
    assert (listed["slug"], listed["owner"], listed["clientId"]) == ("by-hand", "org", registered["client_id"])
    assert secret not in json.dumps(listed)
    started = await world.ok("POST", "/api/oauth/start", {**(await world.start_body("by-hand")), "name": "byhand"})
    assert parse_qs(urlsplit(started["authorizationUrl"]).query)["client_id"] == [registered["client_id"]]
    landed = await world.provider.sign_in(started["authorizationUrl"], "alice@acme.test")
    connection = await world.ok("POST", "/api/oauth/complete", query_of(landed))
    assert connection["address"] == "tools.orders.org.byhand"
