"""The console's integrations and connections pages.

    GET /integrations           the visitor's integrations (the built-in `executor` first) and the forms that add
                                an OpenAPI spec, an MCP server (a remote URL, or a stdio command where the server
                                allows them) or a GraphQL API
    GET /integrations/<slug>    one integration: details, auth templates, the visitor's connections to it, its
                                tools with their TypeScript (`?query=` filters, `?page=` pages), and refresh,
                                update and remove
    GET /connections            the visitor's connections (an OAuth one with its scopes, expiry, last refresh and
                                health), the new-connection form, the connect-link form and the OAuth client form
                                (`?oauthClient=1&slug=..&clientId=..`: `oauth.clients.createHandoff`'s link, open
                                and prefilled; its secret is typed there and posted to `/api/oauth/clients`)
    POST /connections/oauth     {owner, integration, template, name, client?, clientOwner?} -> {authorizationUrl}:
                                a new OAuth connection's sign-in; without a client, one of the API's authorization
                                server the visitor can use, else this server registers itself there
    POST /connections/reconnect {owner, integration, name} -> {authorizationUrl}: a new sign-in for an OAuth
                                connection, with its client, template and name (`integrations.oauth.start`);
                                the page's script sends the browser there. {connected: true} for a client
                                credentials client, connected at once

Pages only read, through the service calls the JSON API makes, always with `visitor.principal`, so a page shows
exactly what that API would answer the visitor. Every change is the page script's JSON call to `/api/...`
(`static/catalog.js`), but Connect (OAuth) and Reconnect, JSON POSTs to the console's own routes with the
visitor's CSRF token, as the console's other posts. A connection's values never reach a page: only where they live.
"""

import time
import urllib.parse
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

import attrs
import trio
from quart import Quart, Response, request

from executor_mcp.auth.principal import Principal
from executor_mcp.codec import JsonObject
from executor_mcp.integrations.access import admin_refusal
from executor_mcp.integrations.graphql.wire import endpoint_for
from executor_mcp.integrations.mcp.kind import McpKind
from executor_mcp.integrations.mcp.registration import STDIO
from executor_mcp.integrations.mcp.servers import server_json
from executor_mcp.integrations.oauth_signins import OAuthSignIns
from executor_mcp.integrations.openapi.auth import describe_methods
from executor_mcp.integrations.service import Integrations
from executor_mcp.integrations.validation import MAX_DESCRIPTION_LENGTH, MAX_NAME_LENGTH, text
from executor_mcp.integrations.wire import BUILT_IN_JSON, integration_json
from executor_mcp.protocol.errors import Refused
from executor_mcp.records.integration_errors import IntegrationError, InvalidInput
from executor_mcp.records.integrations import (
    BUILT_IN_SLUG,
    GRAPHQL,
    MCP,
    NO_AUTH,
    OPENAPI,
    AuthMethod,
    ConnectionRecord,
    IntegrationRecord,
)
from executor_mcp.tools.catalog import Catalog
from executor_mcp.tools.typescript import TOOL_DEFINITIONS, signature
from executor_mcp.transport.discovery import API_PREFIX
from executor_mcp.transport.integrations_api import MAX_SPEC_BODY_BYTES, tool_matches
from executor_mcp.transport.json_answers import json_body, json_error, json_ok
from executor_mcp.web.console import MAX_SIGN_IN_BODY_BYTES, Console
from executor_mcp.web.signin import SignIn

# A large spec has thousands of tools: a page renders this many, with links to the others.
TOOLS_PER_PAGE = 50
# What one tool shows at most: a hostile spec's types could be megabytes of text.
MAX_SHOWN_TYPESCRIPT = 4000
MAX_SHOWN_DEFINITIONS = 20
MAX_QUERY_LENGTH = 200
# How many tool names the add form's preview shows.
PREVIEW_TOOL_NAMES = 8
_ELLIPSIS = "\u2026"
RECONNECT_PATH = "/connections/reconnect"
OAUTH_CONNECT_PATH = "/connections/oauth"
# What `oauth.clients.createHandoff`'s link may prefill in the page's client form (never a secret), each bounded.
CLIENT_FORM_FIELDS = ("owner", "slug", "grant", "clientId", "authorizationUrl", "tokenUrl", "resource")
MAX_PREFILL = 2048


class Described(Protocol):
    """A tool as both a compiled `ToolDef` and the built-in `StaticTool` carry it."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def input_schema(self) -> JsonObject | None: ...
    @property
    def output_schema(self) -> Any: ...
    @property
    def requires_approval(self) -> bool: ...


@attrs.frozen
class ToolView:
    """One tool as the integration page shows it: `name(input): output`, and the named types those reach."""

    name: str
    description: str
    input: str | None
    output: str
    definitions: tuple[tuple[str, str], ...]
    address: str | None  # where the visitor calls it, for tools that exist only at a connection
    requires_approval: bool


def shown(text: str) -> str:
    return text if len(text) <= MAX_SHOWN_TYPESCRIPT else text[:MAX_SHOWN_TYPESCRIPT] + _ELLIPSIS


def tool_view(tool: Described, defs: JsonObject, address: str | None = None) -> ToolView:
    """The TypeScript `/api/tools/schema` answers (`signature`), bounded for a page; the fixed `ToolError`,
    `ToolHttpMeta` and `ToolFile` are left out, as an unwrapped output never names them."""
    typed = signature(tool.input_schema, tool.output_schema, defs)
    definitions = [
        (name, shown(body)) for name, body in typed["typeScriptDefinitions"].items() if name not in TOOL_DEFINITIONS
    ]
    return ToolView(
        name=tool.name,
        description=tool.description,
        input=shown(typed["inputTypeScript"]) if "inputTypeScript" in typed else None,
        output=shown(typed["outputTypeScript"]),
        definitions=tuple(definitions[:MAX_SHOWN_DEFINITIONS]),
        address=address,
        requires_approval=tool.requires_approval,
    )


@attrs.frozen
class Window:
    """One page of a long list: its items, which page it is (from 1) of how many, and of how many items."""

    items: tuple[Any, ...]
    page: int
    pages: int
    total: int
    first: int  # the 1-based position of the first item shown (0 when none is)


def window(items: Sequence[Any], page: int, size: int) -> Window:
    """Page `page` of `items`, `size` at a time; a page past the end is the last one."""
    pages = max(1, -(-len(items) // size))
    page = min(max(1, page), pages)
    start = (page - 1) * size
    shown_items = tuple(items[start : start + size])
    return Window(shown_items, page, pages, len(items), start + 1 if shown_items else 0)


def page_number(raw: str | None) -> int:
    return int(raw) if raw is not None and raw.isascii() and raw.isdigit() and len(raw) <= 6 else 1


def page_link(path: str, query: str, page: int) -> str:
    values = {"query": query} if query else {}
    if page > 1:
        values["page"] = str(page)
    return path + ("?" + urllib.parse.urlencode(values) if values else "")


@attrs.frozen
class TemplateChoice:
    """An auth template a connection can be made with from a page: its inputs are pasted, it takes none, or
    (`oauth`) a person signs in at the API's authorization server."""

    slug: str
    label: str
    inputs: tuple[tuple[str, str], ...]  # (input, where it goes)
    oauth: bool = False

    def json(self) -> JsonObject:
        choice: JsonObject = {"slug": self.slug, "label": self.label, "inputs": [list(field) for field in self.inputs]}
        if self.oauth:
            choice["oauth"] = True
        return choice


def template_choices(record: IntegrationRecord) -> tuple[TemplateChoice, ...]:
    """The templates a page can make a connection with: API-key methods (their inputs pasted), no-auth ones and
    OAuth ones (a sign-in, no pasted value); an integration with no method at all connects with `none`."""
    if not record.auth_methods:
        return (TemplateChoice(NO_AUTH, "No authentication", ()),)
    choices = []
    for method, described in zip(record.auth_methods, describe_methods(record.auth_methods), strict=True):
        if method.kind == NO_AUTH or (method.kind == "apikey" and method.inputs):
            fields = tuple((variable, method.input_places(variable)) for variable in method.inputs)
            choices.append(TemplateChoice(method.slug, described["label"], fields))
        elif method.kind == "oauth2":
            choices.append(TemplateChoice(method.slug, described["label"], (), oauth=True))
    return tuple(choices)


def placement_lines(method: AuthMethod) -> tuple[str, ...]:
    """Where a template puts what, for a person: `header x-api-key: <token>`; a fixed value is not shown."""
    lines = []
    for placement in method.placements:
        what = f"<{placement.input}>" if placement.input is not None else "a fixed value"
        lines.append(f"{placement.carrier} {placement.name}: {placement.prefix}{what}")
    return tuple(lines)


@attrs.frozen
class TemplateView:
    slug: str
    label: str
    kind: str
    placements: tuple[str, ...]


def template_views(record: IntegrationRecord) -> tuple[TemplateView, ...]:
    return tuple(
        TemplateView(method.slug, described["label"], described["kind"], placement_lines(method))
        for method, described in zip(record.auth_methods, describe_methods(record.auth_methods), strict=True)
    )


@attrs.frozen
class OAuthView:
    """An OAuth connection's facts, as a page shows them (never a token: the record holds none)."""

    client: str
    client_owner: str
    scopes: tuple[str, ...]  # granted
    missing: tuple[str, ...]  # asked for and not granted
    expires: str | None  # None: the provider did not say
    expired: bool
    refreshed: str | None
    health: str | None  # why its last tool listing failed; None while healthy


@attrs.frozen
class ConnectionRow:
    owner: str
    integration: str
    name: str
    address: str
    template: str
    created: str
    label: str | None
    oauth: OAuthView | None = None


def when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))


def oauth_view(record: ConnectionRecord, now: float) -> OAuthView | None:
    if record.oauth_client is None:
        return None
    return OAuthView(
        client=record.oauth_client,
        client_owner=record.oauth_client_owner or record.owner,
        scopes=tuple((record.oauth_scope or "").split()),
        missing=record.missing_scopes,
        expires=when(record.expires_at) if record.expires_at is not None else None,
        expired=record.expires_at is not None and record.expires_at <= now,
        refreshed=when(record.refreshed_at) if record.refreshed_at is not None else None,
        health=record.sync_error,
    )


def connection_row(record: ConnectionRecord, now: float | None = None) -> ConnectionRow:
    return ConnectionRow(
        owner=record.owner,
        integration=record.integration,
        name=record.name,
        address=record.address,
        template=record.template,
        created=when(record.created_at),
        label=record.identity_label,
        oauth=oauth_view(record, time.time() if now is None else now),
    )


@attrs.frozen
class IntegrationRow:
    slug: str
    name: str
    kind: str
    tools: int
    connections: int


# What an integration's page refreshes: its spec, fetched again from the URL it was added from; or the tool
# list of each of the visitor's connections to it, for a kind whose tools each connection discovers.
REFRESH_SPEC, REFRESH_CONNECTIONS = "spec", "connections"
# What its update form changes: the OpenAPI document, the endpoint, or a stdio server's command and arguments.
SOURCE_SPEC, SOURCE_ENDPOINT, SOURCE_COMMAND = "spec", "endpoint", "command"


@attrs.frozen
class Manage:
    """What an integration's page offers to change, where each change goes, and why a visitor may not."""

    refusal: str | None  # the service's words when the visitor may not change the integration
    refresh: str | None  # REFRESH_SPEC, REFRESH_CONNECTIONS, or None: its tools change only by an update
    source: str | None  # SOURCE_SPEC, SOURCE_ENDPOINT or SOURCE_COMMAND
    update_path: str  # the `/api` route of the update form
    endpoint: str = ""  # the current endpoint, command and arguments, prefilled for an admin only
    command: str = ""
    args: str = ""  # one a line


def manage_view(record: IntegrationRecord, principal: Principal, discovers: bool) -> Manage:
    """How the page refreshes and updates the integration, by kind (OpenAPI, GraphQL, and otherwise MCP), through
    the `/api` routes the CLI's service calls are served at. An endpoint may carry a token in its query: only an
    admin, the one who can change it, gets it prefilled, as the API shows it to one (`endpoint_for`,
    `server_json(admin=True)`)."""
    refusal = admin_refusal(principal)
    words = refusal.message if refusal is not None else None
    shown = refusal is None
    slug = urllib.parse.quote(record.slug, safe="")
    if record.kind == OPENAPI:
        refresh = REFRESH_SPEC if record.can_refresh else None
        return Manage(words, refresh, SOURCE_SPEC, f"{API_PREFIX}/openapi/integrations/{slug}/spec")
    refresh = REFRESH_CONNECTIONS if discovers else None
    if record.kind == GRAPHQL:
        endpoint = endpoint_for(record, principal) if shown else ""
        return Manage(words, refresh, SOURCE_ENDPOINT, f"{API_PREFIX}/graphql/integrations/{slug}/config", endpoint)
    path = f"{API_PREFIX}/mcp/servers/{slug}/config"
    config = record.config
    if config.get("transport") != STDIO:
        return Manage(words, refresh, SOURCE_ENDPOINT, path, str(config.get("endpoint", "")) if shown else "")
    if not shown:
        return Manage(words, refresh, SOURCE_COMMAND, path)
    args = "\n".join(str(arg) for arg in config.get("args", []))
    return Manage(words, refresh, SOURCE_COMMAND, path, command=str(config.get("command", "")), args=args)


def server_facts(record: IntegrationRecord, principal: Principal) -> tuple[tuple[str, str], ...]:
    """An MCP server's transport and, for a stdio one, its command line, from the config
    `GET /api/mcp/servers/<slug>` shows the visitor (`server_json`)."""
    config = server_json(record, admin=principal.org_admin)["config"]
    if config.get("transport") == STDIO:
        return (("Transport", "stdio"), ("Command", shown(" ".join([config["command"], *config.get("args", [])]))))
    return (("Transport", f"remote, {config.get('remoteTransport', 'auto')}"),)


class CatalogPages:
    def __init__(self, console: Console, integrations: Integrations, catalog: Catalog, *, handoffs: bool) -> None:
        self._console = console
        self._integrations = integrations
        self._catalog = catalog
        self._handoffs = handoffs  # whether connect links are served (the API's handoff route exists)

    def register(self, app: Quart) -> None:
        self._console.add_page(app, "/integrations", "console_integrations", self._list)
        self._console.add_page(app, "/integrations/<slug>", "console_integration", self._one)
        self._console.add_page(app, "/connections", "console_connections", self._connections)
        app.add_url_rule(
            RECONNECT_PATH, "console_reconnect", self._reconnect, methods=["POST"], provide_automatic_options=False
        )
        app.add_url_rule(
            OAUTH_CONNECT_PATH,
            "console_oauth_connect",
            self._connect,
            methods=["POST"],
            provide_automatic_options=False,
        )

    async def _list(self) -> Response:
        async def build(visitor: SignIn) -> Response:
            principal = visitor.principal
            summaries = await self._catalog.summaries(principal)
            counts = Counter(record.integration for record in await self._integrations.connections.visible(principal))
            rows = [
                IntegrationRow(item["id"], item["name"], item["kind"], item["toolCount"], counts[item["id"]])
                for item in summaries
            ]
            refusal = admin_refusal(principal)
            mcp = self._integrations.kind_named(MCP)
            return self._console.view(
                visitor,
                "integrations.html",
                title="Integrations",
                page="integrations",
                scripts=("catalog.js",),
                styles=("catalog.css",),
                rows=rows,
                add_refusal=refusal.message if refusal is not None else None,
                max_spec_bytes=MAX_SPEC_BODY_BYTES,
                max_spec_mib=MAX_SPEC_BODY_BYTES // (1024 * 1024),
                preview_names=PREVIEW_TOOL_NAMES,
                # Offered only where the API would take one (`--allow-stdio-mcp`), as `McpServers` decides.
                stdio_allowed=isinstance(mcp, McpKind) and mcp.allow_stdio,
                max_name=MAX_NAME_LENGTH,
                max_description=MAX_DESCRIPTION_LENGTH,
            )

        return await self._console.page(build)

    async def _one(self, slug: str) -> Response:
        async def build(visitor: SignIn) -> Response:
            try:
                return await self._integration(visitor, slug)
            except IntegrationError as error:
                return self._console.message(visitor, error.status, "Integration not shown", error.message)

        return await self._console.page(build)

    async def _integration(self, visitor: SignIn, slug: str) -> Response:
        principal = visitor.principal
        query = (request.args.get("query") or "")[:MAX_QUERY_LENGTH]
        wanted_page = page_number(request.args.get("page"))
        tools: list[tuple[Described, JsonObject, str | None]]
        templates: tuple[TemplateView, ...] = ()
        connectable = False
        manage = None
        facts: tuple[tuple[str, str], ...] = ()
        if slug == BUILT_IN_SLUG:
            details = BUILT_IN_JSON
            built_in = next(item for item in self._catalog.integrations if item.slug == BUILT_IN_SLUG)
            tools = [(tool, {}, "tools." + tool.id) for tool in built_in.tools]
            connections: list[ConnectionRecord] = []
        else:
            record = await self._integrations.integration(principal, slug)
            details = integration_json(record)
            templates = template_views(record)
            connectable = bool(template_choices(record))
            connections = await self._integrations.connections.visible(principal, slug)
            manage = manage_view(record, principal, self._integrations.kind(record).discovers(record))
            facts = server_facts(record, principal) if record.kind == MCP else ()
            own = await self._integrations.own_catalog(record)
            if own is not None and own.tools:
                tools = [(tool, own.defs, None) for tool in own.tools]
            else:  # tools each connection discovers: the visitor's, at their addresses
                view = await self._integrations.view(principal)
                tools = [
                    (entry.tool, view.defs.get(entry.source_hash, {}), "tools." + entry.tool_id)
                    for entry in view.entries
                    if entry.integration.slug == slug
                ]
        matching = [item for item in tools if tool_matches(item[0].name, item[0].description, query)]
        shown_page = window(matching, wanted_page, TOOLS_PER_PAGE)
        # Rendering fifty tools' types is CPU work: a worker thread's, not the event loop's.
        views = await trio.to_thread.run_sync(lambda: [tool_view(*item) for item in shown_page.items])
        path = "/integrations/" + urllib.parse.quote(slug)
        return self._console.view(
            visitor,
            "integration.html",
            title=details["name"],
            page="integrations",
            scripts=("catalog.js",),
            styles=("catalog.css",),
            details=details,
            manage=manage,
            facts=facts,
            max_spec_bytes=MAX_SPEC_BODY_BYTES,
            max_spec_mib=MAX_SPEC_BODY_BYTES // (1024 * 1024),
            max_name=MAX_NAME_LENGTH,
            max_description=MAX_DESCRIPTION_LENGTH,
            templates=templates,
            connections=[connection_row(record) for record in connections],
            connectable=connectable,
            tools=views,
            total_tools=len(tools),
            window=shown_page,
            query=query,
            previous=page_link(path, query, shown_page.page - 1) if shown_page.page > 1 else None,
            next=page_link(path, query, shown_page.page + 1) if shown_page.page < shown_page.pages else None,
            path=path,
        )

    async def _connections(self) -> Response:
        async def build(visitor: SignIn) -> Response:
            principal = visitor.principal
            records = await self._integrations.integrations(principal)
            connections = await self._integrations.connections.visible(principal)
            choices = {
                record.slug: {"name": record.name, "templates": [choice.json() for choice in template_choices(record)]}
                for record in records
            }
            connectable = {slug: choice for slug, choice in choices.items() if choice["templates"]}
            clients = self._integrations.oauth_clients
            oauth_clients = [
                {"slug": client["slug"], "owner": client["owner"], "tokenUrl": client["tokenUrl"]}
                for client in (await clients.summaries(principal) if clients is not None else [])
            ]
            refusal = admin_refusal(principal)
            wanted = request.args.get("integration")
            prefill = {field: request.args.get(field, "")[:MAX_PREFILL] for field in CLIENT_FORM_FIELDS}
            rows = [connection_row(record) for record in connections]
            # Shown only when it names one of the visitor's connections: a link cannot make the page say more.
            created = request.args.get("created")
            created = created if any(row.address == created for row in rows) else None
            return self._console.view(
                visitor,
                "connections.html",
                title="Connections",
                page="connections",
                scripts=("catalog.js",),
                styles=("catalog.css",),
                connections=rows,
                created=created,
                choices=connectable,
                oauth_clients=oauth_clients,
                client_form=prefill if clients is not None else None,
                client_form_open=request.args.get("oauthClient") == "1",
                selected=wanted if wanted in connectable else None,
                org_refusal=refusal.message if refusal is not None else None,
                handoffs=self._handoffs,
                max_name=MAX_NAME_LENGTH,
            )

        return await self._console.page(build)

    async def _oauth_change(self) -> tuple[Principal, JsonObject, OAuthSignIns] | Response:
        """A console change that starts a sign-in: a signed-in visitor, this origin and the visitor's CSRF token,
        a JSON body, and a server that serves OAuth; else the refusal to answer."""
        try:
            visitor = await self._console.visitor(request.headers)
        except Refused as refused:
            return json_error(refused.envelope.status, refused.envelope.message)
        if visitor is None:
            return json_error(401, "Sign in to the console first")
        if (refusal := self._console.change_refusal(request.headers, visitor)) is not None:
            return json_error(refusal.value.status, refusal.value.message)
        body = await json_body(MAX_SIGN_IN_BODY_BYTES)
        if isinstance(body, Response):
            return body
        if self._integrations.oauth is None:
            return json_error(404, "This server does not serve OAuth connections")
        return visitor.principal, body, self._integrations.oauth

    async def _connect(self) -> Response:
        """A new OAuth connection's sign-in (`OAuthSignIns.connect`: with the client the form names, else one of
        the API's authorization server that this server finds or makes); the page's script sends the browser to
        the authorization URL answered."""
        change = await self._oauth_change()
        if isinstance(change, Response):
            return change
        principal, body, signins = change
        try:
            started = await signins.connect(principal, body)
        except IntegrationError as error:
            return json_error(error.status, error.message)
        if started.get("status") == "redirect":
            return json_ok({"authorizationUrl": started["authorizationUrl"]})
        connection = started.get("connection")
        return json_ok(
            {"connected": True, "address": connection.address if isinstance(connection, ConnectionRecord) else None}
        )

    async def _reconnect(self) -> Response:
        """A new sign-in for one of the visitor's OAuth connections: the same client, integration, template, name
        and owner, so its callback replaces the connection's tokens (`OAuthSignIns.start`, whose checks apply: an
        org connection is an admin's to reconnect)."""
        change = await self._oauth_change()
        if isinstance(change, Response):
            return change
        principal, body, signins = change
        try:
            owner, integration, name = (text(body.get(field), field) for field in ("owner", "integration", "name"))
            record = await self._integrations.connections.get(principal, owner, integration, name)
            if record.oauth_client is None:
                raise InvalidInput(f"{record.address} is not an OAuth connection: replace its values instead")
            started = await signins.start(
                principal,
                {
                    "client": record.oauth_client,
                    "clientOwner": record.oauth_client_owner or record.owner,
                    "owner": record.owner,
                    "name": record.name,
                    "integration": record.integration,
                    "template": record.template,
                },
            )
        except IntegrationError as error:
            return json_error(error.status, error.message)
        if started.get("status") == "redirect":
            return json_ok({"authorizationUrl": started["authorizationUrl"]})
        return json_ok({"connected": True, "address": record.address})
