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


converter.register_structure_hook(
    InitializeParams,
    make_dict_structure_fn(
        InitializeParams,
        converter,
        protocol_version=override(rename="protocolVersion"),
        client_info=override(rename="clientInfo"),
    ),
)
converter.register_structure_hook(
    CallToolParams, make_dict_structure_fn(CallToolParams, converter, meta=override(rename="_meta"))
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
        raise RpcError(Code.INVALID_PARAMS, "Invalid params", cattrs.transform_error(exc, path="$.params")) from None


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
