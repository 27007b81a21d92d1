"""OAuth connections end to end, every part real: a real authorization server (`tests/oauth_provider.py`,
npm oidc-provider, the user's sign-in and consent driven in Chromium), a resource server that accepts only its
JWTs (verified against the provider's JWKS, audience and scopes checked), and the executor between them.

An org admin has the server register itself with the provider (RFC 7591), starts a sign-in for an OpenAPI
integration whose document declares an `oauth2` scheme, the user signs in, the callback's code is completed, and
an agent's call reaches the API with the token. Tokens refresh once however many calls wait; a revoked grant is
`oauth_reauth_required` naming `oauth.start`; a narrow grant is `oauth_scope_insufficient`; a forged, replayed
or another principal's state is refused; another org neither sees nor uses the connection."""

import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs
import httpx
import jwt
import pytest
import trio

from executor_mcp.config import SECRET_KEY_ENV
from executor_mcp.integrations.oauth_clients import MAX_CLIENTS_PER_OWNER
from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest, jwt_server
from tests.integration.test_stateless_wire import call_body, result_of, send
from tests.mcp_support import downstream
from tests.oauth_provider import OAuthProvider, oauth_provider
from tests.upstream import Answer, Received, Upstream, start_upstream

pytestmark = pytest.mark.slow

ADMIN = bearer(mint("alice@acme.test", "acme", org_admin=True, expires_in=3600))
MEMBER = bearer(mint("bob@acme.test", "acme", expires_in=3600))
STRANGER = bearer(mint("eve@other.test", "other", org_admin=True, expires_in=3600))
READ = "return await tools.orders.org.main.orders.getOrder({ id: '7' });"
WRITE = "return await tools.orders.org.main.orders.createOrder({ body: { item: 'tea' } });"


@attrs.define
class ResourceServer:
    """An API that takes only the provider's JWTs for itself: `orders:read` to read, `orders:write` to write."""

    issuer: str
    keys: jwt.PyJWKSet | None = None
    upstream: Upstream | None = None

    def respond(self, request: Received) -> Answer:
        assert self.upstream is not None
        assert self.keys is not None
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        try:
            header = jwt.get_unverified_header(token)
            key = next(k for k in self.keys.keys if k.key_id == header.get("kid"))
            claims = jwt.decode(token, key.key, algorithms=["RS256"], audience=self.upstream.url, issuer=self.issuer)
        except Exception:
            return Answer(
                401, b'{"error":"invalid_token"}', headers=(("www-authenticate", 'Bearer error="invalid_token"'),)
            )
        needed = "orders:write" if request.method == "POST" else "orders:read"
        if needed not in claims.get("scope", "").split():
            challenge = f'Bearer error="insufficient_scope", scope="{needed}"'
            return Answer(403, b'{"error":"insufficient_scope"}', headers=(("www-authenticate", challenge),))
        return Answer(200, json.dumps({"id": "7", "sub": claims["sub"]}).encode())


def orders_spec(api: str, authorize: str, token: str) -> dict[str, Any]:
    flow = {"authorizationUrl": authorize, "tokenUrl": token, "scopes": {"orders:read": "", "orders:write": ""}}
    body = {"content": {"application/json": {"schema": {"type": "object"}}}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "Orders", "version": "1"},
        "servers": [{"url": api}],
        "components": {"securitySchemes": {"oauth": {"type": "oauth2", "flows": {"authorizationCode": flow}}}},
        "security": [{"oauth": ["orders:read"]}],
        "paths": {
            "/orders/{id}": {
                "get": {
                    "operationId": "getOrder",
                    "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "the order"}},
                }
            },
            "/orders": {
                "post": {
                    "operationId": "createOrder",
                    "requestBody": body,
                    "responses": {"200": {"description": "created"}},
                }
            },
        },
    }


def registration_of(probed: dict[str, Any], owner: str = "org") -> dict[str, Any]:
    """`POST /api/oauth/clients/register-dynamic`'s body from `POST /api/oauth/probe`'s answer, as a UI sends it."""
    return {
        "owner": owner,
        "issuer": probed["issuer"],
        "registrationEndpoint": probed["registrationEndpoint"],
        "authorizationUrl": probed["authorizationUrl"],
        "tokenUrl": probed["tokenUrl"],
        "resource": probed["resource"],
        "scopes": probed["scopesSupported"],
        "tokenEndpointAuthMethodsSupported": probed["tokenEndpointAuthMethodsSupported"],
    }


@attrs.frozen
class World:
    executors: tuple[ServerUnderTest, ...]  # one, or two instances on one PostgreSQL database
    provider: OAuthProvider
    api: Upstream
    http: httpx.AsyncClient
    discovery: dict[str, Any]

    @property
    def url(self) -> str:
        return self.executors[0].running.url

    async def call(self, method: str, path: str, body: Any = None, auth: dict[str, str] = ADMIN) -> httpx.Response:
        return await self.http.request(method, self.url + path, json=body, headers=auth)

    async def ok(self, method: str, path: str, body: Any = None, auth: dict[str, str] = ADMIN) -> Any:
        response = await self.call(method, path, body, auth)
        assert response.status_code == 200, response.text
        return response.json()

    async def execute(self, code: str, auth: dict[str, str] = ADMIN, instance: int = 0) -> dict[str, Any]:
        url = self.executors[instance].running.url + "/mcp"
        answer = result_of(await send(self.http, url, call_body(1, "execute", {"code": code}), **auth), 1)
        return answer["structuredContent"]

    async def client(self, auth: dict[str, str] = ADMIN, redirect: str | None = None) -> str:
        """The server registers itself with the provider, for the API as its resource (for `redirect`, when
        given, instead of its own callback)."""
        body = self.registration(redirect)
        return str((await self.ok("POST", "/api/oauth/clients/register-dynamic", body, auth))["client"])

    def registration(self, redirect: str | None = None) -> dict[str, Any]:
        body = {
            "owner": "org",
            "issuer": self.provider.issuer,
            "registrationEndpoint": self.discovery["registration_endpoint"],
            "authorizationUrl": self.discovery["authorization_endpoint"],
            "tokenUrl": self.discovery["token_endpoint"],
            "resource": self.api.url,
            "scopes": ["orders:read", "orders:write"],
            "tokenEndpointAuthMethodsSupported": self.discovery["token_endpoint_auth_methods_supported"],
        }
        if redirect is not None:
            body["redirectUri"] = redirect
        return body

    async def start_body(self, client: str, owner: str = "org") -> dict[str, Any]:
        return {
            "client": client,
            "clientOwner": "org",
            "owner": owner,
            "name": "main",
            "integration": "orders",
            "template": "oauth-oauth",
        }

    async def start(self, client: str, auth: dict[str, str] = ADMIN, owner: str = "org") -> dict[str, Any]:
        return dict(await self.ok("POST", "/api/oauth/start", await self.start_body(client, owner), auth))

    async def connect(self, client: str, *, narrow: bool = False) -> dict[str, Any]:
        started = await self.start(client)
        assert started["status"] == "redirect"
        answered = await self.provider.sign_in(started["authorizationUrl"], "alice@acme.test", narrow=narrow)
        params = {name: values[0] for name, values in parse_qs(urlsplit(answered).query).items()}
        assert params["state"] == started["state"]
        return dict(await self.ok("POST", "/api/oauth/complete", params))


@pytest.fixture
async def world(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[World]:
    ttl, instances = getattr(request, "param", (3600, 1))
    if instances > 1:
        request.getfixturevalue("monkeypatch").setenv(SECRET_KEY_ENV, "one key for the whole cluster")
        on_database = {"database_url": request.getfixturevalue("postgres").new_database()}
    async with oauth_provider(access_token_ttl=ttl) as provider, httpx.AsyncClient(timeout=30) as http:
        discovery = (await http.get(provider.issuer + "/.well-known/openid-configuration")).json()
        resource = ResourceServer(provider.issuer)
        resource.keys = jwt.PyJWKSet.from_dict((await http.get(discovery["jwks_uri"])).json())
        resource.upstream = await start_upstream(nursery, resource.respond)
        if instances == 1:
            executors = (await jwt_server(nursery, data_dir, tmp_path, allow_local_network=True),)
        else:
            executors = tuple(
                [
                    await jwt_server(
                        nursery, tmp_path / name, tmp_path, allow_local_network=True, instance_id=name, **on_database
                    )
                    for name in "ab"[:instances]
                ]
            )
        spec = orders_spec(resource.upstream.url, discovery["authorization_endpoint"], discovery["token_endpoint"])
        added = await http.post(
            executors[0].running.url + "/api/openapi/specs",
            json={"spec": {"kind": "blob", "value": json.dumps(spec)}, "slug": "orders"},
            headers=ADMIN,
        )
        assert added.status_code == 200, added.text
        yield World(executors, provider, resource.upstream, http, discovery)
        for executor in executors:
            executor.running.stop.set()
            await executor.done.wait()


async def test_oauth_connect_an_openapi_api_and_call_it(world: World) -> None:
    client = await world.client()
    assert await world.client() == client  # registered once per server, resource and redirect URI
    listed = await world.ok("GET", "/api/oauth/clients")
    assert [entry["slug"] for entry in listed] == [client]
    assert listed[0]["origin"]["kind"] == "dynamic_client_registration"
    connection = await world.connect(client)
    assert connection["address"] == "tools.orders.org.main"
    assert connection["oauthClient"] == client
    assert connection["oauthClientOwner"] == "org"
    assert set(connection["oauthScope"].split()) == {"orders:read", "orders:write"}
    assert connection["missingOAuthScopes"] == []
    assert connection["expiresAt"] > 0
    result = await world.execute(READ)
    assert result["result"]["ok"] is True, result
    assert result["result"]["data"] == {"id": "7", "sub": "alice@acme.test"}
    (reached,) = world.api.calls("/orders/7")
    assert reached.headers["authorization"].startswith("Bearer ey")
    # No answer, listing or log of ours holds a token.
    token = reached.headers["authorization"].removeprefix("Bearer ")
    for path in ("/api/connections", "/api/oauth/clients", "/api/audit"):
        assert token not in (await world.call("GET", path)).text


async def test_oauth_state_is_single_use_and_bound_to_who_started_it(world: World) -> None:
    client = await world.client()
    started = await world.start(client, owner="user", auth=MEMBER)
    answered = await world.provider.sign_in(started["authorizationUrl"], "bob@acme.test")
    params = {name: values[0] for name, values in parse_qs(urlsplit(answered).query).items()}
    forged = await world.call("POST", "/api/oauth/complete", {**params, "state": secrets.token_urlsafe(32)}, MEMBER)
    assert forged.status_code == 404
    assert forged.json()["_tag"] == "OAuthSessionNotFoundError"
    other = await world.call("POST", "/api/oauth/complete", params, ADMIN)  # same org, another account
    assert other.status_code == 404
    # Taken by that attempt: the state is single use, whoever presents it.
    again = await world.call("POST", "/api/oauth/complete", params, MEMBER)
    assert again.status_code == 404
    # A fresh sign-in completes for its starter, once.
    started = await world.start(client, owner="user", auth=MEMBER)
    answered = await world.provider.sign_in(started["authorizationUrl"], "bob@acme.test")
    params = {name: values[0] for name, values in parse_qs(urlsplit(answered).query).items()}
    made = await world.ok("POST", "/api/oauth/complete", params, MEMBER)
    assert made["address"] == "tools.orders.user.main"
    replayed = await world.call("POST", "/api/oauth/complete", params, MEMBER)
    assert replayed.status_code == 404
    mixed_up = await world.start(client, owner="user", auth=MEMBER)
    answered = await world.provider.sign_in(mixed_up["authorizationUrl"], "bob@acme.test")
    params = {name: values[0] for name, values in parse_qs(urlsplit(answered).query).items()}
    refused = await world.call("POST", "/api/oauth/complete", {**params, "iss": "https://evil.example"}, MEMBER)
    assert refused.status_code == 400
    assert "iss mismatch" in refused.json()["message"]


async def test_oauth_another_org_neither_sees_nor_uses_the_connection(world: World) -> None:
    await world.connect(await world.client())
    assert await world.ok("GET", "/api/oauth/clients", auth=STRANGER) == []
    assert await world.ok("GET", "/api/connections", auth=STRANGER) == []
    result = await world.execute(READ, STRANGER)
    assert "orders" in json.dumps(result)  # the path is unknown there
    assert not world.api.calls("/orders")


@pytest.mark.parametrize("world", [(3, 1)], indirect=True)
async def test_oauth_expiry_refreshes_once_for_fifty_concurrent_calls(world: World) -> None:
    await world.connect(await world.client())
    before = await world.provider.token_requests()
    await trio.sleep(2)  # within the token's last half
    fifty = (
        "const calls = Array.from({ length: 50 }, () => tools.orders.org.main.orders.getOrder({ id: '7' }));"
        " return (await Promise.all(calls)).length;"
    )
    result = await world.execute(fifty)
    assert result["result"] == 50, result
    after = await world.provider.token_requests()
    assert after.get("refresh_token", 0) - before.get("refresh_token", 0) == 1
    assert len(world.api.calls("/orders/7")) == 50


@pytest.mark.parametrize("world", [(3, 2)], indirect=True)
async def test_oauth_two_instances_on_one_database_refresh_once(world: World) -> None:
    """Calls after expiry on two instances at once: the store's claim lets one of them refresh, the other waits
    for the token it writes. Two refreshes would spend the rotated refresh token twice, and the provider revokes
    a grant whose spent refresh token comes back."""
    await world.connect(await world.client())
    before = await world.provider.token_requests()
    await trio.sleep(2)  # within the token's last half
    twenty = (
        "const calls = Array.from({ length: 20 }, () => tools.orders.org.main.orders.getOrder({ id: '7' }));"
        " return (await Promise.all(calls)).length;"
    )
    results: list[dict[str, Any]] = []

    async def execute(instance: int) -> None:
        results.append(await world.execute(twenty, instance=instance))

    async with trio.open_nursery() as nursery:
        for instance in (0, 1, 0, 1):
            nursery.start_soon(execute, instance)
    assert [result["result"] for result in results] == [20] * 4, results
    after = await world.provider.token_requests()
    assert after.get("refresh_token", 0) - before.get("refresh_token", 0) == 1
    await trio.sleep(2)  # due again: the refresh token the one refresh kept is still good, from either instance
    assert (await world.execute(READ, instance=1))["result"]["ok"] is True
    assert (await world.execute(READ, instance=0))["result"]["ok"] is True
    final = await world.provider.token_requests()
    assert final.get("refresh_token", 0) - after.get("refresh_token", 0) == 1


@pytest.mark.parametrize("world", [(3, 1)], indirect=True)
async def test_oauth_a_revoked_grant_asks_for_a_new_sign_in_and_reconnect_fixes_it(world: World) -> None:
    client = await world.client()
    await world.connect(client)
    assert await world.provider.revoke_refresh_tokens("alice@acme.test") >= 1
    await trio.sleep(2)
    result = await world.execute(READ)
    error = result["result"]["error"]
    assert error["code"] == "oauth_reauth_required", error
    assert error["details"]["recovery"]["startOAuthTool"] == "executor.coreTools.oauth.start"
    await world.connect(client)  # Reconnect
    assert (await world.execute(READ))["result"]["ok"] is True


async def test_oauth_a_narrow_grant_is_a_scope_failure_naming_what_is_missing(world: World) -> None:
    connection = await world.connect(await world.client(), narrow=True)
    assert connection["missingOAuthScopes"] == ["orders:write"]
    assert (await world.execute(READ))["result"]["ok"] is True
    await world.ok("POST", "/api/policies", {"owner": "org", "pattern": "orders.*", "action": "approve"})
    error = (await world.execute(WRITE))["result"]["error"]
    assert error["code"] == "oauth_scope_insufficient", error
    assert "orders:write" in error["message"]
    assert "startOAuthTool" not in error["details"]["recovery"]


async def test_oauth_connect_an_mcp_server_that_signs_in_as_the_mcp_spec_says(world: World, tmp_path: Path) -> None:
    """An MCP server built with the official SDK as an OAuth protected resource: its 401 and metadata name the
    authorization server; the server registers itself, the user signs in, and its tools are listed and called."""
    async with downstream(tmp_path / "state", oauth_issuer=world.provider.issuer) as server:
        unsigned = await world.http.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert unsigned.status_code == 401
        added = await world.ok(
            "POST", "/api/mcp/servers", {"name": "tasks", "endpoint": server.url, "auth": {"kind": "oauth2"}}
        )
        probed = await world.ok("POST", "/api/oauth/probe", {"url": server.url})
        assert probed["issuer"] == world.provider.issuer
        assert probed["resource"] == server.url
        registered = await world.ok("POST", "/api/oauth/clients/register-dynamic", registration_of(probed))
        body = {
            "client": registered["client"],
            "clientOwner": "org",
            "owner": "org",
            "name": "main",
            "integration": added["slug"],
            "template": "oauth2",
        }
        started = await world.ok("POST", "/api/oauth/start", body)
        answered = await world.provider.sign_in(started["authorizationUrl"], "alice@acme.test")
        params = {name: values[0] for name, values in parse_qs(urlsplit(answered).query).items()}
        connection = await world.ok("POST", "/api/oauth/complete", params)
        assert connection["lastHealth"] is None, connection
        result = await world.execute(f"return await tools.{added['slug']}.org.main.echo({{ text: 'hi' }});")
        assert result["result"]["ok"] is True, result
        assert result["result"]["data"]["structuredContent"] == {"result": "echo: hi"}


@pytest.mark.parametrize("world", [(3, 1)], indirect=True)
async def test_oauth_a_client_repointed_elsewhere_is_never_sent_a_refresh_token(world: World) -> None:
    """An admin who registers the client again with another token endpoint does not receive the members'
    refresh tokens: a refresh goes only where the connection's tokens came from."""
    client = await world.client()
    await world.connect(client)
    stolen = world.api.url + "/steal"
    body = {
        "owner": "org",
        "slug": client,
        "authorizationUrl": world.discovery["authorization_endpoint"],
        "tokenUrl": stolen,
        "clientId": "someone-else",
    }
    await world.ok("POST", "/api/oauth/clients", body)
    await trio.sleep(2)
    error = (await world.execute(READ))["result"]["error"]
    assert error["code"] == "oauth_reauth_required", error
    assert not world.api.calls("/steal")
    refused = await world.call(
        "POST", "/api/oauth/start", {**(await world.start_body(client)), "redirectUri": "https://evil.example/cb"}
    )
    assert refused.status_code == 400
    assert refused.json()["message"] == "redirectUri must be this server's OAuth callback"


async def test_oauth_an_owner_holds_a_bounded_number_of_clients(world: World) -> None:
    def body(n: int, owner: str = "org") -> dict[str, Any]:
        return {
            "owner": owner,
            "slug": f"c{n}",
            "authorizationUrl": world.discovery["authorization_endpoint"],
            "tokenUrl": world.discovery["token_endpoint"],
            "clientId": f"client-{n}",
        }

    for n in range(MAX_CLIENTS_PER_OWNER):
        await world.ok("POST", "/api/oauth/clients", body(n))
    refused = await world.call("POST", "/api/oauth/clients", body(MAX_CLIENTS_PER_OWNER))
    assert refused.status_code == 400
    assert refused.json()["message"] == "The org holds 100 OAuth clients already: remove one first"
    await world.ok("POST", "/api/oauth/clients", {**body(7), "clientId": "replaced"})  # a replacement is no more
    await world.ok("POST", "/api/oauth/clients", body(0, owner="user"), MEMBER)  # an account's own are counted apart
    refused = await world.call("POST", "/api/oauth/clients/register-dynamic", world.registration())
    assert refused.status_code == 400
    await world.ok("DELETE", "/api/oauth/clients/c3", {"owner": "org"})
    await world.ok("POST", "/api/oauth/clients/register-dynamic", world.registration())
