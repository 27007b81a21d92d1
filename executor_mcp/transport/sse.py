"""Server-sent event framing for JSON-RPC messages."""

from executor_mcp.codec import dumps
from executor_mcp.protocol.jsonrpc import Message, encode

KEEPALIVE = b": keepalive\n\n"


def message_event(message: Message) -> bytes:
    return b"event: message\ndata: " + dumps(encode(message)) + b"\n\n"


def comment(text: str) -> bytes:
    return b": " + text.replace("\n", " ").encode() + b"\n\n"
