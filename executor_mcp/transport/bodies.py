"""Reading the JSON body of an `/api` change: bounded in size and time, parsed strictly, refused in words.

Both APIs (`/api/policies`, the integrations API) read bodies this way and render a `BodyRefused` in their
own error shape. A body refused for its size is left unread, so the connection must close (the rest of it
must not be taken for a next request); the refusal says so in its headers.
"""

import json
from typing import Any

import attrs
import trio
from quart import request

from executor_mcp.transport import headers as rules

# From this size a body is parsed in a worker thread, where a large spec cannot hold up the event loop.
THREADED_PARSE_BYTES = 1024 * 1024


@attrs.frozen
class BodyRefused:
    status: int
    message: str
    headers: dict[str, str] = attrs.Factory(dict)


def _parse(raw: bytes) -> Any:
    return json.loads(raw.decode("utf-8")) if raw.strip() else {}


async def read_json_object(limit: int, seconds: float) -> dict[str, Any] | BodyRefused:
    """The request's JSON object (`{}` for an empty body), or why it is refused: 415 (not JSON: a page in a
    browser can send a `text/plain` POST without a preflight, never a JSON one), 413, 408 or 400."""
    if request.mimetype != rules.JSON:
        return BodyRefused(415, "Unsupported Media Type: Content-Type must be application/json")
    too_large = BodyRefused(413, f"Request body too large. Maximum size is {limit} bytes", {"Connection": "close"})
    if (request.content_length or 0) > limit:
        return too_large
    raw = bytearray()
    with trio.move_on_after(seconds) as waiting:
        async for chunk in request.body:  # a chunked body has no length to check first
            raw += chunk
            if len(raw) > limit:
                return too_large
    if waiting.cancelled_caught:
        return BodyRefused(
            408, f"Request Timeout: the body did not arrive within {seconds:g} seconds", {"Connection": "close"}
        )
    try:
        if len(raw) >= THREADED_PARSE_BYTES:
            body = await trio.to_thread.run_sync(_parse, bytes(raw))
        else:
            body = _parse(bytes(raw))
    except (ValueError, RecursionError):
        return BodyRefused(400, "The request body must be JSON")
    if not isinstance(body, dict):
        return BodyRefused(400, "The request body must be a JSON object")
    return body
