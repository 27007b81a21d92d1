"""The authorization server of an API whose description names none (an OpenAPI document without an `oauth2`
scheme, a GraphQL endpoint), looked for when it is added, so that it can be signed in to with OAuth.

Protected-resource metadata (RFC 9728) beside each of the API's URLs names the server; else the 401 of an
unauthenticated request names that metadata (`WWW-Authenticate: Bearer resource_metadata=...`, as the MCP
authorization spec has it); else the API's own URLs are tried as issuers (RFC 8414, OpenID Connect
discovery). The found server becomes one `oauth2` method, as upstream's `DiscoveredOAuth2`.

Discovery is a courtesy, never a gate: most APIs publish nothing, and adding one must stay quick and succeed
all the same. So every request goes through the outbound guard, the whole search is bounded in time and in
requests, and any failure (blocked, unreachable, not found, a document that does not parse) means "no OAuth
here", logged at debug level only.
"""

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import attrs
import trio

from executor_mcp.codec import JsonObject
from executor_mcp.oauth.metadata import (
    MAX_SERVERS,
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
)
from executor_mcp.outbound.client import Outbound
from executor_mcp.outbound.model import OutboundFailure, OutboundRequest
from executor_mcp.records.integrations import AuthMethod

log = logging.getLogger(__name__)
T = TypeVar("T")

DISCOVERED_METHOD = "oauth2"  # the template of a discovered server, as an MCP server's `auth: {kind: "oauth2"}`
DISCOVERED_LABEL = "OAuth2 (discovered)"
# An add waits at most this long for discovery; one document at most `DOCUMENT_TIMEOUT` of it, so a single
# silent host cannot take it all.
DISCOVERY_BUDGET = 5.0
DOCUMENT_TIMEOUT = 3.0
MAX_REQUESTS = 16
MAX_RESOURCES = 6
MAX_DOCUMENT_BYTES = 64 * 1024


@attrs.frozen
class Found:
    """What discovery found. `discovery_url` is where `OAuthClients.probe` finds the same server again (so a
    sign-in discovers its scopes then); None when only a 401's challenge led to the metadata."""

    discovery_url: str | None
    resource: ProtectedResource | None
    server: AuthorizationServer


def candidate_urls(urls: Iterable[str | None]) -> list[str]:
    """The URLs worth asking, in order, each once: OAuth metadata is only taken from `https:` (or loopback
    `http:`) URLs, so others are dropped, as are query strings and fragments."""
    kept: list[str] = []
    for url in urls:
        if not url or endpoint_problem(url) is not None:
            continue
        parts = urlsplit(url)
        bare = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        if bare not in kept:
            kept.append(bare)
    return kept[:MAX_RESOURCES]


def discovered_method(found: Found) -> AuthMethod:
    """The `oauth2` method a found server gives. Its scopes are left to the sign-in to discover (through
    `discoveryUrl`), except when it could not find them again: then they are the ones found now."""
    server, resource = found.server, found.resource
    oauth: JsonObject = {
        "flow": "authorizationCode" if server.authorization_endpoint else "clientCredentials",
        "tokenUrl": server.token_endpoint,
        "issuer": server.issuer,
        "supportsDynamicRegistration": server.registration_endpoint is not None,
    }
    if server.authorization_endpoint:
        oauth["authorizationUrl"] = server.authorization_endpoint
    if server.registration_endpoint:
        oauth["registrationEndpoint"] = server.registration_endpoint
    if resource is not None:
        oauth["resource"] = resource.resource
    if found.discovery_url is not None:
        oauth["discoveryUrl"] = found.discovery_url
    else:
        oauth["scopes"] = list(advertised_scopes(resource, server))
    return AuthMethod(DISCOVERED_METHOD, "oauth2", DISCOVERED_LABEL, oauth=oauth)


async def discover(
    outbound: Outbound, resources: Sequence[str], challenge: OutboundRequest | None = None
) -> AuthMethod | None:
    """The method of the authorization server protecting `resources` (`candidate_urls`), or None; with
    `challenge`, an unauthenticated request whose 401 may name the metadata. Never raises for what the
    network answers, and returns within `DISCOVERY_BUDGET`."""
    documents = _Documents(outbound)
    found = None
    with trio.move_on_after(DISCOVERY_BUDGET):
        found = await _search(documents, resources, challenge)
    first = resources[0] if resources else None
    if found is None:
        log.debug("no OAuth authorization server found for %s (%d requests)", first, documents.sent)
        return None
    log.info("OAuth authorization server %s found for %s", found.server.issuer, first)
    return discovered_method(found)


async def _search(documents: "_Documents", resources: Sequence[str], challenge: OutboundRequest | None) -> Found | None:
    for url in resources:
        for candidate in protected_resource_urls(url):
            resource = _read(parse_protected_resource, await documents.get(candidate), url)
            if resource is not None:
                server = await _server(documents, resource.authorization_servers)
                if server is not None:
                    return Found(url, resource, server)
    if challenge is not None:
        named = resource_metadata_url(await documents.challenge(challenge))
        resource = _read(parse_protected_resource, await documents.get(named), challenge.url) if named else None
        if resource is not None:
            server = await _server(documents, resource.authorization_servers)
            if server is not None:
                return Found(None, resource, server)
    for url in resources:
        server = await _server(documents, (url,))
        if server is not None:
            return Found(url, None, server)
    return None


async def _server(documents: "_Documents", issuers: Sequence[str]) -> AuthorizationServer | None:
    for issuer in issuers[:MAX_SERVERS]:
        for candidate in authorization_server_urls(issuer):
            raw = await documents.get(candidate)
            if raw is not None:
                server = _read(parse_authorization_server, raw, issuer)
                if server is not None:
                    return server
    return None


def _read(parse: Callable[[bytes, str], T], raw: bytes | None, url: str) -> T | None:
    if raw is None:
        return None
    try:
        return parse(raw, url)
    except MetadataError as exc:
        log.debug("OAuth metadata refused: %s", exc)
        return None


class _Documents:
    """The metadata documents asked for, each once, at most `MAX_REQUESTS` requests in all."""

    def __init__(self, outbound: Outbound) -> None:
        self._outbound = outbound
        self._seen: dict[str, bytes | None] = {}
        self.sent = 0

    def _spend(self) -> bool:
        if self.sent >= MAX_REQUESTS:
            return False
        self.sent += 1
        return True

    async def get(self, url: str) -> bytes | None:
        if url in self._seen:
            return self._seen[url]
        raw = None
        if endpoint_problem(url) is None and self._spend():
            try:
                raw = await self._outbound.fetch(
                    url, accept="application/json", max_bytes=MAX_DOCUMENT_BYTES, timeout=DOCUMENT_TIMEOUT
                )
            except OutboundFailure as failure:
                log.debug("OAuth metadata not fetched (%s)", failure.code)
        self._seen[url] = raw
        return raw

    async def challenge(self, request: OutboundRequest) -> str | None:
        """The `WWW-Authenticate` of a 401 to `request`; only the headers are read."""
        if not self._spend():
            return None
        try:
            async with self._outbound.stream(request, headers_timeout=DOCUMENT_TIMEOUT) as answer:
                return answer.headers.get("www-authenticate") if answer.status == 401 else None
        except OutboundFailure as failure:
            log.debug("OAuth challenge not read (%s)", failure.code)
            return None
