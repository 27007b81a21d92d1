"""The command line's grammar below the top-level commands: the parser class whose refusals are one line, the
helpers every subcommand is built with, and the groups of admin commands over a data dir (integrations,
connections, OAuth clients, toolkits). `cli.py` assembles them into `executor-mcp`'s parser and runs them."""

import argparse
import difflib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn, TypeAlias

from executor_mcp.config import CONFIG_ENV, OPTIONS
from executor_mcp.config_reference import option_help
from executor_mcp.policies.toolkits import SLUG, Level
from executor_mcp.records.oauth import AUTHORIZATION_CODE, GRANTS, TOKEN_AUTH_METHODS

DATA_OPTIONS = {"data_dir", "log_level", "database_url", "database_pool_size"}
# What building the integrations service reads: the outbound guard and limits, and the secret providers.
INTEGRATION_OPTIONS = DATA_OPTIONS | {
    "allow_local_network",
    "allow_stdio_mcp",
    "integration_max_response_bytes",
    "integration_max_spec_bytes",
    "secret_env",
    "secrets_dir",
}


class Parser(argparse.ArgumentParser):
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


def toolkit_slug(text: str) -> str:
    """A toolkit's slug as an argparse type: the grammar's (a toolkit that does not exist is refused by the server,
    which knows whose toolkits there are)."""
    if not SLUG.match(text):
        raise argparse.ArgumentTypeError(f"not a toolkit slug: {text!r} (lowercase letters, digits and '-')")
    return text


def typed(kind: type[int] | type[float]) -> Callable[[str], Any]:
    """`int` or `float` as an argparse type, refused in the options' words (`--limit: invalid int value 'x'`,
    as `--port abc` is refused by `config.py`) rather than argparse's own (`invalid int value: 'x'`)."""

    def parse(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value {text!r}") from None

    return parse


# Every subcommand's parser is a `Parser` too: argparse builds them with the class of the parser they hang from.
Commands: TypeAlias = "argparse._SubParsersAction[Parser]"


def subcommand(actions: Commands, name: str, summary: str, description: str | None = None) -> Parser:
    """A subcommand with its one-line summary in its parent's list and a description in its own `--help`."""
    return actions.add_parser(name, help=summary, description=description or summary[0].upper() + summary[1:] + ".")


def actions_of(command: Parser) -> Commands:
    return command.add_subparsers(dest="action", required=True, metavar="ACTION")


def json_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--json", action="store_true", help="print JSON (a list; [] for none) instead of text")


def add_options(parser: argparse.ArgumentParser, names: set[str] | None = None) -> None:
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


def org_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--org", default="local", help="the organization (default: local, the org of --auth none)")


def spec_source(command: argparse.ArgumentParser, required: bool) -> None:
    source = command.add_mutually_exclusive_group(required=required)
    source.add_argument("--url", help="fetch the OpenAPI document from this URL (and keep it for updates)")
    source.add_argument("--file", type=Path, help="read the OpenAPI document (JSON or YAML) from this file")


def integration_commands(commands: Commands) -> None:
    integrations = subcommand(commands, "integrations", "add, list, show, update or remove integrations")
    actions = actions_of(integrations)
    add = subcommand(actions, "add-openapi", "add an OpenAPI integration to the org")
    add.add_argument("--slug", required=True, help="its id in tool paths: a letter or _, then letters, digits, _ and -")
    spec_source(add, required=True)
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
    org_option(add)
    add_options(add, INTEGRATION_OPTIONS)
    graphql = subcommand(actions, "add-graphql", "add a GraphQL endpoint to the org")
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
    org_option(graphql)
    add_options(graphql, INTEGRATION_OPTIONS)
    listed = subcommand(actions, "list", "the org's integrations")
    json_option(listed)
    org_option(listed)
    add_options(listed, INTEGRATION_OPTIONS)
    for action, summary in (
        ("show", "one integration: its source, tools and templates"),
        ("remove", "remove one, with its connections"),
    ):
        command = subcommand(actions, action, summary)
        command.add_argument("slug")
        if action == "show":
            command.add_argument("--json", action="store_true", help="print JSON instead of text")
        org_option(command)
        add_options(command, INTEGRATION_OPTIONS)
    add_mcp_command(actions)
    update = subcommand(actions, "update", "a new spec from --url or --file, or the stored URL again")
    update.add_argument("slug")
    spec_source(update, required=False)
    org_option(update)
    add_options(update, INTEGRATION_OPTIONS)


def add_mcp_command(actions: Commands) -> None:
    add = subcommand(actions, "add-mcp", "add an MCP server (remote URL, or a stdio command) to the org")
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
    org_option(add)
    add_options(add, INTEGRATION_OPTIONS)


def connection_commands(commands: Commands) -> None:
    connections = subcommand(
        commands, "connections", "add, connect (OAuth), list, refresh or remove connections (credentials)"
    )
    actions = actions_of(connections)
    add = subcommand(
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
    for command in (add, listed := subcommand(actions, "list", "the connections of the org (and of --user)")):
        command.add_argument("--user", help="the account (for user connections)")
        org_option(command)
        add_options(command, INTEGRATION_OPTIONS)
    listed.add_argument("--integration", metavar="SLUG", help="only this integration's")
    json_option(listed)
    for action, summary in (
        ("remove", "remove a connection, and the values it stored"),
        ("refresh", "list a connection's tools again (MCP servers, introspected GraphQL) and print them"),
    ):
        command = subcommand(actions, action, summary)
        command.add_argument(
            "connection", metavar="ADDRESS", help="as connections list prints it, e.g. tools.github.org.main"
        )
        command.add_argument("--user", help="the account a user connection belongs to")
        if action == "refresh":
            json_option(command)
        org_option(command)
        add_options(command, INTEGRATION_OPTIONS)
    connect_command(actions)


def connect_command(actions: Commands) -> None:
    connect = subcommand(
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
    org_option(connect)
    add_options(connect, INTEGRATION_OPTIONS | {"public_url"})


def oauth_client_commands(commands: Commands) -> None:
    clients = subcommand(commands, "oauth-clients", "add, list or remove OAuth clients (what connections sign in with)")
    actions = actions_of(clients)
    listed = subcommand(actions, "list", "the org's OAuth clients (and --user's), never a secret")
    json_option(listed)
    add = subcommand(
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
    remove = subcommand(actions, "remove", "remove a client (its connections work until their next token refresh)")
    remove.add_argument("slug", metavar="SLUG")
    for command in (add, remove):
        command.add_argument("--owner", choices=("org", "user"), default="org", help="the org's, or one account's")
    for command in (listed, add, remove):
        command.add_argument("--user", metavar="ACCOUNT", help="the account (for user clients)")
        org_option(command)
        add_options(command, INTEGRATION_OPTIONS)


def toolkit_commands(commands: Commands) -> None:
    toolkits = subcommand(commands, "toolkits", "list, create, show or remove toolkits and their rows")
    each = actions_of(toolkits)
    listed = subcommand(each, "list", "the org's toolkits (and the user's, with --user)")
    owned(listed)
    json_option(listed)
    create = subcommand(each, "create", "create a toolkit: an MCP endpoint at /mcp/toolkits/SLUG")
    owned(create)
    create.add_argument("--name", required=True, help="its display name")
    create.add_argument("--slug", type=toolkit_slug, help="its endpoint's slug (default: made from the name)")
    for name, summary in (("show", "a toolkit with its connection patterns and rules"), ("remove", "remove a toolkit")):
        shown = subcommand(each, name, summary)
        owned(shown)
        shown.add_argument("toolkit_id", metavar="TOOLKIT_ID")
        if name == "show":
            json_option(shown)
    connect = subcommand(each, "connect", "show a connection pattern's tools at a level (off, read, full)")
    owned(connect)
    connect.add_argument("toolkit_id", metavar="TOOLKIT_ID")
    connect.add_argument("--pattern", required=True, help="e.g. github.org.main.* or executor.coreTools.*")
    connect.add_argument("--level", choices=[level.value for level in Level], default=Level.FULL.value)
    rule = subcommand(each, "rule", "add a rule of the toolkit's own (it can only tighten the org's and the user's)")
    owned(rule)
    rule.add_argument("toolkit_id", metavar="TOOLKIT_ID")
    rule.add_argument("--pattern", required=True, help="e.g. github.*")
    rule.add_argument(
        "--action", dest="policy_action", required=True, metavar="{approve,require_approval,block}", help="its word"
    )
    unrow = subcommand(each, "remove-row", "remove a toolkit's connection pattern (tkconn_…) or rule (tkpol_…)")
    owned(unrow)
    unrow.add_argument("toolkit_id", metavar="TOOLKIT_ID")
    unrow.add_argument("row_id", metavar="ROW_ID")


def owned(parsed: argparse.ArgumentParser) -> None:
    """A toolkit command's owner: the org's toolkits, or (with --user) that account's own."""
    parsed.add_argument("--org", required=True, metavar="ORG", help="the organization")
    parsed.add_argument("--user", metavar="ACCOUNT", help="the account, for its own toolkits")
    add_options(parsed, DATA_OPTIONS)
