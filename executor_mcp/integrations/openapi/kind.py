"""OpenAPI as a `Kind`: pre-flight checks and invocation through `Outbound` (bindings structured once per tool,
by `kinds.Bindings`).
"""

from collections.abc import Mapping
from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.credentials import CredentialMissing, credential_missing_result
from executor_mcp.integrations.kinds import Bindings, Discovery, Invocation
from executor_mcp.integrations.openapi import request, response
from executor_mcp.integrations.openapi.binding import Binding
from executor_mcp.integrations.openapi.compile import compile_spec, decode_compiled, encode_compiled
from executor_mcp.integrations.openapi.document import MAX_SOURCE_BYTES
from executor_mcp.outbound.client import Outbound
from executor_mcp.outbound.model import OutboundFailure
from executor_mcp.records.integration_errors import ArgumentsRefused, DiscoveryFailed
from executor_mcp.records.integrations import OPENAPI, CompiledCatalog, IntegrationRecord, ToolDef, config_strings


class OpenApiKind:
    name = OPENAPI

    def __init__(self, outbound: Outbound, *, max_source_bytes: int = MAX_SOURCE_BYTES) -> None:
        self._outbound = outbound
        self._max_source_bytes = max_source_bytes
        self._bindings = Bindings(Binding)

    def compile(self, source: bytes) -> tuple[CompiledCatalog, bytes]:
        spec = compile_spec(source, max_bytes=self._max_source_bytes)
        return spec.catalog, encode_compiled(spec)

    def decode(self, raw: bytes) -> CompiledCatalog:
        return decode_compiled(raw).catalog

    def discovers(self, integration: IntegrationRecord) -> bool:
        return False

    async def discover(self, discovery: Discovery) -> bytes:
        raise DiscoveryFailed("An OpenAPI integration's tools come from its document, not from its connections")

    def binding(self, tool: ToolDef) -> Binding:
        return self._bindings.of(tool)

    def check_arguments(self, tool: ToolDef, args: Any) -> None:
        request.check_arguments(self.binding(tool), args)

    async def invoke(self, invocation: Invocation) -> JsonObject:
        integration, connection = invocation.integration, invocation.connection
        binding = self.binding(invocation.tool)
        config: Mapping[str, Any] = integration.config
        base_url = config.get("baseUrl")
        try:
            built = request.build_request(
                binding,
                invocation.args,
                base_url=base_url if isinstance(base_url, str) and base_url else None,
                static_headers=config_strings(config.get("headers")),
                static_query=config_strings(config.get("queryParams")),
                auth_method=integration.auth_method(connection.template),
                credentials=invocation.credentials,
            )
        except ArgumentsRefused as refused:
            return {"ok": False, "error": {"code": "invalid_tool_arguments", "message": str(refused)}}
        except OutboundFailure as failure:
            return {"ok": False, "error": failure.as_error()}
        if isinstance(built, CredentialMissing):
            return credential_missing_result(
                integration=integration.slug, owner=connection.owner, connection=connection.name, oauth=built.oauth
            )
        try:
            answer = await self._outbound.send(built, collect_streams=binding.response.file != "binary")
        except OutboundFailure as failure:
            return {"ok": False, "error": failure.as_error()}
        return response.classify(
            binding.response, answer, integration=integration.slug, owner=connection.owner, connection=connection.name
        )
