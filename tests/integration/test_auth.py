"""Bearers, organizations, ownership and the exact refusals, against the real server."""

import json
from pathlib import Path

import httpx
import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.auth_support import JwksServer, SigningKey, bearer, closed_port_url, mint, unsigned
from tests.conftest import ServerUnderTest, start_server
from tests.mcp_http import envelope, headers, initialize_body
from tests.process import run_cli

NO_ORG = "No organization in session — log in via the web app first"
FOREIGN = "MCP session does not belong to the current bearer"
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
AUTH_SERVER = "https://auth.example.test"


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "hs256.key"
    path.write_bytes(b"  test-secret-that-is-long-enough-for-hs256\n")
    return path


@pytest.fixture
async def guarded(nursery: trio.Nursery, data_dir: Path, secret_file: Path) -> ServerUnderTest:
    return await start_server(
        nursery, data_dir, auth="jwt", jwt_secret_file=secret_file, authorization_server=(AUTH_SERVER,)
    )


async def call(http: httpx.AsyncClient, url: str, body: dict, token: str | None, session_id: str | None = None):
    extra = bearer(token) if token is not None else {}
    return await http.post(url, content=json.dumps(body), headers={**headers(session_id), **extra})


async def open_session(http: httpx.AsyncClient, url: str, token: str) -> str:
    response = await call(http, url, initialize_body(), token)
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


def metadata_url(server: ServerUnderTest) -> str:
    return server.running.url + "/.well-known/oauth-protected-resource/mcp"


async def test_no_bearer_is_401_with_a_bare_challenge(guarded: ServerUnderTest, http: httpx.AsyncClient) -> None:
    response = await call(http, guarded.url, initialize_body(), None)
    assert envelope(response) == (401, -32001, "Unauthorized")
    assert response.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url(guarded)}"'
    assert "error=" not in response.headers["www-authenticate"]
    assert "WWW-Authenticate" in response.headers["access-control-expose-headers"]
    assert response.headers["access-control-allow-origin"] == "*"


@pytest.mark.parametrize(
    ("token", "description"),
    [
        (mint(expires_in=-60), "The access token expired"),
        (mint(key=b"a-different-secret-of-enough-length-for-hs"), "The access token is invalid"),
        (unsigned(), "The access token is invalid"),
        (mint(sub=None), "The access token is invalid"),
        ("not.a.jwt", "The access token is invalid"),
        ("exk_unknown_key", "The API key is invalid"),
        ("x" * 20_000, "The bearer token is invalid"),
    ],
    ids=["expired", "wrong-signature", "alg-none", "no-sub", "garbage-jwt", "unknown-api-key", "oversized"],
)
async def test_bad_bearers_are_401_invalid_token(
    guarded: ServerUnderTest, http: httpx.AsyncClient, token: str, description: str
) -> None:
    response = await call(http, guarded.url, initialize_body(), token)
    assert envelope(response) == (401, -32001, "Unauthorized")
    assert response.headers["www-authenticate"] == (
        f'Bearer error="invalid_token", error_description="{description}", resource_metadata="{metadata_url(guarded)}"'
    )


@pytest.mark.parametrize(
    "authorization",
    [b"Basic YWxpY2U6c2VjcmV0", b"bearer lowercase-scheme", b"Bearer \xff\xfe\xfd", b"Bearer"],
    ids=["basic", "lowercase", "non-utf8", "scheme-only"],
)
async def test_malformed_authorization_headers_are_401(
    guarded: ServerUnderTest, http: httpx.AsyncClient, authorization: bytes
) -> None:
    request_headers = [(k.encode(), v.encode()) for k, v in headers().items()] + [(b"authorization", authorization)]
    response = await http.post(guarded.url, content=json.dumps(initialize_body()), headers=request_headers)
    assert envelope(response) == (401, -32001, "Unauthorized")
    assert response.headers["www-authenticate"].startswith("Bearer ")


async def test_a_verified_token_without_org_is_403(guarded: ServerUnderTest, http: httpx.AsyncClient) -> None:
    response = await call(http, guarded.url, initialize_body(), mint(org=None))
    assert envelope(response) == (403, -32001, NO_ORG)
    assert "mcp-session-id" not in response.headers


async def test_issuer_and_audience_are_checked(nursery: trio.Nursery, data_dir: Path, secret_file: Path) -> None:
    server = await start_server(
        nursery, data_dir, auth="jwt", jwt_secret_file=secret_file, jwt_issuer="https://issuer", jwt_audience="mcp"
    )
    async with httpx.AsyncClient() as http:
        good = await call(http, server.url, initialize_body(), mint(iss="https://issuer", aud="mcp"))
        assert good.status_code == 200
        for token in (mint(iss="https://other", aud="mcp"), mint(iss="https://issuer", aud="else"), mint()):
            assert envelope(await call(http, server.url, initialize_body(), token))[0] == 401


async def test_the_sdk_client_works_with_a_bearer(guarded: ServerUnderTest) -> None:
    async with (
        httpx2.AsyncClient(headers=bearer(mint())) as http,
        Client(streamable_http_client(guarded.url, http_client=http), mode="legacy") as client,
    ):
        result = await client.call_tool("execute", {"code": "return 6 * 7"})
        assert result.content[0].text == "42"


async def test_a_stolen_session_id_is_refused_and_the_victim_keeps_working(
    guarded: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    victim = await open_session(http, guarded.url, mint("alice", "acme"))
    for thief in (mint("mallory", "acme"), mint("alice", "other-org"), mint("mallory", "evil")):
        stolen = await call(http, guarded.url, PING, thief, victim)
        assert envelope(stolen) == (403, -32003, FOREIGN)
        assert "retry-after" not in stolen.headers
    # A stranger without any organization is refused too, and cannot condemn the victim's session.
    orgless = await call(http, guarded.url, PING, mint("mallory", None), victim)
    assert envelope(orgless) == (403, -32001, NO_ORG)
    still = await call(http, guarded.url, PING, mint("alice", "acme"), victim)
    assert still.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}


async def test_revoking_an_org_condemns_its_sessions(guarded: ServerUnderTest, http: httpx.AsyncClient) -> None:
    token = mint("alice", "acme")
    session_id = await open_session(http, guarded.url, token)
    data_dir = str(guarded.running.data_dir)
    revoked = await run_cli("orgs", "revoke", "acme", "--data-dir", data_dir)
    assert revoked.returncode == 0, revoked.stderr

    refused = await call(http, guarded.url, PING, token, session_id)
    assert envelope(refused) == (403, -32001, NO_ORG)
    fresh = await call(http, guarded.url, initialize_body(), token)
    assert envelope(fresh) == (403, -32001, NO_ORG)
    listed = await run_cli("orgs", "list", "--data-dir", data_dir)
    assert ["acme", "revoked"] in [line.split()[:2] for line in listed.stdout.decode().splitlines()]

    restored = await run_cli("orgs", "restore", "acme", "--data-dir", data_dir)
    assert restored.returncode == 0
    gone = await call(http, guarded.url, PING, token, session_id)
    status, code, message = envelope(gone)
    assert (status, code) == (404, -32001)
    assert message in {"Session timed out, please reconnect", "Session not found"}
    assert (await call(http, guarded.url, initialize_body(), token)).status_code == 200


async def test_api_keys_from_the_cli(guarded: ServerUnderTest, http: httpx.AsyncClient) -> None:
    data_dir = str(guarded.running.data_dir)
    created = await run_cli("keys", "create", "--user", "bot", "--org", "acme", "--data-dir", data_dir)
    assert created.returncode == 0, created.stderr
    key = created.stdout.decode().strip()
    assert key.startswith("exk_")
    key_id = key.split("_")[1]
    assert key_id.encode() in created.stderr

    session_id = await open_session(http, guarded.url, key)
    assert (await call(http, guarded.url, PING, key, session_id)).status_code == 200
    # The key acts as its account: a token for the same account and org may use the same session.
    assert (await call(http, guarded.url, PING, mint("bot", "acme"), session_id)).status_code == 200

    listed = await run_cli("keys", "list", "--data-dir", data_dir)
    assert [key_id, "active"] in [line.split()[:2] for line in listed.stdout.decode().splitlines()]
    assert key.encode() not in listed.stdout
    assert (await run_cli("keys", "revoke", key_id, "--data-dir", data_dir)).returncode == 0
    refused = await call(http, guarded.url, PING, key, session_id)
    assert envelope(refused) == (401, -32001, "Unauthorized")
    assert 'error_description="The API key is invalid"' in refused.headers["www-authenticate"]
    missing = await run_cli("keys", "revoke", "000000000000", "--data-dir", data_dir)
    assert missing.returncode == 1


async def test_protected_resource_metadata(guarded: ServerUnderTest, http: httpx.AsyncClient) -> None:
    base = guarded.running.url
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
        response = await http.get(base + path)
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == "*"
        assert response.json() == {
            "resource": base + "/mcp",
            "authorization_servers": [AUTH_SERVER],
            "bearer_methods_supported": ["header"],
            "scopes_supported": ["openid", "profile", "email", "offline_access"],
        }
        preflight = await http.options(base + path)
        assert preflight.status_code == 204
        assert "last-event-id" in preflight.headers["access-control-allow-headers"]


async def test_public_url_is_used_in_challenges_and_metadata(
    nursery: trio.Nursery, data_dir: Path, secret_file: Path
) -> None:
    server = await start_server(
        nursery, data_dir, auth="jwt", jwt_secret_file=secret_file, public_url="https://mcp.example.test/"
    )
    async with httpx.AsyncClient() as http:
        response = await call(http, server.url, initialize_body(), None)
        assert response.headers["www-authenticate"] == (
            'Bearer resource_metadata="https://mcp.example.test/.well-known/oauth-protected-resource/mcp"'
        )
        metadata = await http.get(server.running.url + "/.well-known/oauth-protected-resource/mcp")
        assert metadata.json()["resource"] == "https://mcp.example.test/mcp"


async def test_jwks_tokens_are_cached_and_a_rotated_key_is_fetched(nursery: trio.Nursery, data_dir: Path) -> None:
    first, second = SigningKey.rsa("rsa-1"), SigningKey.ec("ec-2")
    jwks = JwksServer(keys=[first])
    await jwks.start(nursery)
    server = await start_server(nursery, data_dir, auth="jwt", jwks_url=jwks.url)
    async with httpx.AsyncClient() as http:
        session_id = await open_session(http, server.url, first.mint())
        assert (await call(http, server.url, PING, first.mint(), session_id)).status_code == 200
        assert jwks.fetches == 1

        forged = SigningKey.rsa("rsa-1").mint()  # the right kid, signed by someone else's key
        assert envelope(await call(http, server.url, PING, forged, session_id))[0] == 401

        jwks.keys.append(second)
        rotated = await call(http, server.url, PING, second.mint(), session_id)
        assert rotated.json()["result"] == {}
        assert jwks.fetches == 2

        # Unknown kids do not make the server fetch again and again.
        for attempt in range(3):
            stray = await call(http, server.url, PING, SigningKey.rsa(f"stray-{attempt}").mint(), session_id)
            assert envelope(stray)[0] == 401
        assert jwks.fetches == 2


async def test_a_failing_jwks_is_503_and_the_session_is_kept(nursery: trio.Nursery, data_dir: Path) -> None:
    key = SigningKey.rsa("rsa-1")
    jwks = JwksServer(keys=[key])
    await jwks.start(nursery)
    server = await start_server(nursery, data_dir, auth="jwt", jwks_url=jwks.url)
    async with httpx.AsyncClient() as http:
        session_id = await open_session(http, server.url, key.mint())
        jwks.failing = True
        jwks.keys.append(SigningKey.rsa("rsa-2"))
        outage = await call(http, server.url, PING, jwks.keys[1].mint(), session_id)
        assert envelope(outage) == (503, -32001, "Authentication temporarily unavailable - please retry")
        assert outage.headers["retry-after"] == "2"
        jwks.failing = False
        kept = await call(http, server.url, PING, key.mint(), session_id)
        assert kept.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}


async def test_an_unreachable_jwks_is_503_and_keeps_the_session(nursery: trio.Nursery, data_dir: Path) -> None:
    server = await start_server(nursery, data_dir, auth="jwt", jwks_url=closed_port_url())
    async with httpx.AsyncClient() as http:
        token = SigningKey.rsa("k").mint()
        refused = await call(http, server.url, initialize_body(), token)
        assert envelope(refused) == (503, -32001, "Authentication temporarily unavailable - please retry")
        assert refused.headers["retry-after"] == "2"
        assert refused.headers["access-control-allow-origin"] == "*"


async def test_the_session_cap_counts_an_account_per_organization(
    nursery: trio.Nursery, data_dir: Path, secret_file: Path
) -> None:
    """`alice` in org `evil` opening sessions never evicts `alice` in org `acme`."""
    server = await start_server(nursery, data_dir, auth="jwt", jwt_secret_file=secret_file, max_sessions_per_user=1)
    async with httpx.AsyncClient() as http:
        mine = await open_session(http, server.url, mint("alice", "acme"))
        for _ in range(2):
            await open_session(http, server.url, mint("alice", "evil"))
        kept = await call(http, server.url, PING, mint("alice", "acme"), mine)
        assert kept.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
        # Within one owner the cap still applies: a second acme session evicts the first.
        await open_session(http, server.url, mint("alice", "acme"))
        evicted = await call(http, server.url, PING, mint("alice", "acme"), mine)
        assert envelope(evicted)[:2] == (404, -32001)


async def test_a_403_condemns_only_the_session_of_the_same_account_and_organization(
    guarded: ServerUnderTest, http: httpx.AsyncClient
) -> None:
    session_id = await open_session(http, guarded.url, mint("alice", "acme"))
    data_dir = str(guarded.running.data_dir)
    assert (await run_cli("orgs", "revoke", "evil", "--data-dir", data_dir)).returncode == 0
    for stranger in (mint("alice", None), mint("alice", "evil")):
        refused = await call(http, guarded.url, PING, stranger, session_id)
        assert envelope(refused) == (403, -32001, NO_ORG)
    still = await call(http, guarded.url, PING, mint("alice", "acme"), session_id)
    assert still.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
