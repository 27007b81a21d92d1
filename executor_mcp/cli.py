"""The `executor-mcp` command line: `serve`, and admin commands that work on a data dir."""

import argparse
import sys
import urllib.parse
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import trio

from executor_mcp import __version__
from executor_mcp.config import CONFIG_ENV, OPTIONS, ConfigError, Settings, load_settings
from executor_mcp.observability.logs import configure_logging
from executor_mcp.storage.records import ELICITATION_MODES, EXECUTE_MODE, MODEL_ELICITATION, PASSTHROUGH_MODE
from executor_mcp.web.signin import LINK_SECONDS

_DATA_OPTIONS = {"data_dir", "log_level"}
# What building the integrations service reads: the outbound guard and limits, and the secret providers.
_INTEGRATION_OPTIONS = _DATA_OPTIONS | {
    "allow_local_network",
    "allow_stdio_mcp",
    "integration_max_response_bytes",
    "integration_max_spec_bytes",
    "secret_env",
    "secrets_dir",
}


def _add_options(parser: argparse.ArgumentParser, names: set[str] | None = None) -> None:
    parser.add_argument("--config", help=f"TOML config file (also {CONFIG_ENV})")
    for option in OPTIONS:
        if names is None or option.name in names:
            if option.switch:
                parser.add_argument(
                    option.flag,
                    dest=option.name,
                    action="store_const",
                    const="true",
                    help=f"{option.help} [{option.env}]",
                )
                continue
            parser.add_argument(
                option.flag,
                dest=option.name,
                metavar="VALUE",
                action="append" if option.repeatable else "store",
                help=f"{option.help} [{option.env}]",
            )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="executor-mcp", description="A self-hosted MCP server for agents' code.")
    parser.add_argument("--version", action="version", version=f"executor-mcp {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_options(commands.add_parser("serve", help="run the MCP server"))
    stdio = commands.add_parser(
        "stdio",
        help="serve one MCP client on standard input and output (for desktop clients that start the server)",
        description="Serve one MCP client over stdio, against the data dir and its catalog, as the local user.",
    )
    stdio.add_argument(
        "--elicitation-mode",
        choices=ELICITATION_MODES,
        default=MODEL_ELICITATION,
        help="how approvals are asked: model (the agent calls resume), native (the client asks its user), "
        "browser (a link to the approvals page)",
    )
    stdio.add_argument(
        "--mode", choices=(EXECUTE_MODE, PASSTHROUGH_MODE), default=EXECUTE_MODE, help="the tools offered"
    )
    _add_options(stdio)

    orgs = commands.add_parser("orgs", help="list, revoke or restore organizations")
    org_actions = orgs.add_subparsers(dest="action", required=True, metavar="ACTION")
    _add_options(org_actions.add_parser("list", help="organizations seen or revoked"), _DATA_OPTIONS)
    for action, summary in (("revoke", "refuse the org's requests and end its sessions"), ("restore", "undo")):
        command = org_actions.add_parser(action, help=summary)
        command.add_argument("org")
        _add_options(command, _DATA_OPTIONS)

    keys = commands.add_parser("keys", help="create, list or revoke API keys")
    key_actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = key_actions.add_parser("create", help="create an API key (printed once)")
    create.add_argument("--user", required=True, help="the account the key acts as")
    create.add_argument("--org", required=True, help="the organization the key acts in")
    create.add_argument("--admin", action="store_true", help="the key may change org rules (see --org-admin-claim)")
    _add_options(create, _DATA_OPTIONS)
    _add_options(key_actions.add_parser("list", help="API keys, without their secrets"), _DATA_OPTIONS)
    revoke = key_actions.add_parser("revoke", help="revoke an API key by its id")
    revoke.add_argument("key_id")
    _add_options(revoke, _DATA_OPTIONS)

    policies = commands.add_parser("policies", help="list, add or remove tool policies")
    policy_actions = policies.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, summary in (
        ("list", "the org's rules (and the user's, with --user) in evaluation order"),
        ("add", "add an org rule, or a user rule with --user"),
        ("remove", "remove an org rule, or a user rule with --user"),
    ):
        command = policy_actions.add_parser(action, help=summary)
        command.add_argument("--org", required=True, help="the organization")
        command.add_argument("--user", help="the account, for user rules")
        if action == "add":
            command.add_argument("--pattern", required=True, help="e.g. executor.coreTools.policies.* or *")
            command.add_argument("--action", dest="policy_action", required=True, help="approve|require_approval|block")
            command.add_argument("--position", help="where in the order (default: below more specific rules)")
        if action == "remove":
            command.add_argument("policy_id")
        _add_options(command, _DATA_OPTIONS)

    sessions = commands.add_parser("sessions", help="list, show or terminate sessions")
    session_actions = sessions.add_subparsers(dest="action", required=True, metavar="ACTION")
    _add_options(session_actions.add_parser("list", help="stored sessions, most recently active first"), _DATA_OPTIONS)
    for action, summary in (("show", "one session's directory entry and meta"), ("terminate", "end a session")):
        command = session_actions.add_parser(action, help=summary)
        command.add_argument("session_id")
        _add_options(command, _DATA_OPTIONS)

    audit = commands.add_parser("audit", help="read the audit log of tool calls")
    audit_actions = audit.add_subparsers(dest="action", required=True, metavar="ACTION")
    listed = audit_actions.add_parser(
        "list",
        help="an org's tool calls, newest first",
        description="An org's tool calls, newest first: who, which session, what the policies decided, how an "
        "approval was answered and how the call ended. Never arguments or results.",
    )
    _org_option(listed)
    listed.add_argument("--json", action="store_true", help="one JSON array of records")
    listed.add_argument("--since", metavar="WHEN", help="only calls since then: 15m, 2h, 7d, or an ISO 8601 time")
    listed.add_argument("--session", metavar="SESSION_ID", help="only this session's calls")
    listed.add_argument("--tool", metavar="GLOB", help="only tools whose path matches, e.g. 'github.*'")
    listed.add_argument("--limit", type=int, default=100, metavar="N", help="at most N records (default 100)")
    _add_options(listed, _DATA_OPTIONS)

    link = commands.add_parser("console-link", help="print a one-time link that signs in to the web console")
    link.add_argument("--user", required=True, help="the account the link signs in as")
    link.add_argument("--org", required=True, help="the organization it signs in to")
    link.add_argument("--admin", action="store_true", help="sign in as an org admin (see --org-admin-claim)")
    link.add_argument("--expires", type=float, default=LINK_SECONDS, help="seconds the link stays usable")
    _add_options(link, _DATA_OPTIONS | {"host", "port", "public_url"})

    _integration_commands(commands)
    _connection_commands(commands)

    # How the single binary re-executes itself as a sandbox worker, or as the zygote that forks them; not for people.
    commands.add_parser("sandbox-worker")
    commands.add_parser("sandbox-zygote")
    return parser


def _org_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--org", default="local", help="the organization (default: local, the org of --auth none)")


def _spec_source(command: argparse.ArgumentParser, required: bool) -> None:
    source = command.add_mutually_exclusive_group(required=required)
    source.add_argument("--url", help="fetch the OpenAPI document from this URL (and keep it for updates)")
    source.add_argument("--file", type=Path, help="read the OpenAPI document (JSON or YAML) from this file")


def _integration_commands(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    integrations = commands.add_parser("integrations", help="add, list, show, update or remove integrations")
    actions = integrations.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add-openapi", help="add an OpenAPI integration to the org")
    add.add_argument("--slug", required=True, help="its id in tool paths: letters, digits, _ and -")
    _spec_source(add, required=True)
    add.add_argument("--name", help="display name (default: the spec's title)")
    add.add_argument("--description", help="what agents read about it (default: the spec's)")
    add.add_argument("--base-url", help="send calls here instead of the spec's servers")
    add.add_argument(
        "--auth-header",
        action="append",
        default=[],
        metavar="NAME[:PREFIX]",
        help="a header the credential goes in, e.g. 'Authorization:Bearer ' (repeatable; default: from the spec)",
    )
    _org_option(add)
    _add_options(add, _INTEGRATION_OPTIONS)
    graphql = actions.add_parser("add-graphql", help="add a GraphQL endpoint to the org")
    graphql.add_argument("--endpoint", required=True, help="the GraphQL endpoint's URL")
    schema = graphql.add_mutually_exclusive_group()
    schema.add_argument("--sdl", type=Path, help="the schema's SDL file (for an endpoint with introspection off)")
    schema.add_argument("--introspection-file", type=Path, help="a saved introspection result (JSON)")
    graphql.add_argument("--slug", help="its id in tool paths (default: from --name, else the endpoint's host)")
    graphql.add_argument("--name", help="display name (default: the slug, else the endpoint's host)")
    graphql.add_argument("--description", help="what agents read about it")
    graphql.add_argument(
        "--header-auth",
        action="append",
        default=[],
        metavar="NAME[:PREFIX]",
        help="a header the credential goes in, e.g. 'Authorization:Bearer ' (repeatable)",
    )
    graphql.add_argument(
        "--query-auth", action="append", default=[], metavar="NAME", help="a query parameter the credential goes in"
    )
    _org_option(graphql)
    _add_options(graphql, _INTEGRATION_OPTIONS)
    listed = actions.add_parser("list", help="the org's integrations")
    _org_option(listed)
    _add_options(listed, _INTEGRATION_OPTIONS)
    for action, summary in (("show", "one integration as JSON"), ("remove", "remove one, with its connections")):
        command = actions.add_parser(action, help=summary)
        command.add_argument("slug")
        _org_option(command)
        _add_options(command, _INTEGRATION_OPTIONS)
    _add_mcp_command(actions)
    update = actions.add_parser("update", help="a new spec from --url or --file, or the stored URL again")
    update.add_argument("slug")
    _spec_source(update, required=False)
    _org_option(update)
    _add_options(update, _INTEGRATION_OPTIONS)


def _add_mcp_command(actions: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    add = actions.add_parser("add-mcp", help="add an MCP server (remote URL, or a stdio command) to the org")
    add.add_argument("--name", required=True, help="display name (the slug defaults to it)")
    add.add_argument("--slug", help="its id in tool paths (default: from the name, the host or the command)")
    add.add_argument("--description", help="what agents read about it")
    source = add.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", help="the remote server's endpoint")
    source.add_argument(
        "--command", dest="stdio_command", help="a stdio server's command (needs --allow-stdio-mcp where it runs)"
    )
    add.add_argument("--transport", choices=("auto", "streamable-http", "sse"), help="remote transport (default auto)")
    add.add_argument(
        "--header-auth",
        metavar="NAME[:PREFIX]",
        help="connections send their token in this header, e.g. 'Authorization:Bearer '",
    )
    add.add_argument("--header", action="append", default=[], metavar="K=V", help="a static header (repeatable)")
    add.add_argument("--arg", action="append", default=[], metavar="ARG", help="a stdio command argument (repeatable)")
    add.add_argument(
        "--env-var",
        action="append",
        default=[],
        metavar="NAME",
        help="an environment variable each connection supplies to the stdio command (repeatable)",
    )
    _org_option(add)
    _add_options(add, _INTEGRATION_OPTIONS)


def _connection_commands(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    connections = commands.add_parser("connections", help="add, list or remove connections (credentials)")
    actions = connections.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser(
        "add", help="add or replace a connection; its value is read from a prompt or standard input, never argv"
    )
    add.add_argument("--integration", required=True, help="the integration's slug")
    add.add_argument("--name", required=True, help="the connection's name (normalized: 'My Key' becomes myKey)")
    add.add_argument("--owner", choices=("org", "user"), default="org", help="shared by the org, or one account's")
    add.add_argument("--template", required=True, help="the integration's auth method (see integrations show), or none")
    add.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="VAR",
        help="an input of the template to read a value for (repeatable; default: the one input token)",
    )
    add.add_argument("--description", help="what agents read about this connection")
    for command in (add, listed := actions.add_parser("list", help="the connections of the org (and of --user)")):
        command.add_argument("--user", help="the account (for user connections)")
        _org_option(command)
        _add_options(command, _INTEGRATION_OPTIONS)
    listed.add_argument("--integration", help="only this integration's")
    remove = actions.add_parser("remove", help="remove a connection, and the values it stored")
    remove.add_argument("connection", metavar="OWNER/INTEGRATION/NAME")
    remove.add_argument("--user", help="the account a user connection belongs to")
    _org_option(remove)
    _add_options(remove, _INTEGRATION_OPTIONS)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["mcp-stdio-lifeline"]:
        # How the single binary re-executes itself as the shim a stdio MCP server runs under; not for people.
        from executor_mcp.integrations.mcp.lifeline import main as lifeline_main

        return lifeline_main(arguments[1:])
    args = _parser().parse_args(arguments)
    if args.command == "sandbox-worker":
        from executor_mcp.sandbox.worker import main as worker_main  # light: the worker needs no server

        return worker_main()
    if args.command == "sandbox-zygote":
        from executor_mcp.sandbox.zygote import main as zygote_main

        return zygote_main()
    try:
        settings = load_settings(vars(args))
    except ConfigError as exc:
        print(f"executor-mcp: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    if args.command == "serve":
        return _serve(settings)
    if args.command == "stdio":
        return _serve_stdio(settings, args.elicitation_mode, args.mode)
    return trio.run(_admin(args, settings))


def _admin(args: argparse.Namespace, settings: Settings):
    if args.command in ("integrations", "connections"):
        return _integrations_admin(args, settings)
    from executor_mcp import admin

    data_dir = settings.data_dir
    match args.command, getattr(args, "action", None):
        case "orgs", "list":
            return partial(admin.orgs_list, data_dir)
        case "orgs", "revoke" | "restore":
            return partial(admin.orgs_set_revoked, data_dir, args.org, args.action == "revoke")
        case "keys", "create":
            return partial(admin.keys_create, data_dir, args.user, args.org, args.admin)
        case "keys", "list":
            return partial(admin.keys_list, data_dir)
        case "policies", "list":
            return partial(admin.policies_list, data_dir, args.org, args.user)
        case "policies", "add":
            return partial(
                admin.policies_add, data_dir, args.org, args.user, args.pattern, args.policy_action, args.position
            )
        case "sessions", "list":
            return partial(admin.sessions_list, data_dir)
        case "sessions", "show":
            return partial(admin.sessions_show, data_dir, args.session_id)
        case "audit", "list":
            return partial(
                admin.audit_list, data_dir, args.org, args.since, args.session, args.tool, args.limit, args.json
            )
        case "console-link", _:
            return partial(admin.console_link, settings, args.user, args.org, args.admin, args.expires)
        case "sessions", "terminate":
            return partial(admin.sessions_terminate, data_dir, args.session_id)
        case "policies", "remove":
            return partial(admin.policies_remove, data_dir, args.org, args.user, args.policy_id)
        case _:
            return partial(admin.keys_revoke, data_dir, args.key_id)


def _integrations_admin(args: argparse.Namespace, settings: Settings):
    from executor_mcp.integrations import commands

    match args.command, args.action:
        case "integrations", "add-openapi":
            return partial(
                commands.integrations_add_openapi,
                settings,
                args.org,
                args.slug,
                args.url,
                args.file,
                args.name,
                args.description,
                args.base_url,
                args.auth_header,
            )
        case "integrations", "add-graphql":
            return partial(
                commands.integrations_add_graphql,
                settings,
                args.org,
                args.endpoint,
                args.slug,
                args.sdl,
                args.introspection_file,
                args.name,
                args.description,
                args.header_auth,
                args.query_auth,
            )
        case "integrations", "add-mcp":
            return partial(
                commands.integrations_add_mcp,
                settings,
                args.org,
                commands.mcp_server_body(
                    name=args.name,
                    slug=args.slug,
                    description=args.description,
                    url=args.url,
                    command=args.stdio_command,
                    transport=args.transport,
                    header_auth=args.header_auth,
                    headers=args.header,
                    args=args.arg,
                    env_vars=args.env_var,
                ),
            )
        case "integrations", "list":
            return partial(commands.integrations_list, settings, args.org)
        case "integrations", "show":
            return partial(commands.integrations_show, settings, args.org, args.slug)
        case "integrations", "update":
            return partial(commands.integrations_update, settings, args.org, args.slug, args.url, args.file)
        case "integrations", "remove":
            return partial(commands.integrations_remove, settings, args.org, args.slug)
        case "connections", "add":
            return partial(
                commands.connections_add,
                settings,
                args.org,
                args.user,
                args.owner,
                args.integration,
                args.name,
                args.template,
                args.input,
                args.description,
                sys.stdin.buffer,
                sys.stdin.isatty(),
            )
        case "connections", "list":
            return partial(commands.connections_list, settings, args.org, args.user, args.integration)
        case _:
            return partial(commands.connections_remove, settings, args.org, args.user, args.connection)


def _serve(settings: Settings) -> int:
    from executor_mcp.app import UnsafeBind, ensure_safe_bind, serve_until_signalled

    try:
        ensure_safe_bind(settings)
    except UnsafeBind as exc:
        print(f"executor-mcp: error: {exc}", file=sys.stderr)
        return 2
    failure: str | None = None
    status = 1
    try:
        trio.run(serve_until_signalled, settings)
    except* ConfigError as group:
        failure, status = str(_first_leaf(group)), 2
    except* OSError as group:
        failure = f"cannot serve on {settings.host}:{settings.port}: {_first_leaf(group)}"
    if failure is not None:
        print(f"executor-mcp: error: {failure}", file=sys.stderr)
        return status
    return 0


def _serve_stdio(settings: Settings, elicitation_mode: str, mode: str) -> int:
    from executor_mcp.app import serve_stdio

    query = urllib.parse.urlencode({"elicitation_mode": elicitation_mode, "mode": mode}).encode()
    failure: str | None = None
    try:
        trio.run(serve_stdio, settings, query)
    except* ConfigError as group:
        failure = str(_first_leaf(group))
    if failure is not None:
        print(f"executor-mcp: error: {failure}", file=sys.stderr)
        return 2
    return 0


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    """The first real exception of a group: nurseries nest groups, whose own text says nothing."""
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


if __name__ == "__main__":
    sys.exit(main())
