"""The `executor-mcp` command line."""

import argparse
import logging
import sys
from collections.abc import Sequence

import trio

from executor_mcp import __version__
from executor_mcp.config import CONFIG_ENV, OPTIONS, ConfigError, load_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="executor-mcp", description="A self-hosted MCP server for agents' code.")
    parser.add_argument("--version", action="version", version=f"executor-mcp {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the MCP server")
    serve.add_argument("--config", help=f"TOML config file (also {CONFIG_ENV})")
    for option in OPTIONS:
        serve.add_argument(option.flag, dest=option.name, metavar="VALUE", help=f"{option.help} [{option.env}]")
    # How the single binary re-executes itself as a sandbox worker; not for people.
    commands.add_parser("sandbox-worker")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "sandbox-worker":
        from executor_mcp.sandbox.worker import main as worker_main  # light: the worker needs no server

        return worker_main()
    from executor_mcp.app import UnsafeBind, ensure_safe_bind, serve_until_signalled

    flags = vars(args)
    try:
        settings = load_settings(flags)
    except ConfigError as exc:
        print(f"executor-mcp: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        ensure_safe_bind(settings)
    except UnsafeBind as exc:
        print(f"executor-mcp: error: {exc}", file=sys.stderr)
        return 2
    failure = None
    try:
        trio.run(serve_until_signalled, settings)
    except* OSError as group:
        failure = group.exceptions[0]
    if failure is not None:
        print(f"executor-mcp: error: cannot serve on {settings.host}:{settings.port}: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
