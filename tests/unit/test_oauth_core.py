"""The OAuth wire with no network: PKCE, discovery documents read as hostile input, the authorization URL, the
token endpoint's requests and answers, dynamic registration, and a callback checked against its flow."""

import base64
import json
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from executor_mcp.oauth.flows import CallbackRefused, check_callback
from executor_mcp.oauth.grants import (
    ClientAuth,
    TokenError,
    Tokens,
    authorization_url,
    client_credentials_form,
    code_form,
    granted_scopes,
    missing_scopes,
    read_tokens,
    refresh_due,
    refresh_form,
    token_request,
)
from executor_mcp.oauth.identity import IdentityRefused, identity_of, verify_id_token
from executor_mcp.oauth.metadata import (
    AuthorizationServer,
    MetadataError,
    ProtectedResource,
    advertised_scopes,
    authorization_server_urls,
    endpoint_problem,
    parse_authorization_server,
    parse_protected_resource,
    protected_resource_urls,
    resource_metadata_url,
    supported_scopes,
)
from executor_mcp.oauth.pkce import challenge, new_state, new_verifier, state_digest
from executor_mcp.oauth.registration import RegistrationFailed, auth_method, read_registration, registration_request
from executor_mcp.outbound.model import OutboundResponse
from executor_mcp.records.oauth import AUTH_BASIC, AUTH_NONE, AUTH_POST, OAuthFlowRecord


def answer(status: int, body: object) -> OutboundResponse:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return OutboundResponse(status=status, headers={"content-type": "application/json"}, body=raw)


# -- PKCE and state --------------------------------------------------------------------------------


def test_oauth_pkce_matches_the_rfc_7636_example_and_fresh_values_are_unguessable() -> None:
    assert challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    verifier = new_verifier()
    assert 43 <= len(verifier) <= 128
    assert set(verifier) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
    assert len({new_verifier() for _ in range(50)}) == 50
    state = new_state()
    assert len(state) >= 43
    assert state_digest(state) != state
    assert len(state_digest(state)) == 64


# -- discovery -------------------------------------------------------------------------------------


def test_oauth_well_known_locations_follow_rfc_8414_and_9728() -> None:
    assert protected_resource_urls("https://api.example.com/mcp/") == [
        "https://api.example.com/.well-known/oauth-protected-resource/mcp",
        "https://api.example.com/.well-known/oauth-protected-resource",
    ]
    assert protected_resource_urls("https://api.example.com") == [
        "https://api.example.com/.well-known/oauth-protected-resource"
    ]
    assert authorization_server_urls("https://auth.example.com/tenant1") == [
        "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
        "https://auth.example.com/.well-known/openid-configuration/tenant1",
        "https://auth.example.com/tenant1/.well-known/openid-configuration",
    ]
    challenge_header = 'Bearer error="invalid_token", resource_metadata="https://api.example.com/.well-known/x"'
    assert resource_metadata_url(challenge_header) == "https://api.example.com/.well-known/x"
    assert resource_metadata_url('Bearer resource_metadata="javascript:alert(1)"') is None
    assert resource_metadata_url(None) is None


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://auth.example.com/token", None),
        ("http://127.0.0.1:9000/token", None),
        ("http://localhost/token", None),
        ("http://[::1]:8080/token", None),
        ("http://auth.example.com/token", "must be https (or http on a loopback host)"),
        ("ftp://auth.example.com/token", "must be https (or http on a loopback host)"),
        ("https://user:pw@auth.example.com/token", "may not hold credentials or a fragment"),
        ("https://auth.example.com/token#x", "may not hold credentials or a fragment"),
        ("https://auth.example.com:99999/", "is not a URL"),
        ("https://a.example.com/" + "x" * 3000, "is too long"),
    ],
)
def test_oauth_endpoints_are_https_or_loopback_http(url: str, problem: str | None) -> None:
    assert endpoint_problem(url) == problem


def test_oauth_authorization_server_metadata_is_checked_and_read() -> None:
    document = {
        "issuer": "https://auth.example.com",
        "authorization_endpoint": "https://auth.example.com/authorize",
        "token_endpoint": "https://auth.example.com/token",
        "registration_endpoint": "https://auth.example.com/register",
        "scopes_supported": ["orders:read", "orders:read", 7, "x" * 400, "orders:write"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_post"],
        "authorization_response_iss_parameter_supported": True,
    }
    server = parse_authorization_server(json.dumps(document).encode(), "https://auth.example.com/")
    assert server.token_endpoint == "https://auth.example.com/token"
    assert server.scopes_supported == ("orders:read", "orders:write")  # deduplicated, junk dropped
    assert server.iss_parameter
    assert server.pkce_s256
    assert not server.metadata_documents
    with pytest.raises(MetadataError, match="for another issuer"):
        parse_authorization_server(json.dumps(document).encode(), "https://evil.example.com")
    for broken, words in [
        ({**document, "token_endpoint": "http://auth.example.com/token"}, "token_endpoint must be https"),
        ({**document, "token_endpoint": None}, "no usable token_endpoint"),
        ({**document, "issuer": 5}, "no usable issuer"),
    ]:
        with pytest.raises(MetadataError, match=words):
            parse_authorization_server(json.dumps(broken).encode(), None)
    for raw in (b"not json", b"[1]", b"\xff"):
        with pytest.raises(MetadataError):
            parse_authorization_server(raw, None)
    plain = parse_authorization_server(
        json.dumps({**document, "code_challenge_methods_supported": ["plain"]}).encode(), None
    )
    assert not plain.pkce_s256


def test_oauth_protected_resource_metadata_names_its_servers() -> None:
    document = {
        "resource": "https://api.example.com/mcp",
        "authorization_servers": ["https://auth.example.com", "http://insecure.example.com", "https://b", "c", "d"],
        "scopes_supported": [],
    }
    resource = parse_protected_resource(json.dumps(document).encode(), "https://api.example.com/mcp")
    assert resource.authorization_servers == ("https://auth.example.com", "https://b")
    assert resource.scopes_supported == ()  # empty is authoritative, not "not said"
    with pytest.raises(MetadataError, match="names another resource"):
        parse_protected_resource(json.dumps(document).encode(), "https://other.example.com/mcp")
    with pytest.raises(MetadataError, match="names no authorization server"):
        parse_protected_resource(
            json.dumps({**document, "authorization_servers": []}).encode(), "https://api.example.com/mcp"
        )
    assert supported_scopes(["a", "b", "a"], None) == ("a", "b")
    assert supported_scopes(["a", "b"], ["b", "c"]) == ("b",)


def test_oauth_an_apis_own_scopes_outrank_its_servers_even_when_empty() -> None:
    server = AuthorizationServer("https://as.example", "https://as.example/token", scopes_supported=("openid", "x"))
    assert advertised_scopes(None, server) == ("openid", "x")
    assert advertised_scopes(ProtectedResource("https://api.example", (), None), server) == ("openid", "x")
    assert advertised_scopes(ProtectedResource("https://api.example", (), ("read",)), server) == ("read",)
    assert advertised_scopes(ProtectedResource("https://api.example", (), ()), server) == ()
    assert advertised_scopes(None, AuthorizationServer("https://as.example", "https://as.example/token")) == ()


# -- the authorization request and the token endpoint --------------------------------------------------


def test_oauth_authorization_url_carries_pkce_state_scopes_and_resource() -> None:
    url = authorization_url(
        "https://auth.example.com/authorize?tenant=acme",
        client_id="client 1",
        redirect_uri="https://mcp.example.com/api/oauth/callback",
        state="st&ate",
        challenge="ch",
        scopes=["orders:read", "offline_access"],
        resource="https://api.example.com/",
    )
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "auth.example.com", "/authorize")
    query = parse_qs(parts.query)
    assert query == {
        "tenant": ["acme"],
        "response_type": ["code"],
        "client_id": ["client 1"],
        "redirect_uri": ["https://mcp.example.com/api/oauth/callback"],
        "state": ["st&ate"],
        "code_challenge": ["ch"],
        "code_challenge_method": ["S256"],
        "scope": ["orders:read offline_access"],
        "resource": ["https://api.example.com/"],
    }
    bare = parse_qs(
        urlsplit(
            authorization_url(
                "https://a/x", client_id="c", redirect_uri="r", state="s", challenge="c", scopes=[], resource=None
            )
        ).query
    )
    assert "scope" not in bare
    assert "resource" not in bare


def test_oauth_token_requests_authenticate_the_client_as_it_registered() -> None:
    form = code_form("the-code", "https://mcp.example.com/cb", "the-verifier", "https://api.example.com")
    public = token_request("https://auth.example.com/token", ClientAuth("pub"), form)
    sent = parse_qs(public.body.decode())  # type: ignore[union-attr]
    assert sent == {
        "grant_type": ["authorization_code"],
        "code": ["the-code"],
        "redirect_uri": ["https://mcp.example.com/cb"],
        "code_verifier": ["the-verifier"],
        "resource": ["https://api.example.com"],
        "client_id": ["pub"],
    }
    posted = token_request("https://a/token", ClientAuth("c", "s3cret", AUTH_POST), refresh_form("r", ["x"], None))
    assert parse_qs(posted.body.decode())["client_secret"] == ["s3cret"]  # type: ignore[union-attr]
    basic = token_request(
        "https://a/token", ClientAuth("c:1", "s ecret", AUTH_BASIC), client_credentials_form([], None)
    )
    authorization = dict(basic.headers)["Authorization"]
    assert base64.b64decode(authorization.removeprefix("Basic ")) == b"c%3A1:s%20ecret"
    assert "client_secret" not in basic.body.decode()  # type: ignore[union-attr]
    assert basic.credential_headers == frozenset({"authorization"})
    assert "s3cret" not in repr(ClientAuth("c", "s3cret", AUTH_POST))


def test_oauth_token_answers_are_tokens_or_a_typed_refusal() -> None:
    tokens = read_tokens(
        answer(
            200,
            {
                "access_token": "at",
                "token_type": "Bearer",
                "expires_in": "120",
                "refresh_token": "rt",
                "scope": "orders:read openid",
            },
        )
    )
    assert tokens == Tokens("at", 120.0, "rt", "orders:read openid")
    assert "'at'" not in repr(tokens)
    assert "'rt'" not in repr(tokens)
    assert granted_scopes(tokens, ["ignored"]) == ("orders:read", "openid")
    assert isinstance(tokens, Tokens)
    assert read_tokens(answer(200, {"access_token": "at", "token_type": "bearer", "expires_in": -5})) == Tokens("at")
    refused = read_tokens(answer(400, {"error": "invalid_grant", "error_description": "Refresh\ntoken revoked"}))
    assert refused == TokenError("invalid_grant", "Refresh token revoked", 400)
    assert isinstance(refused, TokenError)
    assert refused.reauth
    assert refused.message == "(invalid_grant): Refresh token revoked"
    other = read_tokens(answer(401, {"error": "invalid_client"}))
    assert isinstance(other, TokenError)
    assert not other.reauth
    for body in (b"<html>", {"access_token": "at"}, {"access_token": "at", "token_type": "mac"}, [1]):
        unusable = read_tokens(answer(200, body))
        assert isinstance(unusable, TokenError)
        assert unusable.code is None
    assert read_tokens(answer(500, b"oops")) == TokenError(None, "its answer is not a JSON object", 500)


def test_oauth_missing_scopes_and_when_to_refresh() -> None:
    assert missing_scopes(["openid", "orders:read", "orders:write", "x/.default"], ["orders:read"]) == ("orders:write",)
    assert not refresh_due(None, 1000.0)
    assert refresh_due(1059.0, 1000.0)
    assert not refresh_due(1061.0, 1000.0)
    assert not refresh_due(1002.0, 1000.0, issued_at=999.0)  # a 3 s token: refreshed in its last 1.5 s
    assert refresh_due(1001.0, 1000.0, issued_at=998.0)
    assert refresh_due(1030.0, 1000.0, issued_at=400.0)  # a long one: in its last minute


# -- dynamic registration ------------------------------------------------------------------------------


def test_oauth_dynamic_registration_asks_for_a_public_client_where_allowed() -> None:
    assert auth_method(None) == AUTH_NONE
    assert auth_method(["client_secret_basic", "none"]) == AUTH_NONE
    assert auth_method(["client_secret_basic", "client_secret_post"]) == AUTH_POST
    assert auth_method(["client_secret_basic"]) == AUTH_BASIC
    request = registration_request("https://auth.example.com/register", "https://mcp.example.com/cb", ["a"], AUTH_NONE)
    assert json.loads(request.body or b"") == {
        "client_name": "executor-mcp",
        "redirect_uris": ["https://mcp.example.com/cb"],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "application_type": "web",
        "token_endpoint_auth_method": "none",
        "scope": "a",
    }
    registered = read_registration(answer(201, {"client_id": "abc", "token_endpoint_auth_method": "none"}), AUTH_NONE)
    assert (registered.client_id, registered.secret, registered.method) == ("abc", None, AUTH_NONE)
    confidential = read_registration(answer(201, {"client_id": "abc", "client_secret": "s3cr3t-value"}), AUTH_POST)
    assert confidential.secret == "s3cr3t-value"
    assert "s3cr3t-value" not in repr(confidential)
    with pytest.raises(RegistrationFailed, match="invalid_redirect_uri only loopback"):
        read_registration(
            answer(400, {"error": "invalid_redirect_uri", "error_description": "only loopback"}), AUTH_NONE
        )
    with pytest.raises(RegistrationFailed, match="sent no client_secret"):
        read_registration(answer(201, {"client_id": "abc"}), AUTH_POST)
    with pytest.raises(RegistrationFailed, match="no client_id"):
        read_registration(answer(201, {"client_id": 5}), AUTH_NONE)


# -- the callback --------------------------------------------------------------------------------------


def flow(issuer: str | None = "https://auth.example.com", iss_required: bool = True) -> OAuthFlowRecord:
    return OAuthFlowRecord(
        state_digest="d",
        org_id="acme",
        account_id="alice",
        org_admin=False,
        client_owner="org",
        client_slug="c",
        owner="user",
        integration="orders",
        name="main",
        template="oauth-oauth",
        redirect_uri="https://mcp.example.com/api/oauth/callback",
        code_verifier="v",
        scopes=("orders:read",),
        created_at=0.0,
        expires_at=600.0,
        issuer=issuer,
        iss_required=iss_required,
    )


def test_oauth_callback_gives_the_code_or_says_why_not() -> None:
    assert check_callback(flow(), {"code": "c1", "iss": "https://auth.example.com"}) == "c1"
    assert isinstance(check_callback(flow(), {"code": "c1", "iss": "https://auth.example.com/"}), CallbackRefused)
    assert check_callback(flow(iss_required=False), {"code": "c1"}) == "c1"
    assert check_callback(flow(issuer=None, iss_required=False), {"code": "c1", "iss": "https://x"}) == "c1"
    mixed_up = check_callback(flow(), {"code": "c1", "iss": "https://evil.example.com"})
    assert mixed_up == CallbackRefused("The sign-in answer came from another authorization server (iss mismatch)")
    assert isinstance(check_callback(flow(), {"code": "c1"}), CallbackRefused)  # iss promised, not sent
    denied = check_callback(flow(), {"error": "access_denied", "error_description": "User\x00 said no"})
    assert denied == CallbackRefused("The OAuth provider refused the sign-in: access_denied User  said no", True)
    assert isinstance(check_callback(flow(), {"iss": "https://auth.example.com"}), CallbackRefused)
    assert isinstance(check_callback(flow(), {"code": "x" * 5000, "iss": "https://auth.example.com"}), CallbackRefused)


# -- hostile answers, and who a sign-in names ----------------------------------------------------------------


def test_oauth_credential_bearing_requests_never_follow_a_redirect() -> None:
    assert (
        token_request("https://a/token", ClientAuth("c", "s", AUTH_POST), refresh_form("r", [], None)).follow_redirects
        is False
    )
    assert registration_request("https://a/register", "https://m/cb", [], AUTH_NONE).follow_redirects is False


def test_oauth_documents_nested_too_deep_are_refused_not_a_crash() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(MetadataError, match="not JSON"):
        parse_authorization_server(deep, None)
    assert isinstance(read_tokens(answer(200, deep)), TokenError)
    with pytest.raises(RegistrationFailed):
        read_registration(answer(201, deep), AUTH_NONE)


def id_token(key: Any, **claims: Any) -> str:
    now = time.time()
    body = {
        "iss": "https://idp.example",
        "aud": "console",
        "sub": "u1",
        "iat": int(now),
        "exp": int(now) + 60,
        "nonce": "n1",
        **claims,
    }
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": "k1"})


def test_oauth_an_id_token_is_verified_and_its_claims_name_an_account_and_org() -> None:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = jwt.PyJWK.from_dict(
        {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key())), "kid": "k1", "alg": "RS256"}
    )
    good = id_token(private, email="Alice@Acme.test", email_verified=True, org="acme")
    claims = verify_id_token(
        good, [public], issuer="https://idp.example", client_id="console", nonce="n1", now=time.time()
    )
    who = identity_of(claims, account_claim="email", org_claim="org", allowed_domains={"acme.test"})
    assert (who.account_id, who.org_id) == ("alice@acme.test", "acme")
    for token, words in [
        (id_token(private, nonce="other"), "nonce"),
        (id_token(private, aud="someone-else"), "not valid"),
        (id_token(private, iss="https://evil.example"), "not valid"),
        (id_token(private, exp=int(time.time()) - 3600), "not valid"),
    ]:
        with pytest.raises(IdentityRefused, match=words):
            verify_id_token(
                token, [public], issuer="https://idp.example", client_id="console", nonce="n1", now=time.time()
            )
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(IdentityRefused):
        verify_id_token(
            id_token(other), [public], issuer="https://idp.example", client_id="console", nonce="n1", now=time.time()
        )
    for claims_, words in [
        ({"email": "eve@other.test", "email_verified": True, "org": "acme"}, "Accounts of other.test"),
        ({"email": "alice@acme.test", "email_verified": False, "org": "acme"}, "not verified"),
        ({"email": "alice@acme.test", "email_verified": True}, "did not name an organization"),
        ({"org": "acme"}, "did not name an account"),
    ]:
        with pytest.raises(IdentityRefused, match=words):
            identity_of(claims_, account_claim="email", org_claim="org", allowed_domains={"acme.test"})
    # Another claim that looks like an address decides the domain rule only when the provider verified it.
    with pytest.raises(IdentityRefused, match="not verified"):
        identity_of(
            {"preferred_username": "me@acme.test", "org": "acme"},
            account_claim="preferred_username",
            org_claim="org",
            allowed_domains={"acme.test"},
        )


def test_oauth_provider_quirks_google_offline_access_and_comma_separated_scopes() -> None:
    google = authorization_url(
        "https://accounts.google.com/o/oauth2/v2/auth",
        client_id="c",
        redirect_uri="https://mcp.example.com/cb",
        state="s",
        challenge="x",
        scopes=["openid"],
        resource=None,
    )
    assert parse_qs(urlsplit(google).query)["access_type"] == ["offline"]
    assert parse_qs(urlsplit(google).query)["prompt"] == ["consent"]
    other = authorization_url(
        "https://auth.example.com/authorize",
        client_id="c",
        redirect_uri="https://mcp.example.com/cb",
        state="s",
        challenge="x",
        scopes=[],
        resource=None,
    )
    assert "access_type" not in parse_qs(urlsplit(other).query)
    github = read_tokens(answer(200, {"access_token": "gho_x", "token_type": "bearer", "scope": "repo,read:user"}))
    assert isinstance(github, Tokens)
    assert granted_scopes(github, []) == ("repo", "read:user")
