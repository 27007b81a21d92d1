"""OAuth connections: a sign-in from `start` to the connection its callback makes, and the connection's tokens
kept fresh for every call.

`start` keeps a flow bound to its caller (single use, ten minutes, a digest of its state as its key) and answers
the URL where the user signs in; `complete` (the browser's callback, or the API) takes the flow, checks that its
caller is the one who started it and what the authorization server sent back, exchanges the code with the PKCE
verifier, and writes the connection: its tokens in the sealed store, never in a record or an answer. A client
credentials client connects at once. Before a call, a token due to expire is refreshed once per connection
however many calls wait (`Refreshes`), and a refusal becomes the typed failure a model can act on.
"""

import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlencode

import attrs
import trio

from executor_mcp.background import forever
from executor_mcp.codec import JsonObject
from executor_mcp.integrations.access import account_of, find_integration, org_of, require_admin
from executor_mcp.integrations.addresses import valid_slug
from executor_mcp.integrations.credentials import auth_failure, recovery
from executor_mcp.integrations.oauth_clients import OWNERS, OAuthClients
from executor_mcp.integrations.validation import MAX_NAME_LENGTH, check_known, object_of, optional_text, text
from executor_mcp.oauth.flows import FLOW_TTL, MAX_FLOWS_PER_ACCOUNT, CallbackRefused, check_callback
from executor_mcp.oauth.grants import (
    ENDPOINT_TIMEOUT,
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
from executor_mcp.oauth.metadata import advertised_scopes, endpoint_problem, origin_of
from executor_mcp.oauth.pkce import challenge, new_state, new_verifier, state_digest
from executor_mcp.oauth.registration import metadata_document
from executor_mcp.outbound.client import Outbound
from executor_mcp.outbound.model import OutboundFailure
from executor_mcp.records.integration_errors import (
    IntegrationError,
    IntegrationNotFound,
    InvalidInput,
    OAuthCompleteFailed,
    OAuthSessionNotFound,
    OAuthStartFailed,
)
from executor_mcp.records.integrations import TOKEN, ConnectionRecord, IntegrationRecord
from executor_mcp.records.oauth import (
    AUTHORIZATION_CODE,
    CLIENT_CREDENTIALS,
    DYNAMIC,
    GRANTS,
    METADATA_DOCUMENT,
    OAuthClientRecord,
    OAuthFlowRecord,
)
from executor_mcp.secrets.cipher import SecretUnreadable
from executor_mcp.secrets.providers import SecretPartition, SecretProviders, pasted_item_id
from executor_mcp.storage.interfaces import CatalogStore, ConnectionKey, OAuthStore, connection_key
from executor_mcp.storage.records import Owner as Principal

REFRESH = "refresh"  # the input holding a connection's refresh token
# A refresh's claim outlasts the token request it covers (`ENDPOINT_TIMEOUT` for its headers, as much for its body)
# and the writes after it, and is renewed just before that request: a holder that dies leaves a claim that others
# wait out (at most one claim's life), polling for the token it may still have written.
REFRESH_CLAIM_TTL = 2 * ENDPOINT_TIMEOUT + 15.0
REFRESH_CLAIM_POLL = 0.2
CLAIM_TAKEN = "another instance is refreshing this connection's token: try again in a moment"
# Flows nobody finished are deleted as their account starts another; this sweep takes those of accounts that don't.
FLOW_SWEEP_INTERVAL = 300.0
OAUTH_CALLBACK_PATH = "/api/oauth/callback"  # under the public URL: where the authorization server sends users back
# Under the public URL: this server's client ID metadata document, whose URL is its client id where a server takes
# one; upstream's per-target form (`/api/oauth/client-id-metadata/<target>.json`) serves the same document.
CLIENT_METADATA_PATH = "/api/oauth/client-id-metadata.json"
CLIENT_METADATA_TARGETS = "/api/oauth/client-id-metadata/"
NO_CLIENT = "Register an OAuth client for this API first (its id and secret, from the provider)"
# The console's page (under the public URL) whose form registers an OAuth client; `oauthClient=1` opens it prefilled.
CLIENT_HANDOFF_PATH = "/connections"
HANDOFF_ENDPOINTS = ("authorizationUrl", "tokenUrl", "resource")
MAX_HANDOFF_TEXT = 2048
HANDOFF_FIELDS = frozenset(
    {"integration", "owner", "slug", "grant", "clientId", "authorizationUrl", "tokenUrl", "resource", "label"}
)
CLIENT_HANDOFF_INSTRUCTIONS = (
    "Give this link to the person who holds the OAuth client's credentials from the provider. They open it in a "
    "browser signed in to the executor console (as an organization admin, for an org client), enter the client "
    "secret there and register the client: the secret never passes through you. Then call "
    "executor.coreTools.oauth.start with the client's slug."
)
START_FIELDS = frozenset(
    {"client", "clientOwner", "owner", "name", "integration", "template", "identityLabel", "redirectUri"}
)


@attrs.define
class _Refreshing:
    """One connection's lock, shared by its refreshes and its (re)connect, and what its last refresh did: a call
    that waited on a refresh that failed hears the same failure instead of trying again in turn."""

    lock: trio.Lock = attrs.Factory(trio.Lock)
    attempts: int = 0
    failure: "RefreshFailed | None" = None


class RefreshFailed(Exception):
    """A connection's token could not be made fresh; `reauth` when only signing in again can fix it."""

    def __init__(self, message: str, *, reauth: bool) -> None:
        super().__init__(message)
        self.message = message
        self.reauth = reauth


def refresh_failure(connection: ConnectionRecord, failed: RefreshFailed) -> JsonObject:
    """`oauth_reauth_required` (only a new sign-in helps: its recovery names `oauth.start`) or
    `oauth_refresh_failed` (the next call tries again), in the authentication envelope."""
    label = f"{connection.integration}.{connection.owner}.{connection.name}"
    if failed.reauth:
        code, message = "oauth_reauth_required", f'OAuth connection "{label}" requires reauthorization: {failed}'
    else:
        code, message = "oauth_refresh_failed", f'OAuth connection "{label}" could not be resolved: {failed}'
    return auth_failure(
        code,
        message,
        integration=connection.integration,
        owner=connection.owner,
        credential={"kind": "oauth", "label": label},
        recovery=recovery(),
    )


@attrs.frozen
class _Target:
    owner: str
    name: str
    integration: IntegrationRecord
    template: str
    scopes: tuple[str, ...]


class OAuthSignIns:
    def __init__(
        self,
        store: OAuthStore,
        catalog: CatalogStore,
        secrets: SecretProviders,
        outbound: Outbound,
        clients: OAuthClients,
        public_url: Callable[[], str],
        settle: Callable[[IntegrationRecord, ConnectionRecord], Awaitable[ConnectionRecord]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`public_url` is where this server is reached (`--public-url`, else its bound address: asked at each
        use, as it is known only once the server listens); the authorization server sends the user back to its
        `/api/oauth/callback`."""
        self._store = store
        self._catalog = catalog
        self._secrets = secrets
        self._outbound = outbound
        self._clients = clients
        self._public_url = public_url
        self._settle = settle  # what a connection just written goes through (its tools listed, for MCP)
        self._clock = clock
        self._refreshing: dict[tuple[str, ...], _Refreshing] = {}  # bounded by the calls in flight

    def callback_url(self) -> str:
        return self._public_url() + OAUTH_CALLBACK_PATH

    def metadata_document_url(self, target: str | None = None) -> str:
        path = CLIENT_METADATA_PATH if target is None else f"{CLIENT_METADATA_TARGETS}{target}.json"
        return self._public_url() + path

    def metadata_document(self, target: str | None = None) -> JsonObject:
        """The document at `metadata_document_url(target)`: it must name its own URL as the client id."""
        return metadata_document(self.metadata_document_url(target), self.callback_url(), self._public_url())

    # -- start, complete, cancel ---------------------------------------------------------------------------

    async def start(self, principal: Principal, body: Any) -> JsonObject:
        values = object_of(body)
        check_known(values, START_FIELDS)
        owner, client_owner = values.get("owner", "user"), values.get("clientOwner", values.get("owner", "user"))
        if owner not in OWNERS or client_owner not in OWNERS:
            raise InvalidInput('owner and clientOwner must be "org" or "user"')
        if owner == "org":
            require_admin(principal)
        if owner == "org" and client_owner == "user":
            raise OAuthStartFailed("An org connection must use an org OAuth client.")
        target = await self._target(principal, values, str(owner))
        client = await self._clients.get(principal, str(client_owner), text(values.get("client"), "client"))
        identity = optional_text(values, "identityLabel", MAX_NAME_LENGTH)
        if client.grant == CLIENT_CREDENTIALS and client.owner == "org" and target.owner == "user":
            raise OAuthStartFailed(
                "An org's client-credentials client makes org connections only: its token is the org's"
            )
        if client.grant == CLIENT_CREDENTIALS:
            tokens = await self._exchange(client, client_credentials_form(target.scopes, client.resource), start=True)
            record = await self._mint(principal, target, client, tokens, identity)
            return {"status": "connected", "connection": record}
        redirect = optional_text(values, "redirectUri", 2048) or self.callback_url()
        if redirect not in (self.callback_url(), client.origin_redirect_uri):
            raise OAuthStartFailed("redirectUri must be this server's OAuth callback")
        if endpoint_problem(redirect) is not None:
            raise OAuthStartFailed("The redirect URI must be https (or http on a loopback host): set --public-url")
        state, verifier, now = new_state(), new_verifier(), self._clock()
        flow = OAuthFlowRecord(
            state_digest=state_digest(state),
            org_id=org_of(principal),
            account_id=principal.account_id,
            org_admin=principal.org_admin,
            client_owner=client.owner,
            client_slug=client.slug,
            owner=target.owner,
            integration=target.integration.slug,
            name=target.name,
            template=target.template,
            redirect_uri=redirect,
            code_verifier=verifier,
            scopes=target.scopes,
            created_at=now,
            expires_at=now + FLOW_TTL,
            resource=client.resource,
            issuer=client.issuer,
            identity_label=identity,
        )
        if not await self._store.put_flow(flow, MAX_FLOWS_PER_ACCOUNT, now):
            raise OAuthStartFailed(
                f"{MAX_FLOWS_PER_ACCOUNT} sign-ins are in progress for this account: finish or cancel one first"
            )
        url = authorization_url(
            client.authorization_url,
            client_id=client.client_id,
            redirect_uri=redirect,
            state=state,
            challenge=challenge(verifier),
            scopes=target.scopes,
            resource=client.resource,
        )
        return {"status": "redirect", "authorizationUrl": url, "state": state}

    async def connect(self, principal: Principal, body: Any) -> JsonObject:
        """`start`, where the caller may name no client (the console's Connect): then a client of the API's
        authorization server that the caller can use already, else this server made one there (its metadata
        document, or dynamic registration) from what discovery finds at the method's `discoveryUrl`, or at the
        origin of its authorization URL taken as the issuer."""
        values = object_of(body)
        check_known(values, START_FIELDS)
        if values.get("client") is not None:
            return await self.start(principal, values)
        owner = str(values.get("owner", "user"))
        integration = await find_integration(self._catalog, principal, text(values.get("integration"), "integration"))
        template = text(values.get("template"), "template")
        method = integration.auth_method(template)
        if method is None or method.kind != "oauth2":
            raise OAuthStartFailed(f'Template "{template[:64]}" of {integration.slug} is not an OAuth method')
        oauth = method.oauth or {}
        discovery, declared = oauth.get("discoveryUrl"), oauth.get("authorizationUrl")
        where = discovery if isinstance(discovery, str) else origin_of(declared) if isinstance(declared, str) else None
        if where is None:
            raise OAuthStartFailed(f"{NO_CLIENT} (this method names no authorization server)")
        try:
            resource, server = await self._clients.probe(where)
        except IntegrationError as exc:
            raise OAuthStartFailed(f"{NO_CLIENT} ({exc.message})") from None
        wanted_resource = resource.resource if resource is not None else oauth.get("resource")
        for known in await self._store.clients(org_of(principal), principal.account_id):
            if (
                (known.token_url, known.authorization_url) == (server.token_endpoint, server.authorization_endpoint)
                and known.resource == wanted_resource
                and known.grant != CLIENT_CREDENTIALS
                and (owner == "user" or known.owner == "org")
                and self._usable_unasked(known, integration.slug)
            ):
                return await self.start(principal, {**values, "client": known.slug, "clientOwner": known.owner})
        if server.authorization_endpoint is None or (
            server.registration_endpoint is None and not server.metadata_documents
        ):
            raise OAuthStartFailed(f"{NO_CLIENT} (its authorization server lets no client register itself)")
        registration = {
            "owner": owner,
            "issuer": server.issuer,
            "registrationEndpoint": server.registration_endpoint,
            "authorizationUrl": server.authorization_endpoint,
            "tokenUrl": server.token_endpoint,
            "resource": wanted_resource if isinstance(wanted_resource, str) else None,
            "scopes": list(advertised_scopes(resource, server))[:100],
            "tokenEndpointAuthMethodsSupported": list(server.token_auth_methods or ()),
            "clientIdMetadataDocumentSupported": server.metadata_documents,
            "originIntegration": integration.slug,
        }
        client = await self._clients.register_dynamic(
            principal, registration, self.callback_url(), self.metadata_document_url()
        )
        return await self.start(principal, {**values, "client": client.slug, "clientOwner": client.owner})

    async def client_handoff(self, principal: Principal, body: Any) -> JsonObject:
        """`oauth.clients.createHandoff`: the console link where a person registers an OAuth client for the
        integration, its fields but the secret prefilled (the request's, else the integration's OAuth template's
        endpoints). The link grants nothing: the person's own console session registers the client, with the
        API's checks (an org client is an admin's)."""
        values = object_of(body)
        check_known(values, HANDOFF_FIELDS)
        integration = await find_integration(self._catalog, principal, text(values.get("integration"), "integration"))
        owner, grant = values.get("owner", "org"), values.get("grant", AUTHORIZATION_CODE)
        if owner not in OWNERS:
            raise InvalidInput('owner must be "org" or "user"')
        if grant not in GRANTS:
            raise InvalidInput(f"grant must be one of: {', '.join(GRANTS)}")
        query = {"oauthClient": "1", "integration": integration.slug, "owner": str(owner), "grant": str(grant)}
        for field in ("slug", "clientId", "label", *HANDOFF_ENDPOINTS):
            value = optional_text(values, field, MAX_HANDOFF_TEXT)
            if value and field in HANDOFF_ENDPOINTS and (problem := endpoint_problem(value)) is not None:
                raise InvalidInput(f"{field} {problem}")
            if value:
                query[field] = value
        if "slug" in query and not valid_slug(query["slug"]):
            raise InvalidInput("slug must be 1-64 letters, digits, '-' or '_'")
        declared = next((method.oauth or {} for method in integration.auth_methods if method.kind == "oauth2"), {})
        for field in HANDOFF_ENDPOINTS:
            found = declared.get(field)
            if field not in query and isinstance(found, str) and found and endpoint_problem(found) is None:
                query[field] = found
        url = self._public_url() + CLIENT_HANDOFF_PATH + "?" + urlencode(query)
        return {"url": url, "instructions": CLIENT_HANDOFF_INSTRUCTIONS}

    def _usable_unasked(self, client: OAuthClientRecord, integration: str) -> bool:
        """Whether Connect may use `client` without the person choosing it: one this server made for this callback
        (by registration, or as its metadata document), or one registered for this very integration. A client
        registered by hand for another API is the organization's trust in that app: a spec naming the same
        authorization server must not borrow it unasked."""
        if client.origin == DYNAMIC:
            return client.origin_redirect_uri == self.callback_url()
        if client.origin == METADATA_DOCUMENT:
            return (
                client.client_id == self.metadata_document_url() and client.origin_redirect_uri == self.callback_url()
            )
        return client.origin_integration == integration

    async def complete(self, principal: Principal, state: str, params: dict[str, str]) -> ConnectionRecord:
        """The connection a callback's code makes. The flow is taken first (single use) and must be the
        caller's: a state that is unknown, taken, expired or another caller's is not found, alike."""
        flow = await self._store.take_flow(state_digest(state), self._clock()) if state else None
        if flow is None or (flow.org_id, flow.account_id) != (principal.org_id, principal.account_id):
            raise OAuthSessionNotFound("No OAuth sign-in in progress has this state", state=state[:128])
        code = check_callback(flow, params)
        if isinstance(code, CallbackRefused):
            raise OAuthCompleteFailed(code.message, restartRequired=True)
        signer = Principal(flow.account_id, flow.org_id, flow.org_admin)
        try:
            client = await self._clients.get(signer, flow.client_owner, flow.client_slug)
        except OAuthStartFailed as gone:
            raise OAuthCompleteFailed(gone.message, restartRequired=True) from None
        form = code_form(code, flow.redirect_uri, flow.code_verifier, flow.resource)
        tokens = await self._exchange(client, form, start=False)
        integration = await find_integration(self._catalog, signer, flow.integration)
        target = _Target(flow.owner, flow.name, integration, flow.template, flow.scopes)
        return await self._mint(signer, target, client, tokens, flow.identity_label)

    async def sweep_expired(self) -> None:
        """Delete the sign-ins that expired, every few minutes, for as long as the server runs (its owner's
        nursery); a failed sweep is logged and tried again."""
        await forever("sweeping expired OAuth sign-ins", self._sweep, FLOW_SWEEP_INTERVAL)

    async def _sweep(self) -> None:
        await self._store.sweep_flows(self._clock())

    async def cancel(self, principal: Principal, state: str) -> None:
        """Drop the caller's sign-in in progress (idempotent; another's is left alone, and not admitted to)."""
        if state:
            await self._store.take_flow(state_digest(state), self._clock(), (org_of(principal), principal.account_id))

    async def _target(self, principal: Principal, values: JsonObject, owner: str) -> _Target:
        integration = await find_integration(self._catalog, principal, text(values.get("integration"), "integration"))
        template = text(values.get("template"), "template")
        method = integration.auth_method(template)
        if method is None or method.kind != "oauth2":
            raise OAuthStartFailed(f'Template "{template[:64]}" of {integration.slug} is not an OAuth method')
        name = text(values.get("name"), "name")
        if len(name) > 64 or not all(char.isalnum() or char in "-_" for char in name):
            raise InvalidInput("name must be 1-64 letters, digits, '-' or '_'")
        oauth = method.oauth or {}
        declared = oauth.get("scopes")
        if isinstance(declared, list):
            scopes = tuple(dict.fromkeys(s for s in declared if isinstance(s, str)))
        elif isinstance(oauth.get("discoveryUrl"), str):
            scopes = await self._discovered_scopes(str(oauth["discoveryUrl"]))
        else:
            scopes = ()
        return _Target(owner, name, integration, template, scopes[:100])

    async def _discovered_scopes(self, url: str) -> tuple[str, ...]:
        """What an API that names no scopes (an MCP server) asks for: its protected-resource metadata's
        `scopes_supported`, authoritative even when empty, else its authorization server's."""
        try:
            resource, server = await self._clients.probe(url)
        except IntegrationError as exc:
            raise OAuthStartFailed(f"Failed to discover OAuth scopes: {exc.message}") from None
        return advertised_scopes(resource, server)

    async def _exchange(self, client: OAuthClientRecord, form: dict[str, str], *, start: bool) -> Tokens:
        failed = OAuthStartFailed if start else OAuthCompleteFailed
        auth = await self._clients.auth(client)
        try:
            answer = read_tokens(
                await self._outbound.send(token_request(client.token_url, auth, form), timeout=ENDPOINT_TIMEOUT)
            )
        except OutboundFailure as exc:
            raise failed(f"OAuth token exchange failed: {exc.message}") from None
        if isinstance(answer, TokenError):
            fields = {} if start else {"restartRequired": answer.reauth}
            raise failed(f"OAuth token exchange failed: {answer.message}", **fields)
        return answer

    async def _mint(
        self,
        principal: Principal,
        target: _Target,
        client: OAuthClientRecord,
        tokens: Tokens,
        identity: str | None,
    ) -> ConnectionRecord:
        """Write the connection and its tokens (a reconnect replaces both, keeping the description)."""
        org, account = org_of(principal), account_of(target.owner, principal)
        integration = target.integration.slug
        # Under the connection's lock here and its claim in the store: a refresh of the old grant finishing now,
        # on this instance or another, must not overwrite these tokens.
        key = (org, target.owner, account, integration, target.name)
        async with self._held(key), self._claimed(key):
            record = await self._write(org, account, target, client, tokens, identity)
        return record if self._settle is None else await self._settle(target.integration, record)

    async def _write(
        self,
        org: str,
        account: str,
        target: _Target,
        client: OAuthClientRecord,
        tokens: Tokens,
        identity: str | None,
    ) -> ConnectionRecord:
        integration, now = target.integration.slug, self._clock()
        existing = await self._catalog.get_connection(org, target.owner, account, integration, target.name)
        values = {TOKEN: tokens.access_token}
        if tokens.refresh_token:
            values[REFRESH] = tokens.refresh_token
        item_ids = {variable: pasted_item_id(target.owner, integration, target.name, variable) for variable in values}
        granted = granted_scopes(tokens, target.scopes)
        record = ConnectionRecord(
            org_id=org,
            owner=target.owner,
            account_id=account,
            integration=integration,
            name=target.name,
            template=target.template,
            provider=self._secrets.default_writable.key,
            item_ids=item_ids,
            created_at=existing.created_at if existing else now,
            updated_at=now,
            identity_label=identity or (existing.identity_label if existing else None),
            description=existing.description if existing else None,
            oauth_client=client.slug,
            oauth_client_owner=client.owner,
            oauth_token_url=client.token_url,
            expires_at=now + tokens.expires_in if tokens.expires_in is not None else None,
            oauth_scope=" ".join(granted) or None,
            missing_scopes=missing_scopes(target.scopes, granted) if client.grant != CLIENT_CREDENTIALS else (),
            refreshed_at=now,
        )
        await self._secrets.store_values(SecretPartition(org, account), item_ids, values)
        if not await self._catalog.put_connection(record):
            raise IntegrationNotFound(f"Integration not found: {integration}", slug=integration)
        if existing is not None:
            await self._secrets.forget(existing, replaced_by=record)
        return record

    # -- fresh tokens for calls --------------------------------------------------------------------------

    async def fresh(self, connection: ConnectionRecord) -> ConnectionRecord:
        """The connection as a call should use it: refreshed first when its token is due (one refresh per
        connection at a time here; a waiter finds the refreshed record and does not refresh again)."""
        if connection.oauth_client is None or not refresh_due(
            connection.expires_at, self._clock(), connection.refreshed_at
        ):
            return connection
        key = connection_key(connection)
        seen = self._refreshing.setdefault(key, _Refreshing()).attempts
        async with self._held(key) as entry:
            if entry.attempts != seen and entry.failure is not None:
                raise entry.failure  # the refresh this call waited for failed: the same answer, no second try
            current = await self._due(key)
            if current is None:
                return await self._current(key)  # refreshed while this call waited (here, or by another instance)
            entry.attempts += 1
            try:
                refreshed = await self._claimed_refresh(key)
            except RefreshFailed as failed:
                entry.failure = failed
                raise
            entry.failure = None
            return refreshed

    async def _current(self, key: ConnectionKey) -> ConnectionRecord:
        current = await self._catalog.get_connection(*key)
        if current is None:
            raise RefreshFailed("the connection was removed", reauth=True)
        return current

    async def _due(self, key: ConnectionKey) -> ConnectionRecord | None:
        """The connection as stored, if its token is still due; None once it is fresh."""
        current = await self._current(key)
        return current if refresh_due(current.expires_at, self._clock(), current.refreshed_at) else None

    async def _claimed_refresh(self, key: ConnectionKey) -> ConnectionRecord:
        """Refresh under the store's claim on the connection, so that instances sharing a database refresh it
        once: an instance that finds another's claim waits for the token it writes (re-reading the connection)
        and refreshes only if that claim lapses with the token still due (its holder died or failed)."""
        holder, gave_up = secrets.token_hex(16), self._clock() + REFRESH_CLAIM_TTL + 1
        while not await self._claim(key, holder):
            await trio.sleep(REFRESH_CLAIM_POLL)
            if await self._due(key) is None:
                return await self._current(key)
            if self._clock() > gave_up:
                raise RefreshFailed(CLAIM_TAKEN, reauth=False)
        try:
            due = await self._due(key)  # the claim's last holder may have refreshed it just now
            return await self._refresh(due, holder) if due is not None else await self._current(key)
        finally:
            with trio.CancelScope(shield=True):
                await self._store.release_refresh(key, holder)

    async def _claim(self, key: ConnectionKey, holder: str) -> bool:
        """Take (or, for its holder, renew) the store's claim on the connection's tokens."""
        now = self._clock()
        return await self._store.claim_refresh(key, holder, now + REFRESH_CLAIM_TTL, now)

    @asynccontextmanager
    async def _claimed(self, key: ConnectionKey) -> AsyncIterator[None]:
        """The store's claim held for a (re)connect's write, waited for (at most one claim's life) while another
        instance refreshes: that refresh of the old grant lands first, and these tokens then replace it."""
        holder, gave_up = secrets.token_hex(16), self._clock() + REFRESH_CLAIM_TTL + 1
        while not await self._claim(key, holder):
            if self._clock() > gave_up:
                raise OAuthCompleteFailed(CLAIM_TAKEN)
            await trio.sleep(REFRESH_CLAIM_POLL)
        try:
            yield
        finally:
            with trio.CancelScope(shield=True):
                await self._store.release_refresh(key, holder)

    @asynccontextmanager
    async def _held(self, key: tuple[str, ...]) -> AsyncIterator[_Refreshing]:
        """The connection's lock held; its entry dropped once nobody holds or waits for it."""
        entry = self._refreshing.setdefault(key, _Refreshing())
        try:
            async with entry.lock:
                yield entry
        finally:
            if not entry.lock.locked() and entry.lock.statistics().tasks_waiting == 0:
                self._refreshing.pop(key, None)

    async def _refresh(self, connection: ConnectionRecord, holder: str) -> ConnectionRecord:
        owner = connection.oauth_client_owner or connection.owner
        account = connection.account_id if owner == "user" else ""
        client = await self._store.get_client(connection.org_id, owner, account, connection.oauth_client or "")
        if client is None:
            raise RefreshFailed(f'OAuth client "{connection.oauth_client}" is no longer registered.', reauth=True)
        if connection.oauth_token_url is not None and client.token_url != connection.oauth_token_url:
            # Its refresh token goes only where it came from: a client re-registered elsewhere signs in again.
            raise RefreshFailed(
                f'OAuth client "{client.slug}" has another token endpoint than this connection was made with.',
                reauth=True,
            )
        partition = SecretPartition.of(connection)
        scopes = tuple((connection.oauth_scope or "").split())
        if client.grant == CLIENT_CREDENTIALS:
            form = client_credentials_form(scopes, client.resource)
        else:
            item = connection.item_ids.get(REFRESH)
            try:
                stored = await self._secrets.get(connection.provider or "", partition, item) if item else None
            except SecretUnreadable:
                raise RefreshFailed("Stored refresh token could not be resolved.", reauth=True) from None
            if stored is None:
                raise RefreshFailed("No refresh token is stored for this connection.", reauth=True)
            form = refresh_form(stored, scopes, client.resource)
        try:
            auth = await self._clients.auth(client)
        except OAuthStartFailed as exc:
            raise RefreshFailed(exc.message, reauth=True) from None
        # The claim renewed for the request's whole time: past a lapse, another instance could refresh too.
        if not await self._claim(connection_key(connection), holder):
            raise RefreshFailed(CLAIM_TAKEN, reauth=False)
        # Shielded from the exchange to the write: a rotating server has spent the old refresh token the moment
        # it answers, so the new one must be kept even if the call that asked is gone (each step is bounded).
        with trio.CancelScope(shield=True):
            refreshed = await self._exchange_and_keep(connection, client, auth, form, partition)
        return refreshed  # noqa: RET504 (returned after the scope: a `with` could swallow, as mypy knows)

    async def _exchange_and_keep(
        self,
        connection: ConnectionRecord,
        client: OAuthClientRecord,
        auth: ClientAuth,
        form: dict[str, str],
        partition: SecretPartition,
    ) -> ConnectionRecord:
        try:
            answer = read_tokens(
                await self._outbound.send(token_request(client.token_url, auth, form), timeout=ENDPOINT_TIMEOUT)
            )
        except OutboundFailure as exc:
            raise RefreshFailed(f"OAuth token refresh failed: {exc.message}", reauth=False) from None
        if isinstance(answer, TokenError):
            words = f"OAuth token refresh was rejected {answer.message}" if answer.code else answer.message
            raise RefreshFailed(words, reauth=answer.reauth)
        now = self._clock()
        values = {TOKEN: answer.access_token}
        item_ids = {
            TOKEN: connection.item_ids.get(TOKEN)
            or pasted_item_id(connection.owner, connection.integration, connection.name, TOKEN)
        }
        if answer.refresh_token:  # rotated: the old one is spent
            values[REFRESH] = answer.refresh_token
            item_ids[REFRESH] = connection.item_ids.get(REFRESH) or pasted_item_id(
                connection.owner, connection.integration, connection.name, REFRESH
            )
        await self._secrets.store_values(partition, item_ids, values)
        updated = attrs.evolve(
            connection,
            item_ids={**connection.item_ids, **item_ids},
            expires_at=now + answer.expires_in if answer.expires_in is not None else None,
            oauth_scope=" ".join(granted_scopes(answer, ())) if answer.scope is not None else connection.oauth_scope,
            refreshed_at=now,
            updated_at=now,
        )
        if not await self._catalog.put_connection(updated):
            raise RefreshFailed("the connection's integration was removed", reauth=True)
        return updated
