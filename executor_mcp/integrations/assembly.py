"""The integrations service as the server and the admin commands build it from settings."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from executor_mcp.config import Settings
from executor_mcp.integrations.graphql.kind import GraphqlKind
from executor_mcp.integrations.mcp.kind import McpKind
from executor_mcp.integrations.openapi.kind import OpenApiKind
from executor_mcp.integrations.service import Integrations
from executor_mcp.outbound.client import Outbound, OutboundSettings
from executor_mcp.records.integrations import GRAPHQL, MCP, OPENAPI
from executor_mcp.secrets.cipher import open_cipher
from executor_mcp.secrets.providers import standard_providers
from executor_mcp.storage.control import ControlPlane


@asynccontextmanager
async def open_integrations(settings: Settings, control: ControlPlane) -> AsyncIterator[Integrations]:
    """The service, with the outbound HTTP client it owns for as long as the block runs."""
    outbound_settings = OutboundSettings(
        allow_local_network=settings.allow_local_network,
        max_response_bytes=settings.integration_max_response_bytes,
    )
    async with Outbound(outbound_settings) as outbound:
        secrets = standard_providers(control, await open_cipher(settings.data_dir), settings)
        mcp = McpKind(
            outbound, allow_stdio=settings.allow_stdio_mcp, max_source_bytes=settings.integration_max_spec_bytes
        )
        try:
            yield Integrations(
                control,
                secrets,
                {
                    OPENAPI: OpenApiKind(outbound, max_source_bytes=settings.integration_max_spec_bytes),
                    GRAPHQL: GraphqlKind(outbound, max_source_bytes=settings.integration_max_spec_bytes),
                    MCP: mcp,
                },
                outbound,
                max_source_bytes=settings.integration_max_spec_bytes,
                max_operations=settings.integration_max_operations,
            )
        finally:
            await mcp.aclose()
