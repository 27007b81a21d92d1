"""Server-sent event framing for JSON-RPC messages."""

from executor_mcp.codec import dumps
from executor_mcp.protocol.jsonrpc import Message, Notification, encode

KEEPALIVE = b": keepalive\n\n"
REPLAY_COMPLETE = b": replay-complete\n\n"
MAX_AGE_ROTATION = b": max-age rotation, reconnect\n\n"
# The first event of every tools/call stream: it carries an event id before any result exists, so a
# client whose connection drops mid-call knows it can resume (upstream §2.7, "priming events").
PRIMING = Notification(method="notifications/message", params={"level": "debug", "data": "mcp-stream-priming"})


def event_id(stream_id: str, seq: int) -> str:
    return f"{stream_id}:{seq:016x}"


def parse_event_id(text: str) -> tuple[str, int] | None:
    stream_id, separator, seq = text.strip().rpartition(":")
    if not separator or not stream_id or len(seq) != 16:
        return None
    try:
        return stream_id, int(seq, 16)
    except ValueError:
        return None


def message_event(message: Message, event: str | None = None, kind: str = "message") -> bytes:
    head = f"event: {kind}\n" + (f"id: {event}\n" if event else "")
    return head.encode() + b"data: " + dumps(encode(message)) + b"\n\n"


def raw_event(payload: bytes, event: str) -> bytes:
    return b"event: message\nid: " + event.encode() + b"\ndata: " + payload + b"\n\n"


def comment(text: str) -> bytes:
    return b": " + text.replace("\n", " ").encode() + b"\n\n"
