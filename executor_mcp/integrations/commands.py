"""Admin commands `integrations …` and `connections …` on a data dir, also while a server runs on it.

Each opens the control plane, builds the integrations service as the server does (`open_integrations`),
does one thing as an admin of the org, and closes; a running server sees the change on its next catalog
read (the org's catalog revision moved). What the data dir's records may do (`config.DATA_DIR_FACTS`, e.g.
`--allow-local-network`) is what the server on it runs with, unless the command sets it itself. A
connection's values are read here from a TTY prompt that does not echo, or from standard input, never from
argv (visible to every user of the machine); nothing printed holds one.
"""

import getpass
import io
import json
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import BinaryIO

from executor_mcp.auth.identity import identity_problem
from executor_mcp.codec import JsonObject
from executor_mcp.config import Settings, with_data_dir_facts
from executor_mcp.integrations.addresses import OWNERS
from executor_mcp.integrations.assembly import open_integrations
from executor_mcp.integrations.connections import check_template
from executor_mcp.integrations.mcp.servers import server_json
from executor_mcp.integrations.openapi.specs import OpenApiSpecs
from executor_mcp.integrations.service import Integrations
from executor_mcp.integrations.views import ToolEntry
from executor_mcp.integrations.wire import connection_json, integration_json, tool_row
from executor_mcp.listing import Column, print_fields, print_listing
from executor_mcp.records.integration_errors import IntegrationError, InvalidInput
from executor_mcp.records.integrations import (
    GRAPHQL,
    MCP,
    NO_AUTH,
    OPENAPI,
    TOKEN,
    ConnectionRecord,
    IntegrationRecord,
)
from executor_mcp.secrets.prompt import MAX_VALUE_BYTES, SecretInputRefused, read_secret_value
from executor_mcp.storage.control import open_control_plane
from executor_mcp.storage.records import Owner

# The org of `--auth none`, whose local principal is account `local` in org `local`.
LOCAL_ORG = "local"


async def data_dir_settings(settings: Settings, given: frozenset[str]) -> Settings:
    """The command's settings with the data-dir facts it does not set itself (`given`) as the data dir's server
    recorded them, so what the server may call, the command may add, and the other way round."""
    control = await open_control_plane(settings)
    try:
        return with_data_dir_facts(settings, given, await control.facts.data_dir_facts())
    finally:
        await control.close()


@asynccontextmanager
async def open_service(settings: Settings, public_url: Callable[[], str] = lambda: "") -> AsyncIterator[Integrations]:
    """The service as the server builds it; `public_url` is the server's, for an OAuth sign-in's callback."""
    control = await open_control_plane(settings)
    try:
        async with open_integrations(settings, control, public_url) as integrations:
            yield integrations
    finally:
        await control.close()


def admin_principal(org_id: str, account_id: str | None) -> Owner:
    """The operator on the data dir administers the org (and acts as `account_id` for user connections)."""
    return Owner(account_id=account_id or "", org_id=org_id, org_admin=True)


def fail(message: str, status: int = 1) -> int:
    print(f"executor-mcp: error: {message}", file=sys.stderr)
    return status


def refused(error: IntegrationError, message: str | None = None) -> int:
    """An integration error as the CLI reports it (in `message`'s words, when the command words it in its own
    flags): 2 for a request that cannot be valid, 1 otherwise."""
    return fail(message or error.message, 2 if error.status == 400 else 1)


def identity_refusal(org_id: str, account_id: str | None) -> str | None:
    for flag, value in (("--org", org_id), ("--user", account_id)):
        problem = identity_problem(value) if value is not None else None
        if problem:
            return f"{flag} {problem}"
    return None


def auth_template(headers: Sequence[str]) -> list[JsonObject]:
    """`--auth-header NAME[:PREFIX]`… as one API-key method `apikey` in the authoring dialect. The first
    header renders the `token` input; each further one its own input, named from the header (snake_case)."""
    entries: JsonObject = {}
    for position, spec in enumerate(headers):
        name, _, prefix = spec.partition(":")
        name = name.strip()
        variable = TOKEN if position == 0 else "_".join(filter(None, _words(name))) or f"input_{position}"
        entries[name] = ([prefix] if prefix else []) + [{"type": "variable", "name": variable}]
    return [{"slug": "apikey", "type": "apiKey", "headers": entries}]


def _words(name: str) -> list[str]:
    return "".join(char if char.isalnum() else " " for char in name.lower()).split()


def _read_text(file: Path, max_bytes: int) -> str:
    """A UTF-8 file given on the command line (a spec, an SDL document), read up to the source size limit."""
    try:
        with file.open("rb") as source:
            raw = source.read(max_bytes + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read {file}: {exc.strerror}") from None
    if len(raw) > max_bytes:
        raise InvalidInput(f"{file} is larger than {max_bytes} bytes (--integration-max-spec-bytes)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{file} is not UTF-8 text") from None


def _spec(url: str | None, file: Path | None, max_bytes: int) -> JsonObject:
    """`--url` or `--file` as the spec field of a request; a file is read up to the spec size limit."""
    if url is not None:
        return {"kind": "url", "url": url}
    assert file is not None
    return {"kind": "blob", "value": _read_text(file, max_bytes)}


def _methods_line(record_json: JsonObject) -> str:
    methods = [method["template"] for method in record_json.get("authMethods", [])]
    return f"templates: {', '.join(methods)}" if methods else "templates: none declared (use --template none)"


async def integrations_add_openapi(
    settings: Settings,
    org_id: str,
    slug: str,
    url: str | None,
    file: Path | None,
    name: str | None,
    description: str | None,
    base_url: str | None,
    auth_headers: Sequence[str],
) -> int:
    if (problem := identity_refusal(org_id, None)) is not None:
        return fail(problem, 2)
    try:
        body: JsonObject = {"slug": slug, "spec": _spec(url, file, settings.integration_max_spec_bytes)}
        for field, value in (("name", name), ("description", description), ("baseUrl", base_url)):
            if value is not None:
                body[field] = value
        if auth_headers:
            body["authenticationTemplate"] = auth_template(auth_headers)
        async with open_service(settings) as integrations:
            record, count = await integrations.add(admin_principal(org_id, None), OPENAPI, body)
    except IntegrationError as error:
        return refused(error)
    print(
        f"added integration {record.slug} with {count} tools; {_methods_line(integration_json(record))}",
        file=sys.stderr,
    )
    print(record.slug)
    return 0


def graphql_auth_template(headers: Sequence[str], queries: Sequence[str]) -> list[JsonObject]:
    """`--header-auth NAME[:PREFIX]`… and `--query-auth NAME`… as one API-key method `apikey`: the first
    placement renders the `token` input, each further one its own input, named from it (snake_case)."""
    if not queries:
        return auth_template(headers)
    method = auth_template(headers)[0] if headers else {"slug": "apikey", "type": "apiKey", "headers": {}}
    entries: JsonObject = {}
    for position, name in enumerate(queries, start=len(headers)):
        name = name.strip()
        variable = TOKEN if position == 0 else "_".join(filter(None, _words(name))) or f"input_{position}"
        entries[name] = [{"type": "variable", "name": variable}]
    return [{**method, "queryParams": entries}]


async def integrations_add_graphql(
    settings: Settings,
    org_id: str,
    endpoint: str,
    slug: str | None,
    sdl: Path | None,
    introspection_file: Path | None,
    name: str | None,
    description: str | None,
    header_auth: Sequence[str],
    query_auth: Sequence[str],
) -> int:
    """Add a GraphQL endpoint; with `--sdl` or `--introspection-file` its schema is that file, else each
    connection introspects the endpoint when it is made."""
    if (problem := identity_refusal(org_id, None)) is not None:
        return fail(problem, 2)
    try:
        body: JsonObject = {"endpoint": endpoint}
        for field, value in (("slug", slug), ("name", name), ("description", description)):
            if value is not None:
                body[field] = value
        if sdl is not None:
            body["sdl"] = _read_text(sdl, settings.integration_max_spec_bytes)
        if introspection_file is not None:
            body["introspectionJson"] = _read_text(introspection_file, settings.integration_max_spec_bytes)
        if header_auth or query_auth:
            body["authenticationTemplate"] = graphql_auth_template(header_auth, query_auth)
        async with open_service(settings) as integrations:
            record, count = await integrations.add(admin_principal(org_id, None), GRAPHQL, body)
    except IntegrationError as error:
        return refused(error)
    tools = f"{count} tools" if sdl or introspection_file else "tools from each connection's introspection"
    print(f"added integration {record.slug} with {tools}; {_methods_line(integration_json(record))}", file=sys.stderr)
    print(record.slug)
    return 0


# -- MCP servers ------------------------------------------------------------------------------------


def mcp_server_body(
    *,
    name: str,
    slug: str | None,
    description: str | None,
    url: str | None,
    command: str | None,
    transport: str | None,
    header_auth: str | None,
    headers: Sequence[str],
    args: Sequence[str],
    env_vars: Sequence[str],
) -> JsonObject:
    """`add-mcp`'s flags as an `addServer` request (validated by the service like any other)."""
    body: JsonObject = {"name": name}
    for field, value in (("slug", slug), ("description", description)):
        if value is not None:
            body[field] = value
    if command is not None:
        body.update(transport="stdio", command=command, args=list(args))
        if env_vars:
            body["authenticationTemplate"] = [{"slug": "env", "kind": "stdio_env", "vars": list(env_vars)}]
        return body
    body["endpoint"] = url
    if transport is not None:
        body["remoteTransport"] = transport
    if headers:
        body["headers"] = dict(header.partition("=")[::2] for header in headers)
    if header_auth is not None:
        header_name, _, prefix = header_auth.partition(":")
        body["auth"] = {"kind": "header", "headerName": header_name.strip(), "prefix": prefix}
    return body


async def integrations_add_mcp(settings: Settings, org_id: str, body: JsonObject) -> int:
    if (problem := identity_refusal(org_id, None)) is not None:
        return fail(problem, 2)
    try:
        async with open_service(settings) as integrations:
            record, _ = await integrations.add(admin_principal(org_id, None), MCP, body)
    except IntegrationError as error:
        return refused(error)
    print(
        f"added MCP server {record.slug}; its tools are listed per connection; "
        f"{_methods_line(integration_json(record))}",
        file=sys.stderr,
    )
    print(record.slug)
    return 0


def _source(record: IntegrationRecord) -> object:
    """Where an integration's calls go: its URL as every member may see it, or a stdio server's command."""
    return integration_json(record).get("displayUrl") or record.config.get("command")


_INTEGRATION_COLUMNS: list[Column[IntegrationRecord]] = [
    ("SLUG", lambda record: record.slug),
    ("KIND", lambda record: record.kind),
    ("NAME", lambda record: record.name),
    ("SOURCE", _source),
]


async def integrations_list(settings: Settings, org_id: str, as_json: bool = False) -> int:
    """`--json` rows are the HTTP API's (`GET /api/integrations`, less the built-in one)."""
    async with open_service(settings) as integrations:
        records = await integrations.integrations(admin_principal(org_id, None))
    empty = f"no integrations in organization {org_id}"
    print_listing(records, as_json, empty, _INTEGRATION_COLUMNS, integration_json)
    return 0


def _templates(record: IntegrationRecord) -> list[tuple[str, object]]:
    """One line per template a connection may name, with the inputs `connections add --input` reads for it."""
    labels = {method["template"]: method["label"] for method in integration_json(record)["authMethods"]}
    lines: list[tuple[str, object]] = []
    for template in record.templates:
        method = record.auth_method(template)
        if method is None:
            lines.append(("template", f"{template}: no credential"))
            continue
        inputs = ", ".join(f"{variable} ({method.input_places(variable)})" for variable in method.inputs)
        lines.append(("template", f"{template}: {labels[template]}" + (f"; inputs: {inputs}" if inputs else "")))
    return lines


async def integrations_show(settings: Settings, org_id: str, slug: str, as_json: bool = False) -> int:
    """Text for people: what it is, its tools and the templates a connection names; `--json` is the HTTP API's
    row (`GET /api/integrations/<slug>`), with an MCP server's configuration as its admin sees it."""
    try:
        async with open_service(settings) as integrations:
            record = await integrations.integration(admin_principal(org_id, None), slug)
            discovers = integrations.kind(record).discovers(record)
            tools = "listed by each connection" if discovers else await integrations.tool_count(record)
    except IntegrationError as error:
        return refused(error)
    shown = integration_json(record)
    if as_json:
        if record.kind == MCP:
            shown["config"] = server_json(record, admin=True)["config"]
        print(json.dumps(shown, indent=2))
        return 0
    fields = [
        ("slug", record.slug),
        ("name", record.name),
        ("kind", record.kind),
        ("source", _source(record)),
        ("description", record.description),
        ("tools", tools),
    ]
    print_fields(fields + _templates(record))
    return 0


async def integrations_update(settings: Settings, org_id: str, slug: str, url: str | None, file: Path | None) -> int:
    """A new spec from `--url` or `--file`, or (with neither) the stored URL fetched again."""
    try:
        body = {"spec": _spec(url, file, settings.integration_max_spec_bytes)} if url or file else {}
        async with open_service(settings) as integrations:
            changed = await OpenApiSpecs(integrations).update(admin_principal(org_id, None), slug, body)
    except IntegrationError as error:
        return refused(error)
    print(
        f"updated integration {slug}: {changed['toolCount']} tools, {len(changed['addedTools'])} added, "
        f"{len(changed['removedTools'])} removed",
        file=sys.stderr,
    )
    print(json.dumps(changed, indent=2))
    return 0


async def integrations_remove(settings: Settings, org_id: str, slug: str) -> int:
    try:
        async with open_service(settings) as integrations:
            await integrations.remove(admin_principal(org_id, None), slug)
    except IntegrationError as error:
        return refused(error)
    print(f"removed integration {slug} and its connections", file=sys.stderr)
    return 0


def read_values(
    variables: Sequence[str], stdin: BinaryIO, tty: bool, ask: Callable[[str], str] = getpass.getpass
) -> dict[str, str]:
    """One value per input: each at its own prompt on a TTY (`ask`, which does not echo). Piped, a single
    value is all of standard input (so it may span lines); several are one line each, in order."""
    if tty or len(variables) <= 1:
        return {variable: read_secret_value(f"{variable}: ", stdin, tty, ask) for variable in variables}
    values = {}
    for variable in variables:
        line = stdin.readline(MAX_VALUE_BYTES + 2)
        values[variable] = read_secret_value(f"{variable}: ", io.BytesIO(line), False)
    return values


async def connections_add(
    settings: Settings,
    org_id: str,
    account_id: str | None,
    owner: str,
    integration: str,
    name: str,
    template: str,
    inputs: Sequence[str],
    description: str | None,
    stdin: BinaryIO,
    tty: bool,
) -> int:
    if (problem := identity_refusal(org_id, account_id)) is not None:
        return fail(problem, 2)
    if owner == "user" and not account_id:
        return fail("--owner user needs --user, the account the connection belongs to", 2)
    body: JsonObject = {"owner": owner, "name": name, "integration": integration, "template": template}
    if description is not None:
        body["description"] = description
    if template == NO_AUTH and inputs:
        return fail("a connection with --template none takes no --input", 2)
    if len(set(inputs)) != len(inputs):
        return fail("each --input names a different variable", 2)
    principal = admin_principal(org_id, account_id)
    try:
        async with open_service(settings) as integrations:
            # Checked before a value is asked for, so a typo is refused before anyone types a secret.
            check_template(await integrations.integration(principal, integration), template)
            if template != NO_AUTH:
                try:
                    values = read_values(list(inputs) or [TOKEN], stdin, tty)
                except SecretInputRefused as problem:
                    return fail(str(problem), 2)
                body.update({"values": values} if inputs else {"value": values[TOKEN]})
            record = await integrations.connections.create(principal, body, pasted=True)
    except IntegrationError as error:
        return refused(error)
    return report_saved(record)


def report_saved(record: ConnectionRecord, done: str = "saved") -> int:
    """The connection's address on stdout, for a script; a connection whose tools could not be listed is saved
    (as the HTTP API saves it, answering `lastHealth`) but not quietly: it has no tools yet."""
    if record.sync_error is not None:
        reason = record.sync_error.rstrip(".")
        return fail(
            f"{done} connection {record.address}, but listing its tools failed: {reason}. It has no tools until a "
            "listing succeeds: the server lists them again on a catalog read a minute from now, or at once on "
            f"`executor-mcp connections refresh {record.address}`"
        )
    print(f"{done} connection {record.address}", file=sys.stderr)
    print(record.address)
    return 0


_CONNECTION_COLUMNS: list[Column[ConnectionRecord]] = [
    ("ADDRESS", lambda record: record.address),
    ("TEMPLATE", lambda record: record.template),
    ("PROVIDER", lambda record: record.provider),
    ("DESCRIPTION", lambda record: record.description),
]


async def connections_list(
    settings: Settings, org_id: str, account_id: str | None, integration: str | None, as_json: bool = False
) -> int:
    """`--json` rows are the HTTP API's (`GET /api/connections`): where a value is kept, never the value."""
    try:
        async with open_service(settings) as integrations:
            records = await integrations.connections.visible(admin_principal(org_id, account_id), integration)
    except IntegrationError as error:
        return refused(error)
    empty = f"no connections in organization {org_id}"
    print_listing(records, as_json, empty, _CONNECTION_COLUMNS, connection_json)
    return 0


def _connection_key(address: str, account_id: str | None) -> tuple[str, str, str] | str:
    """A connection named by its address, `tools.INTEGRATION.OWNER.NAME`, as `connections add` and `list`
    print it (and code calls its tools), as (owner, integration, name); or why it names none."""
    parts = address.split(".")
    if len(parts) != 4 or parts[0] != "tools" or parts[2] not in OWNERS or not all(parts):
        return "name the connection by its address, as connections list prints it: tools.INTEGRATION.OWNER.NAME"
    _, integration, owner, name = parts
    if owner == "user" and not account_id:
        return "a user connection needs --user, the account it belongs to"
    return owner, integration, name


async def connections_remove(settings: Settings, org_id: str, account_id: str | None, address: str) -> int:
    key = _connection_key(address, account_id)
    if isinstance(key, str):
        return fail(key, 2)
    try:
        async with open_service(settings) as integrations:
            await integrations.connections.remove(admin_principal(org_id, account_id), *key)
    except IntegrationError as error:
        return refused(error)
    print(f"removed connection {address}", file=sys.stderr)
    return 0


# A tool's description is the upstream's own text, often paragraphs: the table shows its start.
DESCRIPTION_SHOWN = 72


def _described(entry: ToolEntry) -> str:
    text = " ".join(entry.tool.description.split())
    return text if len(text) <= DESCRIPTION_SHOWN else text[: DESCRIPTION_SHOWN - 1] + "…"


_TOOL_COLUMNS: list[Column[ToolEntry]] = [("TOOL", lambda entry: "tools." + entry.tool_id), ("DESCRIPTION", _described)]


async def connections_refresh(
    settings: Settings, org_id: str, account_id: str | None, address: str, as_json: bool = False
) -> int:
    """List the connection's tools again where each connection discovers them (MCP servers, GraphQL endpoints
    introspected per connection) and print them, as `POST /api/connections/<owner>/<integration>/<name>/refresh`
    answers (`--json`: its rows). An OpenAPI connection's tools come from the stored document: they are printed."""
    key = _connection_key(address, account_id)
    if isinstance(key, str):
        return fail(key, 2)
    try:
        async with open_service(settings) as integrations:
            entries = await integrations.connections.tools(admin_principal(org_id, account_id), *key)
    except IntegrationError as error:
        return refused(error)
    print_listing(entries, as_json, f"{address} has no tools", _TOOL_COLUMNS, tool_row)
    return 0
