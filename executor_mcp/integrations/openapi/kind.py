"""OpenAPI as a `Kind`: an add request names a document (pasted, or at a URL), compiled before anything is
stored; a call is checked before any approval and sent through `Outbound` (bindings structured once per tool,
by `kinds.Bindings`).
"""

from collections.abc import Mapping
from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.addresses import default_slug, slug_problem
from executor_mcp.integrations.credentials import CredentialMissing, credential_missing_result
from executor_mcp.integrations.kinds import Bindings, Discovery, Invocation, Precompiled, Registration
from executor_mcp.integrations.oauth_discovery import discover
from executor_mcp.integrations.openapi import auth, request, response
from executor_mcp.integrations.openapi.binding import Binding
from executor_mcp.integrations.openapi.compile import (
    READ_METHODS,
    CompiledSpec,
    compile_spec,
    decode_compiled,
    encode_compiled,
    integration_description,
    integration_name,
)
from executor_mcp.integrations.openapi.sources import SpecSources
from executor_mcp.integrations.validation import (
    MAX_DESCRIPTION_LENGTH,
    MAX_NAME_LENGTH,
    check_known,
    configured_methods,
    explicit_methods,
    object_of,
    optional_text,
    static_config,
    url,
)
from executor_mcp.outbound.client import Outbound
from executor_mcp.outbound.model import OutboundFailure
from executor_mcp.records.integration_errors import (
    ArgumentsRefused,
    DiscoveryFailed,
    IntegrationError,
    IntegrationNotFound,
    InvalidInput,
)
from executor_mcp.records.integrations import (
    OPENAPI,
    AuthMethod,
    CompiledCatalog,
    IntegrationRecord,
    ToolDef,
    config_strings,
)
from executor_mcp.storage.records import Owner as Principal

# An add request's fields (`specFormat` and `family` are accepted and unused, as upstream's).
FIELDS = frozenset(
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
    }
)
CONFIGURE_FIELDS = frozenset({"authenticationTemplate", "mode", "baseUrl"})


class OpenApiKind:
    name = OPENAPI

    def __init__(self, outbound: Outbound, sources: SpecSources) -> None:
        self._outbound = outbound
        self.sources = sources
        self._bindings = Bindings(Binding)

    # -- a spec in -----------------------------------------------------------------------------------

    def check_addable(self, body: Any) -> None:
        if object_of(body).get("spec") is None:
            raise InvalidInput("spec is required")

    async def register(self, body: Any, caller: Principal) -> Registration:
        """`{spec, slug?, name?, description?, baseUrl?, headers?, queryParams?, authenticationTemplate?}`: the
        document is read and compiled (in a child process) to name the integration, so an add that names no
        slug, name or auth methods takes the document's, and, where it declares no oauth2, a discovered one."""
        values = object_of(body)
        check_known(values, FIELDS)
        config = static_config(values)
        explicit = explicit_methods(values)
        name = optional_text(values, "name", MAX_NAME_LENGTH)
        description = optional_text(values, "description", MAX_DESCRIPTION_LENGTH)
        slug = values.get("slug")
        if slug is not None and (problem := slug_problem(slug)) is not None:
            raise InvalidInput(problem)
        source, address = await self.sources.read(values.get("spec"))
        compiled = await self.sources.compile(caller, source)
        spec = compiled.head
        slug = slug or default_slug(name or spec.title or "", OPENAPI) or "api"
        if address is not None:
            config["specUrl"] = address
        methods = explicit if explicit is not None else spec.auth_methods
        if explicit is None and not auth.declares_oauth(methods):
            discovered = await self.discovered_oauth(spec, config.get("baseUrl"), address)
            methods = (*methods, discovered) if discovered is not None else methods
        return Registration(
            slug=slug,
            slug_hint=slug,
            # A document's own title and description are cut to what an explicit one may be: every listing of
            # the org's integrations reads them (a 32 MB description took a second to encode, GIL held).
            name=integration_name(spec, name, slug)[:MAX_NAME_LENGTH],
            description=integration_description(spec, description, slug)[:MAX_DESCRIPTION_LENGTH],
            config=config,
            auth_methods=methods,
            source=source,
            can_refresh=address is not None,
            compiled=Precompiled(compiled.encoded, compiled.tool_names),
        )

    async def discovered_oauth(
        self, spec: CompiledSpec, base_url: str | None, spec_url: str | None
    ) -> AuthMethod | None:
        """The `oauth2` method of the authorization server the API's metadata names (`oauth_discovery`), if
        any: bounded and quiet, so a spec without OAuth adds as quickly as before."""
        return await discover(self._outbound, auth.discovery_urls(spec.servers, base_url, spec_url))

    def reconfigure(self, record: IntegrationRecord, body: Any) -> tuple[JsonObject, tuple[AuthMethod, ...]]:
        """`{authenticationTemplate?, mode?: merge|replace, baseUrl?}`: the integration's auth methods merged
        or replaced, and its base URL set (null clears it)."""
        values = object_of(body)
        check_known(values, CONFIGURE_FIELDS)
        methods = configured_methods(record, values)
        config = dict(record.config)
        if "baseUrl" in values:
            if values["baseUrl"] is None:
                config.pop("baseUrl", None)
            else:
                config["baseUrl"] = url(values["baseUrl"], "baseUrl")
        return config, methods

    def not_found(self, slug: str) -> IntegrationError:
        return IntegrationNotFound(f"Integration not found: {slug}", slug=slug)

    # -- tools and calls out -------------------------------------------------------------------------

    def compile(self, source: bytes) -> tuple[CompiledCatalog, bytes]:
        spec = compile_spec(source, max_bytes=self.sources.max_source_bytes)
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

    def read_only(self, tool: ToolDef) -> bool:
        return self.binding(tool).method in READ_METHODS

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
