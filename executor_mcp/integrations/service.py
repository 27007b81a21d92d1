"""The integrations and connections of each organization, and the tools they give each caller.

Every entry point (the HTTP API, the sandbox's core tools, the CLI) goes through `Integrations`, so the
rules live once: who may change what (org integrations and org connections need an org admin; a
member's own connections are theirs), how a request is validated before anything is written, and how a
source becomes tools (compiled once per content hash, in a worker thread, and shared by every
connection that reaches it).

A caller's catalog (`view`) is built from the control plane and cached per (org, account) until the
org's catalog revision moves: an admin command on the same data dir bumps it too.

Kinds whose tools come from each connection (MCP servers, introspected GraphQL endpoints) are discovered
when the connection is made, when it is refreshed, when a call learns the list changed, and again once the
last listing is older than `DISCOVERY_TTL`: the last three by `refresh_stale`, a loop the server runs in
its root nursery, so a slow upstream never holds up a caller's catalog (an admin command runs no loop: what
it marks waits for the server's next look).
"""

import contextlib
import hashlib
import logging
import re
import time
import urllib.parse
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import attrs
import trio

from executor_mcp.codec import JsonObject, dumps
from executor_mcp.integrations.addresses import (
    OWNERS,
    ToolAddress,
    connection_identifier,
    default_slug,
    slug_problem,
    valid_slug,
)
from executor_mcp.integrations.graphql import registration as graphql_registration
from executor_mcp.integrations.kinds import Discovery, Invocation, Kind, Registration
from executor_mcp.integrations.openapi import auth as openapi_auth
from executor_mcp.integrations.openapi import document as openapi_document
from executor_mcp.integrations.openapi.compile import (
    integration_description,
    integration_name,
    preview,
)
from executor_mcp.integrations.openapi.isolated import Compiled, compile_isolated
from executor_mcp.outbound.client import Outbound, OutboundFailure
from executor_mcp.records.integration_errors import (
    ConnectionNotFound,
    DiscoveryFailed,
    IntegrationError,
    IntegrationExists,
    IntegrationNotFound,
    InvalidConnectionInput,
    InvalidInput,
    NotAdmin,
    RemovalNotAllowed,
    SourceUnavailable,
    SpecRefused,
)
from executor_mcp.records.integrations import (
    BUILT_IN_SLUG,
    GRAPHQL,
    MAX_DISCOVERED_TOOLS,
    NO_AUTH,
    OPENAPI,
    AuthMethod,
    CompiledCatalog,
    ConnectionRecord,
    IntegrationRecord,
    ToolDef,
)
from executor_mcp.secrets.cipher import SecretUnreadable
from executor_mcp.secrets.providers import ENV, FILE, SecretItem, SecretPartition, SecretProviders, pasted_item_id
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.records import Owner as Principal
from executor_mcp.turns import Turns

log = logging.getLogger(__name__)

# What one organization may hold: far above any real catalog, far below what fills a disk.
MAX_INTEGRATIONS_PER_ORG = 256
MAX_CONNECTIONS_PER_ACCOUNT = 1024
MAX_CONNECTIONS_PER_INTEGRATION = 32
# Tools at an owner's connections (the org's, or one account's): a caller's catalog holds at most twice this.
MAX_TOOLS_PER_OWNER = 50_000
MAX_NAME_LENGTH = 200
MAX_DESCRIPTION_LENGTH = 4000
MAX_STATIC_ENTRIES = 64
MAX_STATIC_VALUE_LENGTH = 4096
MAX_URL_LENGTH = 2048
MAX_SECRET_VALUE_LENGTH = 16 * 1024
# `integrations.detect` is a quick look: a URL that takes longer to answer is taken for nothing there.
DETECT_TIMEOUT = 20.0
# `toolNames` a preview answers at most, when asked for some.
MAX_PREVIEW_TOOL_NAMES = 20
# Compiled catalogs and per-caller views kept decoded in memory; the rest are re-read from LMDB.
COMPILED_CACHE = 16
VIEW_CACHE = 64
# Listing one connection's tools, all pages (upstream bounds it the same); a slower upstream keeps its old tools.
DISCOVERY_TIMEOUT = 15.0
# A discovered catalog is listed again once it is this old (upstream's remote-catalog TTL), or this soon after
# a listing failed.
DISCOVERY_TTL = 15 * 60.0
DISCOVERY_RETRY = 60.0
# Connections waiting for `refresh_stale`; past this a mark is dropped (the TTL brings it back).
MAX_STALE = 4096
# Secrets the operator put beside the server (environment variables, files): not any one member's to bind.
OPERATOR_PROVIDERS = frozenset({ENV, FILE})
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]+")


@attrs.frozen
class ToolEntry:
    """One tool as one caller reaches it: a compiled tool at one connection's address."""

    integration: IntegrationRecord
    connection: ConnectionRecord
    tool: ToolDef

    @property
    def tool_id(self) -> str:
        """The sandbox path and policy id: the address without `tools.`."""
        connection = self.connection
        return f"{connection.integration}.{connection.owner}.{connection.name}.{self.tool.name}"

    @property
    def source_hash(self) -> str:
        """The catalog this tool comes from: what its connection discovered, else its integration's."""
        return _catalog_hash(self.integration, self.connection)


def _catalog_hash(integration: IntegrationRecord, connection: ConnectionRecord) -> str:
    return connection.source_hash or integration.source_hash


ConnectionKey = tuple[str, str, str, str, str]


def _connection_key(connection: ConnectionRecord) -> ConnectionKey:
    return (connection.org_id, connection.owner, connection.account_id, connection.integration, connection.name)


@attrs.frozen
class View:
    """What one caller's catalog holds at one revision of its org's catalog."""

    revision: int
    integrations: tuple[IntegrationRecord, ...]
    entries: tuple[ToolEntry, ...]  # sorted by tool id
    by_id: Mapping[str, ToolEntry]
    defs: Mapping[str, JsonObject]  # source hash → the `$defs` its tools reference
    counts: Mapping[str, int]  # integration slug → its tools at every connection here (`integrations.list`)
    # Connections whose tools are discovered, and the earliest time one of them is due to be listed again.
    discovered: tuple[tuple[IntegrationRecord, ConnectionRecord], ...] = ()
    due_at: float = float("inf")

    def tool(self, address: ToolAddress) -> ToolEntry | None:
        return self.by_id.get(address.tool_id)

    def connection_tools(self, address: ToolAddress) -> list[ToolEntry]:
        prefix = f"{address.integration}.{address.owner}.{address.connection}."
        return [entry for entry in self.entries if entry.tool_id.startswith(prefix)]

    def tool_count(self, slug: str) -> int:
        return self.counts.get(slug, 0)


EMPTY_VIEW = View(revision=-1, integrations=(), entries=(), by_id={}, defs={}, counts={})


def due_at(integration: IntegrationRecord, connection: ConnectionRecord) -> float:
    """When a discovered connection should be listed again: at once if it never was, or was last listed
    before its integration's config was revised (a new endpoint, headers or template: upstream's
    `config_revised_at`), so every owner's connection converges on that owner's next read."""
    if connection.tools_synced_at is None or connection.tools_synced_at < integration.updated_at:
        return float("-inf")
    return connection.tools_synced_at + (DISCOVERY_RETRY if connection.sync_error else DISCOVERY_TTL)


def _build_view(
    revision: int,
    integrations: tuple[IntegrationRecord, ...],
    reached: list[tuple[IntegrationRecord, ConnectionRecord, CompiledCatalog]],
    discovered: tuple[tuple[IntegrationRecord, ConnectionRecord], ...],
) -> View:
    entries = sorted(
        (
            ToolEntry(integration, connection, tool)
            for integration, connection, compiled in reached
            for tool in compiled.tools
        ),
        key=lambda entry: entry.tool_id,
    )
    return View(
        revision=revision,
        integrations=integrations,
        entries=tuple(entries),
        by_id={entry.tool_id: entry for entry in entries},
        defs={_catalog_hash(integration, connection): compiled.defs for integration, connection, compiled in reached},
        counts=Counter(entry.integration.slug for entry in entries),
        discovered=discovered,
        due_at=min((due_at(*pair) for pair in discovered), default=float("inf")),
    )


class Integrations:
    def __init__(
        self,
        control: ControlPlane,
        secrets: SecretProviders,
        kinds: Mapping[str, Kind],
        outbound: Outbound,
        *,
        max_source_bytes: int,
        max_operations: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._control = control
        self._secrets = secrets
        self._kinds = kinds
        self._outbound = outbound
        self._max_source_bytes = max_source_bytes
        self._max_operations = max_operations
        self._clock = clock
        self._compiled: OrderedDict[str, CompiledCatalog] = OrderedDict()
        self._views: OrderedDict[tuple[str, str], View] = OrderedDict()
        # What the execute description lists, asked by every tools/list: (revision, slugs) per caller.
        self._connected: OrderedDict[tuple[str, str], tuple[int, list[str]]] = OrderedDict()
        # Compiling is CPU work in a thread, one at a time so a flood of specs cannot take every core, and each
        # account waits for its own turn first, so one account's flood of previews delays others by one compile.
        self._compiling = Turns(trio.CapacityLimiter(1))
        # One discovery per connection at a time; a second asker waits for the first one's outcome.
        self._discovering: dict[ConnectionKey, _Flight] = {}
        # Connections to discover again (insertion ordered, deduplicated), and the bell `refresh_stale` waits on.
        self._stale: dict[ConnectionKey, tuple[IntegrationRecord, ConnectionRecord]] = {}
        self._bell_send, self._bell = trio.open_memory_channel[None](1)

    # -- reading -------------------------------------------------------------------------------------

    async def integrations(self, principal: Principal) -> list[IntegrationRecord]:
        org = principal.org_id
        return await self._control.integrations(org) if org else []

    async def integration(self, principal: Principal, slug: str) -> IntegrationRecord:
        record = await self._control.get_integration(_org(principal), slug) if valid_slug(slug) else None
        if record is None:
            raise IntegrationNotFound(f"Integration not found: {slug}", slug=slug)
        return record

    async def view(self, principal: Principal) -> View:
        """The caller's tools: every tool of every integration of its org, at each connection it sees."""
        org = principal.org_id
        if not org:
            return EMPTY_VIEW
        key = (org, principal.account_id)
        revision = await self._control.catalog_revision(org)
        cached = self._views.get(key)
        if cached is not None and cached.revision == revision:
            self._views.move_to_end(key)
            self._mark_due(cached)
            return cached
        integrations = await self._control.integrations(org)
        connections = await self._control.connections(org, principal.account_id)
        by_slug = {record.slug: record for record in integrations}
        reached: list[tuple[IntegrationRecord, ConnectionRecord, CompiledCatalog]] = []
        discovered: list[tuple[IntegrationRecord, ConnectionRecord]] = []
        for connection in connections:
            integration = by_slug.get(connection.integration)
            if integration is None or integration.kind not in self._kinds:
                continue
            if self.kind(integration).discovers(integration):
                discovered.append((integration, connection))
            compiled = await self._catalog(integration, connection)
            if compiled is not None:
                reached.append((integration, connection, compiled))
        # Tens of thousands of entries to make and sort: a worker thread's work, not the event loop's.
        view = await trio.to_thread.run_sync(_build_view, revision, tuple(integrations), reached, tuple(discovered))
        self._views[key] = view
        while len(self._views) > VIEW_CACHE:
            self._views.popitem(last=False)
        self._mark_due(view)
        return view

    def _mark_due(self, view: View) -> None:
        """Queue the view's discovered connections whose listing is due (one comparison when none is)."""
        now = self._clock()
        if now < view.due_at:
            return
        for integration, connection in view.discovered:
            if now >= due_at(integration, connection):
                self.mark_stale(integration, connection)

    async def connected_integrations(self, principal: Principal) -> list[str]:
        """The slugs of the integrations the caller has a connection to, one per connection, as of now."""
        org = principal.org_id
        if not org:
            return []
        key = (org, principal.account_id)
        revision = await self._control.catalog_revision(org)
        cached = self._connected.get(key)
        if cached is not None and cached[0] == revision:
            self._connected.move_to_end(key)
            return list(cached[1])
        slugs = [connection.integration for connection in await self._control.connections(org, principal.account_id)]
        self._connected[key] = (revision, slugs)
        while len(self._connected) > VIEW_CACHE:
            self._connected.popitem(last=False)
        return list(slugs)

    async def _catalog(
        self, integration: IntegrationRecord, connection: ConnectionRecord | None = None
    ) -> CompiledCatalog | None:
        """The tools at `connection` (its discovered catalog, else its integration's): from memory, else from
        LMDB, else compiled again from the stored source (a compiled blob from another version may no longer
        decode)."""
        digest = integration.source_hash if connection is None else _catalog_hash(integration, connection)
        cached = self._compiled.get(digest)
        if cached is not None:
            self._compiled.move_to_end(digest)
            return cached
        kind = self.kind(integration)
        catalog: CompiledCatalog | None = None
        raw = await self._control.get_compiled(digest)
        if raw is not None:
            try:
                catalog = await trio.to_thread.run_sync(kind.decode, raw)
            except Exception as exc:
                log.warning("recompiling %s: its stored compiled form does not decode (%s)", digest[:12], exc)
        if catalog is None:
            source = await self._control.get_source(digest)
            if source is None:
                log.error("integration %s/%s has no stored source %s", integration.org_id, integration.slug, digest)
                return None
            try:
                catalog, encoded = await self._compile_with(kind, None, source)
            except IntegrationError as refused:
                log.error(
                    "integration %s/%s: source %s no longer compiles (%s)",
                    integration.org_id,
                    integration.slug,
                    digest[:12],
                    refused.message,
                )
                return None
            await self._control.put_compiled(digest, encoded)
        self._remember(digest, catalog)
        return catalog

    def _remember(self, digest: str, catalog: CompiledCatalog) -> None:
        self._compiled[digest] = catalog
        while len(self._compiled) > COMPILED_CACHE:
            self._compiled.popitem(last=False)

    async def _compile(self, caller: Principal | None, source: bytes) -> Compiled:
        """An OpenAPI document compiled in a child process, at the caller's turn (`isolated.py` says why)."""
        async with self._compiling.turn(_caller(caller)):
            return await compile_isolated(source, max_bytes=self._max_source_bytes, max_operations=self._max_operations)

    async def _compile_with(self, kind: Kind, caller: Principal | None, source: bytes) -> tuple[CompiledCatalog, bytes]:
        """Any kind's source compiled and encoded, in a worker thread, at the caller's turn."""
        async with self._compiling.turn(_caller(caller)):
            return await trio.to_thread.run_sync(kind.compile, source)

    # -- integrations of any kind ---------------------------------------------------------------------

    async def add(self, principal: Principal, kind_name: str, registration: Registration) -> IntegrationRecord:
        """Store a new integration a kind validated (`Kind`-specific routes build the registration); its
        integration-level source is compiled first, so nothing is written unless it becomes tools.
        `IntegrationExists` when the slug is taken."""
        org = _org(principal)
        _admin(principal)
        slug = registration.slug
        if slug is not None and (problem := slug_problem(slug)) is not None:
            raise InvalidInput(problem)
        slug = slug or default_slug(registration.slug_hint, kind_name) or "api"
        if slug == BUILT_IN_SLUG:
            raise IntegrationExists(f"Integration {slug} already exists; update it instead of re-adding.", slug=slug)
        if len(await self._control.integrations(org)) >= MAX_INTEGRATIONS_PER_ORG:
            raise InvalidInput(f"An organization holds at most {MAX_INTEGRATIONS_PER_ORG} integrations")
        catalog, encoded = await self._compile_with(self._kinds[kind_name], principal, registration.source)
        now = self._clock()
        record = IntegrationRecord(
            org_id=org,
            slug=slug,
            kind=kind_name,
            name=registration.name,
            description=registration.description,
            source_hash=_digest(registration.source),
            config=registration.config,
            auth_methods=registration.auth_methods,
            created_at=now,
            updated_at=now,
            can_refresh=registration.can_refresh,
        )
        if not await self._control.add_integration(record, registration.source, encoded):
            raise IntegrationExists(f"Integration {slug} already exists; update it instead of re-adding.", slug=slug)
        self._remember(record.source_hash, catalog)
        return record

    async def tool_count(self, integration: IntegrationRecord) -> int:
        """The tools of the integration's own source (what an add answers as `toolCount`)."""
        catalog = await self._catalog(integration)
        return len(catalog.tools) if catalog is not None else 0

    async def own_catalog(self, integration: IntegrationRecord) -> CompiledCatalog | None:
        """The tools of the integration's own source, whoever connects to it (none of a kind whose tools
        each connection discovers, until a snapshot gives some)."""
        return await self._catalog(integration)

    # -- discovered catalogs -------------------------------------------------------------------------

    async def discover(self, integration: IntegrationRecord, connection: ConnectionRecord) -> ConnectionRecord:
        """List the connection's tools now and store them; `DiscoveryFailed` (after noting why on the
        connection, which keeps its old tools) when the upstream gives no tool list in time. Concurrent
        discoveries of one connection share one listing."""
        key = _connection_key(connection)
        # A listing in flight answers only for what it was made with, and only once it has an outcome: one
        # whose discoverer was cancelled, or made with an older credential or endpoint, is waited out and
        # this one lists itself. Each turn waits for one flight, itself bounded by `DISCOVERY_TIMEOUT`.
        while (flight := self._discovering.get(key)) is not None:
            await flight.done.wait()
            if flight.settled and flight.serves(integration, connection):
                return flight.result()
        flight = self._discovering[key] = _Flight(integration, connection)
        try:
            flight.outcome = await self._discover_once(integration, connection)
            flight.settled = True
        except DiscoveryFailed as failure:
            flight.failure = failure
            flight.settled = True
        finally:
            del self._discovering[key]
            flight.done.set()
        return flight.result()

    async def _discover_once(
        self, integration: IntegrationRecord, connection: ConnectionRecord
    ) -> ConnectionRecord | None:
        kind = self.kind(integration)
        credentials = await self.credentials(integration, connection)
        error: str | None = None
        source: bytes | None = None
        try:
            with trio.move_on_after(DISCOVERY_TIMEOUT) as deadline:
                source = await kind.discover(Discovery(integration, connection, credentials))
            if deadline.cancelled_caught:
                error = f"Listing the tools of {connection.address} took longer than {DISCOVERY_TIMEOUT:g} s"
        except DiscoveryFailed as failure:
            error = failure.message
        catalog: CompiledCatalog | None = None
        encoded = b""
        if source is not None and error is None:
            try:
                catalog, encoded = await self._compile_with(kind, None, source)
            except IntegrationError as refused:
                error = f"{connection.address} answered a tool list that cannot be used: {refused.message}"
            if catalog is not None and len(catalog.tools) > MAX_DISCOVERED_TOOLS:
                error = f"{connection.address} lists more than {MAX_DISCOVERED_TOOLS} tools; none were taken"
        now = self._clock()
        if error is not None or catalog is None or source is None:
            log.info("discovery of %s failed: %s", connection.address, error)
            await self._control.set_discovered(connection, synced_at=now, error=error)
            raise DiscoveryFailed(error or f"No tools were listed for {connection.address}")
        digest = _digest(source)
        stored = await self._control.set_discovered(
            connection, synced_at=now, source_hash=digest, source=source, compiled=encoded
        )
        self._remember(digest, catalog)
        return stored

    def mark_stale(self, integration: IntegrationRecord, connection: ConnectionRecord) -> None:
        """Ask `refresh_stale` to list the connection's tools again (deduplicated; never blocks)."""
        key = _connection_key(connection)
        if key not in self._stale and len(self._stale) >= MAX_STALE:
            return
        self._stale[key] = (integration, connection)
        # A bell already ringing is enough: the loop takes every queued connection when it wakes.
        with contextlib.suppress(trio.WouldBlock):
            self._bell_send.send_nowait(None)

    async def refresh_stale(self) -> None:
        """Discover the connections marked stale, one at a time, for as long as the owner's nursery runs. One
        failing connection (or a defect) costs only its own refresh. Both records are read again: a mark can
        be older than an admin's move of the endpoint, and the credential goes only where the integration
        points now."""
        async for _ in self._bell:
            while self._stale:
                key = next(iter(self._stale))
                _, connection = self._stale.pop(key)
                try:
                    current = await self._control.get_connection(*key)
                    integration = await self._control.get_integration(connection.org_id, connection.integration)
                    if current is not None and integration is not None and integration.kind in self._kinds:
                        await self.discover(integration, current)
                except (DiscoveryFailed, ConnectionNotFound):
                    pass  # noted on the connection and logged by `discover`, or removed meanwhile
                except Exception:
                    log.exception("refreshing the tools of %s failed", connection.address)

    # -- MCP servers ---------------------------------------------------------------------------------

    def kind_named(self, name: str) -> Kind | None:
        """The kind registered under `name` (a kind's own surface reaches its kind this way)."""
        return self._kinds.get(name)

    async def reconfigure(
        self,
        principal: Principal,
        slug: str,
        *,
        kind_name: str,
        config: JsonObject,
        auth_methods: tuple[AuthMethod, ...],
    ) -> IntegrationRecord:
        """A discovering integration's new connection-facing config: every connection lists its tools again
        (each is due once it was listed before this change, see `due_at`)."""
        _admin(principal)
        record = await self.integration(principal, slug)
        if record.kind != kind_name:
            raise IntegrationNotFound(f"Integration not found: {slug}", slug=slug)
        updated = attrs.evolve(record, config=config, auth_methods=auth_methods, updated_at=self._clock())
        if not await self._control.replace_integration(updated):
            raise IntegrationNotFound(f"Integration not found: {slug}", slug=slug)
        return updated

    # -- OpenAPI integrations ------------------------------------------------------------------------

    async def preview_openapi(self, principal: Principal, body: Any, *, tool_names: int = 0) -> JsonObject:
        """Upstream's summary of a spec; with `tool_names`, also `toolNames`: that many of its tools' names
        (at most `MAX_PREVIEW_TOOL_NAMES`), so a person sees what adding it gives before it is added."""
        _org(principal)  # compiling is shared work: only members of an organization ask for it
        values = _object(body)
        _known(values, {"spec", "specFormat"})
        source, _ = await self._source(values.get("spec"))
        compiled = await self._compile(principal, source)
        summary = preview(compiled.head, operation_count=len(compiled.tool_names))
        if tool_names > 0:
            summary["toolNames"] = list(compiled.tool_names[: min(tool_names, MAX_PREVIEW_TOOL_NAMES)])
        return summary

    def check_may_add(self, principal: Principal, values: JsonObject) -> None:
        """Before an approval is asked for an add: the caller administers the org and named a spec."""
        _admin(principal)
        if values.get("spec") is None:
            raise InvalidInput("spec is required")

    async def add_openapi(self, principal: Principal, body: Any) -> tuple[IntegrationRecord, int]:
        """A new integration from `{spec, slug?, name?, description?, baseUrl?, headers?, queryParams?,
        authenticationTemplate?}`; `IntegrationExists` when the slug is taken. Nothing is written unless
        the whole request is valid and the spec compiles."""
        org = _org(principal)
        _admin(principal)
        values = _object(body)
        _known(
            values,
            {
                "spec",
                "slug",
                "name",
                "description",
                "baseUrl",
                "headers",
                "queryParams",
                "authenticationTemplate",
                "specFormat",
                "family",
            },
        )
        config = _openapi_config(values)
        explicit_methods = (
            openapi_auth.normalize_methods(values["authenticationTemplate"])
            if values.get("authenticationTemplate") is not None
            else None
        )
        name = _optional_text(values, "name", MAX_NAME_LENGTH)
        description = _optional_text(values, "description", MAX_DESCRIPTION_LENGTH)
        slug = values.get("slug")
        if slug is not None and (problem := slug_problem(slug)) is not None:
            raise InvalidInput(problem)
        source, url = await self._source(values.get("spec"))
        compiled = await self._compile(principal, source)
        spec = compiled.head
        slug = slug or default_slug(name or spec.title or "", OPENAPI) or "api"
        if slug == BUILT_IN_SLUG:
            raise IntegrationExists(f"Integration {slug} already exists; update it instead of re-adding.", slug=slug)
        if len(await self._control.integrations(org)) >= MAX_INTEGRATIONS_PER_ORG:
            raise InvalidInput(f"An organization holds at most {MAX_INTEGRATIONS_PER_ORG} integrations")
        if url is not None:
            config["specUrl"] = url
        now = self._clock()
        record = IntegrationRecord(
            org_id=org,
            slug=slug,
            kind=OPENAPI,
            # A document's own title and description are cut to what an explicit one may be: every listing of
            # the org's integrations reads them (a 32 MB description took a second to encode, GIL held).
            name=integration_name(spec, name, slug)[:MAX_NAME_LENGTH],
            description=integration_description(spec, description, slug)[:MAX_DESCRIPTION_LENGTH],
            source_hash=_digest(source),
            config=config,
            auth_methods=explicit_methods if explicit_methods is not None else spec.auth_methods,
            created_at=now,
            updated_at=now,
            can_refresh=url is not None,
        )
        if not await self._control.add_integration(record, source, compiled.encoded):
            raise IntegrationExists(f"Integration {slug} already exists; update it instead of re-adding.", slug=slug)
        return record, len(compiled.tool_names)

    async def update_openapi_spec(self, principal: Principal, slug: str, body: Any) -> JsonObject:
        """Recompile from a new `spec`, or re-fetch the stored URL; connections, policies, auth and the
        description are kept. Answers the added and removed tool names."""
        _admin(principal)
        values = _object(body)
        _known(values, {"spec", "specOverrides"})
        record = await self.integration(principal, slug)
        before = await self._catalog(record)
        if values.get("spec") is not None:
            source, url = await self._source(values["spec"])
        elif record.config.get("specUrl"):
            source, url = await self._source({"kind": "url", "url": record.config["specUrl"]})
        else:
            raise InvalidInput(
                "This integration's spec was pasted inline and has no source URL to re-fetch. "
                "Provide the updated spec content."
            )
        compiled = await self._compile(principal, source)
        config = dict(record.config)
        if url is not None:
            config["specUrl"] = url
        updated = attrs.evolve(
            record,
            source_hash=_digest(source),
            config=config,
            updated_at=self._clock(),
            can_refresh=bool(config.get("specUrl")),
        )
        await self._control.replace_integration(updated, source, compiled.encoded)
        old = {tool.name for tool in before.tools} if before is not None else set()
        new = set(compiled.tool_names)
        return {
            "slug": slug,
            "toolCount": len(new),
            "addedTools": sorted(new - old),
            "removedTools": sorted(old - new),
        }

    async def configure_openapi(self, principal: Principal, slug: str, body: Any) -> IntegrationRecord:
        """`{authenticationTemplate?, mode?: merge|replace, baseUrl?}`: the integration's auth methods
        merged or replaced, and its base URL set (null clears it)."""
        _admin(principal)
        values = _object(body)
        _known(values, {"authenticationTemplate", "mode", "baseUrl"})
        record = await self.integration(principal, slug)
        methods = _configured_methods(record, values)
        config = dict(record.config)
        if "baseUrl" in values:
            if values["baseUrl"] is None:
                config.pop("baseUrl", None)
            else:
                config["baseUrl"] = _url(values["baseUrl"], "baseUrl")
        updated = attrs.evolve(record, auth_methods=methods, config=config, updated_at=self._clock())
        await self._control.replace_integration(updated)
        return updated

    async def patch(self, principal: Principal, slug: str, body: Any) -> IntegrationRecord:
        _admin(principal)
        values = _object(body)
        _known(values, {"name", "description"})
        record = await self.integration(principal, slug)
        changes: dict[str, Any] = {}
        if values.get("name") is not None:
            changes["name"] = _optional_text(values, "name", MAX_NAME_LENGTH)
        if values.get("description") is not None:
            changes["description"] = _optional_text(values, "description", MAX_DESCRIPTION_LENGTH)
        updated = attrs.evolve(record, **changes, updated_at=self._clock())
        await self._control.replace_integration(updated)
        return updated

    async def remove(self, principal: Principal, slug: str) -> None:
        """Remove an integration, its connections and the secret values those connections stored."""
        _admin(principal)
        if slug == BUILT_IN_SLUG:
            raise RemovalNotAllowed(f"Integration {slug} is built in and cannot be removed", slug=slug)
        removed = await self._control.remove_integration(_org(principal), slug) if valid_slug(slug) else None
        if removed is None:
            raise IntegrationNotFound(f"Integration not found: {slug}", slug=slug)
        for connection in removed:
            await self._secrets.forget(connection)

    async def _source(self, spec: Any) -> tuple[bytes, str | None]:
        """The spec's bytes, and its URL when it was fetched: `{kind:"url", url}`, `{kind:"blob", value}`,
        or a string (a URL when it looks like one, else the document itself)."""
        if isinstance(spec, str):
            spec = (
                {"kind": "url", "url": spec}
                if re.match(r"https?://", spec.strip())
                else {"kind": "blob", "value": spec}
            )
        if not isinstance(spec, dict) or spec.get("kind") not in ("url", "blob"):
            raise InvalidInput('spec must be {kind: "url", url} or {kind: "blob", value}')
        if spec["kind"] == "blob":
            value = spec.get("value")
            if isinstance(value, dict | list):
                return dumps(value), None
            if not isinstance(value, str) or not value.strip():
                raise InvalidInput("spec.value must be the document's text")
            raw = value.encode()
            if len(raw) > self._max_source_bytes:
                raise SpecRefused(f"OpenAPI document is larger than {self._max_source_bytes} bytes")
            return raw, None
        url = _url(spec.get("url"), "spec.url")
        try:
            return await self._outbound.fetch(url, max_bytes=self._max_source_bytes), url
        except OutboundFailure as failure:
            raise SourceUnavailable(failure.message) from None

    async def detect(self, principal: Principal, url: Any) -> list[JsonObject]:
        """What kind of integration `url` serves: `[{kind: "openapi", confidence: "high", endpoint, name,
        slug}]` when it answers an OpenAPI 3.x document, else `[]`. An unreachable, blocked or failing URL is
        "nothing detected" too (upstream's plugins answer no candidate); only a malformed URL is an error."""
        _org(principal)
        endpoint = _url(url, "url")
        try:
            source = await self._outbound.fetch(endpoint, max_bytes=self._max_source_bytes, timeout=DETECT_TIMEOUT)
        except OutboundFailure as failure:
            log.info("detect: nothing at the URL (%s)", failure.code)
            return []
        try:
            async with self._compiling.turn(_caller(principal)):
                document = await trio.to_thread.run_sync(
                    lambda: openapi_document.parse(source, max_bytes=self._max_source_bytes)
                )
        except SpecRefused:
            return []
        info = document.root.get("info")
        title = info.get("title") if isinstance(info, dict) else None
        name = title.strip()[:MAX_NAME_LENGTH] if isinstance(title, str) and title.strip() else None
        name = name or (urllib.parse.urlsplit(endpoint).hostname or "api")
        return [
            {
                "kind": OPENAPI,
                "confidence": "high",
                "endpoint": endpoint,
                "name": name,
                "slug": default_slug(name, OPENAPI) or "api",
            }
        ]

    # -- GraphQL integrations ------------------------------------------------------------------------

    def check_may_add_graphql(self, principal: Principal, values: JsonObject) -> None:
        """Before an approval is asked for an add: the caller administers the org and named an endpoint."""
        _admin(principal)
        _url(values.get("endpoint"), "endpoint")

    async def add_graphql(self, principal: Principal, body: Any) -> tuple[IntegrationRecord, int]:
        """A new GraphQL integration (`graphql.registration`); its tool count is the snapshot's, or 0 when
        every connection introspects the endpoint itself."""
        _admin(principal)
        values = _object(body)
        _known(values, set(graphql_registration.FIELDS))
        registration = partial(
            graphql_registration.registration,
            values,
            endpoint=_url(values.get("endpoint"), "endpoint"),
            static=_openapi_config(values),
            auth_methods=(
                openapi_auth.normalize_methods(values["authenticationTemplate"])
                if values.get("authenticationTemplate") is not None
                else ()
            ),
            name=_optional_text(values, "name", MAX_NAME_LENGTH),
            description=_optional_text(values, "description", MAX_DESCRIPTION_LENGTH),
            max_source_bytes=self._max_source_bytes,
        )
        async with self._compiling.turn(_caller(principal)):
            validated = await trio.to_thread.run_sync(registration)
        record = await self.add(principal, GRAPHQL, validated)
        return record, await self.tool_count(record)

    async def graphql_integration(self, principal: Principal, slug: str) -> IntegrationRecord:
        record = await self.integration(principal, slug)
        if record.kind != GRAPHQL:
            raise IntegrationNotFound(f"GraphQL integration not found: {slug}", slug=slug)
        return record

    async def configure_graphql(self, principal: Principal, slug: str, body: Any) -> IntegrationRecord:
        """`{endpoint?, headers?, queryParams?, authenticationTemplate?, mode?: merge|replace}`: set what is
        given (`headers`/`queryParams` null clears them). Connections that introspect are listed again on
        their owner's next read (`due_at`)."""
        _admin(principal)
        values = _object(body)
        _known(values, {"endpoint", "headers", "queryParams", "authenticationTemplate", "mode"})
        record = await self.graphql_integration(principal, slug)
        methods = _configured_methods(record, values)
        config = dict(record.config)
        if values.get("endpoint") is not None:
            config["endpoint"] = _url(values["endpoint"], "endpoint")
        static = {field: values[field] for field in ("headers", "queryParams") if field in values}
        for field in static:
            config.pop(field, None)
        config.update(_openapi_config(static))
        updated = attrs.evolve(record, auth_methods=methods, config=config, updated_at=self._clock())
        await self._control.replace_integration(updated)
        return updated

    # -- connections ---------------------------------------------------------------------------------

    async def connections(
        self, principal: Principal, integration: str | None = None, owner: str | None = None
    ) -> list[ConnectionRecord]:
        org = principal.org_id
        if not org:
            return []
        if owner is not None and owner not in OWNERS:
            raise InvalidInput('owner must be "org" or "user"')
        return await self._control.connections(org, principal.account_id, integration=integration, owner=owner)

    async def create_connection(self, principal: Principal, body: Any, *, pasted: bool) -> ConnectionRecord:
        """Create or replace (upsert) a connection (see `check_connection_request`). Re-creating replaces the
        credential and keeps the description unless a new one is given."""
        values = _object(body)
        owner, name, template, inputs = check_connection_request(principal, values, pasted=pasted)
        integration = await self.integration(principal, _text(values.get("integration"), "integration"))
        check_template(integration, template)
        org, account = integration.org_id, _account(owner, principal)
        existing = await self._control.get_connection(org, owner, account, integration.slug, name)
        if existing is None:
            await self._check_room(principal, owner, integration)
        provider: str | None = None
        item_ids: dict[str, str] = {}
        if inputs.pasted:
            provider = self._secrets.default_writable.key
            item_ids = {variable: pasted_item_id(owner, integration.slug, name, variable) for variable in inputs.pasted}
        elif inputs.references:
            providers = {reference[0] for reference in inputs.references.values()}
            if len(providers) > 1:
                raise InvalidConnectionInput("A connection's inputs must all come from one provider")
            provider = providers.pop()
            self._secrets.provider(provider)
            if provider in OPERATOR_PROVIDERS and not principal.org_admin:
                raise NotAdmin(f'Only an organization admin can use the server\'s "{provider}" secrets')
            item_ids = {variable: item for variable, (_, item) in inputs.references.items()}
        now = self._clock()
        record = ConnectionRecord(
            org_id=org,
            owner=owner,
            account_id=account,
            integration=integration.slug,
            name=name,
            template=template,
            provider=provider,
            item_ids=item_ids,
            created_at=existing.created_at if existing else now,
            updated_at=now,
            identity_label=_optional_text(values, "identityLabel", MAX_NAME_LENGTH)
            or (existing.identity_label if existing else None),
            description=_optional_text(values, "description", MAX_DESCRIPTION_LENGTH)
            or (existing.description if existing else None),
        )
        if inputs.pasted:
            await self._secrets.store_values(SecretPartition(org, account), item_ids, inputs.pasted)
        if not await self._control.put_connection(record):
            raise IntegrationNotFound(f"Integration not found: {integration.slug}", slug=integration.slug)
        if existing is not None:
            await self._secrets.forget(existing, replaced_by=record)
        if self.kind(integration).discovers(integration):
            # A failed listing leaves the connection standing without tools (upstream's incomplete listing):
            # why is noted on it and answered (`sync_error`, the JSON's `lastHealth`), and it is listed again
            # on refresh or after `DISCOVERY_RETRY`.
            try:
                record = await self.discover(integration, record)
            except DiscoveryFailed as failure:
                record = attrs.evolve(record, sync_error=failure.message)
        return record

    async def _check_room(self, principal: Principal, owner: str, integration: IntegrationRecord) -> None:
        """One more connection keeps its owner within bounds: every caller's catalog holds the org's tools and
        its own, so each owner's share is bounded, and no member can make everyone's catalog huge."""
        mine = await self._control.connections(integration.org_id, principal.account_id, owner=owner)
        if len(mine) >= MAX_CONNECTIONS_PER_ACCOUNT:
            raise InvalidConnectionInput(f"At most {MAX_CONNECTIONS_PER_ACCOUNT} connections per owner")
        if (
            sum(1 for connection in mine if connection.integration == integration.slug)
            >= MAX_CONNECTIONS_PER_INTEGRATION
        ):
            raise InvalidConnectionInput(
                f"At most {MAX_CONNECTIONS_PER_INTEGRATION} connections per owner to one integration"
            )
        view = await self.view(principal)
        owned = sum(1 for entry in view.entries if entry.connection.owner == owner)
        compiled = await self._catalog(integration)
        adding = len(compiled.tools) if compiled is not None else 0
        if owned + adding > MAX_TOOLS_PER_OWNER:
            raise InvalidConnectionInput(
                f"At most {MAX_TOOLS_PER_OWNER} tools per owner: this connection would add {adding} to {owned}"
            )

    async def connection(self, principal: Principal, owner: str, integration: str, name: str) -> ConnectionRecord:
        org = principal.org_id
        record = None
        if org and owner in OWNERS:
            record = await self._control.get_connection(org, owner, _account(owner, principal), integration, name)
        if record is None:
            raise ConnectionNotFound(f"Connection not found: tools.{integration}.{owner}.{name}")
        return record

    async def patch_connection(
        self, principal: Principal, owner: str, integration: str, name: str, body: Any
    ) -> ConnectionRecord:
        values = _object(body)
        _known(values, {"description", "identityLabel"})
        record = await self.connection(principal, owner, integration, name)
        if owner == "org":
            _admin(principal)
        changes: dict[str, Any] = {"updated_at": self._clock()}
        if "description" in values:
            changes["description"] = _optional_text(values, "description", MAX_DESCRIPTION_LENGTH)
        if "identityLabel" in values:
            changes["identity_label"] = _optional_text(values, "identityLabel", MAX_NAME_LENGTH)
        updated = attrs.evolve(record, **changes)
        if not await self._control.put_connection(updated):
            raise ConnectionNotFound(f"Connection not found: tools.{integration}.{owner}.{name}")
        return updated

    async def remove_connection(self, principal: Principal, owner: str, integration: str, name: str) -> None:
        record = await self.connection(principal, owner, integration, name)
        if owner == "org":
            _admin(principal)
        removed = await self._control.remove_connection(
            record.org_id, record.owner, record.account_id, record.integration, record.name
        )
        if removed is None:
            raise ConnectionNotFound(f"Connection not found: tools.{integration}.{owner}.{name}")
        await self._secrets.forget(removed)

    async def connection_tools(self, principal: Principal, owner: str, integration: str, name: str) -> list[ToolEntry]:
        """A connection's tools, listed again first where the connection discovers them (OpenAPI tools are
        derived from the stored document, so nothing is rebuilt); `DiscoveryFailed` when that listing fails."""
        record = await self.connection(principal, owner, integration, name)
        integration_record = await self.integration(principal, integration)
        if self.kind(integration_record).discovers(integration_record):
            record = await self.discover(integration_record, record)
        view = await self.view(principal)
        return [entry for entry in view.entries if _connection_key(entry.connection) == _connection_key(record)]

    # -- secret providers ----------------------------------------------------------------------------

    async def providers(self, principal: Principal) -> list[str]:
        """The provider keys a connection may reference, the default store for pasted values first."""
        return self._secrets.keys()

    async def provider_items(self, principal: Principal, key: str) -> list[SecretItem]:
        """The items of provider `key` the caller may reference: the org's and the caller's own, as ids and
        names (a value never leaves its provider). The operator's `env` and `file` secrets are listed to org
        admins only, who alone may reference them."""
        org = _org(principal)
        if key in OPERATOR_PROVIDERS:
            _admin(principal)
        partitions = [SecretPartition(org, "")]
        if principal.account_id:
            partitions.append(SecretPartition(org, principal.account_id))
        listed: dict[str, SecretItem] = {}
        for partition in partitions:
            for item in await self._secrets.items(key, partition):
                listed.setdefault(item.id, item)
        return list(listed.values())

    # -- calling -------------------------------------------------------------------------------------

    def kind(self, integration: IntegrationRecord) -> Kind:
        return self._kinds[integration.kind]

    async def credentials(self, integration: IntegrationRecord, connection: ConnectionRecord) -> dict[str, str | None]:
        """The connection's values for its template's inputs; None where the provider holds none."""
        method = integration.auth_method(connection.template)
        if method is None or connection.provider is None:
            return {}
        partition = SecretPartition.of(connection)
        values: dict[str, str | None] = {}
        for variable in method.inputs:
            item = connection.item_ids.get(variable)
            try:
                values[variable] = (
                    None if item is None else await self._secrets.get(connection.provider, partition, item)
                )
            except SecretUnreadable:
                # A value stored under another key (or damaged) is as good as none: the call answers
                # `connection_value_missing`, whose recovery is to store it again.
                log.warning("connection %s: a stored value does not decrypt with this key", connection.address)
                values[variable] = None
        return values

    async def invoke(self, entry: ToolEntry, args: Any) -> JsonObject:
        integration, connection = entry.integration, entry.connection
        credentials = await self.credentials(integration, connection)
        return await self.kind(integration).invoke(
            Invocation(
                integration,
                connection,
                entry.tool,
                args,
                credentials,
                mark_stale=lambda: self.mark_stale(integration, connection),
            )
        )


@attrs.define
class _Flight:
    """One connection's discovery in progress: whoever asks meanwhile, for the same connection as it stands,
    waits for its outcome."""

    integration: IntegrationRecord
    connection: ConnectionRecord
    done: trio.Event = attrs.Factory(trio.Event)
    settled: bool = False  # stays False when the discoverer was cancelled before an outcome
    outcome: ConnectionRecord | None = None
    failure: DiscoveryFailed | None = None

    def serves(self, integration: IntegrationRecord, connection: ConnectionRecord) -> bool:
        """Whether this listing is the one `connection` asks for: the same integration settings (endpoint,
        headers, templates) and the same credential (a re-created connection is a new `updated_at`, even when
        its pasted values keep their item ids)."""
        return self.integration == integration and _credential(self.connection) == _credential(connection)

    def result(self) -> ConnectionRecord:
        if self.failure is not None:
            raise DiscoveryFailed(self.failure.message)
        if self.outcome is None:
            raise ConnectionNotFound(f"Connection not found: {self.connection.address}")
        return self.outcome


def _credential(connection: ConnectionRecord) -> tuple[object, ...]:
    return (connection.template, connection.provider, connection.item_ids, connection.updated_at)


def check_template(integration: IntegrationRecord, template: str) -> None:
    """A new connection names one of the integration's templates: a typo would otherwise be saved and every call
    go out without a credential, failing as `connection_rejected` with advice to re-authenticate."""
    if template not in integration.templates:
        raise InvalidConnectionInput(
            f'unknown template "{template}" for integration "{integration.slug}"; '
            f"valid templates: {', '.join(integration.templates)}"
        )


def check_connection_request(
    principal: Principal, values: JsonObject, *, pasted: bool
) -> tuple[str, str, str, "_Inputs"]:
    """What can be checked of a connection request without storage: its fields, who may create it, and its
    one credential origin. `pasted` allows `value`/`values` (the HTTP API and the CLI); the sandbox's callers
    may only reference provider items (`from`, `inputs`) or use `none`."""
    allowed = {"owner", "name", "integration", "template", "identityLabel", "description", "from", "inputs"}
    if pasted:
        allowed |= {"value", "values"}
    _known(values, allowed)
    owner = values.get("owner")
    if owner not in OWNERS:
        raise InvalidConnectionInput('owner must be "org" or "user"')
    if owner == "org":
        _admin(principal)
    elif not principal.account_id:
        raise InvalidConnectionInput(
            "Cannot create a personal connection: this context has no user subject. Create it with owner "
            '"org", or connect as a signed-in user.'
        )
    _org(principal)
    raw_name = values.get("name")
    if not isinstance(raw_name, str) or not raw_name.strip() or len(raw_name) > MAX_NAME_LENGTH:
        raise InvalidConnectionInput("name must be a non-empty string")
    template = values.get("template")
    if not isinstance(template, str) or not template or len(template) > MAX_NAME_LENGTH:
        raise InvalidConnectionInput("template must be a non-empty string")
    _text(values.get("integration"), "integration")
    return owner, connection_identifier(raw_name), template, _credential_inputs(values, template, pasted)


@attrs.frozen
class _Inputs:
    pasted: dict[str, str]
    references: dict[str, tuple[str, str]]  # variable → (provider, item id)


def _credential_inputs(values: JsonObject, template: str, pasted: bool) -> _Inputs:
    """The one credential origin of a connection request, as upstream validates it."""
    origins = [key for key in ("value", "values", "from", "inputs") if values.get(key) is not None]
    if template == NO_AUTH:
        # An empty pasted `values` carries nothing (forms and clients send the field whatever the template);
        # an empty `inputs` stays refused, as upstream's no-auth test requires.
        origins = [key for key in origins if not (key == "values" and values[key] == {})]
        if origins:
            raise InvalidConnectionInput('A no-auth connection (template "none") takes no provider credential origin')
        return _Inputs({}, {})
    if len(origins) != 1:
        raise InvalidConnectionInput(
            "Expected exactly one credential origin" if pasted else "Expected exactly one provider credential origin"
        )
    origin = origins[0]
    raw = values[origin]
    if origin == "value":
        return _Inputs({"token": _secret(raw, "value")}, {})
    if origin == "values":
        if not isinstance(raw, dict) or not raw:
            raise InvalidConnectionInput("A connection must supply at least one credential input.")
        return _Inputs({_variable(name): _secret(value, f"values.{name}") for name, value in raw.items()}, {})
    if origin == "from":
        return _Inputs({}, {"token": _reference(raw, "from")})
    if not isinstance(raw, dict):
        raise InvalidConnectionInput("inputs must be an object of {variable: {from: {provider, id}}}")
    if not raw:
        raise InvalidConnectionInput("Expected at least one provider credential input")
    pasted_values: dict[str, str] = {}
    references: dict[str, tuple[str, str]] = {}
    for name, item in raw.items():
        variable = _variable(name)
        if isinstance(item, dict) and "from" in item and len(item) == 1:
            references[variable] = _reference(item["from"], f"inputs.{name}.from")
        elif pasted and isinstance(item, dict) and "value" in item and len(item) == 1:
            pasted_values[variable] = _secret(item["value"], f"inputs.{name}.value")
        else:
            raise InvalidConnectionInput(f"inputs.{name} must be {{from: {{provider, id}}}}")
    if pasted_values and references:
        raise InvalidConnectionInput("A connection cannot mix pasted values and provider references")
    return _Inputs(pasted_values, references)


def _reference(raw: Any, field: str) -> tuple[str, str]:
    if (
        not isinstance(raw, dict)
        or set(raw) != {"provider", "id"}
        or not isinstance(raw["provider"], str)
        or not isinstance(raw["id"], str)
        or not raw["id"]
        or len(raw["id"]) > MAX_NAME_LENGTH
    ):
        raise InvalidConnectionInput(f"{field} must be {{provider, id}}")
    return raw["provider"], raw["id"]


def _secret(raw: Any, field: str) -> str:
    # The message names the field, never the value.
    if not isinstance(raw, str) or not raw:
        raise InvalidConnectionInput(f"{field} must be a non-empty string")
    if len(raw) > MAX_SECRET_VALUE_LENGTH:
        raise InvalidConnectionInput(f"{field} must be at most {MAX_SECRET_VALUE_LENGTH} characters")
    if not _PRINTABLE_ASCII.fullmatch(raw):
        # It goes into a header or a query string: a line break would split the request, and a byte no
        # header can carry would fail every call instead of this one request.
        raise InvalidConnectionInput(f"{field} must be printable ASCII, as API keys and tokens are")
    return raw


def _variable(name: Any) -> str:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
        raise InvalidConnectionInput("credential input names must be identifiers")
    return name


def _configured_methods(record: IntegrationRecord, values: JsonObject) -> tuple[AuthMethod, ...]:
    """A configure request's `authenticationTemplate`, merged into (or, with `mode: "replace"`, replacing) the
    integration's auth methods; the same dialects for every kind."""
    mode = values.get("mode", "merge")
    if mode not in ("merge", "replace"):
        raise InvalidInput('mode must be "merge" or "replace"')
    if values.get("authenticationTemplate") is None:
        return record.auth_methods
    new = openapi_auth.normalize_methods(values["authenticationTemplate"])
    return openapi_auth.merge_methods(record.auth_methods, new, mode)


def _caller(principal: Principal | None) -> tuple[str, str]:
    """Whose turn at the compiler: an account in its org, or the server itself rebuilding a catalog."""
    return (principal.org_id or "", principal.account_id) if principal is not None else ("", "")


def _account(owner: str, principal: Principal) -> str:
    return principal.account_id if owner == "user" else ""


def _org(principal: Principal) -> str:
    if not principal.org_id:
        raise InvalidInput("Integrations need an organization: this bearer has none")
    return principal.org_id


def _admin(principal: Principal) -> None:
    _org(principal)
    if not principal.org_admin:
        raise NotAdmin("Only an organization admin can add, change or remove org integrations and connections")


def admin_refusal(principal: Principal) -> IntegrationError | None:
    """What a change of the org's integrations or connections would raise for `principal`, or None: so a
    page can disable what the API would refuse, by the same rule."""
    try:
        _admin(principal)
    except IntegrationError as refused:
        return refused
    return None


def _digest(source: bytes) -> str:
    return hashlib.sha256(source).hexdigest()


def _object(body: Any) -> JsonObject:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise InvalidInput("Expected a JSON object")
    return body


def _known(values: JsonObject, allowed: set[str]) -> None:
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise InvalidInput(f"Unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown[:10])}")


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{field} must be a non-empty string")
    return value


def _optional_text(values: JsonObject, field: str, limit: int) -> str | None:
    value = values.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be a string")
    if len(value) > limit:
        raise InvalidInput(f"{field} must be at most {limit} characters")
    return value


def _url(value: Any, field: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"https?://\S+", value) or len(value) > MAX_URL_LENGTH:
        raise InvalidInput(f"{field} must be an http(s) URL of at most {MAX_URL_LENGTH} characters")
    return value


def _openapi_config(values: JsonObject) -> JsonObject:
    config: JsonObject = {}
    if values.get("baseUrl") is not None:
        config["baseUrl"] = _url(values["baseUrl"], "baseUrl")
    for field in ("headers", "queryParams"):
        raw = values.get(field)
        if raw is None:
            continue
        if (
            not isinstance(raw, dict)
            or len(raw) > MAX_STATIC_ENTRIES
            or not all(
                isinstance(key, str) and key and isinstance(value, str) and len(value) <= MAX_STATIC_VALUE_LENGTH
                for key, value in raw.items()
            )
        ):
            raise InvalidInput(f"{field} must be an object of at most {MAX_STATIC_ENTRIES} string values")
        config[field] = dict(raw)
    return config
