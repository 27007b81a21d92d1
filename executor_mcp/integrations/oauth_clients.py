"""An org's OAuth clients: registered by hand (an admin for the org's, anyone for their own), by the server
itself (RFC 7591, reused per authorization server, resource and redirect URI), and found by probing an API for
its authorization server (RFC 9728, then RFC 8414 or OpenID Connect discovery).

A client's secret goes to the default secret store (sealed) the moment it arrives and is never answered again:
summaries name the client, never its secret. Every OAuth endpoint is `https:` (or loopback `http:`) and every
request goes through the outbound guard.
"""

import hashlib
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import attrs
import trio

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.access import account_of, org_of, require_admin
from executor_mcp.integrations.addresses import valid_slug
from executor_mcp.integrations.validation import check_known, object_of, optional_text, text
from executor_mcp.oauth.grants import ENDPOINT_TIMEOUT, ClientAuth
from executor_mcp.oauth.metadata import (
    AuthorizationServer,
    MetadataError,
    ProtectedResource,
    authorization_server_urls,
    endpoint_problem,
    origin_of,
    parse_authorization_server,
    parse_protected_resource,
    protected_resource_urls,
)
from executor_mcp.oauth.registration import RegistrationFailed, auth_method, read_registration, registration_request
from executor_mcp.outbound.client import Outbound
from executor_mcp.outbound.model import OutboundFailure
from executor_mcp.records.integration_errors import (
    InvalidInput,
    OAuthProbeFailed,
    OAuthRegistrationFailed,
    OAuthStartFailed,
)
from executor_mcp.records.oauth import (
    AUTH_NONE,
    AUTH_POST,
    AUTHORIZATION_CODE,
    DYNAMIC,
    GRANTS,
    MANUAL,
    METADATA_DOCUMENT,
    TOKEN_AUTH_METHODS,
    OAuthClientRecord,
)
from executor_mcp.secrets.cipher import SecretUnreadable
from executor_mcp.secrets.providers import SecretPartition, SecretProviders
from executor_mcp.storage.interfaces import OAuthStore
from executor_mcp.storage.records import Owner as Principal

OWNERS = ("org", "user")
MAX_DOCUMENT_BYTES = 256 * 1024
MAX_CLIENT_TEXT = 2048
# The clients one org (or one account) may hold: more is an admin script gone wrong, not authorization servers.
MAX_CLIENTS_PER_OWNER = 100
_CREATE_FIELDS = frozenset(
    {
        "owner",
        "slug",
        "authorizationUrl",
        "tokenUrl",
        "grant",
        "clientId",
        "clientSecret",
        "resource",
        "originIntegration",
        "tokenEndpointAuthMethod",
        "issuer",
    }
)
DYNAMIC_FIELDS = frozenset(
    {
        "owner",
        "slug",
        "issuer",
        "registrationEndpoint",
        "authorizationUrl",
        "tokenUrl",
        "resource",
        "scopes",
        "tokenEndpointAuthMethodsSupported",
        "clientName",
        "redirectUri",
        "originIntegration",
        "clientIdMetadataDocumentSupported",
    }
)


def secret_item(owner: str, slug: str) -> str:
    return f"oauth-client:{owner}:{slug}:secret"


def client_summary(record: OAuthClientRecord) -> JsonObject:
    """A client as the API lists it: never its secret."""
    origin: JsonObject = {"kind": record.origin}
    if record.origin == DYNAMIC:
        origin["integration"] = record.origin_integration
    return {
        "owner": record.owner,
        "slug": record.slug,
        "grant": record.grant,
        "authorizationUrl": record.authorization_url,
        "tokenUrl": record.token_url,
        "resource": record.resource,
        "clientId": record.client_id,
        "origin": origin,
    }


def _endpoint(values: JsonObject, field: str, *, required: bool = True) -> str | None:
    value = values.get(field)
    if value is None and not required:
        return None
    url = text(value, field)
    problem = endpoint_problem(url)
    if problem is not None:
        raise InvalidInput(f"{field} {problem}")
    return url


def _owner(values: JsonObject, principal: Principal, field: str = "owner") -> str:
    owner = values.get(field, "user")
    if owner not in OWNERS:
        raise InvalidInput(f'{field} must be "org" or "user"')
    if owner == "org":
        require_admin(principal)
    return str(owner)


def _slug(values: JsonObject) -> str:
    slug = values.get("slug")
    if not valid_slug(slug):
        raise InvalidInput("slug must be 1-64 letters, digits, '-' or '_'")
    return str(slug)


class OAuthClients:
    def __init__(
        self,
        store: OAuthStore,
        secrets: SecretProviders,
        outbound: Outbound,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._secrets = secrets
        self._outbound = outbound
        self._clock = clock
        # One dynamic registration at a time per owner here, so two first sign-ins register once.
        self._registering: dict[tuple[str, str, str], trio.Lock] = {}

    async def create(self, principal: Principal, body: Any) -> OAuthClientRecord:
        """Register a client by hand (upsert by owner and slug); its secret, if any, goes to the sealed store."""
        values = object_of(body)
        check_known(values, _CREATE_FIELDS)
        org, owner, slug = org_of(principal), _owner(values, principal), _slug(values)
        grant = values.get("grant", AUTHORIZATION_CODE)
        if grant not in GRANTS:
            raise InvalidInput(f"grant must be one of: {', '.join(GRANTS)}")
        token_url = _endpoint(values, "tokenUrl")
        authorization_url = _endpoint(values, "authorizationUrl", required=grant == AUTHORIZATION_CODE) or ""
        if authorization_url and (authorization_url == token_url or "/.well-known/" in authorization_url):
            raise InvalidInput(
                "authorizationUrl must be the authorization endpoint, not the token endpoint or metadata"
            )
        client_id = text(values.get("clientId"), "clientId")
        secret = optional_text(values, "clientSecret", MAX_CLIENT_TEXT) or None
        method = values.get("tokenEndpointAuthMethod", AUTH_POST if secret else AUTH_NONE)
        if method not in TOKEN_AUTH_METHODS or (method == AUTH_NONE) != (secret is None):
            raise InvalidInput("tokenEndpointAuthMethod must fit the secret: none without one, else a secret method")
        if len(client_id) > MAX_CLIENT_TEXT:
            raise InvalidInput(f"clientId must be at most {MAX_CLIENT_TEXT} characters")
        account = account_of(owner, principal)
        await self._check_room(principal, owner, slug)
        item = secret_item(owner, slug) if secret else None
        if secret and item:
            await self._secrets.default_writable.set(SecretPartition(org, account), {item: secret})
        record = OAuthClientRecord(
            org_id=org,
            owner=owner,
            account_id=account,
            slug=slug,
            grant=str(grant),
            authorization_url=authorization_url,
            token_url=str(token_url),
            client_id=client_id,
            token_auth_method=str(method),
            created_at=self._clock(),
            secret_item=item,
            resource=_endpoint(values, "resource", required=False),
            origin=MANUAL,
            origin_integration=optional_text(values, "originIntegration", 64),
            issuer=_endpoint(values, "issuer", required=False),
        )
        await self._keep(record)
        return record

    async def _check_room(self, principal: Principal, owner: str, slug: str) -> None:
        """`InvalidInput` when the owner already holds its cap of clients and `slug` would be one more: before
        anything is sealed or registered (`_keep` enforces the cap, atomically, when it writes)."""
        clients = await self._store.clients(org_of(principal), principal.account_id)
        held = {record.slug for record in clients if record.owner == owner}
        if slug not in held and len(held) >= MAX_CLIENTS_PER_OWNER:
            raise InvalidInput(_full(owner))

    async def _keep(self, record: OAuthClientRecord) -> None:
        """Write the client within its owner's cap (another request, or instance, may have filled it since the
        check): past it, its sealed secret is removed again and the caller hears why."""
        if not await self._store.put_client(record, MAX_CLIENTS_PER_OWNER):
            if record.secret_item:
                partition = SecretPartition(record.org_id, record.account_id)
                await self._secrets.default_writable.delete(partition, [record.secret_item])
            raise InvalidInput(_full(record.owner))

    async def summaries(self, principal: Principal) -> list[JsonObject]:
        org = principal.org_id
        return (
            [client_summary(record) for record in await self._store.clients(org, principal.account_id)] if org else []
        )

    async def get(self, principal: Principal, owner: str, slug: str) -> OAuthClientRecord:
        record = None
        if owner in OWNERS and valid_slug(slug):
            record = await self._store.get_client(org_of(principal), owner, account_of(owner, principal), slug)
        if record is None:
            raise OAuthStartFailed(f"OAuth client not found: {slug[:64]}")
        return record

    async def remove(self, principal: Principal, owner: str, slug: str) -> None:
        """Idempotent; connections made with the client keep working until their next refresh fails."""
        if owner not in OWNERS:
            raise InvalidInput('owner must be "org" or "user"')
        if owner == "org":
            require_admin(principal)
        org, account = org_of(principal), account_of(owner, principal)
        removed = await self._store.remove_client(org, owner, account, slug) if valid_slug(slug) else None
        if removed is not None and removed.secret_item:
            await self._secrets.default_writable.delete(SecretPartition(org, account), [removed.secret_item])

    async def auth(self, record: OAuthClientRecord) -> ClientAuth:
        """How the client proves itself at the token endpoint; its secret read from the sealed store."""
        secret = None
        if record.secret_item:
            partition = SecretPartition(record.org_id, record.account_id)
            try:
                secret = await self._secrets.default_writable.get(partition, record.secret_item)
            except SecretUnreadable:
                secret = None
            if secret is None:
                raise OAuthStartFailed(f"The secret of OAuth client {record.slug} cannot be read: register it again")
        return ClientAuth(record.client_id, secret, record.token_auth_method)

    # -- discovery and dynamic registration ------------------------------------------------------------

    async def probe(self, url: str) -> tuple[ProtectedResource | None, AuthorizationServer]:
        """The authorization server of the API at `url`: its protected-resource metadata names it (else `url`
        is taken as the issuer), and its own metadata gives its endpoints."""
        problem = endpoint_problem(url)
        if problem is not None:
            raise OAuthProbeFailed(f"url {problem}")
        resource = None
        for candidate in protected_resource_urls(url):
            raw = await self._document(candidate)
            if raw is not None:
                try:
                    resource = parse_protected_resource(raw, url)
                    break
                except MetadataError:
                    continue
        for issuer in resource.authorization_servers if resource is not None else (url,):
            for candidate in authorization_server_urls(issuer):
                raw = await self._document(candidate)
                if raw is None:
                    continue
                try:
                    return resource, parse_authorization_server(raw, issuer)
                except MetadataError as exc:
                    raise OAuthProbeFailed(f"OAuth discovery failed: {exc}") from None
        raise OAuthProbeFailed(f"No OAuth authorization-server metadata found at {origin_of(url)}")

    async def _document(self, url: str) -> bytes | None:
        try:
            return await self._outbound.fetch(
                url, accept="application/json", max_bytes=MAX_DOCUMENT_BYTES, timeout=ENDPOINT_TIMEOUT
            )
        except OutboundFailure:
            return None

    async def register_dynamic(
        self, principal: Principal, body: Any, redirect_uri: str, metadata_url: str
    ) -> OAuthClientRecord:
        """The client this server is known as to an authorization server, for this resource and redirect URI:
        reused if there is one, else made now. Where the server takes a client ID metadata document's URL as a
        client id and ours is https (`metadata_url`, whose document lists `redirect_uri` alone), that URL is the
        client: nothing to register, no secret to keep. Else the server registers itself (RFC 7591)."""
        values = object_of(body)
        check_known(values, DYNAMIC_FIELDS)
        org, owner = org_of(principal), _owner(values, principal)
        redirect = str(_endpoint({"redirectUri": values.get("redirectUri") or redirect_uri}, "redirectUri"))
        by_document = (
            values.get("clientIdMetadataDocumentSupported") is True
            and redirect == redirect_uri
            and metadata_url.startswith("https://")
        )
        endpoint = None if by_document else str(_endpoint(values, "registrationEndpoint"))
        resource = _endpoint(values, "resource", required=False)
        authorization_url = str(_endpoint(values, "authorizationUrl"))
        token_url = str(_endpoint(values, "tokenUrl"))
        issuer = _endpoint(values, "issuer", required=False) or origin_of(endpoint or token_url)
        wanted = OAuthClientRecord(
            org_id=org,
            owner=owner,
            account_id=account_of(owner, principal),
            slug="",
            grant=AUTHORIZATION_CODE,
            authorization_url=authorization_url,
            token_url=token_url,
            client_id=metadata_url if by_document else "",
            token_auth_method=AUTH_NONE,
            created_at=self._clock(),
            resource=resource,
            origin=METADATA_DOCUMENT if by_document else DYNAMIC,
            origin_integration=optional_text(values, "originIntegration", 64),
            origin_issuer=issuer,
            origin_redirect_uri=redirect,
            issuer=_endpoint(values, "issuer", required=False),
        )
        slug = values.get("slug")
        if not valid_slug(slug):
            slug = _dynamic_slug(wanted)
        wanted = attrs.evolve(wanted, slug=str(slug))
        key = (org, owner, wanted.account_id)
        lock = self._registering.setdefault(key, trio.Lock())
        try:
            async with lock:
                for known in await self._store.clients(org, principal.account_id):
                    if _same_registration(known, wanted):
                        return known
                await self._check_room(principal, owner, wanted.slug)
                if endpoint is not None:
                    wanted = await self._register(wanted, endpoint, values)
                await self._keep(wanted)
                return wanted
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._registering.pop(key, None)

    async def _register(self, wanted: OAuthClientRecord, endpoint: str, values: JsonObject) -> OAuthClientRecord:
        """`wanted` with the client id (and secret, kept sealed) the registration endpoint gave it."""
        scopes = values.get("scopes", [])
        if not isinstance(scopes, list) or not all(isinstance(scope, str) for scope in scopes) or len(scopes) > 100:
            raise InvalidInput("scopes must be a list of at most 100 strings")
        supported = values.get("tokenEndpointAuthMethodsSupported")
        method = auth_method(supported if isinstance(supported, list) else None)
        request = registration_request(endpoint, wanted.origin_redirect_uri or "", scopes, method)
        try:
            registered = read_registration(
                await self._outbound.send(request, collect_streams=False, timeout=ENDPOINT_TIMEOUT), method
            )
        except OutboundFailure as exc:
            raise OAuthRegistrationFailed(f"Dynamic Client Registration failed: {exc.message}") from None
        except RegistrationFailed as exc:
            raise OAuthRegistrationFailed(f"Dynamic Client Registration failed: {exc}") from None
        item = None
        if registered.secret:
            item = secret_item(wanted.owner, wanted.slug)
            partition = SecretPartition(wanted.org_id, wanted.account_id)
            await self._secrets.default_writable.set(partition, {item: registered.secret})
        return attrs.evolve(
            wanted, client_id=registered.client_id, token_auth_method=registered.method, secret_item=item
        )


def _same_registration(known: OAuthClientRecord, wanted: OAuthClientRecord) -> bool:
    """Whether `known` is the client `wanted` would be: the same kind, authorization server, resource, redirect
    URI and endpoints (and, for a metadata document, the same document)."""
    return (
        known.owner == wanted.owner
        and known.origin == wanted.origin
        and (wanted.origin != METADATA_DOCUMENT or known.client_id == wanted.client_id)
        and known.origin_issuer == wanted.origin_issuer
        and known.resource == wanted.resource
        and known.origin_redirect_uri == wanted.origin_redirect_uri
        and (known.authorization_url, known.token_url) == (wanted.authorization_url, wanted.token_url)
    )


def _dynamic_slug(wanted: OAuthClientRecord) -> str:
    """`dcr-<host>-<hash>` (`cimd-…` for a metadata document's client): one per server, resource, redirect URI
    and token endpoint, within 64 characters."""
    issuer = wanted.origin_issuer or ""
    host = "".join(char if char.isalnum() else "-" for char in (urlsplit(issuer).hostname or "server"))[:40]
    key = f"{issuer}\n{wanted.resource or ''}\n{wanted.origin_redirect_uri}\n{wanted.token_url}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return f"{'cimd' if wanted.origin == METADATA_DOCUMENT else 'dcr'}-{host}-{digest}"


def _full(owner: str) -> str:
    return f"The {owner} holds {MAX_CLIENTS_PER_OWNER} OAuth clients already: remove one first"
