"""The `executor-mcp` command line: `serve`, and admin commands that work on a data dir."""

import argparse
import json
import logging
import os
import platform
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import attrs
import trio

from executor_mcp import __version__
from executor_mcp.config import (
    ConfigError,
    Settings,
    check_shared_database,
    given_options,
    load_settings,
)
from executor_mcp.config_reference import render_markdown
from executor_mcp.logs import configure_logging
from executor_mcp.parsers import (
    DATA_OPTIONS,
    Parser,
    actions_of,
    add_options,
    connection_commands,
    integration_commands,
    json_option,
    oauth_client_commands,
    org_option,
    subcommand,
    toolkit_commands,
    toolkit_slug,
    typed,
)
from executor_mcp.protocol.resources import MCP_PATH, resource_for
from executor_mcp.storage.records import ELICITATION_MODES, EXECUTE_MODE, MODEL_ELICITATION, PASSTHROUGH_MODE
from executor_mcp.web.signin import LINK_SECONDS

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
    parser = Parser(prog="executor-mcp", description="A self-hosted MCP server for agents' code.")
    parser.add_argument("--version", action="version", version=f"executor-mcp {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_options(subcommand(commands, "serve", "run the MCP server", SERVE))
    stdio = subcommand(commands, "stdio", "serve one MCP client on standard input and output", STDIO)
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
    stdio.add_argument(
        "--toolkit",
        type=toolkit_slug,
        metavar="SLUG",
        help="serve the toolkit's endpoint (/mcp/toolkits/SLUG): only what the toolkit shows, under its rules",
    )
    add_options(stdio)
    version = subcommand(commands, "version", "print the version (with --json: and the runtime's)")
    version.add_argument("--json", action="store_true", help="print version, python, trio, platform and build")
    doctor = subcommand(commands, "doctor", "check the data dir, permissions, port, sandbox and clock", DOCTOR)
    doctor.add_argument("--json", action="store_true", help="print a JSON list of {check, status, detail}")
    add_options(doctor, {"data_dir", "log_level", "host", "port"})
    subcommand(
        commands,
        "config-reference",
        "print the options as a Markdown table",
        "Print every option (flag, environment variable, TOML key, default, description) as the Markdown table "
        "README.md holds.",
    )

    proxy = subcommand(
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
    migrate = subcommand(
        commands,
        "migrate",
        "bring --database-url's schema up to this version; with --from-lmdb, move a data dir's records into it",
        "Apply the PostgreSQL schema's missing migrations and exit (every instance also applies them at start, "
        "under an advisory lock, so this is for running them alone, e.g. before a rolling upgrade). With "
        "--from-lmdb DIR, also copy that single-node data dir's control plane into the empty database and "
        "verify the copy domain by domain.",
    )
    add_options(migrate, {"log_level", "database_url"})
    migrate.add_argument(
        "--from-lmdb",
        type=Path,
        metavar="DIR",
        help="then move that data dir's control plane (orgs, keys, rules, audit, signing keys, integrations and "
        "connections, sealed secrets) into the empty database and check the copy; the data dir must not be "
        "served meanwhile, and EXECUTOR_MCP_SECRET_KEY must be its secret.key's content",
    )

    orgs = subcommand(commands, "orgs", "list, revoke or restore organizations")
    org_actions = actions_of(orgs)
    listed = subcommand(org_actions, "list", "organizations seen or revoked")
    json_option(listed)
    add_options(listed, DATA_OPTIONS)
    for action, summary in (
        ("revoke", "refuse the org's requests and end its sessions"),
        ("restore", "undo a revocation: the org's requests are served again"),
    ):
        command = subcommand(org_actions, action, summary)
        command.add_argument("org", metavar="ORG")
        add_options(command, DATA_OPTIONS)

    keys = subcommand(commands, "keys", "create, list or revoke API keys")
    key_actions = actions_of(keys)
    create = subcommand(key_actions, "create", "create an API key (printed once)")
    create.add_argument("--user", required=True, metavar="ACCOUNT", help="the account the key acts as")
    create.add_argument("--org", required=True, metavar="ORG", help="the organization the key acts in")
    create.add_argument("--admin", action="store_true", help="the key may change org rules (see --org-admin-claim)")
    create.add_argument(
        "--toolkit",
        type=toolkit_slug,
        metavar="SLUG",
        help="bind the key to one toolkit: it opens /mcp/toolkits/SLUG and nothing else",
    )
    add_options(create, DATA_OPTIONS)
    listed = subcommand(key_actions, "list", "API keys, without their secrets")
    json_option(listed)
    add_options(listed, DATA_OPTIONS)
    revoke = subcommand(key_actions, "revoke", "revoke an API key by its id")
    revoke.add_argument("key_id", metavar="KEY_ID")
    add_options(revoke, DATA_OPTIONS)

    policies = subcommand(commands, "policies", "list, add or remove tool policies")
    policy_actions = actions_of(policies)
    for action, summary in (
        ("list", "the org's rules (and the user's, with --user) in evaluation order"),
        ("add", "add an org rule, or a user rule with --user"),
        ("remove", "remove an org rule, or a user rule with --user"),
    ):
        command = subcommand(policy_actions, action, summary)
        command.add_argument("--org", required=True, metavar="ORG", help="the organization")
        command.add_argument("--user", metavar="ACCOUNT", help="the account, for user rules")
        if action == "list":
            json_option(command)
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
        add_options(command, DATA_OPTIONS)

    sessions = subcommand(commands, "sessions", "list, show or terminate sessions")
    session_actions = actions_of(sessions)
    listed = subcommand(session_actions, "list", "stored sessions, most recently active first")
    json_option(listed)
    add_options(listed, DATA_OPTIONS)
    for action, summary in (
        ("show", "one session's directory entry and what its file says of its client"),
        ("terminate", "end a session (a running server ends its runtime within a second)"),
    ):
        command = subcommand(session_actions, action, summary)
        command.add_argument("session_id", metavar="SESSION_ID")
        if action == "show":
            command.add_argument("--json", action="store_true", help="print JSON instead of text")
        add_options(command, DATA_OPTIONS)

    audit = subcommand(commands, "audit", "read the audit log of tool calls")
    listed = subcommand(
        actions_of(audit),
        "list",
        "an org's tool calls, newest first",
        "An org's tool calls, newest first: who, which session, what the policies decided, how an approval was "
        "answered and how the call ended. Never arguments or results.",
    )
    org_option(listed)
    json_option(listed)
    listed.add_argument("--since", metavar="WHEN", help="only calls since then: 15m, 2h, 7d, or an ISO 8601 time")
    listed.add_argument("--session", metavar="SESSION_ID", help="only this session's calls")
    listed.add_argument("--tool", metavar="GLOB", help="only tools whose path matches, e.g. 'github.*'")
    listed.add_argument("--limit", type=typed(int), default=100, metavar="N", help="at most N records")
    add_options(listed, DATA_OPTIONS)

    link = subcommand(commands, "console-link", "print a one-time link that signs in to the web console")
    link.add_argument("--user", required=True, metavar="ACCOUNT", help="the account the link signs in as")
    link.add_argument("--org", required=True, metavar="ORG", help="the organization it signs in to")
    link.add_argument("--admin", action="store_true", help="sign in as an org admin (see --org-admin-claim)")
    link.add_argument(
        "--expires", type=typed(float), default=LINK_SECONDS, metavar="SECONDS", help="seconds the link stays usable"
    )
    add_options(link, DATA_OPTIONS | {"host", "port", "public_url"})

    integration_commands(commands)
    connection_commands(commands)
    oauth_client_commands(commands)
    toolkit_commands(commands)
    return parser


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
        return _serve_stdio(settings, args.elicitation_mode, args.mode, args.toolkit)
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
            return partial(admin.keys_create, settings, args.user, args.org, args.admin, args.toolkit)
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
        case "toolkits", _:
            return _toolkits_admin(args, settings)
        case _:
            return partial(admin.keys_revoke, settings, args.key_id)


def _toolkits_admin(args: argparse.Namespace, settings: Settings):
    from executor_mcp import admin

    owner = (settings, args.org, args.user)
    match args.action:
        case "list":
            return partial(admin.toolkits_list, *owner, args.json)
        case "create":
            return partial(admin.toolkits_create, *owner, args.name, args.slug)
        case "show":
            return partial(admin.toolkits_show, *owner, args.toolkit_id, args.json)
        case "remove":
            return partial(admin.toolkits_remove, *owner, args.toolkit_id)
        case "connect":
            return partial(admin.toolkits_connect, *owner, args.toolkit_id, args.pattern, args.level)
        case "rule":
            return partial(admin.toolkits_rule, *owner, args.toolkit_id, args.pattern, args.policy_action)
        case _:
            return partial(admin.toolkits_remove_row, *owner, args.toolkit_id, args.row_id)


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


def _serve_stdio(settings: Settings, elicitation_mode: str, mode: str, toolkit: str | None) -> int:
    from executor_mcp.app import serve_stdio

    query = urllib.parse.urlencode({"elicitation_mode": elicitation_mode, "mode": mode}).encode()
    failure: str | None = None
    try:
        trio.run(serve_stdio, settings, query, MCP_PATH if toolkit is None else resource_for(toolkit))
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
