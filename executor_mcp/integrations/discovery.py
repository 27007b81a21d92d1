"""Discovered catalogs: the tools of kinds whose tools come from each connection (MCP servers, introspected
GraphQL endpoints), listed when the connection is made, when it is refreshed, when a call learns the list
changed, and again once the last listing is older than `DISCOVERY_TTL`.

The last three go through `refresh_stale`, a loop the server runs in its root nursery, so a slow upstream
never holds up a caller's catalog (an admin command runs no loop: what it marks waits for the server's next
look). One listing per connection is in flight at a time; whoever asks meanwhile waits for its outcome.
"""

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import attrs
import trio

from executor_mcp.integrations.catalogs import Catalogs, digest
from executor_mcp.integrations.connection_secrets import credential_values
from executor_mcp.integrations.kinds import Discovery, Kinds
from executor_mcp.integrations.oauth_signins import RefreshFailed
from executor_mcp.records.integration_errors import ConnectionNotFound, DiscoveryFailed, IntegrationError
from executor_mcp.records.integrations import MAX_DISCOVERED_TOOLS, CompiledCatalog, ConnectionRecord, IntegrationRecord
from executor_mcp.secrets.providers import SecretProviders
from executor_mcp.storage.interfaces import CatalogStore, ConnectionKey, connection_key

log = logging.getLogger(__name__)

# Listing one connection's tools, all pages (upstream bounds it the same); a slower upstream keeps its old tools.
DISCOVERY_TIMEOUT = 15.0
# A discovered catalog is listed again once it is this old (upstream's remote-catalog TTL), or this soon after
# a listing failed.
DISCOVERY_TTL = 15 * 60.0
DISCOVERY_RETRY = 60.0
# Connections waiting for `refresh_stale`; past this a mark is dropped (the TTL brings it back).
MAX_STALE = 4096


def due_at(integration: IntegrationRecord, connection: ConnectionRecord) -> float:
    """When a discovered connection should be listed again: at once if it never was, or was last listed
    before its integration's config was revised (a new endpoint, headers or template: upstream's
    `config_revised_at`), so every owner's connection converges on that owner's next read."""
    if connection.tools_synced_at is None or connection.tools_synced_at < integration.updated_at:
        return float("-inf")
    return connection.tools_synced_at + (DISCOVERY_RETRY if connection.sync_error else DISCOVERY_TTL)


class Discoveries:
    """Tools a connection lists at run time (GraphQL, MCP): one flight per connection, so a hundred callers
    cause one upstream request, and a failure is kept on the record instead of thrown at every caller."""

    def __init__(
        self,
        catalog: CatalogStore,
        secrets: SecretProviders,
        kinds: Kinds,
        catalogs: Catalogs,
        clock: Callable[[], float] = time.time,
        fresh: Callable[[ConnectionRecord], Awaitable[ConnectionRecord]] | None = None,
    ) -> None:
        """`fresh` makes an OAuth connection's token fresh before its tools are listed (`OAuthSignIns.fresh`)."""
        self._fresh = fresh
        self._catalog = catalog
        self._secrets = secrets
        self._kinds = kinds
        self._catalogs = catalogs
        self._clock = clock
        # One discovery per connection at a time; a second asker waits for the first one's outcome.
        self._discovering: dict[ConnectionKey, _Flight] = {}
        # Connections to discover again (insertion ordered, deduplicated), and the bell `refresh_stale` waits on.
        self._stale: dict[ConnectionKey, tuple[IntegrationRecord, ConnectionRecord]] = {}
        self._bell_send, self._bell = trio.open_memory_channel[None](1)

    async def discover(self, integration: IntegrationRecord, connection: ConnectionRecord) -> ConnectionRecord:
        """List the connection's tools now and store them; `DiscoveryFailed` (after noting why on the
        connection, which keeps its old tools) when the upstream gives no tool list in time. Concurrent
        discoveries of one connection share one listing."""
        key = connection_key(connection)
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
        kind = self._kinds.of(integration)
        if self._fresh is not None and connection.oauth_client is not None:
            try:
                connection = await self._fresh(connection)
            except RefreshFailed as failed:
                raise DiscoveryFailed(
                    f"{connection.address}: its OAuth token could not be refreshed: {failed}"
                ) from None
        credentials = await credential_values(self._secrets, integration, connection)
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
                catalog, encoded = await self._catalogs.compile(kind, None, source)
            except IntegrationError as refused:
                error = f"{connection.address} answered a tool list that cannot be used: {refused.message}"
            if catalog is not None and len(catalog.tools) > MAX_DISCOVERED_TOOLS:
                error = f"{connection.address} lists more than {MAX_DISCOVERED_TOOLS} tools; none were taken"
        now = self._clock()
        if error is not None or catalog is None or source is None:
            log.info("discovery of %s failed: %s", connection.address, error)
            await self._catalog.set_discovered(connection, synced_at=now, error=error)
            raise DiscoveryFailed(error or f"No tools were listed for {connection.address}")
        hashed = digest(source)
        stored = await self._catalog.set_discovered(
            connection, synced_at=now, source_hash=hashed, source=source, compiled=encoded
        )
        self._catalogs.remember(hashed, catalog)
        return stored

    def mark_stale(self, integration: IntegrationRecord, connection: ConnectionRecord) -> None:
        """Ask `refresh_stale` to list the connection's tools again (deduplicated; never blocks)."""
        key = connection_key(connection)
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
                    current = await self._catalog.get_connection(*key)
                    integration = await self._catalog.get_integration(connection.org_id, connection.integration)
                    if current is not None and integration is not None and self._kinds.serves(integration):
                        await self.discover(integration, current)
                except (DiscoveryFailed, ConnectionNotFound):
                    pass  # noted on the connection and logged by `discover`, or removed meanwhile
                except Exception:
                    log.exception("refreshing the tools of %s failed", connection.address)


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
