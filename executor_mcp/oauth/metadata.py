"""Where an authorization server is found, and what its documents say (no I/O).

An API (an MCP server, an OpenAPI API) names its authorization server in its protected-resource metadata (RFC
9728), found through the `resource_metadata` of a 401's `WWW-Authenticate` or at the well-known location beside
the resource; the server's own metadata (RFC 8414, or OpenID Connect discovery) gives its endpoints. Every
document is hostile input: fields are checked for type and size, endpoints must be `https:` (or `http:` on a
loopback host, for local development; the outbound guard decides whether loopback may be reached at all), and
an authorization server's `issuer` must be the one it was looked up as (RFC 8414 §3.3), so a document cannot
name another server.
"""

import ipaddress
import json
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import attrs

from executor_mcp.oauth.pkce import S256

PROTECTED_RESOURCE = "/.well-known/oauth-protected-resource"
AUTHORIZATION_SERVER = "/.well-known/oauth-authorization-server"
OPENID_CONFIGURATION = "/.well-known/openid-configuration"
MAX_URL_LENGTH = 2048
MAX_SCOPES = 100  # scopes kept of a document's list (upstream's cap)
MAX_SCOPE_LENGTH = 256
MAX_SERVERS = 3  # authorization servers of a resource that are asked


class MetadataError(ValueError):
    """A document that cannot be used; the message names what is wrong, never a credential."""


@attrs.frozen
class ProtectedResource:
    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] | None  # None: not said (an empty list is authoritative)


@attrs.frozen
class AuthorizationServer:
    issuer: str
    token_endpoint: str
    authorization_endpoint: str | None = None
    registration_endpoint: str | None = None
    scopes_supported: tuple[str, ...] | None = None
    token_auth_methods: tuple[str, ...] | None = None  # None: not said (RFC 8414: client_secret_basic)
    iss_parameter: bool = False  # RFC 9207: it sends `iss` with every authorization response
    metadata_documents: bool = False  # it accepts a client ID metadata document's URL as a client id
    pkce_s256: bool = True  # it did not list S256 among its challenge methods (some list none at all)
    jwks_uri: str | None = None


def endpoint_problem(url: str) -> str | None:
    """Why `url` may not be an OAuth endpoint, or None: `https:`, or `http:` on a loopback host; no
    credentials or fragment in it; bounded."""
    if len(url) > MAX_URL_LENGTH:
        return "is too long"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 (a malformed port raises here)
    except ValueError:
        return "is not a URL"
    if parts.username is not None or parts.password is not None or parts.fragment:
        return "may not hold credentials or a fragment"
    if parts.scheme == "https" and host:
        return None
    if parts.scheme == "http" and _loopback(host):
        return None
    return "must be https (or http on a loopback host)"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _well_known(url: str, suffix: str) -> str:
    """RFC 8414 §3.1 / RFC 9728 §3.1: the well-known segment goes between the host and the path."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, suffix + path, "", ""))


def protected_resource_urls(resource_url: str) -> list[str]:
    """Where a resource's metadata may be: beside its path, then at its origin."""
    parts = urlsplit(resource_url)
    at_path = _well_known(resource_url, PROTECTED_RESOURCE)
    at_origin = urlunsplit((parts.scheme, parts.netloc, PROTECTED_RESOURCE, "", ""))
    return list(dict.fromkeys([at_path, at_origin]))


def authorization_server_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be: RFC 8414's location, then OpenID Connect's (path inserted, then
    appended, as servers publish either)."""
    appended = issuer.rstrip("/") + OPENID_CONFIGURATION
    urls = [_well_known(issuer, AUTHORIZATION_SERVER), _well_known(issuer, OPENID_CONFIGURATION), appended]
    return list(dict.fromkeys(urls))


_PARAM = re.compile(r'(?:^|[\s,])resource_metadata\s*=\s*(?:"([^"]*)"|([^\s,]+))', re.IGNORECASE)


def resource_metadata_url(www_authenticate: str | None) -> str | None:
    """The `resource_metadata` a 401's Bearer challenge names (RFC 9728 §5.1), if any."""
    if not www_authenticate or len(www_authenticate) > 8 * MAX_URL_LENGTH:
        return None
    match = _PARAM.search(www_authenticate)
    if match is None:
        return None
    url = match.group(1) if match.group(1) is not None else match.group(2)
    return url if endpoint_problem(url) is None else None


def _document(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise MetadataError(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise MetadataError(f"{what} is not a JSON object")
    return value


def _endpoint(document: dict[str, Any], name: str, what: str, *, required: bool = False) -> str | None:
    value = document.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise MetadataError(f"{what} has no usable {name}")
    problem = endpoint_problem(value)
    if problem is not None:
        raise MetadataError(f"{what}'s {name} {problem}")
    return value


def _strings(document: dict[str, Any], name: str, limit: int = MAX_SCOPES) -> tuple[str, ...] | None:
    value = document.get(name)
    if not isinstance(value, list):
        return None
    kept = [item for item in value if isinstance(item, str) and 0 < len(item) <= MAX_SCOPE_LENGTH]
    return tuple(dict.fromkeys(kept))[:limit]


def parse_protected_resource(raw: bytes, resource_url: str) -> ProtectedResource:
    """A resource's metadata. Its `resource` must name the resource asked about (same origin, RFC 9728 §3.3
    asks for the exact URL; servers commonly publish the origin or the path's parent, which stays accepted)."""
    what = "the protected-resource metadata"
    document = _document(raw, what)
    resource = document.get("resource")
    if not isinstance(resource, str) or endpoint_problem(resource) is not None:
        raise MetadataError(f"{what} has no usable resource")
    if _origin(resource) != _origin(resource_url):
        raise MetadataError(f"{what} names another resource")
    servers = _strings(document, "authorization_servers", MAX_SERVERS) or ()
    servers = tuple(server for server in servers if endpoint_problem(server) is None)
    if not servers:
        raise MetadataError(f"{what} names no authorization server")
    return ProtectedResource(resource, servers, _strings(document, "scopes_supported"))


def parse_authorization_server(raw: bytes, issuer: str | None) -> AuthorizationServer:
    """An authorization server's metadata; with `issuer`, it must be that issuer's (RFC 8414 §3.3)."""
    what = "the authorization server metadata"
    document = _document(raw, what)
    named = document.get("issuer")
    if not isinstance(named, str) or endpoint_problem(named) is not None:
        raise MetadataError(f"{what} has no usable issuer")
    if issuer is not None and named.rstrip("/") != issuer.rstrip("/"):
        raise MetadataError(f"{what} is for another issuer")
    token = _endpoint(document, "token_endpoint", what, required=True)
    assert token is not None
    challenges = _strings(document, "code_challenge_methods_supported")
    return AuthorizationServer(
        issuer=named,
        token_endpoint=token,
        authorization_endpoint=_endpoint(document, "authorization_endpoint", what),
        registration_endpoint=_endpoint(document, "registration_endpoint", what),
        scopes_supported=_strings(document, "scopes_supported"),
        token_auth_methods=_strings(document, "token_endpoint_auth_methods_supported"),
        iss_parameter=document.get("authorization_response_iss_parameter_supported") is True,
        metadata_documents=document.get("client_id_metadata_document_supported") is True,
        pkce_s256=challenges is None or S256 in challenges,
        jwks_uri=_endpoint(document, "jwks_uri", what),
    )


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc.lower()


def origin_of(url: str) -> str:
    """`scheme://host[:port]` of `url`: where an issuer taken from an endpoint, or metadata at the root, is."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def advertised_scopes(resource: ProtectedResource | None, server: AuthorizationServer) -> tuple[str, ...]:
    """The scopes an API asks for: its protected-resource metadata's `scopes_supported`, authoritative even when
    empty, else its authorization server's (the MCP authorization spec's order)."""
    if resource is not None and resource.scopes_supported is not None:
        return resource.scopes_supported
    return server.scopes_supported or ()


def supported_scopes(requested: Sequence[str], supported: Sequence[str] | None) -> tuple[str, ...]:
    """The requested scopes the server says it supports (all of them when it says nothing)."""
    if supported is None:
        return tuple(dict.fromkeys(requested))
    known = set(supported)
    return tuple(scope for scope in dict.fromkeys(requested) if scope in known)
