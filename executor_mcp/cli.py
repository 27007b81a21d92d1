"""The `executor-mcp` command line: `serve`, and admin commands that work on a data dir."""

import argparse
import logging
import sys
from collections.abc import Sequence
from functools import partial

import trio

from executor_mcp import __version__
from executor_mcp.config import CONFIG_ENV, OPTIONS, ConfigError, Settings, load_settings

_DATA_OPTIONS = {"data_dir", "log_level"}


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

    # How the single binary re-executes itself as a sandbox worker; not for people.
    commands.add_parser("sandbox-worker")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "sandbox-worker":
        from executor_mcp.sandbox.worker import main as worker_main  # light: the worker needs no server

        return worker_main()
    try:
        settings = load_settings(vars(args))
    except ConfigError as exc:
        print(f"executor-mcp: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if args.command == "serve":
        return _serve(settings)
    return trio.run(_admin(args, settings))


def _admin(args: argparse.Namespace, settings: Settings):
    from executor_mcp import admin

    data_dir = settings.data_dir
    match args.command, args.action:
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
        case "sessions", "terminate":
            return partial(admin.sessions_terminate, data_dir, args.session_id)
        case "policies", "remove":
            return partial(admin.policies_remove, data_dir, args.org, args.user, args.policy_id)
        case _:
            return partial(admin.keys_revoke, data_dir, args.key_id)


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


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    """The first real exception of a group: nurseries nest groups, whose own text says nothing."""
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


if __name__ == "__main__":
    sys.exit(main())
