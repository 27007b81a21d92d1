"""How an execution's outcome reads to an MCP client and a model (upstream §3.5). No I/O.

Three shapes: completed (the result as text, then logs), error (`Error: <message>`, then logs, with
`isError`), and emitted output (the emitted items in order, then the error or the logs; the return
value then lives only in `structuredContent.result`). Text is capped so one execution cannot flood a
model's context.
"""

import base64
import binascii
import json
import re
from typing import Any
from urllib.parse import quote

from executor_mcp.codec import JsonObject
from executor_mcp.execution.engine import Outcome

MAX_TEXT = 30_000
MAX_FILE_TEXT = 64_000
INVALID_ITEM = "Invalid execution output item omitted."
_CONTENT_TYPES = frozenset({"text", "image", "audio", "resource", "resource_link"})
_TEXT_LIKE = re.compile(r"^(text/.*|application/(json|xml|javascript|x-yaml|yaml|csv)|.*\+(json|xml))$")


def render(outcome: Outcome) -> JsonObject:
    if outcome.defect:
        return _error_result([_text(f"Error: {outcome.error}")], {"status": "error", "error": outcome.error})
    structured: JsonObject = (
        {"status": "completed", "result": outcome.result, "logs": outcome.logs}
        if outcome.ok
        else {"status": "error", "error": outcome.error, "logs": outcome.logs}
    )
    if outcome.emitted:
        structured["emitted"] = len(outcome.emitted)
        content = [block for item in outcome.emitted for block in _emitted_blocks(item)]
        if not outcome.ok:
            content.append(_text(truncate(f"Error: {outcome.error}" + _logs_suffix(outcome.logs))))
        elif outcome.logs:
            content.append(_text("Logs:\n" + "\n".join(outcome.logs)))
    elif outcome.ok:
        result_text = outcome.text if outcome.text is not None else "(no result)"
        content = [_text(truncate(result_text) + _logs_suffix(outcome.logs))]
    else:
        content = [_text(truncate(f"Error: {outcome.error}" + _logs_suffix(outcome.logs)))]
    if outcome.ok:
        return {"content": content, "structuredContent": structured}
    return _error_result(content, structured)


def truncate(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n... [truncated {len(text) - limit} chars]"


def _error_result(content: list[JsonObject], structured: JsonObject) -> JsonObject:
    return {"content": content, "structuredContent": structured, "isError": True}


def _logs_suffix(logs: list[str]) -> str:
    return "\n\nLogs:\n" + "\n".join(logs) if logs else ""


def _text(text: str) -> JsonObject:
    return {"type": "text", "text": text}


def _emitted_blocks(item: Any) -> list[JsonObject]:
    if isinstance(item, str):
        return [_text(item)]
    if isinstance(item, dict) and item.get("type") in _CONTENT_TYPES:
        return [item if _is_content_block(item) else _text(INVALID_ITEM)]
    if _is_tool_file(item):
        return _file_blocks(item)
    return [_text(json.dumps(item, separators=(",", ":"), ensure_ascii=False))]


def _is_tool_file(item: Any) -> bool:
    """A ToolFile: `{ name?, mimeType, byteLength, data }`, `data` being base64."""
    return (
        isinstance(item, dict)
        and "type" not in item
        and isinstance(item.get("mimeType"), str)
        and isinstance(item.get("data"), str)
        and isinstance(item.get("byteLength"), int)
        and not isinstance(item.get("byteLength"), bool)
        and isinstance(item.get("name", ""), str)
    )


def _file_blocks(file: JsonObject) -> list[JsonObject]:
    name, mime, data = file.get("name") or "tool-output", file["mimeType"], file["data"]
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return [_text(INVALID_ITEM)]
    header = _text(f"File output: {name} ({mime}, {file['byteLength']} bytes)")
    if mime.startswith("image/"):
        return [header, {"type": "image", "data": data, "mimeType": mime}]
    if mime.startswith("audio/"):
        return [header, {"type": "audio", "data": data, "mimeType": mime}]
    if _TEXT_LIKE.match(mime.lower()):
        text = raw.decode(errors="replace")
        if len(text) > MAX_FILE_TEXT:
            text = f"{text[:MAX_FILE_TEXT]}\n\n[truncated {len(text) - MAX_FILE_TEXT} characters]"
        return [header, _text(text)]
    resource = {"uri": f"executor-file:///{quote(name)}", "mimeType": mime, "blob": data}
    return [header, {"type": "resource", "resource": resource}]


def _is_content_block(item: JsonObject) -> bool:
    """An MCP content block is forwarded unchanged, so it must be one a client can render."""

    def strings(*keys: str) -> bool:
        return all(isinstance(item.get(key), str) for key in keys)

    match item["type"]:
        case "text":
            return strings("text")
        case "image" | "audio":
            return strings("data", "mimeType")
        case "resource":
            resource = item.get("resource")
            return isinstance(resource, dict) and isinstance(resource.get("uri"), str)
        case _:
            return strings("uri", "name")
