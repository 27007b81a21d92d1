"""Server-sent event framing for JSON-RPC messages, already serialized to bytes."""

import re

KEEPALIVE = b": keepalive\n\n"
REPLAY_COMPLETE = b": replay-complete\n\n"
MAX_AGE_ROTATION = b": max-age rotation, reconnect\n\n"
# The payload of the first event of every tools/call stream: an event id with empty data, so a client
# whose connection drops mid-call knows it can resume (upstream §2.7; the MCP spec's priming event). It
# has no event name and no message, so clients neither dispatch nor warn about it.
PRIMING = b""

# Event ids are ours (`event_id`); anything else a client sends back names no stream of this server.
_EVENT_ID = re.compile(r"([0-9a-f]{32}):([0-9a-f]{16})")


def event_id(stream_id: str, seq: int) -> str:
    return f"{stream_id}:{seq:016x}"


def parse_event_id(text: str) -> tuple[str, int] | None:
    """A `Last-Event-ID` this server could have issued, or None (the client then gets a fresh stream)."""
    match = _EVENT_ID.fullmatch(text.strip())
    if match is None:
        return None
    return match.group(1), int(match.group(2), 16)


def message_event(payload: bytes, event: str | None = None) -> bytes:
    """One SSE event: `message` with its id, or (empty payload) the priming event, an id and no data."""
    head = f"id: {event}\n".encode() if event else b""
    if not payload:
        return head + b"data: \n\n"
    return b"event: message\n" + head + b"data: " + payload + b"\n\n"


def comment(text: str) -> bytes:
    return b": " + text.replace("\n", " ").replace("\r", " ").encode() + b"\n\n"
