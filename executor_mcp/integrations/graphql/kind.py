"""GraphQL as a `Kind`: an endpoint (with a schema snapshot or SDL, or introspected by each connection) in,
per-connection introspection and invocation through `Outbound` out.

A call and an introspection are the same request: a JSON POST to the endpoint with the integration's static
headers and query parameters, and the connection's credential over them (a credential header or parameter
wins over a static one of the same name).
"""

import urllib.parse
from collections.abc import Mapping
from functools import partial
from typing import Any

import attrs
import trio

from executor_mcp.codec import JsonObject, dumps
from executor_mcp.integrations.compiling import Compiler
from executor_mcp.integrations.credentials import CredentialMissing, credential_missing_result, render_credentials
from executor_mcp.integrations.graphql import introspection, response
from executor_mcp.integrations.graphql.compile import compile_catalog
from executor_mcp.integrations.graphql.operation import Binding, build_operation
from executor_mcp.integrations.graphql.registration import CONFIGURE_FIELDS, FIELDS, PER_CONNECTION, registration
from executor_mcp.integrations.kinds import Bindings, Discovery, Invocation, Registration
from executor_mcp.integrations.oauth_discovery import candidate_urls, discover
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
from executor_mcp.oauth.metadata import origin_of
from executor_mcp.outbound.client import Outbound
from executor_mcp.outbound.model import OutboundFailure, OutboundRequest
from executor_mcp.records.integration_errors import (
    ArgumentsRefused,
    DiscoveryFailed,
    IntegrationError,
    IntegrationNotFound,
)
from executor_mcp.records.integrations import (
    GRAPHQL,
    AuthMethod,
    CompiledCatalog,
    IntegrationRecord,
    ToolDef,
    config_strings,
    decode_catalog,
    encode_catalog,
)
from executor_mcp.storage.records import Owner as Principal

JSON = "application/json"


def credential_placements(
    method: AuthMethod | None, credentials: Mapping[str, str | None]
) -> tuple[dict[str, str], dict[str, str]] | CredentialMissing:
    """The shared rendering, with upstream's GraphQL override: an oauth2 method's token goes in
    `Authorization: Bearer` unless the method names another `header` and `prefix`."""
    rendered = render_credentials(method, credentials)
    if isinstance(rendered, CredentialMissing) or method is None or method.kind != "oauth2" or not method.oauth:
        return rendered
    header, prefix = method.oauth.get("header"), method.oauth.get("prefix")
    if not isinstance(header, str) and not isinstance(prefix, str):
        return rendered
    token = rendered[0].pop("authorization")[len("Bearer ") :]
    rendered[0][header if isinstance(header, str) and header else "Authorization"] = (
        prefix if isinstance(prefix, str) else "Bearer "
    ) + token
    return rendered


def http_request(
    endpoint: str,
    payload: JsonObject,
    *,
    static_headers: Mapping[str, str],
    static_query: Mapping[str, str],
    credential_headers: Mapping[str, str],
    credential_query: Mapping[str, str],
) -> OutboundRequest:
    """The POST that carries one operation. Header names compare case-insensitively; the content type and
    accept stay JSON whatever the static headers say."""
    headers: dict[str, tuple[str, str]] = {"user-agent": ("User-Agent", introspection.USER_AGENT)}
    for name, value in [*static_headers.items(), *credential_headers.items()]:
        if name.lower() not in ("content-type", "accept", "content-length", "host"):
            headers[name.lower()] = (name, value)
    headers["content-type"] = ("Content-Type", JSON)
    headers["accept"] = ("Accept", JSON)
    parts = urllib.parse.urlsplit(endpoint)
    query = [
        (name, value)
        for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if name not in static_query and name not in credential_query
    ]
    query += [(name, value) for name, value in static_query.items() if name not in credential_query]
    query += list(credential_query.items())
    url = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
    return OutboundRequest(
        method="POST",
        url=url,
        headers=tuple(headers.values()),
        body=dumps(payload),
        credential_headers=frozenset(name.lower() for name in credential_headers),
        credential_query=frozenset(credential_query),
    )


class GraphqlKind:
    name = GRAPHQL

    def __init__(self, outbound: Outbound, compiler: Compiler, *, max_source_bytes: int) -> None:
        self._outbound = outbound
        self._compiler = compiler
        self._max_source_bytes = max_source_bytes
        # Reading a large introspection answer is CPU work: in a worker thread, one at a time.
        self._reading = trio.CapacityLimiter(1)
        self._bindings = Bindings(Binding)

    # -- an endpoint in ------------------------------------------------------------------------------

    def check_addable(self, body: Any) -> None:
        url(object_of(body).get("endpoint"), "endpoint")

    async def register(self, body: Any, caller: Principal) -> Registration:
        """`registration.py`'s request; building a schema from SDL is CPU work, done at the caller's turn
        of the compiler. Without an `authenticationTemplate`, the endpoint is probed for an authorization
        server (`discovered_oauth`) once the request is known to be valid."""
        values = object_of(body)
        check_known(values, FIELDS)
        explicit = explicit_methods(values)
        registered = await self._compiler.run(
            caller,
            partial(
                registration,
                values,
                endpoint=url(values.get("endpoint"), "endpoint"),
                static=static_config(values),
                auth_methods=explicit or (),
                name=optional_text(values, "name", MAX_NAME_LENGTH),
                description=optional_text(values, "description", MAX_DESCRIPTION_LENGTH),
                max_source_bytes=self._max_source_bytes,
            ),
        )
        if explicit is not None:
            return registered
        discovered = await self.discovered_oauth(registered.config)
        return registered if discovered is None else attrs.evolve(registered, auth_methods=(discovered,))

    async def discovered_oauth(self, config: JsonObject) -> AuthMethod | None:
        """The `oauth2` method of the endpoint's authorization server, if it names one: in metadata beside the
        endpoint or at its origin, or in the 401 an unauthenticated `{ __typename }` query gets (the MCP
        authorization spec's way, which GraphQL servers share). Bounded and quiet (`oauth_discovery`)."""
        endpoint = str(config.get("endpoint", ""))
        challenge = http_request(
            endpoint,
            {"query": "{ __typename }"},
            static_headers=config_strings(config.get("headers")),
            static_query=config_strings(config.get("queryParams")),
            credential_headers={},
            credential_query={},
        )
        resources = candidate_urls([endpoint, origin_of(endpoint)])
        return await discover(self._outbound, resources, challenge) if resources else None

    def reconfigure(self, record: IntegrationRecord, body: Any) -> tuple[JsonObject, tuple[AuthMethod, ...]]:
        """`{endpoint?, headers?, queryParams?, authenticationTemplate?, mode?: merge|replace}`: set what is
        given (`headers`/`queryParams` null clears them)."""
        values = object_of(body)
        check_known(values, CONFIGURE_FIELDS)
        methods = configured_methods(record, values)
        config = dict(record.config)
        if values.get("endpoint") is not None:
            config["endpoint"] = url(values["endpoint"], "endpoint")
        static: JsonObject = {field: values[field] for field in ("headers", "queryParams") if field in values}
        for field in static:
            config.pop(field, None)
        config.update(static_config(static))
        return config, methods

    def not_found(self, slug: str) -> IntegrationError:
        return IntegrationNotFound(f"GraphQL integration not found: {slug}", slug=slug)

    # -- tools and calls out -------------------------------------------------------------------------

    def compile(self, source: bytes) -> tuple[CompiledCatalog, bytes]:
        if len(source) > self._max_source_bytes:
            raise introspection.SchemaRefused(f"GraphQL schema is larger than {self._max_source_bytes} bytes")
        catalog = compile_catalog(source)
        return catalog, encode_catalog(catalog)

    def decode(self, raw: bytes) -> CompiledCatalog:
        return decode_catalog(raw)

    def discovers(self, integration: IntegrationRecord) -> bool:
        return integration.config.get("introspection") == PER_CONNECTION

    def binding(self, tool: ToolDef) -> Binding:
        return self._bindings.of(tool)

    def check_arguments(self, tool: ToolDef, args: Any) -> None:
        build_operation(self.binding(tool), args)

    def read_only(self, tool: ToolDef) -> bool:
        return self.binding(tool).operation == "query"

    def _request(
        self, integration: IntegrationRecord, template: str, credentials: Mapping[str, str | None], payload: JsonObject
    ) -> OutboundRequest | CredentialMissing:
        rendered = credential_placements(integration.auth_method(template), credentials)
        if isinstance(rendered, CredentialMissing):
            return rendered
        endpoint = integration.config.get("endpoint")
        return http_request(
            endpoint if isinstance(endpoint, str) else "",
            payload,
            static_headers=config_strings(integration.config.get("headers")),
            static_query=config_strings(integration.config.get("queryParams")),
            credential_headers=rendered[0],
            credential_query=rendered[1],
        )

    async def discover(self, discovery: Discovery) -> bytes:
        """The connection's schema, introspected with its own credential (upstream: per connection, at tool
        production), in the stored form; `DiscoveryFailed` with upstream's introspection messages."""
        integration, connection = discovery.integration, discovery.connection
        built = self._request(
            integration, connection.template, discovery.credentials, {"query": introspection.INTROSPECTION_QUERY}
        )
        if isinstance(built, CredentialMissing):
            raise DiscoveryFailed(
                f'Connection "{connection.name}" for "{integration.slug}" has no resolvable credential value. '
                "Re-authenticate or update the connection."
            )
        try:
            answer = await self._outbound.send(built, collect_streams=False)
        except OutboundFailure as failure:
            raise DiscoveryFailed(failure.message) from None
        secrets = tuple(discovery.credentials.values())
        try:
            return await trio.to_thread.run_sync(introspection.read_answer, answer, secrets, limiter=self._reading)
        except introspection.SchemaRefused as refused:
            raise DiscoveryFailed(refused.message) from None

    async def invoke(self, invocation: Invocation) -> JsonObject:
        integration, connection = invocation.integration, invocation.connection
        try:
            operation = build_operation(self.binding(invocation.tool), invocation.args)
        except ArgumentsRefused as refused:
            return {"ok": False, "error": {"code": refused.code, "message": str(refused)}}
        built = self._request(integration, connection.template, invocation.credentials, operation.payload())
        if isinstance(built, CredentialMissing):
            return credential_missing_result(
                integration=integration.slug, owner=connection.owner, connection=connection.name, oauth=built.oauth
            )
        try:
            answer = await self._outbound.send(built, collect_streams=False)
        except OutboundFailure as failure:
            return {"ok": False, "error": failure.as_error()}
        return response.classify(
            answer, integration=integration.slug, owner=connection.owner, connection=connection.name
        )
