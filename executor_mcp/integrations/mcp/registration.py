"""`addServer` input → a validated `kinds.Registration` (pure; registration never dials the server).

Remote: `{transport?: "remote", name, description?, endpoint, remoteTransport?, headers?, queryParams?, slug?,
authenticationTemplate?, auth?}`. stdio: `{transport: "stdio", name, command, args?, env?, cwd?, slug?,
description?, authenticationTemplate?}`. `auth` is the shorthand `{kind: "none"}` or `{kind: "header",
headerName, prefix?}` (the method `header`, whose input is `token`); `oauth2` keeps its place in the shape
but is refused until MCP OAuth lands. A stdio template `{slug: "env", kind: "stdio_env", vars: [...]}` is
stored as an API-key method whose placements have carrier `env`: each var is one input of the connection,
pasted on the connect page or referenced in a secret provider like any other credential.
"""

import posixpath
import re
import urllib.parse
from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.integrations import addresses
from executor_mcp.integrations.kinds import Registration
from executor_mcp.integrations.openapi import auth as openapi_auth
from executor_mcp.integrations.validation import MAX_DESCRIPTION_LENGTH, MAX_NAME_LENGTH, MAX_URL_LENGTH, check_known
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import DISCOVERED_PER_CONNECTION, MCP, NO_AUTH, AuthMethod, Placement

REMOTE, STDIO = "remote", "stdio"
REMOTE_TRANSPORTS = ("auto", "streamable-http", "sse")
ENV_CARRIER = "env"
HEADER_METHOD = "header"
ENV_METHOD = "env"
STDIO_DISABLED = (
    "MCP stdio transport is disabled. Start executor-mcp with --allow-stdio-mcp (EXECUTOR_MCP_ALLOW_STDIO_MCP=true) "
    "to let integrations run MCP servers as local commands."
)
OAUTH_METHOD = "oauth2"  # the template of a server added with auth {kind: "oauth2"}
OAUTH_IN_TEMPLATE = (
    'An MCP server signs in with OAuth through auth {kind: "oauth2"}, not an authenticationTemplate entry'
)

MAX_ENTRIES = 64
MAX_VALUE_LENGTH = 4096
MAX_ARGS = 256
MAX_ARG_LENGTH = 4096
MAX_COMMAND_LENGTH = 1024
MAX_VARS = 32
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")
_HEADER_VALUE = re.compile(r"[\x20-\x7e\t]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_REMOTE_FIELDS = {
    "transport",
    "name",
    "description",
    "endpoint",
    "remoteTransport",
    "headers",
    "queryParams",
    "slug",
    "authenticationTemplate",
    "auth",
}
_STDIO_FIELDS = {"transport", "name", "description", "command", "args", "env", "cwd", "slug", "authenticationTemplate"}
# What `config` changes: the connection-facing parts, never the name or slug.
CONFIG_FIELDS = {
    "endpoint",
    "remoteTransport",
    "headers",
    "queryParams",
    "auth",
    "authenticationTemplate",
    "command",
    "args",
    "env",
    "cwd",
}


def _text(values: JsonObject, field: str, limit: int, *, required: bool = False) -> str | None:
    value = values.get(field)
    if value is None:
        if required:
            raise InvalidInput(f"{field} is required")
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidInput(f"{field} must be a {'non-empty ' if required else ''}string")
    if len(value) > limit:
        raise InvalidInput(f"{field} must be at most {limit} characters")
    return value


def endpoint_url(value: Any, field: str = "endpoint") -> str:
    if not isinstance(value, str) or len(value) > MAX_URL_LENGTH or not re.fullmatch(r"https?://\S+", value):
        raise InvalidInput(f"{field} must be an http(s) URL of at most {MAX_URL_LENGTH} characters")
    if not urllib.parse.urlsplit(value).hostname:
        raise InvalidInput(f"{field} must name a host")
    return value


def _pairs(raw: Any, field: str, *, header_names: bool) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_ENTRIES:
        raise InvalidInput(f"{field} must be an object of at most {MAX_ENTRIES} string values")
    for key, value in raw.items():
        if not isinstance(value, str) or len(value) > MAX_VALUE_LENGTH or not isinstance(key, str) or not key:
            raise InvalidInput(f"{field} must be an object of at most {MAX_ENTRIES} string values")
        if header_names and (not _HEADER_NAME.fullmatch(key) or not _HEADER_VALUE.fullmatch(value)):
            raise InvalidInput(f"{field}.{key[:64]} is not a valid header")
    return dict(raw)


def _env(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_ENTRIES:
        raise InvalidInput(f"env must be an object of at most {MAX_ENTRIES} string values")
    for key, value in raw.items():
        if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
            raise InvalidInput("env names must be identifiers (letters, digits and _)")
        if not isinstance(value, str) or len(value) > MAX_VALUE_LENGTH or "\0" in value:
            raise InvalidInput(f"env.{key} must be a string of at most {MAX_VALUE_LENGTH} characters")
    return dict(raw)


def oauth_method(endpoint: str) -> AuthMethod:
    """A remote server that signs in with OAuth (the MCP authorization spec): its authorization server and
    scopes are discovered from the endpoint when a sign-in starts (RFC 9728, then RFC 8414)."""
    return AuthMethod(
        OAUTH_METHOD, "oauth2", "OAuth", oauth={"discoveryUrl": endpoint, "supportsDynamicRegistration": True}
    )


def _header_auth(auth: Any, endpoint: str) -> tuple[AuthMethod, ...]:
    if not isinstance(auth, dict):
        raise InvalidInput('auth must be {kind: "none"}, {kind: "oauth2"} or {kind: "header", headerName, prefix?}')
    kind = auth.get("kind")
    if kind == NO_AUTH:
        check_known(auth, {"kind"})
        return (AuthMethod(NO_AUTH, NO_AUTH),)
    if kind == "oauth2":
        check_known(auth, {"kind"})
        return (oauth_method(endpoint),)
    if kind != "header":
        raise InvalidInput('auth.kind must be "none", "header" or "oauth2"')
    check_known(auth, {"kind", "headerName", "prefix"})
    name = auth.get("headerName")
    if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
        raise InvalidInput("auth.headerName must be a header name")
    prefix = auth.get("prefix", "")
    if not isinstance(prefix, str) or len(prefix) > 256 or not _HEADER_VALUE.fullmatch(prefix):
        raise InvalidInput("auth.prefix must be printable text of at most 256 characters")
    return (AuthMethod(HEADER_METHOD, "apikey", f"Header ({name})", (Placement("header", name, prefix),)),)


def _remote_template(raw: Any) -> tuple[AuthMethod, ...]:
    methods = openapi_auth.normalize_methods(raw)
    if any(method.kind == "oauth2" for method in methods):
        raise InvalidInput(OAUTH_IN_TEMPLATE)
    return methods


def _stdio_template(raw: Any) -> tuple[AuthMethod, ...]:
    if not isinstance(raw, list) or len(raw) > 8:
        raise InvalidInput("authenticationTemplate must be an array of at most 8 auth methods")
    methods: list[AuthMethod] = []
    for position, item in enumerate(raw):
        where = f"authenticationTemplate[{position}]"
        if not isinstance(item, dict):
            raise InvalidInput(f"{where} must be an object")
        kind = item.get("kind")
        slug = item.get("slug")
        if kind == NO_AUTH:
            methods.append(AuthMethod(slug if isinstance(slug, str) and slug else NO_AUTH, NO_AUTH))
            continue
        if kind != "stdio_env":
            raise InvalidInput(f'{where}.kind must be "stdio_env" or "none" for a stdio server')
        check_known(item, {"slug", "kind", "vars", "label"})
        variables = item.get("vars")
        if (
            not isinstance(variables, list)
            or not variables
            or len(variables) > MAX_VARS
            or not all(isinstance(name, str) and _ENV_NAME.fullmatch(name) for name in variables)
            or len(set(variables)) != len(variables)
        ):
            raise InvalidInput(f"{where}.vars must be 1 to {MAX_VARS} distinct environment variable names")
        methods.append(
            AuthMethod(
                slug if isinstance(slug, str) and slug else ENV_METHOD,
                "apikey",
                "Environment variables",
                tuple(Placement(ENV_CARRIER, name, variable=name) for name in variables),
            )
        )
    if len({method.slug for method in methods}) != len(methods):
        raise InvalidInput("authenticationTemplate has two auth methods with one slug")
    return tuple(methods)


def _remote_config(values: JsonObject) -> JsonObject:
    config: JsonObject = {"transport": REMOTE, "endpoint": endpoint_url(values.get("endpoint"))}
    transport = values.get("remoteTransport", "auto")
    if transport not in REMOTE_TRANSPORTS:
        raise InvalidInput('remoteTransport must be "auto", "streamable-http" or "sse"')
    config["remoteTransport"] = transport
    for field in ("headers", "queryParams"):
        pairs = _pairs(values.get(field), field, header_names=field == "headers")
        if pairs:
            config[field] = pairs
    return config


def _stdio_config(values: JsonObject) -> JsonObject:
    command = _text(values, "command", MAX_COMMAND_LENGTH, required=True)
    assert command is not None
    if "\0" in command:
        raise InvalidInput("command must not hold a NUL character")
    args = values.get("args", [])
    if (
        not isinstance(args, list)
        or len(args) > MAX_ARGS
        or not all(isinstance(arg, str) and len(arg) <= MAX_ARG_LENGTH and "\0" not in arg for arg in args)
    ):
        raise InvalidInput(f"args must be an array of at most {MAX_ARGS} strings")
    config: JsonObject = {"transport": STDIO, "command": command, "args": list(args), "env": _env(values.get("env"))}
    cwd = _text(values, "cwd", MAX_COMMAND_LENGTH)
    if cwd:
        if not cwd.startswith("/") or "\0" in cwd:
            raise InvalidInput("cwd must be an absolute path")
        config["cwd"] = cwd
    return config


def transport_of(values: JsonObject) -> str:
    transport = values.get("transport", REMOTE)
    if transport not in (REMOTE, STDIO):
        raise InvalidInput('transport must be "remote" or "stdio"')
    return transport


def connection_config(values: JsonObject, *, stdio_allowed: bool) -> tuple[JsonObject, tuple[AuthMethod, ...]]:
    """The stored config and auth methods of a server's connection-facing fields."""
    transport = transport_of(values)
    if transport == STDIO:
        if not stdio_allowed:
            raise InvalidInput(STDIO_DISABLED)
        if values.get("auth") is not None:
            raise InvalidInput("auth is for remote servers; a stdio server takes authenticationTemplate")
        config = _stdio_config(values)
        template = values.get("authenticationTemplate")
        methods = _stdio_template(template) if template is not None else (AuthMethod(NO_AUTH, NO_AUTH),)
        return config, methods
    config = _remote_config(values)
    if values.get("auth") is not None and values.get("authenticationTemplate") is not None:
        raise InvalidInput("Give auth or authenticationTemplate, not both")
    if values.get("authenticationTemplate") is not None:
        methods = _remote_template(values["authenticationTemplate"])
    else:
        methods = _header_auth(values.get("auth", {"kind": NO_AUTH}), str(config.get("endpoint", "")))
    return config, methods


def default_slug(name: str, config: JsonObject) -> str:
    """The slug of the name, else of the endpoint's host, else of the command's basename, else `mcp`
    (`addresses.default_slug`: `mcp_` before one that would start with a digit)."""
    for candidate in (
        name,
        urllib.parse.urlsplit(config.get("endpoint", "")).hostname or "",
        posixpath.basename(config.get("command", "")),
    ):
        slug = addresses.default_slug(candidate, MCP)
        if slug:
            return slug
    return "mcp"


def registration(body: Any, *, stdio_allowed: bool) -> Registration:
    """A validated `addServer` request; `InvalidInput` with the first problem found."""
    if not isinstance(body, dict):
        raise InvalidInput("Expected a JSON object")
    values: JsonObject = body
    check_known(values, _STDIO_FIELDS if transport_of(values) == STDIO else _REMOTE_FIELDS)
    name = _text(values, "name", MAX_NAME_LENGTH, required=True)
    assert name is not None
    description = _text(values, "description", MAX_DESCRIPTION_LENGTH)
    slug = _text(values, "slug", 64)
    config, methods = connection_config(values, stdio_allowed=stdio_allowed)
    return Registration(
        slug=slug or default_slug(name, config),
        slug_hint=name,
        name=name.strip(),
        description=description or f"MCP server {name.strip()}",
        config=config,
        auth_methods=methods,
        source=DISCOVERED_PER_CONNECTION,
        can_refresh=True,
    )


def reconfigured(
    config: JsonObject, body: Any, methods: tuple[AuthMethod, ...], *, stdio_allowed: bool
) -> tuple[JsonObject, tuple[AuthMethod, ...]]:
    """`config` changes (`CONFIG_FIELDS`) applied over the stored config: the new config and methods. Auth
    stays unless the change names `auth` or `authenticationTemplate`."""
    if not isinstance(body, dict):
        raise InvalidInput("Expected a JSON object")
    check_known(body, CONFIG_FIELDS)
    merged: JsonObject = {key: value for key, value in config.items()}
    merged.update({key: value for key, value in body.items() if key not in ("auth", "authenticationTemplate")})
    for key in [key for key, value in merged.items() if value is None]:
        del merged[key]
    if "auth" in body or "authenticationTemplate" in body:
        for field in ("auth", "authenticationTemplate"):
            if body.get(field) is not None:
                merged[field] = body[field]
        return connection_config(merged, stdio_allowed=stdio_allowed)
    new_config, _ = connection_config(merged, stdio_allowed=stdio_allowed)
    return new_config, methods
