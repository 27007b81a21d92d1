"""What a tool call answered (or how it failed) → the envelope the sandbox sees (pure)."""

import re
from typing import Any

from executor_mcp.codec import JsonObject

_NOT_FOUND = re.compile(r"\b(?:unknown tool|tool\b.{0,300}\bnot found)", re.IGNORECASE | re.DOTALL)
MAX_MESSAGE_LENGTH = 4000


def unknown_tool(name: str) -> JsonObject:
    return {
        "ok": False,
        "error": {
            "code": "mcp_tool_unknown",
            "message": f'The MCP server no longer provides tool "{name}". Its tool catalog changed; list tools '
            "again for the current set.",
        },
    }


def first_text(content: Any) -> str | None:
    if not isinstance(content, list):
        return None
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            return block["text"]
    return None


def says_unknown_tool(result: Any) -> bool:
    """An `isError` result whose text says the tool is not there (servers answer this instead of -32602)."""
    if not isinstance(result, dict) or result.get("isError") is not True:
        return False
    text = first_text(result.get("content"))
    return text is not None and _NOT_FOUND.search(text[:1000]) is not None


def call_result(result: Any) -> JsonObject:
    """`{ok: true, data: <CallToolResult>}` (no `http` key), or `mcp_tool_error` for an `isError` result."""
    if not isinstance(result, dict) or not isinstance(result.get("content", []), list):
        return protocol_failure("The MCP server answered tools/call with something that is not a CallToolResult")
    if result.get("isError") is True:
        content = result.get("content", [])
        message = first_text(content) or "The MCP tool reported an error"
        return {
            "ok": False,
            "error": {
                "code": "mcp_tool_error",
                "message": message[:MAX_MESSAGE_LENGTH],
                "details": {"content": content},
            },
        }
    return {"ok": True, "data": result}


def rpc_failure(code: int, message: str) -> JsonObject:
    """A JSON-RPC error answer to tools/call other than an unknown tool."""
    return {
        "ok": False,
        "error": {
            "code": "mcp_tool_error",
            "message": message[:MAX_MESSAGE_LENGTH],
            "details": {"rpcCode": code},
        },
    }


def protocol_failure(message: str) -> JsonObject:
    return {"ok": False, "error": {"code": "mcp_protocol_error", "message": message[:MAX_MESSAGE_LENGTH]}}


def connect_failure(message: str) -> JsonObject:
    """`connection_rejected` with the connect message: the server could not be dialled or initialized."""
    return {"ok": False, "error": {"code": "connection_rejected", "message": message[:MAX_MESSAGE_LENGTH]}}
