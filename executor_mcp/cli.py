"""The `executor-mcp` command line: `serve`, and admin commands that work on a data dir."""

import argparse
import difflib
import json
import logging
import os
import platform
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NoReturn, TypeAlias

import attrs
import trio

from executor_mcp import __version__
from executor_mcp.config import (
    CONFIG_ENV,
    OPTIONS,
    ConfigError,
    Settings,
    check_shared_database,
    given_options,
    load_settings,
)
from executor_mcp.config_reference import option_help, render_markdown
from executor_mcp.logs import configure_logging
from executor_mcp.records.oauth import AUTHORIZATION_CODE, GRANTS, TOKEN_AUTH_METHODS
from executor_mcp.storage.records import ELICITATION_MODES, EXECUTE_MODE, MODEL_ELICITATION, PASSTHROUGH_MODE
from executor_mcp.web.signin import LINK_SECONDS

_DATA_OPTIONS = {"data_dir", "log_level", "database_url", "database_pool_size"}
# What building the integrations service reads: the outbound guard and limits, and the secret providers.
_INTEGRATION_OPTIONS = _DATA_OPTIONS | {
    "allow_local_network",
    "allow_stdio_mcp",
    "integration_max_response_bytes",
    "integration_max_spec_bytes",
    "secret_env",
    "secrets_dir",
}


class _Parser(argparse.ArgumentParser):
    """A parser whose refusals are short: one line naming what is wrong (an unknown option with the known one
    closest to it, a bad value with its option) and where help is, never the whole usage (`serve`'s is forty
    lines, and the error scrolled away above it). It refuses what it does not know itself: argparse hands a
    subcommand's leftovers up to the top parser, which would name `executor-mcp` instead of `sessions list`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Errors are raised to `parse_known_args` below, which words them from the error's parts.
        kwargs.setdefault("exit_on_error", False)
        super().__init__(*args, **kwargs)

    # argparse's own signature (a namespace class in, the same class out); only ours ever comes back here.
    def parse_known_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> tuple[Any, list[str]]:
        try:
            parsed, extras = super().parse_known_args(args, namespace)
        except argparse.ArgumentError as refused:
            self.error(f"{refused.argument_name}: {refused.message}" if refused.argument_name else refused.message)
        if extras:
            self.error(self._unknown(extras))
        return parsed, extras

    def _unknown(self, extras: list[str]) -> str:
        option = next((extra.partition("=")[0] for extra in extras if extra.startswith("--")), None)
        if option is None:
            return f"unrecognized arguments: {' '.join(extras)}"
        known = [name for name in self._option_string_actions if name.startswith("--")]
        close = difflib.get_close_matches(option, known, n=1)
        return f"unknown option {option}" + (f"; did you mean {close[0]}?" if close else "")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n(see {self.prog} --help)\n")


def _typed(kind: type[int] | type[float]) -> Callable[[str], Any]:
    """`int` or `float` as an argparse type, refused in the options' words (`--limit: invalid int value 'x'`,
    as `--port abc` is refused by `config.py`) rather than argparse's own (`invalid int value: 'x'`)."""

    def parse(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value {text!r}") from None

    return parse


# Every subcommand's parser is a `_Parser` too: argparse builds them with the class of the parser they hang from.
Commands: TypeAlias = "argparse._SubParsersAction[_Parser]"


def _command(actions: Commands, name: str, summary: str, description: str | None = None) -> _Parser:
    """A subcommand with its one-line summary in its parent's list and a description in its own `--help`."""
    return actions.add_parser(name, help=summary, description=description or summary[0].upper() + summary[1:] + ".")


def _actions(command: _Parser) -> Commands:
    return command.add_subparsers(dest="action", required=True, metavar="ACTION")


def _json_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--json", action="store_true", help="print JSON (a list; [] for none) instead of text")


def _add_options(parser: argparse.ArgumentParser, names: set[str] | None = None) -> None:
    parser.add_argument("--config", metavar="FILE", help=f"TOML config file [{CONFIG_ENV}]")
    for option in OPTIONS:
        if names is None or option.name in names:
            if option.switch:
                parser.add_argument(
                    option.flag, dest=option.name, action="store_const", const="true", help=option_help(option)
                )
                continue
            parser.add_argument(
                option.flag,
                dest=option.name,
                metavar=option.placeholder,
                action="append" if option.repeatable else "store",
                help=option_help(option),
            )


SERVE = """Run the MCP server: MCP over streamable HTTP at /mcp, the web console at /, and the JSON APIs under
/api. Agents' code runs in sandbox worker processes; sessions, paused executions and the control plane persist in
the data dir, so a restart keeps them. Once listening it prints `MCP: http://HOST:PORT/mcp` and `Console:
http://HOST:PORT/` on stderr (and records the URL in the data dir's server.lock, where doctor finds it); SIGTERM or
SIGINT stop it gracefully. Every option is also an environment variable and a key of the --config file (flag >
environment > file > default)."""

STDIO = """Serve one MCP client on standard input and output, for desktop clients that start their servers as
child processes: newline-delimited JSON-RPC, both MCP eras, the local principal, the same data dir and catalog as
serve (one server holds a data dir at a time). Logs go to stderr. The end of input shuts it down gracefully."""

DOCTOR = """Check whether this machine can run the server with these settings: the data dir (exists or can be
created, writable), its control plane (opens and reads), permissions (data dir and secret.key not open to
others), the port (free, or held by the server running on this data dir: the one that server announced, whatever
--port says), a sandbox worker (starts and runs a program) and the clock. Prints one line per check,
`ok|warn|fail  check  detail`; exits 1 if any check failed."""


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="executor-mcp", description="A self-hosted MCP server for agents' code.")
    parser.add_argument("--version", action="version", version=f"executor-mcp {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_options(_command(commands, "serve", "run the MCP server", SERVE))
    stdio = _command(commands, "stdio", "serve one MCP client on standard input and output", STDIO)
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
    version = _command(commands, "version", "print the version (with --json: and the runtime's)")
    version.add_argument("--json", action="store_true", help="print version, python, trio, platform and build")
    doctor = _command(commands, "doctor", "check the data dir, permissions, port, sandbox and clock", DOCTOR)
    doctor.add_argument("--json", action="store_true", help="print a JSON list of {check, status, detail}")
    _add_options(doctor, {"data_dir", "log_level", "host", "port"})
    _command(
        commands,
        "config-reference",
        "print the options as a Markdown table",
        "Print every option (flag, environment variable, TOML key, default, description) as the Markdown table "
        "README.md holds.",
    )

    proxy = _command(
        commands,
        "proxy-config",
        "print an nginx or HAProxy configuration for several instances",
        "Print a proxy configuration that routes each session's requests to the instance its Mcp-Session-Id "
        "names, everything else to any instance, and answers the restart envelope while a session's home is down.",
    )
    proxy.add_argument("proxy", choices=("nginx", "haproxy"), help="which proxy's configuration")
    proxy.add_argument(
        "--instance",
        action="append",
        required=True,
        metavar="ID=URL",
        help="an instance's --instance-id and the http://HOST:PORT the proxy reaches it at (repeat for each)",
    )
    proxy.add_argument("--listen", default="127.0.0.1:8080", metavar="HOST:PORT", help="where the proxy listens")
    migrate = _command(
        commands,
        "migrate",
        "bring --database-url's schema up to this version; with --from-lmdb, move a data dir's records into it",
        "Apply the PostgreSQL schema's missing migrations and exit (every instance also applies them at start, "
        "under an advisory lock, so this is for running them alone, e.g. before a rolling upgrade). With "
        "--from-lmdb DIR, also copy that single-node data dir's control plane into the empty database and "
        "verify the copy domain by domain.",
    )
    _add_options(migrate, {"log_level", "database_url"})
    migrate.add_argument(
        "--from-lmdb",
        type=Path,
        metavar="DIR",
        help="then move that data dir's control plane (orgs, keys, rules, audit, signing keys, integrations and "
        "connections, sealed secrets) into the empty database and check the copy; the data dir must not be "
        "served meanwhile, and EXECUTOR_MCP_SECRET_KEY must be its secret.key's content",
    )

    orgs = _command(commands, "orgs", "list, revoke or restore organizations")
    org_actions = _actions(orgs)
    listed = _command(org_actions, "list", "organizations seen or revoked")
    _json_option(listed)
    _add_options(listed, _DATA_OPTIONS)
    for action, summary in (
        ("revoke", "refuse the org's requests and end its sessions"),
        ("restore", "undo a revocation: the org's requests are served again"),
    ):
        command = _command(org_actions, action, summary)
        command.add_argument("org", metavar="ORG")
        _add_options(command, _DATA_OPTIONS)

    keys = _command(commands, "keys", "create, list or revoke API keys")
    key_actions = _actions(keys)
    create = _command(key_actions, "create", "create an API key (printed once)")
    create.add_argument("--user", required=True, metavar="ACCOUNT", help="the account the key acts as")
    create.add_argument("--org", required=True, metavar="ORG", help="the organization the key acts in")
    create.add_argument("--admin", action="store_true", help="the key may change org rules (see --org-admin-claim)")
    _add_options(create, _DATA_OPTIONS)
    listed = _command(key_actions, "list", "API keys, without their secrets")
    _json_option(listed)
    _add_options(listed, _DATA_OPTIONS)
    revoke = _command(key_actions, "revoke", "revoke an API key by its id")
    revoke.add_argument("key_id", metavar="KEY_ID")
    _add_options(revoke, _DATA_OPTIONS)

    policies = _command(commands, "policies", "list, add or remove tool policies")
    policy_actions = _actions(policies)
    for action, summary in (
        ("list", "the org's rules (and the user's, with --user) in evaluation order"),
        ("add", "add an org rule, or a user rule with --user"),
        ("remove", "remove an org rule, or a user rule with --user"),
    ):
        command = _command(policy_actions, action, summary)
        command.add_argument("--org", required=True, metavar="ORG", help="the organization")
        command.add_argument("--user", metavar="ACCOUNT", help="the account, for user rules")
        if action == "list":
            _json_option(command)
        if action == "add":
            command.add_argument(
                "--pattern", required=True, metavar="PATTERN", help="e.g. executor.coreTools.policies.* or *"
            )
            command.add_argument(
                "--action",
                dest="policy_action",
                required=True,
                metavar="{approve,require_approval,block}",
                help="what a matching call gets",
            )
            command.add_argument(
                "--position", metavar="POSITION", help="where in the order (default: below more specific rules)"
            )
        if action == "remove":
            command.add_argument("policy_id", metavar="POLICY_ID")
        _add_options(command, _DATA_OPTIONS)

    sessions = _command(commands, "sessions", "list, show or terminate sessions")
    session_actions = _actions(sessions)
    listed = _command(session_actions, "list", "stored sessions, most recently active first")
    _json_option(listed)
    _add_options(listed, _DATA_OPTIONS)
    for action, summary in (
        ("show", "one session's directory entry and what its file says of its client"),
        ("terminate", "end a session (a running server ends its runtime within a second)"),
    ):
        command = _command(session_actions, action, summary)
        command.add_argument("session_id", metavar="SESSION_ID")
        if action == "show":
            command.add_argument("--json", action="store_true", help="print JSON instead of text")
        _add_options(command, _DATA_OPTIONS)

    audit = _command(commands, "audit", "read the audit log of tool calls")
    listed = _command(
        _actions(audit),
        "list",
        "an org's tool calls, newest first",
        "An org's tool calls, newest first: who, which session, what the policies decided, how an approval was "
        "answered and how the call ended. Never arguments or results.",
    )
    _org_option(listed)
    _json_option(listed)
    listed.add_argument("--since", metavar="WHEN", help="only calls since then: 15m, 2h, 7d, or an ISO 8601 time")
    listed.add_argument("--session", metavar="SESSION_ID", help="only this session's calls")
    listed.add_argument("--tool", metavar="GLOB", help="only tools whose path matches, e.g. 'github.*'")
    listed.add_argument("--limit", type=_typed(int), default=100, metavar="N", help="at most N records")
    _add_options(listed, _DATA_OPTIONS)

    link = _command(commands, "console-link", "print a one-time link that signs in to the web console")
    link.add_argument("--user", required=True, metavar="ACCOUNT", help="the account the link signs in as")
    link.add_argument("--org", required=True, metavar="ORG", help="the organization it signs in to")
    link.add_argument("--admin", action="store_true", help="sign in as an org admin (see --org-admin-claim)")
    link.add_argument(
        "--expires", type=_typed(float), default=LINK_SECONDS, metavar="SECONDS", help="seconds the link stays usable"
    )
    _add_options(link, _DATA_OPTIONS | {"host", "port", "public_url"})

    _integration_commands(commands)
    _connection_commands(commands)
    _oauth_client_commands(commands)
    return parser


def _org_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--org", default="local", help="the organization (default: local, the org of --auth none)")


def _spec_source(command: argparse.ArgumentParser, required: bool) -> None:
    source = command.add_mutually_exclusive_group(required=required)
    source.add_argument("--url", help="fetch the OpenAPI document from this URL (and keep it for updates)")
    source.add_argument("--file", type=Path, help="read the OpenAPI document (JSON or YAML) from this file")


def _integration_commands(commands: Commands) -> None:
    integrations = _command(commands, "integrations", "add, list, show, update or remove integrations")
    actions = _actions(integrations)
    add = _command(actions, "add-openapi", "add an OpenAPI integration to the org")
    add.add_argument("--slug", required=True, help="its id in tool paths: a letter or _, then letters, digits, _ and -")
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
    graphql = _command(actions, "add-graphql", "add a GraphQL endpoint to the org")
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
    listed = _command(actions, "list", "the org's integrations")
    _json_option(listed)
    _org_option(listed)
    _add_options(listed, _INTEGRATION_OPTIONS)
    for action, summary in (
        ("show", "one integration: its source, tools and templates"),
        ("remove", "remove one, with its connections"),
    ):
        command = _command(actions, action, summary)
        command.add_argument("slug")
        if action == "show":
            command.add_argument("--json", action="store_true", help="print JSON instead of text")
        _org_option(command)
        _add_options(command, _INTEGRATION_OPTIONS)
    _add_mcp_command(actions)
    update = _command(actions, "update", "a new spec from --url or --file, or the stored URL again")
    update.add_argument("slug")
    _spec_source(update, required=False)
    _org_option(update)
    _add_options(update, _INTEGRATION_OPTIONS)


def _add_mcp_command(actions: Commands) -> None:
    add = _command(actions, "add-mcp", "add an MCP server (remote URL, or a stdio command) to the org")
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


def _connection_commands(commands: Commands) -> None:
    connections = _command(
        commands, "connections", "add, connect (OAuth), list, refresh or remove connections (credentials)"
    )
    actions = _actions(connections)
    add = _command(
        actions, "add", "add or replace a connection; its value is read from a prompt or standard input, never argv"
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
    for command in (add, listed := _command(actions, "list", "the connections of the org (and of --user)")):
        command.add_argument("--user", help="the account (for user connections)")
        _org_option(command)
        _add_options(command, _INTEGRATION_OPTIONS)
    listed.add_argument("--integration", metavar="SLUG", help="only this integration's")
    _json_option(listed)
    for action, summary in (
        ("remove", "remove a connection, and the values it stored"),
        ("refresh", "list a connection's tools again (MCP servers, introspected GraphQL) and print them"),
    ):
        command = _command(actions, action, summary)
        command.add_argument(
            "connection", metavar="ADDRESS", help="as connections list prints it, e.g. tools.github.org.main"
        )
        command.add_argument("--user", help="the account a user connection belongs to")
        if action == "refresh":
            _json_option(command)
        _org_option(command)
        _add_options(command, _INTEGRATION_OPTIONS)
    _connect_command(actions)


def _connect_command(actions: Commands) -> None:
    connect = _command(
        actions,
        "connect",
        "connect with an OAuth client: at once (client credentials), or a sign-in URL to open, then wait",
        "Make an OAuth connection as the HTTP API's /api/oauth/start does. A client-credentials client connects at "
        "once. An authorization-code client starts a sign-in as --user: open the printed URL in a browser signed in "
        "to the console as that account; the server on this data dir completes it at --public-url's "
        "/api/oauth/callback, and this command waits for the connection (Ctrl-C cancels the sign-in).",
    )
    connect.add_argument("--integration", required=True, metavar="SLUG", help="the integration's slug")
    connect.add_argument("--name", required=True, help="the connection's name: letters, digits, - and _")
    connect.add_argument("--template", required=True, help="the integration's OAuth method (see integrations show)")
    connect.add_argument("--client", required=True, metavar="SLUG", help="the OAuth client (see oauth-clients list)")
    connect.add_argument("--owner", choices=("org", "user"), default="org", help="shared by the org, or one account's")
    connect.add_argument("--client-owner", choices=("org", "user"), help="whose client it is (default: --owner)")
    connect.add_argument("--user", metavar="ACCOUNT", help="the account that signs in (and owns a user connection)")
    connect.add_argument(
        "--no-wait", dest="wait", action="store_false", help="print the sign-in URL and exit, without waiting"
    )
    _org_option(connect)
    _add_options(connect, _INTEGRATION_OPTIONS | {"public_url"})


def _oauth_client_commands(commands: Commands) -> None:
    clients = _command(commands, "oauth-clients", "add, list or remove OAuth clients (what connections sign in with)")
    actions = _actions(clients)
    listed = _command(actions, "list", "the org's OAuth clients (and --user's), never a secret")
    _json_option(listed)
    add = _command(
        actions, "add", "register a client by hand; its secret is read from a prompt or standard input, never argv"
    )
    add.add_argument("--slug", required=True, help="its name here: 1-64 letters, digits, - and _")
    add.add_argument("--grant", choices=GRANTS, default=AUTHORIZATION_CODE, help="how it gets tokens")
    add.add_argument("--client-id", required=True, metavar="ID", help="the id the authorization server gave it")
    add.add_argument("--authorization-url", metavar="URL", help="the authorization endpoint (authorization_code)")
    add.add_argument("--token-url", required=True, metavar="URL", help="the token endpoint")
    add.add_argument(
        "--resource", metavar="URL", help="the API its tokens are for (RFC 8707), e.g. an MCP server's URL"
    )
    add.add_argument(
        "--issuer", metavar="URL", help="the authorization server's issuer, checked against a callback's iss"
    )
    add.add_argument(
        "--token-auth-method", choices=TOKEN_AUTH_METHODS, help="default: client_secret_post, or none with --no-secret"
    )
    add.add_argument("--no-secret", dest="secret", action="store_false", help="a public client: no secret is read")
    remove = _command(actions, "remove", "remove a client (its connections work until their next token refresh)")
    remove.add_argument("slug", metavar="SLUG")
    for command in (add, remove):
        command.add_argument("--owner", choices=("org", "user"), default="org", help="the org's, or one account's")
    for command in (listed, add, remove):
        command.add_argument("--user", metavar="ACCOUNT", help="the account (for user clients)")
        _org_option(command)
        _add_options(command, _INTEGRATION_OPTIONS)


def _hidden(command: str) -> Callable[[list[str]], int] | None:
    """How the single binary re-executes itself (a sandbox worker, the zygote that forks them, the shim a stdio MCP
    server runs under, the OpenAPI compiler): commands not for people, so argparse never hears of them and no help
    or error lists them."""
    if command == "sandbox-worker":
        from executor_mcp.sandbox.worker import main as worker_main  # light: the worker needs no server

        return lambda _: worker_main()
    if command == "sandbox-zygote":
        from executor_mcp.sandbox.zygote import main as zygote_main

        return lambda _: zygote_main()
    if command == "openapi-compiler":
        from executor_mcp.integrations.openapi.compiler import main as compiler_main

        return compiler_main
    if command == "mcp-stdio-lifeline":
        from executor_mcp.integrations.mcp.lifeline import main as lifeline_main

        return lifeline_main
    return None


# What a command ends with when the reader of its output went away (`sessions list | head -1`): the status a
# shell reports for a process that SIGPIPE ended (128 + 13), as `yes | head` reports it, not a traceback.
CLOSED_PIPE_STATUS = 141


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and (hidden := _hidden(arguments[0])) is not None:
        return hidden(arguments[1:])
    try:
        status = _run(_parser().parse_args(arguments))
        sys.stdout.flush()  # inside the try: a closed pipe shows here for output still buffered
    except BrokenPipeError:
        return _closed_pipe()
    except BaseExceptionGroup as group:
        if group.split(BrokenPipeError)[1] is not None:
            raise
        return _closed_pipe()
    return status


def _closed_pipe() -> int:
    """Standard output's reader is gone: point stdout at /dev/null, so that the interpreter's last flush has
    somewhere to go instead of printing a second error (the Python documentation's recipe for SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_PIPE_STATUS


def _run(args: argparse.Namespace) -> int:
    if args.command == "version":
        return _version(args.json)
    if args.command == "config-reference":
        print(render_markdown(), end="")
        return 0
    if args.command == "proxy-config":
        return _proxy_config(args.proxy, args.instance, args.listen)
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
    if args.command == "doctor":
        _only_our_log_lines()
        return _doctor(settings, args.json)
    from executor_mcp.storage.interfaces import StoreUnavailable
    from executor_mcp.storage.postgres.migrations import SchemaTooNew

    try:
        if args.command != "migrate":  # the schema holds no secret
            check_shared_database(settings, os.environ, serving=False)
        return trio.run(_admin(args, settings))
    except ConfigError as exc:
        print(f"executor-mcp: error: {exc}", file=sys.stderr)
        return 2
    except (StoreUnavailable, SchemaTooNew) as exc:
        print(f"executor-mcp: error: {exc}", file=sys.stderr)
        return 1


def _proxy_config(proxy: str, instances: list[str], listen: str) -> int:
    from executor_mcp.proxy_config import Instance, ProxyConfigError, render

    try:
        print(render(proxy, [Instance.parse(text) for text in instances], listen), end="")
    except ProxyConfigError as exc:
        print(f"executor-mcp: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _version(as_json: bool) -> int:
    if not as_json:
        print(f"executor-mcp {__version__}")
        return 0
    shown = {
        "version": __version__,
        "python": platform.python_version(),
        "trio": trio.__version__,
        "platform": platform.platform(),
        "build": "frozen" if getattr(sys, "frozen", False) else "source",
    }
    print(json.dumps(shown, indent=2))
    return 0


def _ours(record: logging.LogRecord) -> bool:
    return record.name == "executor_mcp" or record.name.startswith("executor_mcp.")


def _only_our_log_lines() -> None:
    """The doctor's report is its output: a library's log line among it (httpx logs each request it makes at
    info) reads as a finding, and is none."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(_ours)


def _doctor(settings: Settings, as_json: bool) -> int:
    from executor_mcp.doctor.checks import exit_status, text_line
    from executor_mcp.doctor.probes import run_all

    found = trio.run(run_all, settings)
    if as_json:
        print(json.dumps([{"check": c.check, "status": c.status.value, "detail": c.detail} for c in found], indent=2))
    else:
        for check in found:
            print(text_line(check))
    return exit_status(found)


def _admin(args: argparse.Namespace, settings: Settings):
    if args.command in ("integrations", "connections", "oauth-clients"):
        return _integrations_admin(args, settings)
    from executor_mcp import admin

    match args.command, getattr(args, "action", None):
        case "migrate", _:
            return partial(admin.migrate, settings, args.from_lmdb)
        case "orgs", "list":
            return partial(admin.orgs_list, settings, args.json)
        case "orgs", "revoke" | "restore":
            return partial(admin.orgs_set_revoked, settings, args.org, args.action == "revoke")
        case "keys", "create":
            return partial(admin.keys_create, settings, args.user, args.org, args.admin)
        case "keys", "list":
            return partial(admin.keys_list, settings, args.json)
        case "policies", "list":
            return partial(admin.policies_list, settings, args.org, args.user, args.json)
        case "policies", "add":
            return partial(
                admin.policies_add, settings, args.org, args.user, args.pattern, args.policy_action, args.position
            )
        case "sessions", "list":
            return partial(admin.sessions_list, settings, args.json)
        case "sessions", "show":
            return partial(admin.sessions_show, settings, args.session_id, args.json)
        case "audit", "list":
            return partial(
                admin.audit_list, settings, args.org, args.since, args.session, args.tool, args.limit, args.json
            )
        case "console-link", _:
            return partial(admin.console_link, settings, args.user, args.org, args.admin, args.expires)
        case "sessions", "terminate":
            return partial(admin.sessions_terminate, settings, args.session_id)
        case "policies", "remove":
            return partial(admin.policies_remove, settings, args.org, args.user, args.policy_id)
        case _:
            return partial(admin.keys_revoke, settings, args.key_id)


def _integrations_admin(args: argparse.Namespace, settings: Settings):
    from executor_mcp.integrations import commands, dispatch

    settings = trio.run(commands.data_dir_settings, settings, given_options(vars(args)))
    if args.action == "connect" and settings.public_url is None:
        settings = attrs.evolve(settings, public_url=_served_public_url(settings.data_dir))
    return dispatch.command(args, settings, sys.stdin.buffer, sys.stdin.isatty())


def _served_public_url(data_dir: Path) -> str | None:
    """Where the server running on `data_dir` is reached, in its own words: its protected-resource metadata names
    its MCP endpoint under its public URL (`--public-url`, else its bound address). A sign-in the CLI starts
    must come back to that server's callback, whatever flags the server was given; None when no server has
    announced an address in the data dir's lock file, or it does not answer."""
    import httpx

    from executor_mcp.storage import ownership
    from executor_mcp.transport.discovery import MCP_PATH, METADATA_PATH

    running = ownership.holder(data_dir)
    if running is None or running.url is None:
        return None
    try:
        metadata = httpx.get(running.url + METADATA_PATH + MCP_PATH, timeout=10, trust_env=False).json()
    except (httpx.HTTPError, ValueError):
        return None
    resource = metadata.get("resource") if isinstance(metadata, dict) else None
    return resource.removesuffix(MCP_PATH) if isinstance(resource, str) and resource.endswith(MCP_PATH) else None


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
