"""The executor's tools for the catalog itself: adding OpenAPI specs, GraphQL endpoints and MCP servers, managing
connections.

Paths `tools.executor.openapi.previewSpec|addSpec`, `tools.executor.graphql.getIntegration|addIntegration`,
`tools.executor.mcp.probeEndpoint|getServer|addServer`, `tools.executor.coreTools.integrations.detect` and
`tools.executor.coreTools.connections.list|create|createHandoff|remove|refresh` (upstream §3.2). What
changes the catalog is approval-gated, and `connections.create` takes provider references or `none` only:
a secret value never passes through the agent; `createHandoff` (ungated: it changes nothing until a person
pastes a value on its page) is how one gets in. Each gated tool checks what it can before the approval is
asked, so a doomed call costs no human.
"""

import logging
from typing import Any

import attrs

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.addresses import OWNERS
from executor_mcp.integrations.connections import check_connection_request
from executor_mcp.integrations.graphql import wire as graphql_wire
from executor_mcp.integrations.handoff import INSTRUCTIONS, Handoffs, connect_url, handoff_id, handoff_terms
from executor_mcp.integrations.mcp.servers import McpServers, server_json
from executor_mcp.integrations.openapi.specs import OpenApiSpecs
from executor_mcp.integrations.service import Integrations
from executor_mcp.integrations.wire import connection_json, tool_row
from executor_mcp.records.integration_errors import InvalidConnectionInput, InvalidInput
from executor_mcp.records.integrations import GRAPHQL, MCP, OPENAPI
from executor_mcp.storage.records import Owner as Principal
from executor_mcp.tools.catalog import StaticTool
from executor_mcp.tools.context import CallContext

log = logging.getLogger(__name__)

_OWNER = {"type": "string", "enum": list(OWNERS)}
_REFERENCE = {
    "type": "object",
    "properties": {"provider": {"type": "string"}, "id": {"type": "string"}},
    "required": ["provider", "id"],
}
CONNECTION: JsonObject = {
    "type": "object",
    "properties": {
        "owner": _OWNER,
        "name": {"type": "string"},
        "integration": {"type": "string"},
        "template": {"type": "string"},
        "provider": {"type": ["string", "null"]},
        "address": {"type": "string"},
        "identityLabel": {"type": ["string", "null"]},
        "description": {"type": ["string", "null"]},
    },
    "required": ["owner", "name", "integration", "template", "address"],
}
_TOOL_ROW = {
    "type": "object",
    "properties": {
        "address": {"type": "string"},
        "owner": {"type": "string"},
        "integration": {"type": "string"},
        "connection": {"type": "string"},
        "name": {"type": "string"},
        "pluginId": {"type": "string"},
        "description": {"type": "string"},
    },
}
_SPEC = {
    "description": 'The OpenAPI document: {kind: "url", url} or {kind: "blob", value: "<JSON or YAML text>"}',
    "anyOf": [
        {
            "type": "object",
            "properties": {"kind": {"type": "string", "enum": ["url"]}, "url": {"type": "string"}},
            "required": ["kind", "url"],
        },
        {
            "type": "object",
            "properties": {"kind": {"type": "string", "enum": ["blob"]}, "value": {"type": "string"}},
            "required": ["kind", "value"],
        },
        {"type": "string"},
    ],
}
_CONNECTION_KEY = {"owner": _OWNER, "integration": {"type": "string"}, "name": {"type": "string"}}


def _values(args: Any) -> JsonObject:
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise InvalidInput("Tool arguments did not match the input schema.")
    return args


def _slug(args: Any) -> str:
    slug = _values(args).get("slug")
    if not isinstance(slug, str) or not slug:
        raise InvalidInput("slug must be a non-empty string")
    return slug


def _key(args: Any) -> tuple[str, str, str]:
    values = _values(args)
    owner, integration, name = values.get("owner"), values.get("integration"), values.get("name")
    if owner not in OWNERS or not isinstance(integration, str) or not isinstance(name, str):
        raise InvalidConnectionInput('Expected {owner: "org" | "user", integration, name}')
    return owner, integration, name


async def create_handoff(
    integrations: Integrations, handoffs: Handoffs, principal: Principal, values: JsonObject
) -> JsonObject:
    """`connections.createHandoff` (and the console's `POST /api/connections/handoffs`): a one-time connect
    link for `{integration, owner?, template?, label?}`, checked against who asks, as `{url, instructions}`."""
    slug = values.get("integration")
    if not isinstance(slug, str) or not slug:
        raise InvalidConnectionInput("integration must be a non-empty string")
    record = await integrations.integration(principal, slug)
    terms = handoff_terms(principal, values, record)
    token = handoffs.book.issue(principal, terms.owner, terms.integration, terms.template, terms.label)
    log.info("handoff %s issued for %s (%s, %s)", handoff_id(token), terms.integration, terms.owner, terms.template)
    return {"url": connect_url(handoffs.base_url(), token, terms), "instructions": INSTRUCTIONS}


@attrs.frozen
class ConnectedTools:
    """The catalog's own tools over `integrations`: each handler a method, to be checked piece by piece, and
    `tools()` the static tools that hold them (GraphQL's and, where MCP servers are enabled, MCP's among them)."""

    integrations: Integrations
    handoffs: Handoffs

    async def preview_spec(self, args: Any, context: CallContext) -> JsonObject:
        return await OpenApiSpecs(self.integrations).preview(context.principal, args)

    async def add_spec(self, args: Any, context: CallContext) -> JsonObject:
        record, count = await self.integrations.add(context.principal, OPENAPI, args)
        return {"slug": record.slug, "toolCount": count}

    def check_add(self, args: Any, context: CallContext) -> None:
        self.integrations.check_may_add(context.principal, OPENAPI, _values(args))

    async def list_connections(self, args: Any, context: CallContext) -> JsonObject:
        values = _values(args)
        records = await self.integrations.connections.visible(
            context.principal, values.get("integration"), values.get("owner")
        )
        return {"connections": [connection_json(record, full=False) for record in records]}

    async def create_connection(self, args: Any, context: CallContext) -> JsonObject:
        record = await self.integrations.connections.create(context.principal, args, pasted=False)
        return connection_json(record, full=False)

    def check_create(self, args: Any, context: CallContext) -> None:
        check_connection_request(context.principal, _values(args), pasted=False)

    async def remove_connection(self, args: Any, context: CallContext) -> JsonObject:
        await self.integrations.connections.remove(context.principal, *_key(args))
        return {"removed": True}

    async def refresh_connection(self, args: Any, context: CallContext) -> JsonObject:
        entries = await self.integrations.connections.tools(context.principal, *_key(args))
        return {"tools": [tool_row(entry) for entry in entries]}

    def check_key(self, args: Any, context: CallContext) -> None:
        _key(args)

    async def handoff(self, args: Any, context: CallContext) -> JsonObject:
        return await create_handoff(self.integrations, self.handoffs, context.principal, _values(args))

    async def detect(self, args: Any, context: CallContext) -> JsonObject:
        return {"results": await OpenApiSpecs(self.integrations).detect(context.principal, _values(args).get("url"))}

    def tools(self) -> tuple[StaticTool, ...]:
        return (
            StaticTool(
                id="executor.openapi.previewSpec",
                read_only=True,
                integration="executor",
                name="openapi.previewSpec",
                description=(
                    "Preview an OpenAPI document before adding it: its title, servers, operation count and auth "
                    "methods. Preview first, then add it with executor.openapi.addSpec. Never ask the user to paste "
                    "API keys or tokens into the chat: connections are created by the user outside it."
                ),
                input_schema={"type": "object", "properties": {"spec": _SPEC}, "required": ["spec"]},
                output_schema={"type": "object"},
                handler=self.preview_spec,
            ),
            StaticTool(
                id="executor.openapi.addSpec",
                integration="executor",
                name="openapi.addSpec",
                description="Add an OpenAPI integration to this organization's catalog from a URL or the document.",
                input_schema={
                    "type": "object",
                    "properties": {
                        "spec": _SPEC,
                        "slug": {"type": "string"},
                        "name": {"type": "string"},
                        "description": {"type": "string"},
                        "baseUrl": {"type": "string"},
                        "headers": {"type": "object"},
                        "queryParams": {"type": "object"},
                        "authenticationTemplate": {"type": "array"},
                    },
                    "required": ["spec"],
                },
                output_schema={
                    "type": "object",
                    "properties": {"slug": {"type": "string"}, "toolCount": {"type": "number"}},
                    "required": ["slug", "toolCount"],
                },
                handler=self.add_spec,
                requires_approval=True,
                approval_description="Add an OpenAPI integration",
                validate=self.check_add,
            ),
            StaticTool(
                id="executor.coreTools.connections.list",
                read_only=True,
                integration="executor",
                name="connections.list",
                description="List the connections you can use: the organization's and your own.",
                input_schema={
                    "type": "object",
                    "properties": {"integration": {"type": "string"}, "owner": _OWNER, "verbose": {"type": "boolean"}},
                },
                output_schema={
                    "type": "object",
                    "properties": {"connections": {"type": "array", "items": CONNECTION}},
                    "required": ["connections"],
                },
                handler=self.list_connections,
            ),
            StaticTool(
                id="executor.coreTools.connections.create",
                integration="executor",
                name="connections.create",
                description=(
                    "Create a connection from a credential the user already stored in a provider "
                    '(`from: {provider, id}` or `inputs: {var: {from}}`), or a no-auth one (`template: "none"`). '
                    "It never takes a secret value."
                ),
                input_schema={
                    "type": "object",
                    "properties": {
                        "owner": _OWNER,
                        "name": {"type": "string"},
                        "integration": {"type": "string"},
                        "template": {"type": "string"},
                        "identityLabel": {"type": "string"},
                        "description": {"type": "string"},
                        "from": _REFERENCE,
                        "inputs": {"type": "object", "additionalProperties": {"type": "object"}},
                    },
                    "required": ["owner", "name", "integration", "template"],
                },
                output_schema=CONNECTION,
                handler=self.create_connection,
                requires_approval=True,
                validate=self.check_create,
            ),
            StaticTool(
                id="executor.coreTools.connections.createHandoff",
                integration="executor",
                name="connections.createHandoff",
                description=(
                    "Get a one-time link where the user pastes an API key or token for an integration, so the secret "
                    "never passes through the chat. Give the user the URL, then call connections.list to find the "
                    "connection they created. owner defaults to user; template to the integration's only auth template."
                ),
                input_schema={
                    "type": "object",
                    "properties": {
                        "integration": {"type": "string"},
                        "owner": _OWNER,
                        "template": {"type": "string"},
                        "label": {"type": "string"},
                    },
                    "required": ["integration"],
                },
                output_schema={
                    "type": "object",
                    "properties": {"url": {"type": "string"}, "instructions": {"type": "string"}},
                    "required": ["url", "instructions"],
                },
                handler=self.handoff,
            ),
            StaticTool(
                id="executor.coreTools.integrations.detect",
                read_only=True,
                integration="executor",
                name="integrations.detect",
                description=(
                    "Detect what kind of integration a URL serves: an OpenAPI document gives one result with a "
                    "suggested name and slug for executor.openapi.addSpec; anything else (or an unreachable URL) none."
                ),
                input_schema={
                    "type": "object",
                    "properties": {"url": {"type": "string", "maxLength": 2048}},
                    "required": ["url"],
                },
                output_schema={
                    "type": "object",
                    "properties": {
                        "results": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "kind": {"type": "string"},
                                    "confidence": {"type": "string", "enum": ["high", "medium", "low"]},
                                    "endpoint": {"type": "string"},
                                    "name": {"type": "string"},
                                    "slug": {"type": "string"},
                                },
                                "required": ["kind", "confidence", "endpoint", "name", "slug"],
                            },
                        }
                    },
                    "required": ["results"],
                },
                handler=self.detect,
            ),
            StaticTool(
                id="executor.coreTools.connections.remove",
                integration="executor",
                name="connections.remove",
                description="Remove a connection; its tools go with it.",
                input_schema={"type": "object", "properties": _CONNECTION_KEY, "required": list(_CONNECTION_KEY)},
                output_schema={
                    "type": "object",
                    "properties": {"removed": {"type": "boolean"}},
                    "required": ["removed"],
                },
                handler=self.remove_connection,
                requires_approval=True,
                validate=self.check_key,
            ),
            StaticTool(
                id="executor.coreTools.connections.refresh",
                integration="executor",
                name="connections.refresh",
                description="Refresh a connection's tools from its integration, and list them.",
                input_schema={"type": "object", "properties": _CONNECTION_KEY, "required": list(_CONNECTION_KEY)},
                output_schema={"type": "object", "properties": {"tools": {"type": "array", "items": _TOOL_ROW}}},
                handler=self.refresh_connection,
                requires_approval=True,
                validate=self.check_key,
            ),
            *GraphqlTools(self.integrations).tools(),
            *(McpServerTools(self.integrations).tools() if self.integrations.kind_named(MCP) is not None else ()),
        )


# -- GraphQL ---------------------------------------------------------------------------------------------

_GRAPHQL_SUMMARY = {
    "type": "object",
    "properties": {
        "slug": {"type": "string"},
        "name": {"type": "string"},
        "description": {"type": "string"},
        "endpoint": {"type": "string"},
        "introspection": {"type": "string", "enum": ["snapshot", "connection"]},
        "canRefresh": {"type": "boolean"},
        "authMethods": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["slug", "endpoint"],
}


@attrs.frozen
class GraphqlTools:
    """`executor.graphql.getIntegration` (ungated) and `executor.graphql.addIntegration` (approval-gated)."""

    integrations: Integrations

    async def get_integration(self, args: Any, context: CallContext) -> JsonObject:
        slug = _slug(args)
        record = await self.integrations.integration(context.principal, slug, GRAPHQL)
        return graphql_wire.summary(record, context.principal)

    async def add_integration(self, args: Any, context: CallContext) -> JsonObject:
        record, count = await self.integrations.add(context.principal, GRAPHQL, args)
        return {"slug": record.slug, "toolCount": count}

    def check_add(self, args: Any, context: CallContext) -> None:
        self.integrations.check_may_add(context.principal, GRAPHQL, _values(args))

    def tools(self) -> tuple[StaticTool, ...]:
        return (
            StaticTool(
                id="executor.graphql.getIntegration",
                read_only=True,
                integration="executor",
                name="graphql.getIntegration",
                description="Show a GraphQL integration: its endpoint, where its schema comes from, its auth methods.",
                input_schema={"type": "object", "properties": {"slug": {"type": "string"}}, "required": ["slug"]},
                output_schema=_GRAPHQL_SUMMARY,
                handler=self.get_integration,
            ),
            StaticTool(
                id="executor.graphql.addIntegration",
                integration="executor",
                name="graphql.addIntegration",
                description=(
                    "Add a GraphQL endpoint to this organization's catalog: its queries and mutations become tools "
                    "(query.<field>, mutation.<field>). Without `sdl` or `introspectionJson`, each connection "
                    "introspects the endpoint with its own credential. Never ask the user to paste API keys or tokens "
                    "into the chat: connections are created by the user outside it."
                ),
                input_schema={
                    "type": "object",
                    "properties": {
                        "endpoint": {"type": "string"},
                        "slug": {"type": "string"},
                        "name": {"type": "string"},
                        "description": {"type": "string"},
                        "sdl": {
                            "type": "string",
                            "description": "The schema's SDL, for an endpoint with introspection off",
                        },
                        "introspectionJson": {"type": "object", "description": "A saved introspection result"},
                        "headers": {"type": "object"},
                        "queryParams": {"type": "object"},
                        "authenticationTemplate": {"type": "array"},
                    },
                    "required": ["endpoint"],
                },
                output_schema={
                    "type": "object",
                    "properties": {"slug": {"type": "string"}, "toolCount": {"type": "number"}},
                    "required": ["slug", "toolCount"],
                },
                handler=self.add_integration,
                requires_approval=True,
                approval_description="Add a GraphQL integration",
                validate=self.check_add,
            ),
        )


# -- MCP servers ------------------------------------------------------------------------------------

_MCP_SERVER_INPUT = {
    "type": "object",
    "properties": {
        "transport": {"type": "string", "enum": ["remote", "stdio"]},
        "name": {"type": "string"},
        "description": {"type": "string"},
        "slug": {"type": "string"},
        "endpoint": {"type": "string"},
        "remoteTransport": {"type": "string", "enum": ["auto", "streamable-http", "sse"]},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "queryParams": {"type": "object", "additionalProperties": {"type": "string"}},
        "auth": {
            "type": "object",
            "description": '{kind: "none"} or {kind: "header", headerName, prefix?} (a connection gives the token)',
        },
        "authenticationTemplate": {"type": "array"},
        "command": {"type": "string"},
        "args": {"type": "array", "items": {"type": "string"}},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "cwd": {"type": "string"},
    },
    "required": ["name"],
}


@attrs.frozen
class McpServerTools:
    """`executor.mcp.probeEndpoint` and `getServer` (ungated) and `executor.mcp.addServer` (approval-gated)."""

    integrations: Integrations
    servers: McpServers = attrs.field(
        init=False, default=attrs.Factory(lambda self: McpServers(self.integrations), takes_self=True)
    )

    async def probe(self, args: Any, context: CallContext) -> JsonObject:
        return await self.servers.probe(context.principal, _values(args))

    async def get_server(self, args: Any, context: CallContext) -> JsonObject:
        slug = _slug(args)
        record = await self.servers.get(context.principal, slug)
        return {"server": None if record is None else server_json(record, admin=context.principal.org_admin)}

    async def add_server(self, args: Any, context: CallContext) -> JsonObject:
        record, count = await self.integrations.add(context.principal, MCP, args)
        return {"slug": record.slug, "toolCount": count}

    def check_add(self, args: Any, context: CallContext) -> None:
        self.integrations.check_may_add(context.principal, MCP, _values(args))

    def tools(self) -> tuple[StaticTool, ...]:
        return (
            StaticTool(
                id="executor.mcp.probeEndpoint",
                read_only=True,
                integration="executor",
                name="mcp.probeEndpoint",
                description=(
                    "Probe a remote MCP server URL before adding it: whether it answers MCP, over which transport, its "
                    "name and version, whether it requires authentication, and its tool count when it lists without "
                    "it. Then add it with executor.mcp.addServer. Never ask the user to paste tokens into the chat."
                ),
                input_schema={
                    "type": "object",
                    "properties": {
                        "endpoint": {"type": "string"},
                        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                        "remoteTransport": {"type": "string", "enum": ["auto", "streamable-http", "sse"]},
                    },
                    "required": ["endpoint"],
                },
                output_schema={"type": "object"},
                handler=self.probe,
            ),
            StaticTool(
                id="executor.mcp.getServer",
                read_only=True,
                integration="executor",
                name="mcp.getServer",
                description="Show an MCP server integration: its transport, endpoint or command, and auth templates.",
                input_schema={"type": "object", "properties": {"slug": {"type": "string"}}, "required": ["slug"]},
                output_schema={"type": "object", "properties": {"server": {"type": ["object", "null"]}}},
                handler=self.get_server,
            ),
            StaticTool(
                id="executor.mcp.addServer",
                integration="executor",
                name="mcp.addServer",
                description=(
                    "Add an MCP server to this organization's catalog (a remote URL, or with the server's "
                    "--allow-stdio-mcp a local command). Its tools appear per connection, once one is created."
                ),
                input_schema=_MCP_SERVER_INPUT,
                output_schema={
                    "type": "object",
                    "properties": {"slug": {"type": "string"}, "toolCount": {"type": "number"}},
                    "required": ["slug", "toolCount"],
                },
                handler=self.add_server,
                requires_approval=True,
                approval_description="Add an MCP server integration",
                validate=self.check_add,
            ),
        )
