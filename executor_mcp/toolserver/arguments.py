"""Argument problems of the product's tools, worded as the MCP SDK words them (zod issues in an isError result).

A model reads these and corrects its call, so they are tool results, never JSON-RPC errors.
"""

import json
from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.protocol.results import text_result


def type_issue(field: str, value: Any, expected: str = "string") -> JsonObject:
    received = zod_type(value)
    message = "Required" if value is None else f"Expected {expected}, received {received}"
    return {"code": "invalid_type", "expected": expected, "received": received, "path": [field], "message": message}


def zod_type(value: Any) -> str:
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def invalid(tool: str, issues: list[JsonObject]) -> JsonObject:
    text = (
        f"MCP error -32602: Input validation error: Invalid arguments for tool {tool}: {json.dumps(issues, indent=2)}"
    )
    return text_result(text, error=True)
