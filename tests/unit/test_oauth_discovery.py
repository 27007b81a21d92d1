"""Discovery's pure parts: which URLs an API is asked at, and the `oauth2` method a found server gives (the
network side runs against a real authorization server in `tests/integration/test_oauth_discovery.py`)."""

from executor_mcp.integrations.oauth_discovery import (
    DISCOVERED_METHOD,
    MAX_RESOURCES,
    Found,
    candidate_urls,
    discovered_method,
)
from executor_mcp.integrations.openapi.auth import declares_oauth, discovered_preset, discovery_urls
from executor_mcp.oauth.metadata import AuthorizationServer, ProtectedResource
from executor_mcp.records.integrations import AuthMethod

SERVER = AuthorizationServer(
    issuer="https://login.example.com",
    token_endpoint="https://login.example.com/token",
    authorization_endpoint="https://login.example.com/authorize",
    registration_endpoint="https://login.example.com/register",
    scopes_supported=("openid", "orders:read"),
)
RESOURCE = ProtectedResource("https://api.example.com/v1", ("https://login.example.com",), ("orders:read",))


def test_oauth_discovery_asks_only_https_or_loopback_urls_each_once_and_bounded() -> None:
    assert candidate_urls(
        [
            "https://api.example.com/v1?key=secret#top",
            None,
            "",
            "http://api.example.com/v1",  # OAuth metadata is never taken over plain http off loopback
            "https://api.example.com/v1",
            "http://127.0.0.1:8080/graphql",
            "ftp://files.example.com",
            "https://user:pw@api.example.com",
        ]
    ) == ["https://api.example.com/v1", "http://127.0.0.1:8080/graphql"]
    many = [f"https://api{n}.example.com" for n in range(50)]
    assert candidate_urls(many) == many[:MAX_RESOURCES]


def test_oauth_discovery_of_a_spec_follows_upstreams_order() -> None:
    servers = [
        {"url": "https://{region}.api.example.com/v1", "variables": {"region": {"default": "eu"}}},
        {"url": "/relative"},  # not absolute: nothing to ask
        {"url": "https://{tenant}.example.com", "variables": {"tenant": {}}},  # no default: still templated
        {"url": "https://mirror.example.com/api"},
    ]
    assert discovery_urls(servers, None, "https://docs.example.com/openapi.json") == [
        "https://eu.api.example.com/v1",
        "https://mirror.example.com/api",
        "https://eu.api.example.com",
        "https://mirror.example.com",
        "https://docs.example.com/openapi.json",
    ]
    # An explicit base URL comes first; a blob spec has no spec URL.
    assert discovery_urls(servers[3:], "https://gateway.example.com/x", None) == [
        "https://gateway.example.com/x",
        "https://mirror.example.com/api",
        "https://gateway.example.com",
        "https://mirror.example.com",
    ]
    assert discovery_urls([], None, None) == []


def test_oauth_a_server_found_through_metadata_leaves_its_scopes_to_the_sign_in() -> None:
    method = discovered_method(Found("https://api.example.com/v1", RESOURCE, SERVER))
    assert (method.slug, method.kind, method.label) == (DISCOVERED_METHOD, "oauth2", "OAuth2 (discovered)")
    assert method.oauth == {
        "flow": "authorizationCode",
        "authorizationUrl": "https://login.example.com/authorize",
        "tokenUrl": "https://login.example.com/token",
        "issuer": "https://login.example.com",
        "registrationEndpoint": "https://login.example.com/register",
        "supportsDynamicRegistration": True,
        "resource": "https://api.example.com/v1",
        "discoveryUrl": "https://api.example.com/v1",
    }
    assert declares_oauth([method])
    assert not declares_oauth([AuthMethod("apikey-0", "apikey")])


def test_oauth_a_server_found_only_through_a_challenge_carries_the_scopes_found_then() -> None:
    """`OAuthClients.probe` looks beside the URL: it would not find metadata that only a 401 pointed at."""
    method = discovered_method(Found(None, RESOURCE, SERVER))
    assert method.oauth is not None
    assert "discoveryUrl" not in method.oauth
    assert method.oauth["scopes"] == ["orders:read"]  # the resource's, authoritative over the server's
    unscoped = ProtectedResource(RESOURCE.resource, RESOURCE.authorization_servers, None)
    assert discovered_method(Found(None, unscoped, SERVER)).oauth == {
        **method.oauth,
        "scopes": ["openid", "orders:read"],
    }


def test_oauth_a_server_without_an_authorization_endpoint_is_a_client_credentials_method() -> None:
    bare = AuthorizationServer(issuer="https://login.example.com", token_endpoint="https://login.example.com/t")
    method = discovered_method(Found("https://login.example.com", None, bare))
    assert method.oauth == {
        "flow": "clientCredentials",
        "tokenUrl": "https://login.example.com/t",
        "issuer": "https://login.example.com",
        "supportsDynamicRegistration": False,
        "discoveryUrl": "https://login.example.com",
    }


def test_oauth_a_discovered_method_previews_as_an_oauth2_preset() -> None:
    preset = discovered_preset(discovered_method(Found(None, RESOURCE, SERVER)))
    assert preset["label"] == "OAuth2 Authorization Code · discovered"
    assert preset["template"] == DISCOVERED_METHOD
    assert preset["scopes"] == {"orders:read": ""}
    assert preset["identityScopes"] == "auto"
    assert preset["authorizationUrl"] == "https://login.example.com/authorize"
    assert "securitySchemeName" not in preset
