"""How this server becomes a client of an authorization server, built and read purely: its client ID metadata
document (the document's https URL is the client id, for servers that take one), or dynamic registration (RFC
7591) once per authorization server and redirect URI, as a public client where the server allows one."""

import json
from collections.abc import Sequence

import attrs

from executor_mcp.oauth.grants import MAX_DESCRIPTION
from executor_mcp.outbound.model import OutboundRequest, OutboundResponse
from executor_mcp.records.oauth import AUTH_BASIC, AUTH_NONE, AUTH_POST

CLIENT_NAME = "executor-mcp"
MAX_CLIENT_ID = 1024


@attrs.frozen
class Registered:
    client_id: str
    secret: str | None = attrs.field(repr=False)
    method: str


class RegistrationFailed(ValueError):
    """The server refused to register us, or answered something unusable; the message is its own words,
    bounded, never a secret it may have sent."""


def metadata_document(client_id: str, redirect_uri: str, client_uri: str) -> dict[str, object]:
    """This server as a public web client (PKCE protects its codes): no secret, since anyone can read the
    document, and the one redirect URI, since the document speaks for every org on this server."""
    return {
        "client_id": client_id,
        "client_name": CLIENT_NAME,
        "client_uri": client_uri,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": AUTH_NONE,
        "application_type": "web",
    }


def auth_method(supported: Sequence[str] | None) -> str:
    """`none` (a public client, PKCE protecting the code) unless the server lists methods without it; then a
    secret sent in the body, or basic if that is all it takes."""
    if supported is None or AUTH_NONE in supported:
        return AUTH_NONE
    return AUTH_BASIC if AUTH_BASIC in supported and AUTH_POST not in supported else AUTH_POST


def registration_request(
    endpoint: str, redirect_uri: str, scopes: Sequence[str], method: str, client_name: str = CLIENT_NAME
) -> OutboundRequest:
    document: dict[str, object] = {
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method,
        "application_type": "web",
    }
    if scopes:
        document["scope"] = " ".join(scopes)
    return OutboundRequest(
        method="POST",
        url=endpoint,
        headers=(("Content-Type", "application/json"), ("Accept", "application/json")),
        body=json.dumps(document).encode(),
        follow_redirects=False,
    )


def read_registration(response: OutboundResponse, method: str) -> Registered:
    try:
        document = json.loads(response.body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        document = None
    if not isinstance(document, dict):
        raise RegistrationFailed(f"the registration endpoint answered HTTP {response.status} with no JSON object")
    if response.status not in (200, 201):
        code = document.get("error")
        described = document.get("error_description")
        words = " ".join(str(part)[:MAX_DESCRIPTION] for part in (code, described) if isinstance(part, str) and part)
        raise RegistrationFailed(words or f"HTTP {response.status}")
    client_id = document.get("client_id")
    if not isinstance(client_id, str) or not 0 < len(client_id) <= MAX_CLIENT_ID or not client_id.isprintable():
        raise RegistrationFailed("the registration answer holds no client_id")
    secret = document.get("client_secret")
    granted = document.get("token_endpoint_auth_method")
    chosen = granted if isinstance(granted, str) and granted in (AUTH_NONE, AUTH_POST, AUTH_BASIC) else method
    if chosen != AUTH_NONE and not (isinstance(secret, str) and secret):
        raise RegistrationFailed("the server registered a confidential client but sent no client_secret")
    return Registered(client_id, secret if chosen != AUTH_NONE else None, chosen)
