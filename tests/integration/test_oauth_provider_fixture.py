"""The OAuth 2.1 / OpenID Connect test server (`tests/oauth_provider.py`) does what later tests rely on, shown
with plain httpx and headless Chromium: discovery, dynamic registration, authorization code + PKCE with a
resource indicator, JWT access tokens for that resource, rotating refresh tokens, the admin revocation, client
credentials, a short access-token lifetime, and an OpenID Connect sign-in with email and org claims.

Fails, never skips, when Node tools or Chromium are missing (`scripts/test` installs both).
"""

import base64
import hashlib
import secrets
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
import pytest
import trio

from tests.oauth_provider import OAuthProvider, SsoClient, oauth_provider

RESOURCE = "http://127.0.0.1:9/mcp"


async def callback_server(nursery: trio.Nursery) -> tuple[str, list[str]]:
    """A client's redirect URI that answers 200 and records each request's target (path and query)."""
    reached: list[str] = []

    async def answer(stream: trio.SocketStream) -> None:
        async with stream:
            request = await stream.receive_some()  # nothing, for a connection the browser opened speculatively
            if request:
                reached.append(request.split(b" ")[1].decode())
                await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")

    listeners = await nursery.start(partial(trio.serve_tcp, answer, 0, host="127.0.0.1"))
    return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/callback", reached


async def discover(http: httpx.AsyncClient, provider: OAuthProvider) -> dict[str, Any]:
    answer = await http.get(f"{provider.issuer}/.well-known/openid-configuration")
    answer.raise_for_status()
    config: dict[str, Any] = answer.json()
    return config


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


async def verified(http: httpx.AsyncClient, config: dict[str, Any], token: str, audience: str) -> dict[str, Any]:
    """The claims of a JWT signed with a key at the provider's jwks_uri, for `audience`."""
    keys = jwt.PyJWKSet.from_dict((await http.get(config["jwks_uri"])).json())
    key = keys[jwt.get_unverified_header(token)["kid"]]
    claims: dict[str, Any] = jwt.decode(
        token, key=key, algorithms=["RS256"], audience=audience, issuer=config["issuer"]
    )
    return claims


async def authorize(
    http: httpx.AsyncClient,
    provider: OAuthProvider,
    config: dict[str, Any],
    client: dict[str, Any],
    login: str,
    *,
    scope: str,
    narrow: bool = False,
    follow: bool = False,
    **extra: str,
) -> dict[str, Any]:
    """Sign `login` in through Chromium for `client`, check the redirect (state, RFC 9207 iss), exchange the code
    (a public client's way, or HTTP basic for a confidential one); the token response."""
    verifier, challenge = pkce()
    state = secrets.token_urlsafe(8)
    redirect_uri = client["redirect_uris"][0]
    query = {
        "response_type": "code",
        "client_id": client["client_id"],
        "redirect_uri": redirect_uri,
        "scope": scope,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **extra,
    }
    url = f"{config['authorization_endpoint']}?{urlencode(query)}"
    landed = await provider.sign_in(url, login, narrow=narrow, follow=follow)
    assert landed.startswith(f"{redirect_uri}?")
    params = parse_qs(urlsplit(landed).query)
    assert params["state"] == [state]
    assert params["iss"] == [provider.issuer]
    form = {
        "grant_type": "authorization_code",
        "code": params["code"][0],
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
    }
    if secret := client.get("client_secret"):
        answer = await http.post(config["token_endpoint"], data=form, auth=(client["client_id"], secret))
    else:
        answer = await http.post(config["token_endpoint"], data={**form, "client_id": client["client_id"]})
    assert answer.status_code == 200, answer.text
    tokens: dict[str, Any] = answer.json()
    return tokens


async def refresh(http: httpx.AsyncClient, config: dict[str, Any], client_id: str, token: str) -> httpx.Response:
    form = {"grant_type": "refresh_token", "refresh_token": token, "client_id": client_id}
    return await http.post(config["token_endpoint"], data=form)


async def test_oauth_provider_code_flow_with_pkce_resource_and_rotating_refresh_tokens(nursery: trio.Nursery) -> None:
    # A redirect URI that listens, to show the browser never reaches it (the code is the test's to use).
    redirect_uri, reached = await callback_server(nursery)
    async with oauth_provider() as provider, httpx.AsyncClient() as http:
        config = await discover(http, provider)
        assert config["issuer"] == provider.issuer
        assert config["registration_endpoint"] == f"{provider.issuer}/reg"
        assert config["code_challenge_methods_supported"] == ["S256"]
        assert config["authorization_response_iss_parameter_supported"] is True
        assert config["response_types_supported"] == ["code"]
        assert {"orders:read", "orders:write", "openid", "offline_access"} <= set(config["scopes_supported"])
        assert {"none", "client_secret_post", "client_secret_basic"} <= set(
            config["token_endpoint_auth_methods_supported"]
        )

        # RFC 7591: a public client, as an MCP client registers itself; grant_types defaults to code + refresh.
        registration = {
            "redirect_uris": [redirect_uri],
            "token_endpoint_auth_method": "none",
            "scope": "orders:read orders:write",
            "client_name": "test client",
        }
        answer = await http.post(config["registration_endpoint"], json=registration)
        assert answer.status_code == 201, answer.text
        client = answer.json()
        assert "client_secret" not in client
        assert set(client["grant_types"]) == {"authorization_code", "refresh_token"}

        # No offline_access asked for, and a refresh token all the same.
        tokens = await authorize(
            http, provider, config, client, "alice@acme.test", scope="orders:read orders:write", resource=RESOURCE
        )
        assert tokens["token_type"] == "Bearer"
        assert tokens["expires_in"] == 3600
        assert set(tokens["scope"].split()) == {"orders:read", "orders:write"}
        claims = await verified(http, config, tokens["access_token"], RESOURCE)
        assert claims["sub"] == "alice@acme.test"
        assert claims["client_id"] == client["client_id"]
        assert set(claims["scope"].split()) == {"orders:read", "orders:write"}
        assert jwt.get_unverified_header(tokens["access_token"])["typ"] == "at+jwt"

        # Rotation: each refresh answers a new refresh token and a new access token for the same resource.
        first = tokens["refresh_token"]
        answer = await refresh(http, config, client["client_id"], first)
        assert answer.status_code == 200, answer.text
        second = answer.json()["refresh_token"]
        assert second != first
        assert (await verified(http, config, answer.json()["access_token"], RESOURCE))["aud"] == RESOURCE
        answer = await refresh(http, config, client["client_id"], second)
        assert answer.status_code == 200, answer.text
        third = answer.json()["refresh_token"]
        # A rotated token presented again is refused, and (reuse detection) takes the whole grant with it.
        answer = await refresh(http, config, client["client_id"], first)
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid_grant")
        answer = await refresh(http, config, client["client_id"], third)
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid_grant")

        # Narrow consent: of the resource scopes, only orders:read; then the admin route revokes the grant.
        tokens = await authorize(
            http,
            provider,
            config,
            client,
            "bob@beta.example",
            scope="orders:read orders:write",
            narrow=True,
            resource=RESOURCE,
        )
        assert tokens["scope"] == "orders:read"
        assert (await verified(http, config, tokens["access_token"], RESOURCE))["scope"] == "orders:read"
        answer = await refresh(http, config, client["client_id"], tokens["refresh_token"])
        assert answer.status_code == 200, answer.text
        assert await provider.revoke_refresh_tokens("bob@beta.example") == 1
        answer = await refresh(http, config, client["client_id"], answer.json()["refresh_token"])
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid_grant")

        assert await provider.token_requests() == {"authorization_code": 2, "refresh_token": 6}
    assert reached == []


async def test_oauth_provider_client_credentials_short_ttl_and_sso_sign_in(nursery: trio.Nursery) -> None:
    redirect_uri, reached = await callback_server(nursery)
    sso = SsoClient(client_id="console", client_secret=secrets.token_urlsafe(24), redirect_uris=(redirect_uri,))
    async with oauth_provider(access_token_ttl=2, sso_client=sso) as provider, httpx.AsyncClient() as http:
        config = await discover(http, provider)

        # A confidential machine client: client_credentials only (so no response types, no redirect URIs).
        registration = {
            "grant_types": ["client_credentials"],
            "response_types": [],
            "token_endpoint_auth_method": "client_secret_post",
        }
        answer = await http.post(config["registration_endpoint"], json=registration)
        assert answer.status_code == 201, answer.text
        client = answer.json()
        form = {
            "grant_type": "client_credentials",
            "client_id": client["client_id"],
            "client_secret": client["client_secret"],
            "scope": "orders:read",
            "resource": RESOURCE,
        }
        answer = await http.post(config["token_endpoint"], data=form)
        assert answer.status_code == 200, answer.text
        tokens = answer.json()
        assert (tokens["expires_in"], tokens["scope"]) == (2, "orders:read")
        claims = await verified(http, config, tokens["access_token"], RESOURCE)
        assert claims["exp"] - claims["iat"] == 2
        assert claims["client_id"] == client["client_id"]
        # Only loopback resources are resource servers.
        answer = await http.post(config["token_endpoint"], data={**form, "resource": "https://elsewhere.example/"})
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid_target")

        # OpenID Connect sign-in by the pre-registered client, the browser following the redirect to the app (as
        # a console sign-in needs): email and org in the ID token and at userinfo.
        tokens = await authorize(
            http,
            provider,
            config,
            {"client_id": sso.client_id, "client_secret": sso.client_secret, "redirect_uris": [redirect_uri]},
            "carol@globex.example",
            scope="openid email profile",
            follow=True,
            nonce="n-0S6",
        )
        (callback,) = [target for target in reached if target.startswith("/callback")]  # and /favicon.ico
        assert callback.startswith("/callback?code=")
        # A request the provider cannot redirect back (an unregistered redirect URI) fails the sign-in at once.
        with pytest.raises(AssertionError, match="redirect_uri did not match"):
            await provider.sign_in(
                f"{config['authorization_endpoint']}?"
                + urlencode({"client_id": sso.client_id, "redirect_uri": RESOURCE, "response_type": "code"}),
                "carol@globex.example",
            )
        assert tokens["expires_in"] == 2
        identity = await verified(http, config, tokens["id_token"], sso.client_id)
        assert identity["nonce"] == "n-0S6"
        expected = {"sub": "carol@globex.example", "email": "carol@globex.example", "org": "globex"}
        assert {key: identity[key] for key in expected} == expected
        assert identity["email_verified"] is True
        answer = await http.get(
            config["userinfo_endpoint"], headers={"authorization": f"Bearer {tokens['access_token']}"}
        )
        assert answer.status_code == 200, answer.text
        assert {key: answer.json()[key] for key in expected} == expected
