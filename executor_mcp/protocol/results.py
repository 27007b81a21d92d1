"""The MCP tool-result envelope (`CallToolResult`): `content` blocks, optional `structuredContent`, and `isError`.

Every tool result the server answers is built here, so its shape (and its key order on the wire) is written once.
A failed call is still a result, with `isError`, never a JSON-RPC error: a model reads it and corrects its call.
"""

from typing import Any

from executor_mcp.codec import JsonObject


def text_block(text: str) -> JsonObject:
    """One `text` content block."""
    return {"type": "text", "text": text}


def tool_result(content: list[JsonObject], structured: Any = None, *, error: bool = False) -> JsonObject:
    """A result of `content` blocks, with `structuredContent` when `structured` is given (None: none)."""
    result: JsonObject = {"content": content}
    if structured is not None:
        result["structuredContent"] = structured
    if error:
        result["isError"] = True
    return result


def text_result(text: str, structured: Any = None, *, error: bool = False) -> JsonObject:
    """A result whose content is one text block."""
    return tool_result([text_block(text)], structured, error=error)
