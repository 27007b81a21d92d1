"""How an execution's outcome reads to an MCP client and a model (upstream §3.5). No I/O.

Three shapes: completed (the result as text, then logs), error (`Error: <message>`, then logs, with
`isError`), and emitted output (the emitted items in order, then the error or the logs; the return
value then lives only in `structuredContent.result`). Text is capped so one execution cannot flood a
model's context.
"""

import json
from typing import Any

from executor_mcp.codec import JsonObject
from executor_mcp.execution.engine import Outcome

MAX_TEXT = 30_000
INVALID_ITEM = "Invalid execution output item omitted."
_CONTENT_TYPES = frozenset({"text", "image", "audio", "resource", "resource_link"})


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
        content = [_emitted_block(item) for item in outcome.emitted]
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


def _emitted_block(item: Any) -> JsonObject:
    if isinstance(item, str):
        return _text(item)
    if isinstance(item, dict) and item.get("type") in _CONTENT_TYPES:
        return item if _is_content_block(item) else _text(INVALID_ITEM)
    return _text(json.dumps(item, separators=(",", ":"), ensure_ascii=False))


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
