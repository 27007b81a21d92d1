"""The integrations of each organization, and the tools they give each caller.

Every entry point (the HTTP API, the sandbox's core tools, the CLI) goes through `Integrations`, so the
rules live once: who may change what (org integrations need an org admin), how a request is validated before
anything is written (by its kind, see `kinds.Kind`), and how a source becomes tools (compiled once per
content hash and shared by every connection that reaches it: `catalogs.py`). One add path and one configure
path serve every kind.

The service is assembled from parts it shares: `catalogs` (compiled catalogs), `discoveries` (connections'
own tool lists), `views` (each caller's catalog) and `connections` (credentials bound to integrations).
"""

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.access import find_integration, org_of, require_admin
from executor_mcp.integrations.addresses import default_slug, slug_problem, valid_slug
from executor_mcp.integrations.catalogs import Catalogs, digest
from executor_mcp.integrations.compiling import Compiler
from executor_mcp.integrations.connections import Connections
from executor_mcp.integrations.discovery import Discoveries
from executor_mcp.integrations.kinds import Invocation, Kind, Kinds
from executor_mcp.integrations.oauth_clients import OAuthClients
from executor_mcp.integrations.oauth_signins import OAuthSignIns, RefreshFailed, refresh_failure
from executor_mcp.integrations.validation import (
    MAX_DESCRIPTION_LENGTH,
    MAX_NAME_LENGTH,
    check_known,
    object_of,
    optional_text,
)
from executor_mcp.integrations.views import ToolEntry, View, Views
from executor_mcp.outbound.client import Outbound
from executor_mcp.records.integration_errors import (
    DiscoveryFailed,
    IntegrationExists,
    IntegrationNotFound,
    InvalidInput,
    RemovalNotAllowed,
)
from executor_mcp.records.integrations import BUILT_IN_SLUG, CompiledCatalog, ConnectionRecord, IntegrationRecord
from executor_mcp.secrets.providers import SecretProviders
from executor_mcp.storage.interfaces import CatalogStore, OAuthStore
from executor_mcp.storage.records import Owner as Principal

# What one organization may hold: far above any real catalog, far below what fills a disk.
MAX_INTEGRATIONS_PER_ORG = 256


class Integrations:
    """What every surface (API, console, CLI, `coreTools`) asks of the catalog: one add, configure and remove
    path for every kind, and the parts (connections, views, discoveries) that each own one concern."""

    def __init__(
        self,
        catalog: CatalogStore,
        secrets: SecretProviders,
        kinds: Kinds,
        compiler: Compiler,
        *,
        oauth_store: OAuthStore | None = None,
        outbound: Outbound | None = None,
        public_url: Callable[[], str] = lambda: "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        """With `oauth_store` and `outbound`, OAuth connections are served (`oauth_clients`, `oauth`: sign-ins
        and fresh tokens; `public_url` is where this server is reached, its OAuth callback under it); without,
        only where no OAuth connection can exist (tests of other parts)."""
        self._catalog = catalog
        self._secrets = secrets
        self._kinds = kinds
        self._clock = clock
        self._catalogs = Catalogs(catalog, kinds, compiler)
        self.oauth_clients: OAuthClients | None = None
        self.oauth: OAuthSignIns | None = None
        if oauth_store is not None and outbound is not None:
            self.oauth_clients = OAuthClients(oauth_store, secrets, outbound, clock)
            self.oauth = OAuthSignIns(
                oauth_store, catalog, secrets, outbound, self.oauth_clients, public_url, self._settle, clock
            )
        fresh = self.oauth.fresh if self.oauth is not None else None
        self.discoveries = Discoveries(catalog, secrets, kinds, self._catalogs, clock, fresh)
        self.views = Views(catalog, kinds, self._catalogs, self.discoveries, clock)
        self.connections = Connections(catalog, secrets, kinds, self._catalogs, self.views, self.discoveries, clock)

    async def _settle(self, integration: IntegrationRecord, connection: ConnectionRecord) -> ConnectionRecord:
        """A connection just written by a sign-in, its tools listed now where its kind discovers them (a
        failed listing is noted on it, as for any connection saved)."""
        if not self._kinds.of(integration).discovers(integration):
            return connection
        try:
            return await self.discoveries.discover(integration, connection)
        except DiscoveryFailed as failure:
            return attrs.evolve(connection, sync_error=failure.message)

    # -- reading -------------------------------------------------------------------------------------

    async def integrations(self, principal: Principal) -> list[IntegrationRecord]:
        org = principal.org_id
        return await self._catalog.integrations(org) if org else []

    async def integration(self, principal: Principal, slug: str, kind_name: str | None = None) -> IntegrationRecord:
        """The org's integration `slug`; with `kind_name`, one of that kind (else that kind's own refusal)."""
        record = await find_integration(self._catalog, principal, slug)
        if kind_name is not None and record.kind != kind_name:
            raise self._registered(kind_name).not_found(slug)
        return record

    async def view(self, principal: Principal) -> View:
        """The caller's tools (`views.Views.view`)."""
        return await self.views.view(principal)

    async def connected_integrations(self, principal: Principal) -> list[str]:
        return await self.views.connected_integrations(principal)

    async def tool_count(self, integration: IntegrationRecord) -> int:
        """The tools of the integration's own source (what an add answers as `toolCount`)."""
        catalog = await self._catalogs.catalog(integration)
        return len(catalog.tools) if catalog is not None else 0

    async def own_catalog(self, integration: IntegrationRecord) -> CompiledCatalog | None:
        """The tools of the integration's own source, whoever connects to it (none of a kind whose tools
        each connection discovers, until a snapshot gives some)."""
        return await self._catalogs.catalog(integration)

    def kind(self, integration: IntegrationRecord) -> Kind:
        return self._kinds.of(integration)

    def kind_named(self, name: str) -> Kind | None:
        """The kind registered under `name` (a kind's own surface reaches its kind this way)."""
        return self._kinds.named(name)

    def _registered(self, name: str) -> Kind:
        kind = self._kinds.named(name)
        if kind is None:
            raise InvalidInput(f"This server does not serve {name} integrations")
        return kind

    # -- changing ------------------------------------------------------------------------------------

    def check_may_add(self, principal: Principal, kind_name: str, body: Any) -> None:
        """Everything of an add but I/O and storage, before an approval is asked for it."""
        require_admin(principal)
        self._registered(kind_name).check_addable(body)

    async def add(self, principal: Principal, kind_name: str, body: Any) -> tuple[IntegrationRecord, int]:
        """A new integration of any kind, from the add request its kind validates; its integration-level
        source is compiled first, so nothing is written unless it becomes tools. Answers the record and its
        own tools' count (0 for a kind whose tools each connection discovers). `IntegrationExists` when the
        slug is taken."""
        org = org_of(principal)
        require_admin(principal)
        kind = self._registered(kind_name)
        registration = await kind.register(body, principal)
        slug = registration.slug
        if slug is not None and (problem := slug_problem(slug)) is not None:
            raise InvalidInput(problem)
        slug = slug or default_slug(registration.slug_hint, kind_name) or "api"
        if slug == BUILT_IN_SLUG:
            raise IntegrationExists(f"Integration {slug} already exists; update it instead of re-adding.", slug=slug)
        if len(await self._catalog.integrations(org)) >= MAX_INTEGRATIONS_PER_ORG:
            raise InvalidInput(f"An organization holds at most {MAX_INTEGRATIONS_PER_ORG} integrations")
        catalog: CompiledCatalog | None = None
        if registration.compiled is not None:
            encoded, count = registration.compiled.encoded, len(registration.compiled.tool_names)
        else:
            catalog, encoded = await self._catalogs.compile(kind, principal, registration.source)
            count = len(catalog.tools)
        now = self._clock()
        record = IntegrationRecord(
            org_id=org,
            slug=slug,
            kind=kind_name,
            name=registration.name,
            description=registration.description,
            source_hash=digest(registration.source),
            config=registration.config,
            auth_methods=registration.auth_methods,
            created_at=now,
            updated_at=now,
            can_refresh=registration.can_refresh,
        )
        if not await self._catalog.add_integration(record, registration.source, encoded):
            raise IntegrationExists(f"Integration {slug} already exists; update it instead of re-adding.", slug=slug)
        if catalog is not None:
            self._catalogs.remember(record.source_hash, catalog)
        return record, count

    async def configure(self, principal: Principal, slug: str, kind_name: str, body: Any) -> IntegrationRecord:
        """The integration's connection-facing settings changed as its kind reads the request. Connections
        that discover their tools list them again on their owner's next read (`discovery.due_at`)."""
        require_admin(principal)
        record = await self.integration(principal, slug, kind_name)
        config, methods = self._registered(kind_name).reconfigure(record, body)
        return await self._replace(attrs.evolve(record, config=config, auth_methods=methods))

    async def replace_source(
        self, principal: Principal, updated: IntegrationRecord, source: bytes, encoded: bytes
    ) -> IntegrationRecord:
        """Store an integration's new source (compiled by its kind) and the settings that go with it; the
        connections, policies and auth methods are kept."""
        require_admin(principal)
        return await self._replace(attrs.evolve(updated, source_hash=digest(source)), source, encoded)

    async def patch(self, principal: Principal, slug: str, body: Any) -> IntegrationRecord:
        require_admin(principal)
        values = object_of(body)
        check_known(values, {"name", "description"})
        record = await self.integration(principal, slug)
        changes: dict[str, Any] = {}
        if values.get("name") is not None:
            changes["name"] = optional_text(values, "name", MAX_NAME_LENGTH)
        if values.get("description") is not None:
            changes["description"] = optional_text(values, "description", MAX_DESCRIPTION_LENGTH)
        return await self._replace(attrs.evolve(record, **changes))

    async def _replace(
        self, updated: IntegrationRecord, source: bytes | None = None, encoded: bytes | None = None
    ) -> IntegrationRecord:
        stored = attrs.evolve(updated, updated_at=self._clock())
        if not await self._catalog.replace_integration(stored, source, encoded):
            raise IntegrationNotFound(f"Integration not found: {stored.slug}", slug=stored.slug)
        return stored

    async def remove(self, principal: Principal, slug: str) -> None:
        """Remove an integration, its connections and the secret values those connections stored."""
        require_admin(principal)
        if slug == BUILT_IN_SLUG:
            raise RemovalNotAllowed(f"Integration {slug} is built in and cannot be removed", slug=slug)
        removed = await self._catalog.remove_integration(org_of(principal), slug) if valid_slug(slug) else None
        if removed is None:
            raise IntegrationNotFound(f"Integration not found: {slug}", slug=slug)
        for connection in removed:
            await self._secrets.forget(connection)

    # -- calling -------------------------------------------------------------------------------------

    async def invoke(self, entry: ToolEntry, args: Any) -> JsonObject:
        integration, connection = entry.integration, entry.connection
        if connection.oauth_client is not None and self.oauth is not None:
            try:
                connection = await self.oauth.fresh(connection)
            except RefreshFailed as failed:
                return refresh_failure(connection, failed)
        credentials = await self.connections.credentials(integration, connection)
        return await self._kinds.of(integration).invoke(
            Invocation(
                integration,
                connection,
                entry.tool,
                args,
                credentials,
                mark_stale=partial(self.discoveries.mark_stale, integration, connection),
            )
        )
