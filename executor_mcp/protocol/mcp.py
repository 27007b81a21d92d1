"""MCP-level types and rules that need no I/O: version negotiation, initialize, tool listings.

Field names on the wire are camelCase (and `_meta`); cattrs overrides map them onto snake_case
attributes so the rest of the code reads like Python.
"""

from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from executor_mcp import __version__
from executor_mcp.codec import JsonObject, converter
from executor_mcp.protocol.errors import Code, RpcError

SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
LATEST_VERSION = SUPPORTED_VERSIONS[0]
# The version the Streamable HTTP spec says to assume when a request carries no version header.
HEADERLESS_VERSION = "2025-03-26"
# The probe that MCP 2026-07-28 clients send first; answering "method not found" makes them fall back.
DISCOVER_METHOD = "server/discover"
INITIALIZE_METHOD = "initialize"

SERVER_NAME = "executor"
SERVER_CAPABILITIES: JsonObject = {"tools": {"listChanged": True}}


@attrs.frozen
class Implementation:
    name: str
    version: str


@attrs.frozen
class InitializeParams:
    protocol_version: str
    capabilities: JsonObject
    client_info: Implementation


@attrs.frozen
class Tool:
    name: str
    description: str
    input_schema: JsonObject
    annotations: JsonObject | None = None


@attrs.frozen
class CallToolParams:
    name: str
    arguments: JsonObject = attrs.Factory(dict)
    meta: JsonObject | None = None


# Attribute names that differ on the wire; one table serves the hooks and the error messages.
WIRE_NAMES = {"protocol_version": "protocolVersion", "client_info": "clientInfo", "meta": "_meta"}


converter.register_structure_hook(
    InitializeParams,
    make_dict_structure_fn(
        InitializeParams,
        converter,
        protocol_version=override(rename=WIRE_NAMES["protocol_version"]),
        client_info=override(rename=WIRE_NAMES["client_info"]),
    ),
)
converter.register_structure_hook(
    CallToolParams, make_dict_structure_fn(CallToolParams, converter, meta=override(rename=WIRE_NAMES["meta"]))
)
converter.register_unstructure_hook(
    Tool,
    make_dict_unstructure_fn(
        Tool, converter, input_schema=override(rename="inputSchema"), annotations=override(omit_if_default=True)
    ),
)


def structure_params(params: JsonObject | None, cls: type[Any]) -> Any:
    """Structure request params or raise -32602 with one line per problem, pointing into `params`."""
    try:
        return converter.structure(params or {}, cls)
    except cattrs.BaseValidationError as exc:
        problems = [_wire_path(line) for line in cattrs.transform_error(exc, path="$.params")]
        raise RpcError(Code.INVALID_PARAMS, "Invalid params", problems) from None


def _wire_path(problem: str) -> str:
    """cattrs names attributes in its paths; a client should read the field names it sent."""
    description, separator, path = problem.rpartition(" @ ")
    if not separator:
        return problem
    segments = [WIRE_NAMES.get(segment, segment) for segment in path.split(".")]
    return f"{description} @ {'.'.join(segments)}"


# How deeply `capabilities` may nest. Real clients use two or three levels; the session file keeps the
# value, and anything much deeper only exists to break a recursive encoder.
MAX_CAPABILITIES_DEPTH = 32


# At most this many problems are reported, each path naming at most this much of every key: a hostile
# initialize must not make its own answer (or its own checking) large.
MAX_PROBLEMS = 10
MAX_KEY_IN_PATH = 40


def initialize_problems(params: InitializeParams) -> list[str]:
    """What makes valid-looking initialize params unstorable: lone surrogates, absurd nesting."""
    problems = [
        f"Text is not valid Unicode (a lone surrogate) @ $.params.{path}"
        for path, text in (
            ("protocolVersion", params.protocol_version),
            ("clientInfo.name", params.client_info.name),
            ("clientInfo.version", params.client_info.version),
        )
        if not _encodable(text)
    ]
    problems.extend(_value_problems(params.capabilities, "$.params.capabilities", MAX_PROBLEMS - len(problems)))
    return problems


def _value_problems(root: Any, root_path: str, most: int) -> list[str]:
    """Walked iteratively (the nesting is what is being checked), stopping at `most` problems."""
    problems: list[str] = []
    pending: list[tuple[Any, str, int]] = [(root, root_path, 1)]
    while pending and len(problems) < most:
        value, path, depth = pending.pop()
        if isinstance(value, str):
            if not _encodable(value):
                problems.append(f"Text is not valid Unicode (a lone surrogate) @ {path}")
            continue
        if not isinstance(value, dict | list):
            continue
        if depth > MAX_CAPABILITIES_DEPTH:
            problems.append(f"Nested deeper than {MAX_CAPABILITIES_DEPTH} levels @ {path}")
            continue
        items = value.items() if isinstance(value, dict) else enumerate(value)
        children = []
        for key, item in items:
            if isinstance(key, str):
                shown = key if len(key) <= MAX_KEY_IN_PATH else key[:MAX_KEY_IN_PATH] + "..."
                if not _encodable(key):
                    problems.append(f"Key is not valid Unicode (a lone surrogate) @ {path}")
                    continue
                children.append((item, f"{path}.{shown}", depth + 1))
            else:
                children.append((item, f"{path}[{key}]", depth + 1))
        pending.extend(reversed(children))
    return problems[:most]


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def negotiate_version(requested: str) -> str:
    return requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION


def initialize_result(protocol_version: str) -> JsonObject:
    return {
        "protocolVersion": protocol_version,
        "capabilities": SERVER_CAPABILITIES,
        "serverInfo": {"name": SERVER_NAME, "version": __version__},
    }


def tools_list_result(tools: list[Tool]) -> JsonObject:
    return {"tools": [converter.unstructure(tool) for tool in tools]}
