"""OpenAPI as a `Kind`: pre-flight checks and invocation through `Outbound`.

The binding a compiled tool carries is unstructured JSON (the catalog never reads it); it is structured
once per `ToolDef` and kept in a small bounded cache, since a hot tool is called many times.
"""

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from executor_mcp.codec import JsonObject, converter
from executor_mcp.integrations.credentials import CredentialMissing, credential_missing_result
from executor_mcp.integrations.errors import ArgumentsRefused, DiscoveryFailed
from executor_mcp.integrations.kinds import Discovery, Invocation
from executor_mcp.integrations.model import OPENAPI, CompiledCatalog, IntegrationRecord, ToolDef
from executor_mcp.integrations.openapi import request, response
from executor_mcp.integrations.openapi.binding import Binding
from executor_mcp.integrations.openapi.compile import compile_spec, decode_compiled, encode_compiled
from executor_mcp.integrations.openapi.document import MAX_SOURCE_BYTES
from executor_mcp.outbound.client import Outbound
from executor_mcp.outbound.model import OutboundFailure

BINDING_CACHE_SIZE = 4096


def _strings(value: Any) -> dict[str, str]:
    """A config map of static values; anything that is not a string pair is not sendable and is left out."""
    if not isinstance(value, dict):
        return {}
    return {name: text for name, text in value.items() if isinstance(name, str) and isinstance(text, str)}


class OpenApiKind:
    name = OPENAPI

    def __init__(self, outbound: Outbound, *, max_source_bytes: int = MAX_SOURCE_BYTES) -> None:
        self._outbound = outbound
        self._max_source_bytes = max_source_bytes
        # Keyed by identity; the entry holds the ToolDef itself, so its id cannot be reused while cached.
        self._bindings: OrderedDict[int, tuple[ToolDef, Binding]] = OrderedDict()

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
        cached = self._bindings.get(id(tool))
        if cached is not None and cached[0] is tool:
            self._bindings.move_to_end(id(tool))
            return cached[1]
        structured = converter.structure(tool.binding, Binding)
        self._bindings[id(tool)] = (tool, structured)
        if len(self._bindings) > BINDING_CACHE_SIZE:
            self._bindings.popitem(last=False)
        return structured

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
                static_headers=_strings(config.get("headers")),
                static_query=_strings(config.get("queryParams")),
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
