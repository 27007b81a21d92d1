"""OAuth found where the API's description names none, every part real: a real authorization server
(`tests/oauth_provider.py`, npm oidc-provider, sign-in driven in Chromium), APIs that accept only its JWTs and
say where it is (RFC 9728 metadata beside an OpenAPI API; a GraphQL endpoint's 401 challenge), and the
executor, which adds them with a discovered `oauth2` method that a user signs in to and an agent calls through.

And the other side: an API that publishes nothing, or never answers, adds as before, quickly."""

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs
import httpx
import jwt
import pytest
import trio

from executor_mcp.integrations.oauth_discovery import DISCOVERY_BUDGET, MAX_REQUESTS
from tests.conftest import ServerUnderTest, jwt_server
from tests.graphql_upstream import start_graphql_shop
from tests.integration.test_oauth_connections import ADMIN, READ, ResourceServer, orders_spec, registration_of
from tests.integration.test_stateless_wire import call_body, result_of, send
from tests.oauth_provider import OAuthProvider, oauth_provider
from tests.upstream import Answer, Received, Upstream, start_upstream

pytestmark = pytest.mark.slow

SCOPES = ["orders:read", "orders:write"]


def unprotected_spec(api: str) -> dict[str, Any]:
    """The orders API's document without its `oauth2` scheme: nothing in it says how to sign in."""
    spec = orders_spec(api, "unused", "unused")
    del spec["components"], spec["security"]
    return spec


def blob(spec: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "blob", "value": json.dumps(spec)}


@attrs.frozen
class Executor:
    server: ServerUnderTest
    provider: OAuthProvider
    http: httpx.AsyncClient

    @property
    def url(self) -> str:
        return self.server.running.url

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        response = await self.http.request(method, self.url + path, json=body, headers=ADMIN)
        assert response.status_code == 200, response.text
        return response.json()

    async def auth_methods(self, slug: str) -> list[dict[str, Any]]:
        (listed,) = [row for row in await self.ok("GET", "/api/integrations") if row["slug"] == slug]
        return list(listed["authMethods"])

    async def sign_in(self, integration: str, client: str) -> dict[str, Any]:
        """An org connection `main` signed in with the discovered method's template."""
        body = {
            "client": client,
            "clientOwner": "org",
            "owner": "org",
            "name": "main",
            "integration": integration,
            "template": "oauth2",
        }
        started = await self.ok("POST", "/api/oauth/start", body)
        assert started["status"] == "redirect"
        answered = await self.provider.sign_in(started["authorizationUrl"], "alice@acme.test")
        params = {name: values[0] for name, values in parse_qs(urlsplit(answered).query).items()}
        return dict(await self.ok("POST", "/api/oauth/complete", params))

    async def execute(self, code: str) -> dict[str, Any]:
        answer = result_of(
            await send(self.http, self.url + "/mcp", call_body(1, "execute", {"code": code}), **ADMIN), 1
        )
        return dict(answer["structuredContent"])


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> AsyncIterator[Executor]:
    async with oauth_provider() as provider, httpx.AsyncClient(timeout=30) as http:
        server = await jwt_server(nursery, data_dir, tmp_path, allow_local_network=True)
        yield Executor(server, provider, http)
        server.running.stop.set()
        await server.done.wait()


async def provider_keys(executor: Executor) -> jwt.PyJWKSet:
    discovery = (await executor.http.get(executor.provider.issuer + "/.well-known/openid-configuration")).json()
    return jwt.PyJWKSet.from_dict((await executor.http.get(discovery["jwks_uri"])).json())


async def test_oauth_discovered_for_an_openapi_spec_without_a_scheme_signs_in_and_calls(
    executor: Executor, nursery: trio.Nursery
) -> None:
    """The API publishes protected-resource metadata at its origin naming the provider: the add gains an
    `oauth2` method whose `discoveryUrl` leads a probe, a registration and a sign-in to a working call."""
    resource = ResourceServer(executor.provider.issuer, await provider_keys(executor))

    def respond(request: Received) -> Answer:
        assert resource.upstream is not None
        if request.path == "/.well-known/oauth-protected-resource":
            metadata = {
                "resource": resource.upstream.url,
                "authorization_servers": [executor.provider.issuer],
                "scopes_supported": SCOPES,
            }
            return Answer(200, json.dumps(metadata).encode())
        return resource.respond(request)

    resource.upstream = api = await start_upstream(nursery, respond)
    spec = blob(unprotected_spec(api.url))

    previewed = await executor.ok("POST", "/api/openapi/preview", {"spec": spec})
    (preset,) = previewed["oauth2Presets"]
    assert preset["label"] == "OAuth2 Authorization Code · discovered"
    assert (preset["template"], preset["discoveryUrl"], preset["issuer"]) == (
        "oauth2",
        api.url,
        executor.provider.issuer,
    )

    await executor.ok("POST", "/api/openapi/specs", {"spec": spec, "slug": "orders"})
    (method,) = await executor.auth_methods("orders")
    assert (method["id"], method["kind"], method["template"]) == ("oauth2", "oauth", "oauth2")
    oauth = method["oauth"]
    assert oauth["discoveryUrl"] == api.url
    assert oauth["resource"] == api.url
    assert oauth["supportsDynamicRegistration"] is True
    assert "scopes" not in oauth  # discovered by the sign-in, through discoveryUrl

    # The console's sequence: probe the discovery URL, register with what it found, start.
    probed = await executor.ok("POST", "/api/oauth/probe", {"url": oauth["discoveryUrl"]})
    assert (probed["authorizationUrl"], probed["tokenUrl"]) == (oauth["authorizationUrl"], oauth["tokenUrl"])
    registered = await executor.ok("POST", "/api/oauth/clients/register-dynamic", registration_of(probed))
    connection = await executor.sign_in("orders", registered["client"])
    assert set(connection["oauthScope"].split()) == set(SCOPES)
    result = await executor.execute(READ)
    assert result["result"]["ok"] is True, result
    assert result["result"]["data"] == {"id": "7", "sub": "alice@acme.test"}


async def test_oauth_discovered_for_a_graphql_endpoint_through_its_401_signs_in_and_queries(
    executor: Executor, nursery: trio.Nursery
) -> None:
    """The endpoint publishes nothing at the well-known locations; its 401 names metadata elsewhere (the MCP
    authorization spec's way). The method then carries the scopes found, and the sign-in uses them."""
    keys = await provider_keys(executor)
    shop = await start_graphql_shop(nursery, auth=None)
    endpoint = shop.url
    metadata_url = endpoint.removesuffix("/graphql") + "/meta/orders-graph"
    challenge = f'Bearer error="invalid_token", resource_metadata="{metadata_url}"'
    open_respond = shop.respond

    def respond(request: Received) -> Answer:
        if request.path == "/meta/orders-graph":
            metadata = {
                "resource": endpoint,
                "authorization_servers": [executor.provider.issuer],
                "scopes_supported": ["orders:read"],
            }
            return Answer(200, json.dumps(metadata).encode())
        if request.method != "POST":
            return Answer(404, b"{}")
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        try:
            key = keys[jwt.get_unverified_header(token)["kid"]]
            jwt.decode(token, key.key, algorithms=["RS256"], audience=endpoint, issuer=executor.provider.issuer)
        except Exception:
            return Answer(401, b'{"message":"sign in"}', headers=(("www-authenticate", challenge),))
        return open_respond(request)

    assert shop.upstream is not None
    shop.upstream.respond = respond
    await executor.ok("POST", "/api/graphql/integrations", {"endpoint": endpoint, "slug": "shop"})
    (method,) = await executor.auth_methods("shop")
    oauth = method["oauth"]
    assert (method["id"], oauth["resource"], oauth["scopes"]) == ("oauth2", endpoint, ["orders:read"])
    assert "discoveryUrl" not in oauth  # a probe beside the endpoint would not find the metadata again

    registered = await executor.ok(
        "POST",
        "/api/oauth/clients/register-dynamic",
        {
            "owner": "org",
            "issuer": oauth["issuer"],
            "registrationEndpoint": oauth["registrationEndpoint"],
            "authorizationUrl": oauth["authorizationUrl"],
            "tokenUrl": oauth["tokenUrl"],
            "resource": oauth["resource"],
            "scopes": oauth["scopes"],
        },
    )
    connection = await executor.sign_in("shop", registered["client"])
    assert connection["oauthScope"] == "orders:read"
    assert connection["lastHealth"] is None, connection  # introspected with the token
    result = await executor.execute('return await tools.shop.org.main.query.order({ id: "o-1", select: "id" });')
    assert result["result"] == {"ok": True, "data": {"order": {"id": "o-1"}}}, result
    assert shop.received[-1].headers["authorization"].startswith("Bearer ey")


async def test_oauth_discovery_finds_nothing_quickly_where_nothing_is_published(
    executor: Executor, nursery: trio.Nursery
) -> None:
    """Every URL answers 404: the spec and the endpoint add at once, with their own methods alone, after a
    bounded number of requests."""
    api = await start_upstream(nursery, lambda request: Answer(404, b"{}"))
    started = trio.current_time()
    await executor.ok("POST", "/api/openapi/specs", {"spec": blob(unprotected_spec(api.url)), "slug": "plain"})
    assert await executor.auth_methods("plain") == []
    assert trio.current_time() - started < DISCOVERY_BUDGET
    assert 0 < len(api.received) <= MAX_REQUESTS
    assert {request.method for request in api.received} == {"GET"}

    shop = await start_graphql_shop(nursery, auth=None)
    await executor.ok("POST", "/api/graphql/integrations", {"endpoint": shop.url, "slug": "shop"})
    assert await executor.auth_methods("shop") == []
    # An explicit template (even an empty one) is the whole answer: nothing is probed.
    sent = len(shop.received)
    await executor.ok(
        "POST", "/api/graphql/integrations", {"endpoint": shop.url, "slug": "keyed", "authenticationTemplate": []}
    )
    assert len(shop.received) == sent


async def test_oauth_discovery_is_bounded_when_the_api_never_answers(executor: Executor, nursery: trio.Nursery) -> None:
    async def silent(request: Received) -> Answer:
        await trio.sleep_forever()

    api: Upstream = await start_upstream(nursery, silent)
    started = trio.current_time()
    await executor.ok("POST", "/api/openapi/specs", {"spec": blob(unprotected_spec(api.url)), "slug": "silent"})
    assert trio.current_time() - started < DISCOVERY_BUDGET + 3  # the budget, and the add's own work
    assert await executor.auth_methods("silent") == []
