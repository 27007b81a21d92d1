"""MCP revision 2026-07-28 on the wire: which era a request speaks, its checks, and its result shapes. No I/O.

A 2026 request carries everything on itself: its version and the client's capabilities in
`params._meta`, its method (and name) again in headers that a proxy can route on. There is no handshake and
no session: `validate` runs the spec's ladder on one request (first failure wins, each with its exact code
and status) and gives back what the rest of the server needs to serve it. The 2025 revisions are served
exactly as before; `is_stateless` is the one place the two eras part.

Statuses: the spec fixes 400 for the header, version, capability and `_meta` errors and 404 (only) for
`-32601`; for the rest this server follows the official Python SDK (400 for malformed requests and bad
params, 200 for everything else, in-band).
"""

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import attrs

from executor_mcp import __version__
from executor_mcp.codec import JsonObject
from executor_mcp.protocol.errors import Code, RpcError
from executor_mcp.protocol.jsonrpc import Message, Notification, Request
from executor_mcp.protocol.mcp import DISCOVER_METHOD, SERVER_NAME

STATELESS_VERSION = "2026-07-28"
STATELESS_VERSIONS = (STATELESS_VERSION,)
# The versions that open with `initialize`: a version header naming one of these is the 2025 era.
HANDSHAKE_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

VERSION_HEADER = "mcp-protocol-version"
METHOD_HEADER = "mcp-method"
NAME_HEADER = "mcp-name"
SESSION_HEADER = "mcp-session-id"

TOOLS_LIST = "tools/list"
TOOLS_CALL = "tools/call"
SERVED = frozenset({DISCOVER_METHOD, TOOLS_LIST, TOOLS_CALL})
# The methods whose `Mcp-Name` header repeats a param, and which param.
NAMED = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}

HEADER_MISMATCH = -32020
MISSING_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022

_STATUS = {
    Code.PARSE_ERROR: 400,
    Code.INVALID_REQUEST: 400,
    Code.INVALID_PARAMS: 400,
    Code.METHOD_NOT_FOUND: 404,
    HEADER_MISMATCH: 400,
    MISSING_CAPABILITY: 400,
    UNSUPPORTED_VERSION: 400,
}

# `ttlMs`/`cacheScope` of the cacheable results. Discovery is the same for everyone; the tool list names the
# caller's integrations, which change with no notification to the client, so it is private and short-lived.
DISCOVER_TTL_MS = 3_600_000
TOOLS_LIST_TTL_MS = 30_000
PUBLIC = "public"
PRIVATE = "private"

_SENTINEL_PREFIX, _SENTINEL_SUFFIX = "=?base64?", "?="
# A header value is a method or a tool name: anything longer is refused before it is decoded.
MAX_HEADER_VALUE = 1024


def status_of(code: int) -> int:
    """The HTTP status a 2026 error answer carries when it is not in an already started event stream."""
    return _STATUS.get(code, 200)


def is_stateless(headers: Mapping[str, str], messages: list[Message], batch: bool) -> bool:
    """Whether a POST speaks 2026-07-28: a single message whose `_meta` claims a version, or a version header
    that names no handshake version (unknown ones included, so that they hear `-32022`) on a request that names
    no 2025 session (one that does is a 2025 request with a bad header, refused as it always was)."""
    if stateless_by_header(headers):
        return True
    if batch or len(messages) != 1:
        return False
    message = messages[0]
    if not isinstance(message, Request | Notification) or not isinstance(message.params, dict):
        return False
    meta = message.params.get("_meta")
    return isinstance(meta, dict) and META_VERSION in meta


def stateless_by_header(headers: Mapping[str, str]) -> bool:
    """A version header of no handshake version, on a request with no `Mcp-Session-Id`."""
    version = headers.get(VERSION_HEADER, "").strip()
    return bool(version) and version not in HANDSHAKE_VERSIONS and not headers.get(SESSION_HEADER, "").strip()


@attrs.frozen
class StatelessRequest:
    """One 2026 request that passed the ladder: what serving it needs to know about its client."""

    request: Request
    capabilities: JsonObject  # this request's own: 2026 has no handshake to remember them from


def validate(headers: Mapping[str, str], repeated: frozenset[str], request: Request) -> StatelessRequest:
    """The spec's checks on a 2026 request, in its order: `_meta` (-32602), the routing headers (-32020),
    the version (-32022), the method (-32601). `repeated` names the headers sent more than once."""
    params = request.params if isinstance(request.params, dict) else {}
    meta = params.get("_meta")
    meta = meta if isinstance(meta, dict) else {}
    version, capabilities = meta.get(META_VERSION), meta.get(META_CAPABILITIES)
    missing = [
        key
        for key, value, kind in ((META_VERSION, version, str), (META_CAPABILITIES, capabilities, dict))
        if not isinstance(value, kind)
    ]
    if missing:
        raise RpcError(Code.INVALID_PARAMS, f"Invalid params: _meta must carry {' and '.join(missing)}")
    assert isinstance(version, str)
    assert isinstance(capabilities, dict)
    _check_headers(headers, repeated, request, params, version)
    if version not in STATELESS_VERSIONS:
        raise RpcError(
            UNSUPPORTED_VERSION,
            f"Unsupported protocol version: {version[:100]}",
            {"supported": list(STATELESS_VERSIONS), "requested": version},
        )
    if request.method not in SERVED:
        raise RpcError(Code.METHOD_NOT_FOUND, "Method not found")
    return StatelessRequest(request, capabilities)


def _check_headers(
    headers: Mapping[str, str], repeated: frozenset[str], request: Request, params: JsonObject, version: str
) -> None:
    expected: dict[str, str | None] = {VERSION_HEADER: version, METHOD_HEADER: request.method}
    if request.method in NAMED:
        named = params.get(NAMED[request.method])
        expected[NAME_HEADER] = named if isinstance(named, str) else None
    for name, wanted in expected.items():
        if name in repeated:
            raise RpcError(HEADER_MISMATCH, f"Header mismatch: {name} is sent more than once")
        sent = header_value(headers.get(name))
        if sent is None:
            raise RpcError(HEADER_MISMATCH, f"Header mismatch: {name} is missing or malformed")
        if wanted is None or sent != wanted:
            raise RpcError(HEADER_MISMATCH, f"Header mismatch: {name} does not match the request body")


def header_value(raw: str | None) -> str | None:
    """A routing header's value with the spec's `=?base64?...?=` form decoded (canonical base64 of UTF-8
    only), surrounding whitespace trimmed; None when it is absent or cannot be decoded."""
    if raw is None:
        return None
    value = raw.strip()
    if len(value) > MAX_HEADER_VALUE * 2:
        return None
    if not (value.startswith(_SENTINEL_PREFIX) and value.endswith(_SENTINEL_SUFFIX)):
        return value or None
    encoded = value[len(_SENTINEL_PREFIX) : -len(_SENTINEL_SUFFIX)]
    try:
        decoded = base64.b64decode(encoded, validate=True)
        text = decoded.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    if base64.b64encode(decoded).decode("ascii") != encoded:
        return None
    return text


def server_info() -> JsonObject:
    return {"name": SERVER_NAME, "version": __version__}


def complete(result: JsonObject, *, ttl_ms: int | None = None, scope: str = PRIVATE) -> JsonObject:
    """A result as 2026 sends it: `resultType`, the server's identity in `_meta`, and (for the cacheable
    methods, `ttl_ms` given) the cache hints."""
    shaped: JsonObject = {**result, "resultType": "complete", "_meta": _meta_with_server(result)}
    if ttl_ms is not None:
        shaped.update(ttlMs=ttl_ms, cacheScope=scope)
    return shaped


def input_required(requests: JsonObject, state: str) -> JsonObject:
    """A multi-round-trip answer: what the client must ask its user, and the state it must echo back."""
    return {
        "resultType": "input_required",
        "inputRequests": requests,
        "requestState": state,
        "_meta": {META_SERVER_INFO: server_info()},
    }


def discover_result() -> JsonObject:
    """`server/discover`: only 2026 versions are listed (the 2025 ones are reached with `initialize`), and only
    the capabilities honoured on this era (no list-changed notifications: there is no stream to send them on)."""
    return complete(
        {"supportedVersions": list(STATELESS_VERSIONS), "capabilities": {"tools": {}}},
        ttl_ms=DISCOVER_TTL_MS,
        scope=PUBLIC,
    )


def declares_form_elicitation(capabilities: JsonObject) -> bool:
    """Whether a request's client can be asked a form question: `elicitation` declared, with `form` or (as
    before modes were named) nothing in it."""
    elicitation = capabilities.get("elicitation")
    return isinstance(elicitation, dict) and (not elicitation or "form" in elicitation)


FORM_ELICITATION: JsonObject = {"elicitation": {"form": {}}}


def _meta_with_server(result: JsonObject) -> JsonObject:
    meta: Any = result.get("_meta")
    return {**(meta if isinstance(meta, dict) else {}), META_SERVER_INFO: server_info()}
