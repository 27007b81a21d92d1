"""What one caller reaches: every tool of every integration of its org, at each connection it sees.

A caller's catalog (`View`) is built from the control plane and cached per (org, account) until the org's
catalog revision moves: an admin command on the same data dir bumps it too. Reading a view also queues the
discovered connections whose listing is due (`discovery.due_at`).
"""

import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping

import attrs
import trio

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.addresses import ToolAddress
from executor_mcp.integrations.catalogs import Catalogs, catalog_hash
from executor_mcp.integrations.discovery import Discoveries, due_at
from executor_mcp.integrations.kinds import Kinds
from executor_mcp.records.integrations import CompiledCatalog, ConnectionRecord, IntegrationRecord, ToolDef
from executor_mcp.storage.interfaces import CatalogStore
from executor_mcp.storage.records import Owner as Principal

# Per-caller views kept in memory.
VIEW_CACHE = 64


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
        return catalog_hash(self.integration, self.connection)


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


def narrowed(view: View, keep: Callable[[ToolEntry], bool]) -> View:
    """`view` with only the entries `keep` keeps, and only the integrations one of those belongs to (a toolkit's
    endpoint). Discovery still follows the whole view: what a toolkit hides is still listed when due."""
    entries = tuple(entry for entry in view.entries if keep(entry))
    slugs = {entry.integration.slug for entry in entries}
    return attrs.evolve(
        view,
        integrations=tuple(record for record in view.integrations if record.slug in slugs),
        entries=entries,
        by_id={entry.tool_id: entry for entry in entries},
        counts=Counter(entry.integration.slug for entry in entries),
    )


def build_view(
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
        defs={catalog_hash(integration, connection): compiled.defs for integration, connection, compiled in reached},
        counts=Counter(entry.integration.slug for entry in entries),
        discovered=discovered,
        due_at=min((due_at(*pair) for pair in discovered), default=float("inf")),
    )


class Views:
    """Each caller's catalog, rebuilt only when its org's catalog revision moves: every tool call reads it."""

    def __init__(
        self,
        catalog: CatalogStore,
        kinds: Kinds,
        catalogs: Catalogs,
        discoveries: Discoveries,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._catalog = catalog
        self._kinds = kinds
        self._catalogs = catalogs
        self._discoveries = discoveries
        self._clock = clock
        self._views: OrderedDict[tuple[str, str], View] = OrderedDict()
        # What the execute description lists, asked by every tools/list: (revision, slugs) per caller.
        self._connected: OrderedDict[tuple[str, str], tuple[int, list[str]]] = OrderedDict()

    async def view(self, principal: Principal) -> View:
        """The caller's tools: every tool of every integration of its org, at each connection it sees."""
        org = principal.org_id
        if not org:
            return EMPTY_VIEW
        key = (org, principal.account_id)
        revision = await self._catalog.catalog_revision(org)
        cached = self._views.get(key)
        if cached is not None and cached.revision == revision:
            self._views.move_to_end(key)
            self._mark_due(cached)
            return cached
        integrations = await self._catalog.integrations(org)
        connections = await self._catalog.connections(org, principal.account_id)
        by_slug = {record.slug: record for record in integrations}
        reached: list[tuple[IntegrationRecord, ConnectionRecord, CompiledCatalog]] = []
        discovered: list[tuple[IntegrationRecord, ConnectionRecord]] = []
        for connection in connections:
            integration = by_slug.get(connection.integration)
            if integration is None or not self._kinds.serves(integration):
                continue
            if self._kinds.of(integration).discovers(integration):
                discovered.append((integration, connection))
            compiled = await self._catalogs.catalog(integration, connection)
            if compiled is not None:
                reached.append((integration, connection, compiled))
        # Tens of thousands of entries to make and sort: a worker thread's work, not the event loop's.
        view = await trio.to_thread.run_sync(build_view, revision, tuple(integrations), reached, tuple(discovered))
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
                self._discoveries.mark_stale(integration, connection)

    async def connected_integrations(self, principal: Principal) -> list[str]:
        """The slugs of the integrations the caller has a connection to, one per connection, as of now."""
        org = principal.org_id
        if not org:
            return []
        key = (org, principal.account_id)
        revision = await self._catalog.catalog_revision(org)
        cached = self._connected.get(key)
        if cached is not None and cached[0] == revision:
            self._connected.move_to_end(key)
            return list(cached[1])
        slugs = [connection.integration for connection in await self._catalog.connections(org, principal.account_id)]
        self._connected[key] = (revision, slugs)
        while len(self._connected) > VIEW_CACHE:
            self._connected.popitem(last=False)
        return list(slugs)
