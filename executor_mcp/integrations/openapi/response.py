"""An upstream answer → the tool result the sandbox sees (sans-I/O).

`{ok: true, data, http: {status, headers}}` for 2xx; otherwise a typed failure: `connection_rejected`
(401, or 403 without a scope signal), `oauth_scope_insufficient`, or `upstream_http_error` with the
upstream's own message. The shapes and messages are upstream's (`backing.ts`, `auth-tool-failure.ts`).
"""

import base64
import binascii
import json
import re
from typing import Any

from executor_mcp.codec import JsonObject, deeper_than, dumps
from executor_mcp.integrations.credentials import insufficient_scope, rejected_result, scope_failure
from executor_mcp.integrations.openapi.binding import ResponseShape
from executor_mcp.outbound.model import HTTP_ERROR, OutboundResponse

NDJSON_TYPES = frozenset({"application/stream+json", "application/x-ndjson", "application/jsonl"})
OCTET_STREAM = "application/octet-stream"
MESSAGE_CAP = 1024


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_json(content_type: str | None) -> bool:
    return "json" in media_type(content_type)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str) -> tuple[bool, Any]:
    """JSON.parse's answer: (parsed, value). NaN/Infinity are not JSON; too deep a value is not taken."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return False, None
    if deeper_than(value):
        return False, None
    return True, value


def decode_text(body: bytes) -> str:
    return body.decode("utf-8", errors="replace")


def parse_ndjson(text: str, *, truncated: bool) -> Any:
    """One array item per line; a partial last line is dropped when a cap cut the stream; any other line that
    is not JSON means the body was not NDJSON after all, and it comes back as text."""
    lines = re.split(r"\r?\n", text)
    last = max((index for index, line in enumerate(lines) if line.strip()), default=-1)
    rows: list[Any] = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        parsed, value = parse_json(line)
        if parsed:
            rows.append(value)
        elif not (truncated and index == last):
            return text
    return rows


# --- files ---


def _starts(data: bytes, prefix: bytes) -> bool:
    return data.startswith(prefix)


def _likely_text(data: bytes) -> bool:
    if not data:
        return False
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if "\x00" in text:
        return False
    suspicious = sum(1 for char in text if ord(char) < 0x20 and char not in "\t\n\x0c\r")
    return suspicious / max(1, len(text)) <= 0.02


def sniff_mime(data: bytes) -> str | None:
    """The type a generic `application/octet-stream` body really is, for the common file kinds."""
    if _starts(data, b"\xff\xd8\xff"):
        return "image/jpeg"
    if _starts(data, b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if _starts(data, b"GIF87a") or _starts(data, b"GIF89a"):
        return "image/gif"
    if _starts(data, b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    if _starts(data, b"%PDF-"):
        return "application/pdf"
    if any(_starts(data, magic) for magic in (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")):
        return "application/zip"
    if _likely_text(data):
        return "text/plain"
    return None


def _generic(mime: str) -> bool:
    return media_type(mime) == OCTET_STREAM


def tool_file(mime: str, data: bytes) -> JsonObject:
    return {
        "_tag": "ToolFile",
        "mimeType": (sniff_mime(data) or mime) if _generic(mime) else mime,
        "encoding": "base64",
        "data": base64.b64encode(data).decode(),
        "byteLength": len(data),
    }


def _normalize_base64(text: str, encoding: str) -> str:
    compact = re.sub(r"\s", "", text)
    if encoding == "base64url":
        compact = compact.replace("-", "+").replace("_", "/")
    return compact + "=" * (-len(compact) % 4)


def _base64_length(text: str) -> int:
    padding = 2 if text.endswith("==") else 1 if text.endswith("=") else 0
    return max(0, len(text) * 3 // 4 - padding)


def file_from_byte_field(body: Any, encoding: str) -> JsonObject | None:
    """`{data: <base64>, size?}` as a ToolFile; None when the body does not have that shape."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), str):
        return None
    data = _normalize_base64(body["data"], encoding)
    size = body.get("size")
    length = size if isinstance(size, int | float) and not isinstance(size, bool) else _base64_length(data)
    try:
        prefix = base64.b64decode(data[:64], validate=True)
    except (binascii.Error, ValueError):
        prefix = b""
    return {
        "_tag": "ToolFile",
        "mimeType": sniff_mime(prefix) or OCTET_STREAM,
        "encoding": "base64",
        "data": data,
        "byteLength": length,
    }


# --- reading a body ---


def read_body(answer: OutboundResponse, *, binary_file: bool) -> Any:
    """The body as a value: null for 204, the collected stream, a ToolFile, parsed JSON, else text."""
    if answer.status == 204:
        return None
    if answer.stream is not None:
        text = decode_text(answer.body)
        if media_type(answer.content_type) in NDJSON_TYPES:
            return parse_ndjson(text, truncated=answer.stream.truncated)
        return text
    if binary_file:
        return tool_file(answer.content_type or OCTET_STREAM, answer.body)
    text = decode_text(answer.body)
    if is_json(answer.content_type):
        parsed, value = parse_json(text)
        return value if parsed else text
    return text


# --- failures ---


def clamp(text: str) -> str:
    return f"{text[:MESSAGE_CAP]}…" if len(text) > MESSAGE_CAP else text


def _nonempty(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _first_error_text(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return None
    return _nonempty(entry.get("detail")) or _nonempty(entry.get("message")) or _nonempty(entry.get("title"))


def upstream_message(body: Any, status: int) -> str:
    """Upstream's extraction order: `error.message`, `message`, `errorMessage`, the first `errors[]` entry's
    detail/message/title, `detail`, `title`, `description`; else the body itself, clamped."""
    if isinstance(body, str):
        return clamp(body) if body else f"Upstream returned HTTP {status}"
    if isinstance(body, dict):
        error = body.get("error")
        candidates: list[Any] = [error.get("message") if isinstance(error, dict) else None]
        candidates += [body.get("message"), body.get("errorMessage")]
        errors = body.get("errors")
        if isinstance(errors, list):
            candidates.append(next(filter(None, map(_first_error_text, errors)), None))
        candidates += [body.get("detail"), body.get("title"), body.get("description")]
        found = next((text for text in map(_nonempty, candidates) if text is not None), None)
        if found is not None:
            return clamp(found)
    if isinstance(body, dict | list):
        return clamp(dumps(body).decode())
    return f"Upstream returned HTTP {status}"


def classify(
    shape: ResponseShape,
    answer: OutboundResponse,
    *,
    integration: str,
    owner: str,
    connection: str,
    required_scopes: tuple[tuple[str, ...], ...] = (),
    granted_scopes: str | None = None,
) -> JsonObject:
    """The tool result for one upstream answer. `required_scopes`: the operation's declared `security`
    alternatives, named in a scope failure when the challenge names none."""
    ok = 200 <= answer.status < 300
    body = read_body(answer, binary_file=ok and shape.file == "binary")
    if ok:
        data = body
        if shape.file == "byteField":
            data = file_from_byte_field(body, shape.byte_encoding) or body
        headers = dict(answer.headers)
        if answer.stream is not None:
            headers.update(answer.stream.headers())
        return {"ok": True, "data": data, "http": {"status": answer.status, "headers": headers}}

    if answer.status == 403:
        scoped, challenge_scope = insufficient_scope(answer.headers, body)
        if scoped:
            return scope_failure(
                answer.status,
                body,
                integration=integration,
                owner=owner,
                connection=connection,
                required=challenge_scope
                or ", or ".join(" ".join(alternative) for alternative in required_scopes if alternative)
                or None,
                granted=granted_scopes,
            )
    if answer.status in (401, 403):
        return rejected_result(answer.status, body, integration=integration, owner=owner, connection=connection)
    error: JsonObject = {"code": HTTP_ERROR, "status": answer.status, "message": upstream_message(body, answer.status)}
    if body is not None:
        error["details"] = body
    return {"ok": False, "error": error}
