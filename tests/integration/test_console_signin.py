"""Signing in to the web console, over raw httpx against a real server: the cookie, its CSRF token, and what
ends a sign-in (sign-out, a revoked key or org, expiry of the bearer it came from)."""

from pathlib import Path

import httpx
import pytest
import trio

from tests.auth_support import mint
from tests.conftest import ServerUnderTest, start_server
from tests.console_support import CSRF_META, console_server, visitor
from tests.process import run_cli


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> ServerUnderTest:
    return await console_server(nursery, data_dir, tmp_path)


async def test_a_page_sends_a_stranger_to_sign_in_and_back(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    base = executor.running.url
    page = await http.get(f"{base}/?x=1")
    assert page.status_code == 303
    assert page.headers["location"] == "/signin?next=%2F%3Fx%3D1"
    signin = await http.get(f"{base}/signin?next=//evil.example/")
    assert signin.status_code == 200
    assert 'data-next="/"' in signin.text
    assert "access-control-allow-origin" not in signin.headers
    assert "script-src 'self'" in signin.headers["content-security-policy"]


async def test_a_bearer_signs_in_once_and_the_cookie_carries_the_visit(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    token = mint("alice", "acme")
    signed = await http.post(f"{base}/signin", json={"token": token}, headers={"origin": base})
    assert signed.status_code == 200
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert token not in cookie
    home = await http.get(f"{base}/", headers={"cookie": cookie.split(";")[0]})
    assert home.status_code == 200
    assert "<code>alice</code>" in home.text
    assert token not in home.text


async def test_the_api_takes_the_cookie_only_with_its_csrf_token(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    alice = await visitor(http, base, mint("alice", "acme"))
    listed = await http.get(f"{base}/api/policies", headers=alice.headers())
    assert listed.status_code == 200
    assert listed.json() == []
    without = await http.get(f"{base}/api/policies", headers=alice.headers(csrf=False))
    assert without.status_code == 403
    assert without.json() == {"error": "Forbidden: missing or invalid CSRF token"}
    bob = await visitor(http, base, mint("bob", "acme"))
    crossed = await http.get(f"{base}/api/policies", headers={**alice.headers(), "x-csrf-token": bob.csrf})
    assert crossed.status_code == 403
    elsewhere = await http.get(f"{base}/api/policies", headers={**alice.headers(), "origin": "http://evil.example"})
    assert elsewhere.status_code == 403
    assert elsewhere.json() == {"error": "Forbidden: Origin not allowed"}
    body = {"owner": "user", "pattern": "executor.*", "action": "block"}
    created = await http.post(f"{base}/api/policies", json=body, headers=alice.headers())
    assert created.status_code == 200
    assert (await http.get(f"{base}/api/policies", headers=bob.headers())).json() == []


async def test_a_sign_in_post_from_another_origin_or_without_one_is_refused(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    token = mint("alice", "acme")
    for headers in ({"origin": "http://evil.example"}, {}):
        refused = await http.post(f"{base}/signin", json={"token": token}, headers=headers)
        assert refused.status_code == 403
        assert "set-cookie" not in refused.headers
    form = await http.post(f"{base}/signin", data={"token": token}, headers={"origin": base})
    assert form.status_code == 415
    bad = await http.post(f"{base}/signin", json={"token": "exk_nope_nope"}, headers={"origin": base})
    assert bad.status_code == 401
    assert "not valid" in bad.json()["error"]
    # JSON may escape a lone surrogate, which no token holds and UTF-8 cannot encode: refused, not a 500.
    lone = await http.post(
        f"{base}/signin",
        content=b'{"token": "exk_\\ud800"}',
        headers={"origin": base, "content-type": "application/json"},
    )
    assert lone.status_code == 401
    assert "not valid" in lone.json()["error"]


async def test_sign_out_needs_the_token_and_clears_the_cookie(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base = executor.running.url
    alice = await visitor(http, base, mint("alice", "acme"))
    assert (await http.post(f"{base}/signout", json={}, headers=alice.headers(csrf=False))).status_code == 403
    out = await http.post(f"{base}/signout", json={}, headers=alice.headers())
    assert out.status_code == 200
    assert "Max-Age=0" in out.headers["set-cookie"]


async def test_a_revoked_key_or_org_ends_the_visit(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    base, data_dir = executor.running.url, str(executor.running.data_dir)
    created = await run_cli("keys", "create", "--user", "carol", "--org", "globex", "--data-dir", data_dir)
    key = created.stdout.decode().strip()
    carol = await visitor(http, base, key)
    assert (await http.get(f"{base}/api/policies", headers=carol.headers())).status_code == 200
    assert (await run_cli("keys", "revoke", key.split("_")[1], "--data-dir", data_dir)).returncode == 0
    assert (await http.get(f"{base}/", headers=carol.headers())).status_code == 303
    assert (await http.get(f"{base}/api/policies", headers=carol.headers())).status_code == 401
    dave = await visitor(http, base, mint("dave", "initech"))
    assert (await run_cli("orgs", "revoke", "initech", "--data-dir", data_dir)).returncode == 0
    assert (await http.get(f"{base}/", headers=dave.headers())).status_code == 303


async def test_a_sign_in_ends_with_the_bearer_it_came_from(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    base = executor.running.url
    signed = await http.post(
        f"{base}/signin", json={"token": mint("alice", "acme", expires_in=120)}, headers={"origin": base}
    )
    max_age = int(signed.headers["set-cookie"].split("Max-Age=")[1].split(";")[0])
    assert 100 <= max_age <= 120


async def test_without_auth_the_first_page_signs_the_browser_in(
    nursery: trio.Nursery, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    server = await start_server(nursery, tmp_path / "open")
    base = server.running.url
    home = await http.get(f"{base}/")
    assert home.status_code == 200
    cookie = home.headers["set-cookie"].split(";")[0]
    match = CSRF_META.search(home.text)
    assert match is not None
    assert (await http.get(f"{base}/signin")).status_code == 303
    listed = await http.get(f"{base}/api/policies", headers={"cookie": cookie, "x-csrf-token": match.group(1)})
    assert listed.status_code == 200
    http.cookies.clear()
    forged = await http.get(f"{base}/api/policies", headers={"cookie": cookie})
    assert forged.status_code == 403
    assert (await http.get(f"{base}/api/policies")).status_code == 200  # curl has no cookie: the local principal


async def test_a_console_link_signs_in_once(executor: ServerUnderTest, http: httpx.AsyncClient) -> None:
    base, data_dir = executor.running.url, str(executor.running.data_dir)
    made = await run_cli(
        "console-link", "--user", "erin", "--org", "acme", "--data-dir", data_dir, "--public-url", base
    )
    assert made.returncode == 0, made.stderr
    url = made.stdout.decode().strip()
    assert url.startswith(f"{base}/signin/link/")
    page = await http.get(url)
    assert page.status_code == 200
    assert "sign-in-link" in page.text
    assert url.rsplit("/", 1)[1] not in page.text
    assert (await http.post(url, json={}, headers={"origin": "http://evil.example"})).status_code == 403
    used = await http.post(url, json={}, headers={"origin": base})
    assert used.status_code == 200
    cookie = used.headers["set-cookie"].split(";")[0]
    http.cookies.clear()
    home = await http.get(f"{base}/", headers={"cookie": cookie})
    assert "<code>erin</code>" in home.text
    again = await http.post(url, json={}, headers={"origin": base})
    assert again.status_code == 404
    assert "set-cookie" not in again.headers


async def test_a_console_link_for_a_revoked_org_signs_nobody_in(
    executor: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    base, data_dir = executor.running.url, str(executor.running.data_dir)
    made = await run_cli(
        "console-link", "--user", "erin", "--org", "gone", "--data-dir", data_dir, "--public-url", base
    )
    assert (await run_cli("orgs", "revoke", "gone", "--data-dir", data_dir)).returncode == 0
    refused = await http.post(made.stdout.decode().strip(), json={}, headers={"origin": base})
    assert refused.status_code == 403
    assert "set-cookie" not in refused.headers


async def test_console_link_refuses_bad_input(tmp_path: Path) -> None:
    bad = await run_cli("console-link", "--user", "", "--org", "acme", "--data-dir", str(tmp_path))
    assert bad.returncode == 2
    assert b"--user is empty" in bad.stderr
    forever = await run_cli(
        "console-link", "--user", "a", "--org", "b", "--expires", "1e9", "--data-dir", str(tmp_path)
    )
    assert forever.returncode == 2


async def test_a_sign_in_made_before_an_admin_claim_was_set_is_dropped(
    nursery: trio.Nursery, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """Without `--org-admin-claim` every member signs in as an admin; once the claim is set, that cookie's
    admin role means nothing, so the visitor signs in again (and gets the role the claim gives)."""
    data_dir = tmp_path / "data"
    before = await console_server(nursery, data_dir, tmp_path)
    alice = await visitor(http, before.running.url, mint("alice", "acme"))
    assert (await http.get(f"{before.running.url}/", headers=alice.headers())).status_code == 200
    await before.stop()
    after = await console_server(nursery, data_dir, tmp_path, org_admin_claim=("org_role", "admin"))
    kept = await http.get(f"{after.running.url}/", headers=alice.headers())
    assert kept.status_code == 303
