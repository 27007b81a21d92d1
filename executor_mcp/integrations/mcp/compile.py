"""A discovered tool list → the connection's compiled catalog (pure, run in a worker thread by the service).

The source is what discovery stored: `{"server": {...}, "tools": [<tool as the server listed it>]}`. Names
follow upstream's rule (`simple_echo`), schemas are the server's but bounded: a schema nesting deeper than
`MAX_SCHEMA_DEPTH` or holding more than `MAX_SCHEMA_VALUES` values is replaced by the permissive one, so a
hostile server cannot make every caller's catalog (and `describe`) expensive, while the tool stays callable.
"""

import re
from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.mcp.protocol import parse_json
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.integrations import DISCOVERED_PER_CONNECTION, CompiledCatalog, ToolDef

MAX_SCHEMA_DEPTH = 64
MAX_SCHEMA_VALUES = 50_000
MAX_DESCRIPTION_LENGTH = 10_000
MAX_TOOL_NAME_LENGTH = 256
PERMISSIVE_INPUT: JsonObject = {"type": "object"}
_NOT_NAME = re.compile(r"[^a-z0-9]+")

_CONTENT_BLOCK: JsonObject = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["text", "image", "audio", "resource", "resource_link"]},
        "text": {"type": "string"},
        "data": {"type": "string", "description": "base64"},
        "mimeType": {"type": "string"},
        "uri": {"type": "string"},
        "resource": {"type": "object"},
    },
    "required": ["type"],
}


def call_tool_result_schema(structured: JsonObject | None) -> JsonObject:
    """MCP's CallToolResult, with `structuredContent` the tool's own `outputSchema` when it declares one."""
    return {
        "type": "object",
        "properties": {
            "content": {"type": "array", "items": _CONTENT_BLOCK},
            "structuredContent": structured if structured is not None else {"type": "object"},
            "isError": {"type": "boolean"},
        },
        "required": ["content"],
    }


def tool_name(raw: str) -> str:
    """Upstream's tool name: lowercased, runs of anything but `[a-z0-9]` as `_`, trimmed; `tool` if empty."""
    return _NOT_NAME.sub("_", raw.lower()).strip("_") or "tool"


def unique_names(raw_names: list[str]) -> list[str]:
    """Names in listing order, a repeat getting `_2`, `_3`, … (skipping any already taken)."""
    taken: set[str] = set()
    names = []
    for raw in raw_names:
        base = tool_name(raw)
        name, suffix = base, 2
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(name)
        names.append(name)
    return names


def bounded_schema(raw: Any) -> JsonObject | None:
    """The schema when it is an object within the depth and size bounds, else None."""
    if not isinstance(raw, dict):
        return None
    budget = MAX_SCHEMA_VALUES
    stack: list[tuple[Any, int]] = [(raw, 1)]
    while stack:
        value, depth = stack.pop()
        budget -= 1
        if budget < 0 or depth > MAX_SCHEMA_DEPTH:
            return None
        if isinstance(value, dict):
            stack.extend((child, depth + 1) for child in value.values())
        elif isinstance(value, list):
            stack.extend((child, depth + 1) for child in value)
    return raw


def _text(value: Any, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) and value.strip() else None


def _tool(raw: JsonObject, name: str) -> ToolDef:
    real = raw["name"]
    raw_annotations = raw.get("annotations")
    annotations: JsonObject = raw_annotations if isinstance(raw_annotations, dict) else {}
    title = _text(raw.get("title"), 200) or _text(annotations.get("title"), 200)
    read_only = annotations.get("readOnlyHint") is True
    destructive = annotations.get("destructiveHint") is True and not read_only
    input_schema = bounded_schema(raw.get("inputSchema")) or PERMISSIVE_INPUT
    output_schema = bounded_schema(raw.get("outputSchema"))
    mcp: JsonObject = {"name": real, "annotations": bounded_schema(annotations) or {}}
    if title:
        mcp["title"] = title
    return ToolDef(
        name=name,
        description=_text(raw.get("description"), MAX_DESCRIPTION_LENGTH) or f"MCP tool: {real}",
        input_schema=input_schema,
        output_schema=call_tool_result_schema(output_schema),
        binding={"mcp": mcp},
        requires_approval=destructive,
        approval_description=(title or real) if destructive else None,
    )


def compile_tools(source: bytes) -> CompiledCatalog:
    """The catalog of a discovered listing; `InvalidInput` for a source that is not one."""
    if source == DISCOVERED_PER_CONNECTION:
        return CompiledCatalog(tools=())
    try:
        document = parse_json(source)
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput("The MCP tool listing is not JSON") from None
    listed = document.get("tools") if isinstance(document, dict) else None
    if not isinstance(listed, list):
        raise InvalidInput("The MCP tool listing has no tools array")
    usable = [
        tool
        for tool in listed
        if isinstance(tool, dict)
        and isinstance(tool.get("name"), str)
        and 0 < len(tool["name"]) <= MAX_TOOL_NAME_LENGTH
    ]
    names = unique_names([tool["name"] for tool in usable])
    tools = sorted((_tool(tool, name) for tool, name in zip(usable, names, strict=True)), key=lambda t: t.name)
    return CompiledCatalog(tools=tuple(tools))


def real_name(tool: ToolDef) -> str:
    """The name the server knows the tool by."""
    mcp = tool.binding.get("mcp")
    name = mcp.get("name") if isinstance(mcp, dict) else None
    return name if isinstance(name, str) else tool.name
