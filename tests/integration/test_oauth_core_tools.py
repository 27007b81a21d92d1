"""The sandbox's OAuth core tools (`tools.executor.coreTools.oauth.*`, upstream-oauth-toolkits §A.2) end to end:
a real authorization server (`tests/oauth_provider.py`, the user's sign-in driven in Chromium), a resource server
that accepts only its JWTs, and an agent's `execute` over HTTP doing what the console would: probe the issuer,
register the executor as a client, start a sign-in whose URL the user opens, and call through the connection the
completion made. The gated tools pause for a human unless a policy approves them; no answer holds a secret or a
token; wrong input is a typed failure before any approval is asked."""

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

from tests.auth_support import bearer, mint
from tests.conftest import ServerUnderTest, jwt_server
from tests.integration.test_oauth_connections import READ, ResourceServer, orders_spec
from tests.integration.test_stateless_wire import call_body, result_of, send
from tests.oauth_provider import OAuthProvider, oauth_provider
from tests.upstream import Upstream, start_upstream

ADMIN_CLAIM = ("role", "admin")  # without one, every member is an admin
ADMIN = bearer(mint("alice@acme.test", "acme", role="admin", expires_in=3600))
MEMBER = bearer(mint("bob@acme.test", "acme", expires_in=3600))
APPROVE_OAUTH = {"owner": "org", "pattern": "executor.coreTools.oauth.*", "action": "approve"}
GATED = {
    "executor.coreTools.oauth.clients.create",
    "executor.coreTools.oauth.clients.registerDynamic",
    "executor.coreTools.oauth.clients.remove",
    "executor.coreTools.oauth.start",
}
UNGATED = {
    "executor.coreTools.oauth.clients.list",
    "executor.coreTools.oauth.clients.createHandoff",
    "executor.coreTools.oauth.probe",
    "executor.coreTools.oauth.cancel",
}


@attrs.frozen
class World:
    executor: ServerUnderTest
    provider: OAuthProvider
    api: Upstream
    http: httpx.AsyncClient
    discovery: dict[str, Any]

    @property
    def url(self) -> str:
        return self.executor.running.url

    async def call(self, method: str, path: str, body: Any = None, auth: dict[str, str] = ADMIN) -> httpx.Response:
        return await self.http.request(method, self.url + path, json=body, headers=auth)

    async def ok(self, method: str, path: str, body: Any = None, auth: dict[str, str] = ADMIN) -> Any:
        response = await self.call(method, path, body, auth)
        assert response.status_code == 200, response.text
        return response.json()

    async def execute(self, code: str, auth: dict[str, str] = ADMIN) -> dict[str, Any]:
        answer = result_of(await send(self.http, self.url + "/mcp", call_body(1, "execute", {"code": code}), **auth), 1)
        return dict(answer["structuredContent"])

    async def tool(self, name: str, args: Any, auth: dict[str, str] = ADMIN) -> dict[str, Any]:
        """`tools.executor.coreTools.oauth.<name>(args)`'s `{ok, data}` or `{ok: false, error}`."""
        answered = await self.execute(f"return await tools.executor.coreTools.oauth.{name}({json.dumps(args)});", auth)
        assert "result" in answered, answered
        return dict(answered["result"])

    async def data(self, name: str, args: Any, auth: dict[str, str] = ADMIN) -> Any:
        answered = await self.tool(name, args, auth)
        assert answered["ok"] is True, answered
        return answered["data"]

    async def register(self) -> str:
        """The agent probes the provider's issuer and has the executor register itself there, for the API."""
        probed = await self.data("probe", {"url": self.provider.issuer})
        registered = await self.data(
            "clients.registerDynamic",
            {
                "owner": "org",
                "issuer": probed["issuer"],
                "registrationEndpoint": probed["registrationEndpoint"],
                "authorizationUrl": probed["authorizationUrl"],
                "tokenUrl": probed["tokenUrl"],
                "resource": self.api.url,
                "scopes": ["orders:read", "orders:write"],
                "tokenEndpointAuthMethodsSupported": probed["tokenEndpointAuthMethodsSupported"],
            },
        )
        return str(registered["client"])

    async def start(self, client: str) -> dict[str, Any]:
        body = {
            "client": client,
            "clientOwner": "org",
            "owner": "org",
            "name": "main",
            "integration": "orders",
            "template": "oauth-oauth",
        }
        return dict(await self.data("start", body))

    async def sign_in(self, authorization_url: str) -> dict[str, str]:
        """The user opens the URL, signs in and consents: the callback's parameters (not visited)."""
        answered = await self.provider.sign_in(authorization_url, "alice@acme.test")
        return {name: values[0] for name, values in parse_qs(urlsplit(answered).query).items()}


@pytest.fixture
async def world(nursery: trio.Nursery, data_dir: Path, tmp_path: Path) -> AsyncIterator[World]:
    async with oauth_provider() as provider, httpx.AsyncClient(timeout=30) as http:
        discovery = (await http.get(provider.issuer + "/.well-known/openid-configuration")).json()
        resource = ResourceServer(provider.issuer)
        resource.keys = jwt.PyJWKSet.from_dict((await http.get(discovery["jwks_uri"])).json())
        resource.upstream = await start_upstream(nursery, resource.respond)
        executor = await jwt_server(nursery, data_dir, tmp_path, allow_local_network=True, org_admin_claim=ADMIN_CLAIM)
        spec = orders_spec(resource.upstream.url, discovery["authorization_endpoint"], discovery["token_endpoint"])
        added = await http.post(
            executor.running.url + "/api/openapi/specs",
            json={"spec": {"kind": "blob", "value": json.dumps(spec)}, "slug": "orders"},
            headers=ADMIN,
        )
        assert added.status_code == 200, added.text
        yield World(executor, provider, resource.upstream, http, discovery)
        executor.running.stop.set()
        await executor.done.wait()


async def test_oauth_core_tools_are_listed_with_their_approval_annotations(world: World) -> None:
    found = await world.execute(
        "return await tools.search({ query: 'oauth', namespace: 'executor', limit: 50 });", MEMBER
    )
    paths = {item["path"] for item in found["result"]["items"]}
    assert paths >= GATED | UNGATED
    for path in sorted(GATED | UNGATED):
        verdict = await world.ok("GET", f"/api/policies/evaluate?path={path}", auth=MEMBER)
        assert verdict["action"] == ("require_approval" if path in GATED else "approve"), verdict
        assert verdict["rule"] is None
    described = await world.execute(
        "return await tools.describe.tool({ path: 'tools.executor.coreTools.oauth.start' });", MEMBER
    )
    start = described["result"]
    assert start["inputTypeScript"].startswith('{ client: string; clientOwner: "org" | "user"; owner: "org" | "user";')
    assert '{ status: "redirect"; authorizationUrl: string; state: string; }' in start["outputTypeScript"]
    assert '{ status: "connected"; connection: {' in start["outputTypeScript"]
    create = (
        await world.execute(
            "return await tools.describe.tool({ path: 'tools.executor.coreTools.oauth.clients.create' });", MEMBER
        )
    )["result"]
    assert "secret" not in create["inputTypeScript"].lower()
    # Without a rule, a gated tool pauses for a human: nothing is registered meanwhile.
    paused = await world.execute(
        "return await tools.executor.coreTools.oauth.clients.remove({ owner: 'user', slug: 'nothing' });", MEMBER
    )
    assert "result" not in paused, paused
    assert "executor.coreTools.oauth.clients.remove" in json.dumps(paused)


async def test_oauth_core_tools_refuse_wrong_input_before_any_approval(world: World) -> None:
    """Each refusal is answered at once (no pause, though no rule approves the gated tools)."""
    public = {
        "owner": "org",
        "slug": "orders-app",
        "authorizationUrl": world.discovery["authorization_endpoint"],
        "tokenUrl": world.discovery["token_endpoint"],
        "grant": "authorization_code",
        "clientId": "orders-public",
    }
    refusals = [
        ("clients.create", {**public, "clientSecret": "s3cret"}, ADMIN, "invalid_input", "takes no clientSecret"),
        ("clients.create", {**public, "grant": "client_credentials"}, ADMIN, "invalid_input", "needs a secret"),
        ("clients.create", {**public, "tokenUrl": "http://example.com/token"}, ADMIN, "invalid_input", "https"),
        ("clients.create", public, MEMBER, "forbidden", "organization admin"),
        ("clients.create", "orders", ADMIN, "invalid_input", "Expected a JSON object"),
        ("clients.registerDynamic", {"owner": "org"}, ADMIN, "invalid_input", "registrationEndpoint"),
        ("clients.remove", {"slug": "x"}, ADMIN, "invalid_input", 'owner must be "org" or "user"'),
        ("start", {"client": "x", "owner": "org", "clientOwner": "user"}, ADMIN, "oauth_start_failed", "org OAuth"),
        ("start", {"client": "x", "name": "main", "bogus": 1}, ADMIN, "invalid_input", "Unknown field: bogus"),
        ("probe", {}, ADMIN, "invalid_input", "url must be a non-empty string"),
        ("probe", {"url": "http://example.com"}, ADMIN, "oauth_probe_failed", "https"),
        ("cancel", {"state": 7}, ADMIN, "invalid_input", "state must be a non-empty string"),
    ]
    for name, args, auth, code, words in refusals:
        answered = await world.execute(f"return await tools.executor.coreTools.oauth.{name}({json.dumps(args)});", auth)
        assert "result" in answered, json.dumps([name, args, answered])  # answered at once: no pause
        answered = answered["result"]
        assert answered["ok"] is False, (name, args, answered)
        assert answered["error"]["code"] == code, (name, args, answered)
        assert words in answered["error"]["message"], (name, args, answered)
    assert await world.data("clients.list", {}) == {"clients": []}
    # A public client by hand: its secret is empty, so nothing is sealed and nothing could be answered.
    await world.ok("POST", "/api/policies", APPROVE_OAUTH)
    assert await world.data("clients.create", public) == {"client": "orders-app"}
    (listed,) = (await world.data("clients.list", {}))["clients"]
    assert listed["clientId"] == "orders-public"
    assert listed["origin"] == {"kind": "manual"}
    assert "secret" not in json.dumps(listed).lower()


async def test_oauth_an_agent_connects_through_the_core_tools_and_calls_the_api(world: World) -> None:
    await world.ok("POST", "/api/policies", APPROVE_OAUTH)
    probed = await world.data("probe", {"url": world.provider.issuer})
    assert probed["issuer"] == world.provider.issuer
    assert probed["authorizationUrl"] == world.discovery["authorization_endpoint"]
    assert probed["tokenUrl"] == world.discovery["token_endpoint"]
    assert probed["registrationEndpoint"] == world.discovery["registration_endpoint"]
    client = await world.register()
    assert await world.register() == client  # reused per server, resource and redirect URI
    clients = await world.data("clients.list", {})
    (listed,) = clients["clients"]
    assert listed["slug"] == client
    assert listed["owner"] == "org"
    assert listed["origin"]["kind"] == "dynamic_client_registration"
    assert listed["resource"] == world.api.url
    assert "secret" not in json.dumps(clients).lower()
    started = await world.start(client)
    assert set(started) == {"status", "authorizationUrl", "state"}
    assert started["status"] == "redirect"
    assert started["authorizationUrl"].startswith(world.discovery["authorization_endpoint"] + "?")
    query = parse_qs(urlsplit(started["authorizationUrl"]).query)
    assert query["redirect_uri"] == [world.url + "/api/oauth/callback"]
    assert query["state"] == [started["state"]]
    assert query["code_challenge_method"] == ["S256"]
    params = await world.sign_in(started["authorizationUrl"])
    assert params["state"] == started["state"]
    connection = await world.ok("POST", "/api/oauth/complete", params)
    assert connection["address"] == "tools.orders.org.main"
    assert connection["oauthClient"] == client
    result = await world.execute(READ)
    assert result["result"]["ok"] is True, result
    assert result["result"]["data"] == {"id": "7", "sub": "alice@acme.test"}
    (reached,) = world.api.calls("/orders/7")
    token = reached.headers["authorization"].removeprefix("Bearer ")
    listed_connections = await world.execute("return await tools.executor.coreTools.connections.list({});")
    assert token not in json.dumps(listed_connections)
    assert token not in json.dumps(await world.tool("clients.list", {}))


async def test_oauth_cancel_makes_a_later_complete_not_found(world: World) -> None:
    await world.ok("POST", "/api/policies", APPROVE_OAUTH)
    client = await world.register()
    started = await world.start(client)
    params = await world.sign_in(started["authorizationUrl"])
    # Another member cannot cancel it (and is not told whether it exists).
    assert await world.data("cancel", {"state": started["state"]}, MEMBER) == {"cancelled": True}
    assert await world.data("cancel", {"state": started["state"]}) == {"cancelled": True}
    assert await world.data("cancel", {"state": started["state"]}) == {"cancelled": True}  # idempotent
    late = await world.call("POST", "/api/oauth/complete", params)
    assert late.status_code == 404, late.text
    assert late.json()["_tag"] == "OAuthSessionNotFoundError"
    assert (await world.ok("GET", "/api/connections")) == []


async def test_oauth_clients_remove_leaves_nothing_to_start_with(world: World) -> None:
    await world.ok("POST", "/api/policies", APPROVE_OAUTH)
    client = await world.register()
    assert await world.data("clients.remove", {"owner": "org", "slug": client}) == {"removed": True}
    assert await world.data("clients.remove", {"owner": "org", "slug": client}) == {"removed": True}  # idempotent
    assert await world.data("clients.list", {}) == {"clients": []}
    refused = await world.tool(
        "start",
        {
            "client": client,
            "clientOwner": "org",
            "owner": "org",
            "name": "main",
            "integration": "orders",
            "template": "oauth-oauth",
        },
    )
    assert refused["ok"] is False
    assert refused["error"]["code"] == "oauth_start_failed"
    assert refused["error"]["message"] == f"OAuth client not found: {client}"
    # A member may not remove the org's client, and is told so before any approval.
    refused = await world.tool("clients.remove", {"owner": "org", "slug": client}, MEMBER)
    assert refused["error"]["code"] == "forbidden"


async def test_oauth_a_client_handoff_links_to_the_console_form_prefilled_and_grants_nothing(world: World) -> None:
    """The agent asks for a link where a person registers a confidential client: the integration's OAuth
    endpoints come prefilled, the link holds no secret and no token, and nothing is registered by asking."""
    handoff = await world.data(
        "clients.createHandoff", {"integration": "orders", "slug": "orders-app", "clientId": "from-provider"}, MEMBER
    )
    url = urlsplit(handoff["url"])
    assert f"{url.scheme}://{url.netloc}" == world.url
    assert url.path == "/connections"
    assert {name: values[0] for name, values in parse_qs(url.query).items()} == {
        "oauthClient": "1",
        "integration": "orders",
        "owner": "org",
        "grant": "authorization_code",
        "slug": "orders-app",
        "clientId": "from-provider",
        "authorizationUrl": world.discovery["authorization_endpoint"],
        "tokenUrl": world.discovery["token_endpoint"],
    }
    assert "secret" in handoff["instructions"]
    assert "oauth.start" in handoff["instructions"]
    assert await world.data("clients.list", {}) == {"clients": []}
    refusals = [
        ({"integration": "nothing"}, "integration_not_found"),
        ({"integration": "orders", "owner": "team"}, "invalid_input"),
        ({"integration": "orders", "tokenUrl": "http://example.com/token"}, "invalid_input"),
        ({"integration": "orders", "slug": "not a slug"}, "invalid_input"),
        ({"integration": "orders", "clientSecret": "s3cret"}, "invalid_input"),
    ]
    for args, code in refusals:
        answered = await world.tool("clients.createHandoff", args)
        assert answered["ok"] is False, (args, answered)
        assert answered["error"]["code"] == code, (args, answered)
