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
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from executor_mcp.codec import JsonObject, deeper_than
from executor_mcp.execution.engine import Outcome
from executor_mcp.protocol.results import text_block, text_result, tool_result

MAX_TEXT = 30_000
MAX_FILE_TEXT = 64_000
INVALID_ITEM = "Invalid execution output item omitted."
# The `status` of a paused execution's structured result (what a 2026 native-mode client is asked from).
PAUSED_STATUS = "waiting_for_interaction"
_CONTENT_TYPES = frozenset({"text", "image", "audio", "resource", "resource_link"})
_TEXT_LIKE = re.compile(r"^(text/.*|application/(json|xml|javascript|x-yaml|yaml|csv)|.*\+(json|xml))$")


def render(outcome: Outcome) -> JsonObject:
    if outcome.defect:
        return text_result(f"Error: {outcome.error}", {"status": "error", "error": outcome.error}, error=True)
    structured: JsonObject = (
        {"status": "completed", "result": outcome.result, "logs": outcome.logs}
        if outcome.ok
        else {"status": "error", "error": outcome.error, "logs": outcome.logs}
    )
    if outcome.emitted:
        structured["emitted"] = len(outcome.emitted)
        content = [block for item in outcome.emitted for block in _emitted_blocks(item)]
        if not outcome.ok:
            content.append(text_block(truncate(f"Error: {outcome.error}" + _logs_suffix(outcome.logs))))
        elif outcome.logs:
            content.append(text_block("Logs:\n" + "\n".join(outcome.logs)))
    elif outcome.ok:
        result_text = outcome.text if outcome.text is not None else "(no result)"
        content = [text_block(truncate(result_text) + _logs_suffix(outcome.logs))]
    else:
        content = [text_block(truncate(f"Error: {outcome.error}" + _logs_suffix(outcome.logs)))]
    if outcome.ok:
        return tool_result(content, structured)
    return tool_result(content, structured, error=True)


def truncate(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n... [truncated {len(text) - limit} chars]"


def _logs_suffix(logs: list[str]) -> str:
    return "\n\nLogs:\n" + "\n".join(logs) if logs else ""


def _emitted_blocks(item: Any) -> list[JsonObject]:
    if deeper_than(item):
        return [text_block(INVALID_ITEM)]
    if isinstance(item, str):
        return [text_block(item)]
    if isinstance(item, dict) and item.get("type") in _CONTENT_TYPES:
        return [item if _is_content_block(item) else text_block(INVALID_ITEM)]
    if _is_tool_file(item):
        return _file_blocks(item)
    return [text_block(json.dumps(item, separators=(",", ":"), ensure_ascii=False))]


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
        return [text_block(INVALID_ITEM)]
    header = text_block(f"File output: {name} ({mime}, {file['byteLength']} bytes)")
    if mime.startswith("image/"):
        return [header, {"type": "image", "data": data, "mimeType": mime}]
    if mime.startswith("audio/"):
        return [header, {"type": "audio", "data": data, "mimeType": mime}]
    if _TEXT_LIKE.match(mime.lower()):
        text = raw.decode(errors="replace")
        if len(text) > MAX_FILE_TEXT:
            text = f"{text[:MAX_FILE_TEXT]}\n\n[truncated {len(text) - MAX_FILE_TEXT} characters]"
        return [header, text_block(text)]
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


# -- pauses and resumes (upstream §3.5 "Paused", §3.6) ---------------------------------------------

RECOVERY = (
    "To recover, run the execute tool again with the original code; if it pauses, a fresh executionId will be issued."
)
RERUN_IF_NEEDED = "Run execute again only if the result is still needed."
# The same guidance where the session has `invoke` instead of `execute` (passthrough mode).
INVOKE_RECOVERY = (
    "To recover, call the invoke tool again with the same path and args; if it pauses, a fresh executionId will be "
    "issued."
)
INVOKE_IF_NEEDED = "Call invoke again only if the result is still needed."


def iso(epoch: float) -> str:
    """JavaScript's `toISOString`: UTC, milliseconds, `Z`."""
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def ttl_words(seconds: float) -> str:
    whole = max(1, round(seconds))
    if whole % 60 == 0:
        minutes = whole // 60
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{whole} second{'s' if whole != 1 else ''}"


CONFIRMATION_PROMPT = (
    "This is a model-side confirmation gate; no browser form is waiting. Ask the user whether to approve, then call "
    'the resume tool with action "accept", "decline", or "cancel".'
)


def render_paused(
    execution_id: str,
    message: str,
    address: str,
    args: Any,
    schema: JsonObject,
    expires_at: float,
    ttl: float,
    why: str | None = None,
) -> JsonObject:
    """Model mode's pause (upstream §3.5 "Paused"). A schema with no properties asks nothing but yes or no, so it
    takes upstream's confirmation-gate wording, not "a response matching the requested schema" (upstream takes
    that branch for every approval, §7); `why` (the rule or default that asked) follows the question."""
    deadline, window = iso(expires_at), ttl_words(ttl)
    confirmation = not schema.get("properties")
    if confirmation:
        base = (
            "This is a model-side confirmation gate; there is no browser form to open. Ask the user whether to "
            "approve the paused tool call. If the user approves, call the resume tool with executionId "
            f'"{execution_id}" and action "accept". If the user declines, call resume with action "decline" or '
            '"cancel".'
        )
        asking = [f"\n{CONFIRMATION_PROMPT}"]
    else:
        base = (
            "Ask the user for values matching requestedSchema. Then call the resume tool with executionId "
            f'"{execution_id}", action "accept", and content matching requestedSchema. If the user declines, call '
            'resume with action "decline" or "cancel".'
        )
        asking = [
            "\nAsk the user for a response matching the requested schema, then call the resume tool.",
            f"\nRequested schema:\n{json.dumps(schema, indent=2)}",
        ]
    instructions = f"{base} Resume before {deadline}; this approval window lasts {window}."
    text = "\n".join(
        [
            f"Execution paused: {message}",
            *([f"\n{why}"] if why else []),
            *asking,
            f"\nexecutionId: {execution_id}",
            f"\nresumeDeadline: {deadline} ({window} approval window)",
            f"\ninstructions: {instructions}",
        ]
    )
    interaction: JsonObject = {
        "kind": "form",
        "message": message,
        "instructions": instructions,
        "address": address,
        "args": args,
        "requestedSchema": schema,
    }
    if why:
        interaction["reason"] = why
    structured = {
        "status": PAUSED_STATUS,
        "executionId": execution_id,
        "expiresAt": deadline,
        "ttlMs": int(ttl * 1000),
        "interaction": interaction,
    }
    return text_result(text, structured)


APPROVALS_PATH = "/approvals/"
BROWSER_RESUME_PROMPT = (
    "Return text to the user telling them to approve the action at this approvalUrl. Only after you have prompted "
    "the user, call the `resume` tool with this executionId; `resume` will wait for the user's browser decision."
)


def approval_url(public_url: str, execution_id: str) -> str:
    """Where a person answers a pause: the console's page for it (`<public-url>/approvals/<executionId>`)."""
    return public_url.rstrip("/") + APPROVALS_PATH + quote(execution_id, safe="")


def render_browser_paused(execution_id: str, url: str) -> JsonObject:
    """A pause in `elicitation_mode=browser` (upstream §3.5 "Browser mode pause"): the person answers at `url`,
    and the model only waits for them with `resume`. No interaction key: nothing for the model to answer."""
    text = "\n".join(
        [
            "User approval required.",
            "\nTell the user to open this URL while signed in and approve or decline the paused interaction:",
            url,
            "\nRequired next steps for this agent:",
            BROWSER_RESUME_PROMPT,
        ]
    )
    structured = {
        "status": "user_approval_required",
        "executionId": execution_id,
        "approvalUrl": url,
        "resumePrompt": BROWSER_RESUME_PROMPT,
    }
    return text_result(text, structured)


def _unavailable(status: str, execution_id: str, sentences: list[str], **extra: Any) -> JsonObject:
    return text_result(" ".join(sentences), {"status": status, "executionId": execution_id, **extra}, error=True)


def not_found_result(execution_id: str) -> JsonObject:
    return _unavailable(
        "execution_not_found",
        execution_id,
        [
            f"Paused execution is unknown: {execution_id}.",
            "Paused executions are only resumable for a limited window; this id may have expired or never existed.",
            RECOVERY,
        ],
        recovery="re_execute",
    )


def expired_result(execution_id: str, ttl: float) -> JsonObject:
    return _unavailable(
        "execution_expired",
        execution_id,
        [
            f"Paused execution expired: {execution_id}.",
            f"Approval windows last {ttl_words(ttl)}; the owning session no longer has a live pause for this "
            "executionId.",
            RECOVERY,
        ],
        ttlMs=int(ttl * 1000),
        recovery="re_execute",
    )


def forbidden_result(execution_id: str) -> JsonObject:
    return _unavailable(
        "execution_forbidden",
        execution_id,
        [
            f"Paused execution cannot be resumed by this authenticated identity: {execution_id}.",
            "Resume must be called by the same account and organization that owns the paused session.",
        ],
    )


def settled_result(execution_id: str) -> JsonObject:
    return _unavailable(
        "execution_already_settled",
        execution_id,
        [
            f"Paused execution has already settled: {execution_id}.",
            "The resume result is no longer available for replay.",
            RERUN_IF_NEEDED,
        ],
        recovery="re_execute",
    )


def worded_for_invoke(result: JsonObject) -> JsonObject:
    """An unavailable pause's answer (`recovery: "re_execute"`) with its guidance naming `invoke`, the tool a
    passthrough session has, where it names `execute`; any other result as it is."""
    structured = result.get("structuredContent")
    if not isinstance(structured, dict) or structured.get("recovery") != "re_execute":
        return result
    content = [
        {**block, "text": block["text"].replace(RECOVERY, INVOKE_RECOVERY).replace(RERUN_IF_NEEDED, INVOKE_IF_NEEDED)}
        if block.get("type") == "text" and isinstance(block.get("text"), str)
        else block
        for block in result.get("content", [])
    ]
    return {**result, "content": content}
