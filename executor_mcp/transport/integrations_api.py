"""`/api/integrations`, `/api/connections`, `/api/tools`, `/api/providers` and `/api/openapi/*`: the bearer's
integrations, connections and tools over plain JSON HTTP (upstream-integrations §3.1).

    GET    /api/integrations                                   the built-in `executor`, then the org's
    POST   /api/integrations/detect                            {url} -> [{kind, confidence, endpoint, name, slug}]
    GET|PATCH|DELETE /api/integrations/<slug>                  PATCH {name?, description?}; DELETE -> {removed}
    GET    /api/connections?integration&owner                  the connections the bearer sees
    POST   /api/connections                                    {owner, name, integration, template, ...}
    POST   /api/connections/handoffs                           {integration, owner?, template?, label?}
                                                               -> {url, instructions} (a one-time connect link)
    GET|PATCH|DELETE /api/connections/<owner>/<integration>/<name>
    POST   /api/connections/<owner>/<integration>/<name>/refresh   -> the connection's tool rows
    GET    /api/tools?integration&owner&connection&query&includeAnnotations&includeBlocked
    GET    /api/tools/schema?address=tools.<i>.<o>.<c>.<tool>
    GET    /api/providers, /api/providers/<key>/items         provider keys; item ids and names, never values
    POST   /api/openapi/preview?toolNames=<n>                  {spec} -> the summary (and n tool names)
    POST   /api/openapi/specs                                  {spec, slug?, ...} -> {slug, toolCount}
    GET|DELETE /api/openapi/integrations/<slug>                the summary or null; DELETE -> 204
    GET|POST /api/openapi/integrations/<slug>/config           {authenticationTemplate?, mode?, baseUrl?}
    POST   /api/openapi/integrations/<slug>/spec               {spec?} -> {slug, toolCount, addedTools, removedTools}
    POST   /api/graphql/integrations                           {endpoint, sdl?, ...} -> {slug, toolCount}
    GET    /api/graphql/integrations/<slug>                    the summary or null
    GET|POST /api/graphql/integrations/<slug>/config           {endpoint?, headers?, queryParams?, auth...?, mode?}
    POST   /api/mcp/probe                                      {endpoint, headers?, remoteTransport?} -> what answers
    POST   /api/mcp/servers                                    addServer input -> {slug, toolCount}
    GET|DELETE /api/mcp/servers/<slug>                         the server (config, templates) or null; DELETE -> 204
    POST   /api/mcp/servers/<slug>/config                      {endpoint?, headers?, auth?, ...} -> the server

Authenticated exactly like `/mcp`. Errors are upstream's `{"_tag": "<Error>", "message": ..., ...fields}`:
every `IntegrationError` with its own status (400, 403, 404, 409), and the request's own refusals with the
tags of `_REQUEST_TAGS` (401/403/503 authentication with `/mcp`'s challenge and `Retry-After`, 405 with
`Allow`, 408, 413, 415). A body, when there is one, must be `application/json` (a page can send a
`text/plain` POST without a preflight, never a JSON one) and is bounded: 32 MiB where a spec travels,
64 KiB elsewhere. Nothing here logs a body, and no answer holds a secret value: the service never returns
one.
"""

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Any

import attrs
from quart import Quart, Response, request

from executor_mcp.auth.principal import Authenticator, Principal
from executor_mcp.codec import JsonObject, dumps
from executor_mcp.integrations.addresses import parse_tool_address
from executor_mcp.integrations.graphql import wire as graphql_wire
from executor_mcp.integrations.handoff import Handoffs
from executor_mcp.integrations.mcp.servers import McpServers, server_json
from executor_mcp.integrations.openapi.specs import OpenApiSpecs
from executor_mcp.integrations.service import Integrations
from executor_mcp.integrations.views import ToolEntry, View
from executor_mcp.integrations.wire import BUILT_IN_JSON, connection_json, display_url, integration_json, tool_row
from executor_mcp.policies.model import Action, decide
from executor_mcp.policies.service import Policies, to_rule
from executor_mcp.protocol.errors import BODY_TIMEOUT_SECONDS, Refused, envelope_headers
from executor_mcp.records.integration_errors import IntegrationError, IntegrationNotFound, InvalidInput
from executor_mcp.records.integrations import BUILT_IN_SLUG, GRAPHQL, MCP, OPENAPI, AuthMethod, IntegrationRecord
from executor_mcp.tools.connected import create_handoff
from executor_mcp.tools.typescript import signature
from executor_mcp.transport import headers as rules
from executor_mcp.transport.bodies import BodyRefused, read_json_object
from executor_mcp.transport.discovery import API_PREFIX
from executor_mcp.transport.oauth_api import OAuthHandlers

# A management request is a few short fields; a spec route carries a whole OpenAPI document (GitHub's is
# 13 MB as JSON text, more once escaped into a JSON string).
MAX_BODY_BYTES = 64 * 1024
MAX_SPEC_BODY_BYTES = 32 * 1024 * 1024
# 32 MiB at `/mcp`'s pace (3.2 Mbit/s) would take 80 s: a spec upload gets longer than other bodies.
SPEC_BODY_TIMEOUT_SECONDS = 120
_SPEC_PATHS = re.compile(re.escape(API_PREFIX) + r"/openapi/(?:preview|specs|integrations/[^/]+/spec)")
# Adding a GraphQL integration may carry its whole schema (an SDL document or an introspection snapshot).
_GRAPHQL_SCHEMA_PATHS = re.compile(re.escape(API_PREFIX) + r"/graphql/integrations")
_WITH_BODY = frozenset({"POST", "PATCH", "DELETE"})  # a DELETE may say which (`/oauth/clients/<slug>` {owner})
_TRUE = frozenset({"", "1", "true", "yes"})
_REQUEST_TAGS = {
    400: "InvalidInputError",
    401: "UnauthorizedError",
    403: "ForbiddenError",
    405: "MethodNotAllowedError",
    408: "RequestTimeoutError",
    413: "RequestTooLargeError",
    415: "UnsupportedMediaTypeError",
    503: "ServiceUnavailableError",
}

_OWN = frozenset({"_tag", "message"})

Handler = Callable[..., Awaitable[Any]]


class ToolNotFound(IntegrationError):
    tag = "ToolNotFoundError"
    status = 404
    code = "tool_not_found"


def body_limit(path: str) -> int:
    """The largest body a request to `path` may carry: the spec routes take a whole document."""
    carries_source = _SPEC_PATHS.fullmatch(path) or _GRAPHQL_SCHEMA_PATHS.fullmatch(path)
    return MAX_SPEC_BODY_BYTES if carries_source else MAX_BODY_BYTES


@attrs.frozen
class _Route:
    rule: str
    name: str
    handlers: Mapping[str, Handler]  # method -> handler(principal, body, **path parameters)

    @property
    def allow(self) -> str:
        methods = list(self.handlers)
        if "GET" in methods:
            methods.insert(methods.index("GET") + 1, "HEAD")
        return ", ".join([*methods, "OPTIONS"])


class IntegrationsApi:
    def __init__(
        self,
        integrations: Integrations,
        authenticator: Authenticator,
        policies: Policies,
        handoffs: Handoffs | None = None,
    ) -> None:
        self._integrations = integrations
        self._auth = authenticator
        self._policies = policies
        self._handoffs = handoffs  # None: no connect page is served, so no link is issued

    def register(self, app: Quart) -> None:
        """Every method reaches each route, which answers the ones it lacks with its own 405 and `Allow`."""
        for route in self._routes():
            app.add_url_rule(
                API_PREFIX + route.rule,
                route.name,
                self._view(route),
                methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
                provide_automatic_options=False,
            )

    def _routes(self) -> tuple[_Route, ...]:
        connection = "/connections/<owner>/<integration>/<name>"
        openapi = "/openapi/integrations/<slug>"
        graphql = "/graphql/integrations/<slug>"
        return (
            _Route("/integrations", "integrations", {"GET": self._list_integrations}),
            # A fixed path outranks `<slug>`, so an integration whose slug is `detect` is still reached here.
            _Route(
                "/integrations/detect",
                "integrations_detect",
                {
                    "GET": partial(self._get_integration, slug="detect"),
                    "POST": self._detect,
                    "PATCH": partial(self._patch_integration, slug="detect"),
                    "DELETE": partial(self._remove_integration, slug="detect"),
                },
            ),
            _Route(
                "/integrations/<slug>",
                "integration",
                {"GET": self._get_integration, "PATCH": self._patch_integration, "DELETE": self._remove_integration},
            ),
            _Route("/connections", "connections", {"GET": self._list_connections, "POST": self._create_connection}),
            *self._handoff_routes(),
            _Route(
                connection,
                "connection",
                {"GET": self._get_connection, "PATCH": self._patch_connection, "DELETE": self._remove_connection},
            ),
            _Route(connection + "/refresh", "connection_refresh", {"POST": self._refresh_connection}),
            _Route("/tools", "tools", {"GET": self._list_tools}),
            _Route("/tools/schema", "tool_schema", {"GET": self._tool_schema}),
            _Route("/providers", "providers", {"GET": self._providers}),
            _Route("/providers/<key>/items", "provider_items", {"GET": self._provider_items}),
            _Route("/openapi/preview", "openapi_preview", {"POST": self._preview}),
            _Route("/openapi/specs", "openapi_specs", {"POST": self._add_spec}),
            _Route(openapi, "openapi_integration", {"GET": self._openapi_summary, "DELETE": self._openapi_remove}),
            _Route(openapi + "/config", "openapi_config", {"GET": self._openapi_config, "POST": self._configure}),
            _Route(openapi + "/spec", "openapi_spec", {"POST": self._update_spec}),
            _Route("/graphql/integrations", "graphql_integrations", {"POST": self._add_graphql}),
            _Route(graphql, "graphql_integration", {"GET": self._graphql_summary}),
            _Route(
                graphql + "/config", "graphql_config", {"GET": self._graphql_config, "POST": self._configure_graphql}
            ),
            *self._mcp_routes(),
            *self._oauth_routes(),
        )

    def _oauth_routes(self) -> tuple[_Route, ...]:
        oauth = OAuthHandlers(self._integrations)
        return (
            _Route("/oauth/clients", "oauth_clients", {"GET": oauth.clients, "POST": oauth.create_client}),
            _Route("/oauth/clients/register-dynamic", "oauth_register_dynamic", {"POST": oauth.register_dynamic}),
            _Route("/oauth/clients/<slug>", "oauth_client", {"DELETE": oauth.remove_client}),
            _Route("/oauth/start", "oauth_start", {"POST": oauth.start}),
            _Route("/oauth/complete", "oauth_complete", {"POST": oauth.complete}),
            _Route("/oauth/cancel", "oauth_cancel", {"POST": oauth.cancel}),
            _Route("/oauth/probe", "oauth_probe", {"POST": oauth.probe}),
        )

    def _view(self, route: _Route) -> Callable[..., Awaitable[Response]]:
        async def view(**parameters: str) -> Response:
            return await self._dispatch(route, parameters)

        return view

    async def _dispatch(self, route: _Route, parameters: dict[str, str]) -> Response:
        if request.method == "OPTIONS":
            return Response(b"", status=204, headers={**rules.PREFLIGHT, "Access-Control-Allow-Methods": route.allow})
        method = "GET" if request.method == "HEAD" else request.method
        handler = route.handlers.get(method)
        if handler is None:
            return _refusal(405, "Method not allowed", {"Allow": route.allow})
        try:
            principal = await self._auth.authenticate(request.headers)
        except Refused as refused:
            return _refusal(refused.envelope.status, refused.message, envelope_headers(refused))
        body: JsonObject = {}
        if method in _WITH_BODY:
            read = await _body(request.path)
            if isinstance(read, Response):
                return read
            body = read
        try:
            answer = await handler(principal, body, **parameters)
        except IntegrationError as error:
            return _failure(error)
        return answer if isinstance(answer, Response) else _ok(answer)

    # -- integrations --------------------------------------------------------------------------------

    async def _list_integrations(self, principal: Principal, body: JsonObject) -> list[JsonObject]:
        return [
            BUILT_IN_JSON,
            *(integration_json(record) for record in await self._integrations.integrations(principal)),
        ]

    async def _get_integration(self, principal: Principal, body: JsonObject, slug: str) -> JsonObject:
        if slug == BUILT_IN_SLUG:
            return BUILT_IN_JSON
        return integration_json(await self._integrations.integration(principal, slug))

    async def _patch_integration(self, principal: Principal, body: JsonObject, slug: str) -> JsonObject:
        return integration_json(await self._integrations.patch(principal, slug, body))

    async def _remove_integration(self, principal: Principal, body: JsonObject, slug: str) -> JsonObject:
        await self._integrations.remove(principal, slug)
        return {"removed": True}

    async def _detect(self, principal: Principal, body: JsonObject) -> list[JsonObject]:
        return await OpenApiSpecs(self._integrations).detect(principal, body.get("url"))

    # -- connections ---------------------------------------------------------------------------------

    async def _list_connections(self, principal: Principal, body: JsonObject) -> list[JsonObject]:
        records = await self._integrations.connections.visible(
            principal, request.args.get("integration") or None, request.args.get("owner") or None
        )
        return [connection_json(record) for record in records]

    async def _create_connection(self, principal: Principal, body: JsonObject) -> JsonObject:
        return connection_json(await self._integrations.connections.create(principal, body, pasted=True))

    async def _get_connection(
        self, principal: Principal, body: JsonObject, owner: str, integration: str, name: str
    ) -> JsonObject:
        return connection_json(await self._integrations.connections.get(principal, owner, integration, name))

    async def _patch_connection(
        self, principal: Principal, body: JsonObject, owner: str, integration: str, name: str
    ) -> JsonObject:
        return connection_json(await self._integrations.connections.patch(principal, owner, integration, name, body))

    async def _remove_connection(
        self, principal: Principal, body: JsonObject, owner: str, integration: str, name: str
    ) -> JsonObject:
        await self._integrations.connections.remove(principal, owner, integration, name)
        return {"removed": True}

    async def _refresh_connection(
        self, principal: Principal, body: JsonObject, owner: str, integration: str, name: str
    ) -> list[JsonObject]:
        return [
            tool_row(entry) for entry in await self._integrations.connections.tools(principal, owner, integration, name)
        ]

    # -- connect links -------------------------------------------------------------------------------

    def _handoff_routes(self) -> tuple[_Route, ...]:
        if self._handoffs is None:
            return ()
        return (_Route("/connections/handoffs", "connection_handoffs", {"POST": self._create_handoff}),)

    async def _create_handoff(self, principal: Principal, body: JsonObject) -> JsonObject:
        assert self._handoffs is not None
        return await create_handoff(self._integrations, self._handoffs, principal, body)

    # -- tools ---------------------------------------------------------------------------------------

    async def _list_tools(self, principal: Principal, body: JsonObject) -> list[JsonObject]:
        args = request.args
        annotations = _flag(args.get("includeAnnotations"))
        entries = await self._visible(principal, include_blocked=_flag(args.get("includeBlocked")))
        selected = select_tools(
            entries,
            integration=args.get("integration") or None,
            owner=args.get("owner") or None,
            connection=args.get("connection") or None,
            query=args.get("query") or None,
        )
        return [tool_row(entry, annotations=annotations) for entry in selected]

    async def _tool_schema(self, principal: Principal, body: JsonObject) -> JsonObject:
        raw = request.args.get("address") or ""
        address = parse_tool_address(raw)
        view = await self._integrations.view(principal)
        entry = view.tool(address) if address is not None else None
        if entry is None or await self._blocked(principal, [entry]):
            raise ToolNotFound(f"Tool not found: {raw[:500]}", address=raw[:500])
        return tool_schema(entry, view)

    async def _visible(self, principal: Principal, *, include_blocked: bool) -> list[ToolEntry]:
        entries = list((await self._integrations.view(principal)).entries)
        if include_blocked:
            return entries
        blocked = await self._blocked(principal, entries)
        return [entry for entry in entries if entry.tool_id not in blocked]

    async def _blocked(self, principal: Principal, entries: list[ToolEntry]) -> set[str]:
        """The tool ids of `entries` that a policy blocks for this caller: hidden, as upstream hides them."""
        if not entries:
            return set()
        policies = [to_rule(record) for record in await self._policies.list(principal)]
        return {
            entry.tool_id
            for entry in entries
            if decide(policies, entry.tool_id, entry.tool.requires_approval).action is Action.BLOCK
        }

    # -- providers -----------------------------------------------------------------------------------

    async def _providers(self, principal: Principal, body: JsonObject) -> list[str]:
        return await self._integrations.connections.providers(principal)

    async def _provider_items(self, principal: Principal, body: JsonObject, key: str) -> list[JsonObject]:
        items = await self._integrations.connections.provider_items(principal, key)
        return [{"id": item.id, "name": item.name} for item in items]

    # -- OpenAPI -------------------------------------------------------------------------------------

    async def _preview(self, principal: Principal, body: JsonObject) -> JsonObject:
        raw = request.args.get("toolNames") or ""
        names = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 3 else 0
        return await OpenApiSpecs(self._integrations).preview(principal, body, tool_names=names)

    async def _add_spec(self, principal: Principal, body: JsonObject) -> JsonObject:
        record, count = await self._integrations.add(principal, OPENAPI, body)
        return {"slug": record.slug, "toolCount": count}

    async def _openapi_summary(self, principal: Principal, body: JsonObject, slug: str) -> JsonObject | None:
        try:
            record = await self._integrations.integration(principal, slug)
        except IntegrationNotFound:
            return None
        if record.kind != OPENAPI:
            return None
        return {
            "slug": record.slug,
            "description": record.description,
            "kind": record.kind,
            "canRemove": True,
            "canRefresh": record.can_refresh,
        }

    async def _openapi_remove(self, principal: Principal, body: JsonObject, slug: str) -> Response:
        await self._integrations.remove(principal, slug)
        return Response(b"", status=204)

    async def _openapi_config(self, principal: Principal, body: JsonObject, slug: str) -> JsonObject:
        record = await self._integrations.integration(principal, slug)
        config: JsonObject = {
            key: record.config[key] for key in ("specUrl", "baseUrl", "headers", "queryParams") if key in record.config
        }
        if "specUrl" in config and not principal.org_admin:
            config["specUrl"] = display_url(config["specUrl"])
        return {**config, "authenticationTemplate": [method_json(method) for method in record.auth_methods]}

    async def _configure(self, principal: Principal, body: JsonObject, slug: str) -> JsonObject:
        record = await self._integrations.configure(principal, slug, OPENAPI, body)
        return {"authenticationTemplate": [method_json(method) for method in record.auth_methods]}

    async def _update_spec(self, principal: Principal, body: JsonObject, slug: str) -> JsonObject:
        return await OpenApiSpecs(self._integrations).update(principal, slug, body)

    # -- GraphQL -------------------------------------------------------------------------------------

    async def _add_graphql(self, principal: Principal, body: JsonObject) -> JsonObject:
        record, count = await self._integrations.add(principal, GRAPHQL, body)
        return {"slug": record.slug, "toolCount": count}

    async def _graphql_summary(self, principal: Principal, body: JsonObject, slug: str) -> JsonObject | None:
        try:
            return graphql_wire.summary(await self._integrations.integration(principal, slug, GRAPHQL), principal)
        except IntegrationNotFound:
            return None

    async def _graphql_config(self, principal: Principal, body: JsonObject, slug: str) -> JsonObject:
        return graphql_config(await self._integrations.integration(principal, slug, GRAPHQL), principal)

    async def _configure_graphql(self, principal: Principal, body: JsonObject, slug: str) -> JsonObject:
        return graphql_config(await self._integrations.configure(principal, slug, GRAPHQL, body), principal)

    # -- MCP servers ---------------------------------------------------------------------------------

    def _mcp_routes(self) -> tuple[_Route, ...]:
        server = "/mcp/servers/<slug>"
        return (
            _Route("/mcp/probe", "mcp_probe", {"POST": self._mcp_probe}),
            _Route("/mcp/servers", "mcp_servers", {"POST": self._mcp_add}),
            _Route(server, "mcp_server", {"GET": self._mcp_get, "DELETE": self._mcp_remove}),
            _Route(server + "/config", "mcp_server_config", {"POST": self._mcp_configure}),
        )

    def _mcp(self) -> McpServers:
        return McpServers(self._integrations)

    async def _mcp_probe(self, principal: Principal, body: JsonObject) -> JsonObject:
        return await self._mcp().probe(principal, body)

    async def _mcp_add(self, principal: Principal, body: JsonObject) -> JsonObject:
        record, count = await self._integrations.add(principal, MCP, body)
        return {"slug": record.slug, "toolCount": count}

    async def _mcp_get(self, principal: Principal, body: JsonObject, slug: str) -> JsonObject | None:
        try:
            record = await self._mcp().get(principal, slug)
        except IntegrationNotFound:
            return None
        return None if record is None else server_json(record, admin=principal.org_admin)

    async def _mcp_remove(self, principal: Principal, body: JsonObject, slug: str) -> Response:
        await self._mcp().remove(principal, slug)
        return Response(b"", status=204)

    async def _mcp_configure(self, principal: Principal, body: JsonObject, slug: str) -> JsonObject:
        record = await self._integrations.configure(principal, slug, MCP, body)
        return server_json(record, admin=principal.org_admin)


def graphql_config(record: IntegrationRecord, principal: Principal) -> JsonObject:
    """A GraphQL integration's config: its endpoint, static headers and query parameters, where its schema
    comes from (`snapshot` or each `connection`), and its auth methods."""
    config: JsonObject = {key: record.config[key] for key in ("headers", "queryParams") if key in record.config}
    return {
        "endpoint": graphql_wire.endpoint_for(record, principal),
        **config,
        "introspection": record.config.get("introspection"),
        "authenticationTemplate": [method_json(method) for method in record.auth_methods],
    }


def select_tools(
    entries: Iterable[ToolEntry],
    *,
    integration: str | None = None,
    owner: str | None = None,
    connection: str | None = None,
    query: str | None = None,
) -> list[ToolEntry]:
    """`/api/tools`' filters: exact integration, owner and connection; `query` a case-insensitive substring
    of the tool's name or description."""
    return [
        entry
        for entry in entries
        if (integration is None or entry.integration.slug == integration)
        and (owner is None or entry.connection.owner == owner)
        and (connection is None or entry.connection.name == connection)
        and tool_matches(entry.tool.name, entry.tool.description, query)
    ]


def tool_matches(name: str, description: str, query: str | None) -> bool:
    """`/api/tools`' `query` (and the console's tool filter): a case-insensitive substring of the tool's name
    or description; no query matches every tool."""
    if not query:
        return True
    needle = query.casefold()
    return needle in name.casefold() or needle in description.casefold()


def tool_schema(entry: ToolEntry, view: View) -> JsonObject:
    """`/api/tools/schema`: the tool's JSON Schemas with the definitions they reach, and the TypeScript
    `describe.tool` shows, but with the output type unwrapped (the data, not the `{ok, data}` union)."""
    tool = entry.tool
    defs = view.defs.get(entry.source_hash, {})
    answer: JsonObject = {
        "address": "tools." + entry.tool_id,
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.input_schema,
        "outputSchema": tool.output_schema,
    }
    definitions = referenced_definitions([tool.input_schema, tool.output_schema], defs)
    if definitions:
        answer["schemaDefinitions"] = definitions
    answer.update(signature(tool.input_schema, tool.output_schema, defs))
    return answer


_DEF_REFS = ("#/$defs/", "#/definitions/")


def referenced_definitions(schemas: Iterable[Any], defs: Mapping[str, Any]) -> JsonObject:
    """The `$defs` entries `schemas` reference as `#/$defs/<name>` (or `#/definitions/<name>`), directly or
    through each other, in the order first reached. Iterative, and each definition is walked once, so any
    nesting or cycle is safe."""
    found: JsonObject = {}
    stack: list[Any] = list(schemas)
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            prefix = next((p for p in _DEF_REFS if isinstance(ref, str) and ref.startswith(p)), None)
            if isinstance(ref, str) and prefix is not None:
                name = ref[len(prefix) :].replace("~1", "/").replace("~0", "~")
                if name in defs and name not in found:
                    found[name] = defs[name]
                    stack.append(defs[name])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def method_json(method: AuthMethod) -> JsonObject:
    """An auth method in its canonical stored form (placements, not the authoring dialect)."""
    body: JsonObject = {"slug": method.slug, "kind": method.kind}
    if method.label is not None:
        body["label"] = method.label
    if method.placements:
        body["placements"] = [
            {
                "carrier": placement.carrier,
                "name": placement.name,
                "prefix": placement.prefix,
                **({"variable": placement.variable} if placement.variable is not None else {}),
                **({"literal": placement.literal} if placement.literal is not None else {}),
            }
            for placement in method.placements
        ]
    if method.oauth is not None:
        body["oauth"] = method.oauth
    return body


def _flag(value: str | None) -> bool:
    return value is not None and value.strip().lower() in _TRUE


async def _body(path: str) -> JsonObject | Response:
    """The JSON object a change carries (`{}` when it carries none), or the refusal to answer instead."""
    declares_body = (request.content_length or 0) > 0 or "transfer-encoding" in request.headers
    if not declares_body:
        return {}
    limit = body_limit(path)
    timeout = SPEC_BODY_TIMEOUT_SECONDS if limit == MAX_SPEC_BODY_BYTES else BODY_TIMEOUT_SECONDS
    body = await read_json_object(limit, timeout)
    if isinstance(body, BodyRefused):
        if body.status == 400:
            return _failure(InvalidInput(body.message))
        return _refusal(body.status, body.message, body.headers)
    return body


def _ok(body: Any) -> Response:
    return Response(dumps(body), status=200, content_type=rules.JSON)


def _failure(error: IntegrationError) -> Response:
    """The one rendering of an integration error: its tag, status and message, and its extra fields."""
    return _tagged(error.status, error.tag, error.message, error.fields)


def _refusal(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return _tagged(status, _REQUEST_TAGS.get(status, "HttpError"), message, {}, headers)


def _tagged(
    status: int, tag: str, message: str, fields: Mapping[str, object], headers: dict[str, str] | None = None
) -> Response:
    body = {"_tag": tag, "message": message, **{key: value for key, value in fields.items() if key not in _OWN}}
    return Response(dumps(body), status=status, content_type=rules.JSON, headers=headers or {})
