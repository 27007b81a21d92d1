"""The integrations service as the server and the admin commands build it from settings: the one place the
kinds of integration are registered."""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from executor_mcp.config import Settings
from executor_mcp.integrations.compiling import Compiler
from executor_mcp.integrations.graphql.kind import GraphqlKind
from executor_mcp.integrations.kinds import Kinds
from executor_mcp.integrations.mcp.kind import McpKind
from executor_mcp.integrations.openapi.kind import OpenApiKind
from executor_mcp.integrations.openapi.sources import SpecSources
from executor_mcp.integrations.service import Integrations
from executor_mcp.outbound.client import Outbound, OutboundSettings
from executor_mcp.secrets.cipher import open_cipher
from executor_mcp.secrets.providers import standard_providers
from executor_mcp.storage.control import ControlPlane


@asynccontextmanager
async def open_integrations(
    settings: Settings, control: ControlPlane, public_url: Callable[[], str] = lambda: ""
) -> AsyncIterator[Integrations]:
    """The service, with the outbound HTTP client and the MCP sessions it owns for as long as the block runs.
    `public_url` is where browsers reach this server (OAuth's callback is under it), known once it listens."""
    async with Outbound(OutboundSettings.of(settings)) as outbound:
        secrets = standard_providers(control.secrets, await open_cipher(settings.data_dir), settings)
        compiler = Compiler()
        max_source_bytes = settings.integration_max_spec_bytes
        sources = SpecSources(
            outbound, compiler, max_source_bytes=max_source_bytes, max_operations=settings.integration_max_operations
        )
        mcp = McpKind(outbound, allow_stdio=settings.allow_stdio_mcp, max_source_bytes=max_source_bytes)
        kinds = Kinds(
            (
                OpenApiKind(outbound, sources),
                GraphqlKind(outbound, compiler, max_source_bytes=max_source_bytes),
                mcp,
            )
        )
        try:
            yield Integrations(
                control.catalog,
                secrets,
                kinds,
                compiler,
                oauth_store=control.oauth,
                outbound=outbound,
                public_url=public_url,
            )
        finally:
            await mcp.aclose()
