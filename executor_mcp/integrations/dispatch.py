"""What each `integrations …`, `connections …` and `oauth-clients …` command line runs: its parsed flags
mapped onto the command's coroutine. `cli.py` builds the parser and calls this, so the parser and the dispatch of
every command family do not make one file too long to read, and the integrations commands' imports stay out of
the commands that do not need them."""

import argparse
from collections.abc import Awaitable, Callable
from functools import partial
from typing import BinaryIO

from executor_mcp.config import Settings
from executor_mcp.integrations import commands, oauth_commands


def command(args: argparse.Namespace, settings: Settings, stdin: BinaryIO, tty: bool) -> Callable[[], Awaitable[int]]:
    """The command's coroutine function; `stdin` and `tty` are where a secret is read (never argv)."""
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
            return partial(commands.integrations_list, settings, args.org, args.json)
        case "integrations", "show":
            return partial(commands.integrations_show, settings, args.org, args.slug, args.json)
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
                stdin,
                tty,
            )
        case "connections", "list":
            return partial(commands.connections_list, settings, args.org, args.user, args.integration, args.json)
        case "connections", "refresh":
            return partial(commands.connections_refresh, settings, args.org, args.user, args.connection, args.json)
        case "connections", "connect":
            body = oauth_commands.start_body(
                owner=args.owner,
                name=args.name,
                integration=args.integration,
                template=args.template,
                client=args.client,
                client_owner=args.client_owner,
            )
            return partial(oauth_commands.connect, settings, args.org, args.user, body, args.wait)
        case "oauth-clients", "list":
            return partial(oauth_commands.clients_list, settings, args.org, args.user, args.json)
        case "oauth-clients", "add":
            body = oauth_commands.client_body(
                owner=args.owner,
                slug=args.slug,
                grant=args.grant,
                client_id=args.client_id,
                authorization_url=args.authorization_url,
                token_url=args.token_url,
                resource=args.resource,
                issuer=args.issuer,
                token_auth_method=args.token_auth_method,
            )
            add = oauth_commands.clients_add
            return partial(add, settings, args.org, args.user, body, args.secret, stdin, tty)
        case "oauth-clients", "remove":
            return partial(oauth_commands.clients_remove, settings, args.org, args.user, args.owner, args.slug)
        case _:
            return partial(commands.connections_remove, settings, args.org, args.user, args.connection)
