"""Compiled catalogs by content hash: compiled once, shared by every integration and connection whose source
hashes the same, kept decoded in memory for the hottest few and re-read from LMDB for the rest."""

import hashlib
import logging
from collections import OrderedDict
from functools import partial

import trio

from executor_mcp.integrations.compiling import Compiler
from executor_mcp.integrations.kinds import Kind, Kinds
from executor_mcp.records.integration_errors import IntegrationError
from executor_mcp.records.integrations import CompiledCatalog, ConnectionRecord, IntegrationRecord
from executor_mcp.storage.interfaces import CatalogStore
from executor_mcp.storage.records import Owner as Principal

log = logging.getLogger(__name__)

# Compiled catalogs kept decoded in memory; the rest are re-read from LMDB.
COMPILED_CACHE = 16


def digest(source: bytes) -> str:
    """A source's content hash: what its compiled catalog is stored and shared under."""
    return hashlib.sha256(source).hexdigest()


def catalog_hash(integration: IntegrationRecord, connection: ConnectionRecord) -> str:
    """The catalog a connection's tools come from: what it discovered, else its integration's."""
    return connection.source_hash or integration.source_hash


class Catalogs:
    """Compiled catalogs by content hash: one integration's document is decoded once however many callers see it."""

    def __init__(self, catalog: CatalogStore, kinds: Kinds, compiler: Compiler) -> None:
        self._catalog = catalog
        self._kinds = kinds
        self._compiler = compiler
        self._compiled: OrderedDict[str, CompiledCatalog] = OrderedDict()

    async def catalog(
        self, integration: IntegrationRecord, connection: ConnectionRecord | None = None
    ) -> CompiledCatalog | None:
        """The tools at `connection` (its discovered catalog, else its integration's): from memory, else from
        LMDB, else compiled again from the stored source (a compiled blob from another version may no longer
        decode)."""
        hashed = integration.source_hash if connection is None else catalog_hash(integration, connection)
        cached = self._compiled.get(hashed)
        if cached is not None:
            self._compiled.move_to_end(hashed)
            return cached
        kind = self._kinds.of(integration)
        catalog: CompiledCatalog | None = None
        raw = await self._catalog.get_compiled(hashed)
        if raw is not None:
            try:
                catalog = await trio.to_thread.run_sync(kind.decode, raw)
            except Exception as exc:
                log.warning("recompiling %s: its stored compiled form does not decode (%s)", hashed[:12], exc)
        if catalog is None:
            source = await self._catalog.get_source(hashed)
            if source is None:
                log.error("integration %s/%s has no stored source %s", integration.org_id, integration.slug, hashed)
                return None
            try:
                catalog, encoded = await self.compile(kind, None, source)
            except IntegrationError as refused:
                log.error(
                    "integration %s/%s: source %s no longer compiles (%s)",
                    integration.org_id,
                    integration.slug,
                    hashed[:12],
                    refused.message,
                )
                return None
            await self._catalog.put_compiled(hashed, encoded)
        self.remember(hashed, catalog)
        return catalog

    def remember(self, hashed: str, catalog: CompiledCatalog) -> None:
        self._compiled[hashed] = catalog
        while len(self._compiled) > COMPILED_CACHE:
            self._compiled.popitem(last=False)

    async def compile(self, kind: Kind, caller: Principal | None, source: bytes) -> tuple[CompiledCatalog, bytes]:
        """Any kind's source compiled and encoded, in a worker thread, at the caller's turn."""
        return await self._compiler.run(caller, partial(kind.compile, source))
