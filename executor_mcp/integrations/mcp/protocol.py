"""The client side of MCP as values: the messages we send, the SSE framing we read, what a message we receive
is, and what we answer a server's own request with. No I/O, so hostile framings are tested directly.

We declare no client capabilities (no roots, sampling or elicitation), so a conforming server never asks for
them; a server that asks anyway gets -32601, as does any request but `ping`.
"""

from typing import Any

import attrs

from executor_mcp import __version__
from executor_mcp.codec import JsonObject, dumps, loads
from executor_mcp.protocol.mcp import LATEST_VERSION, SUPPORTED_VERSIONS

CLIENT_INFO: JsonObject = {"name": "executor-mcp", "version": __version__}
OFFERED_VERSION = LATEST_VERSION
ACCEPTED_VERSIONS = frozenset(SUPPORTED_VERSIONS)
# `tools/list` pages followed per discovery (upstream's bound).
MAX_PAGES = 100
LIST_CHANGED = "notifications/tools/list_changed"
ACCEPT = "application/json, text/event-stream"
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602


class ProtocolError(Exception):
    """What the server sent is not MCP we can use (not JSON-RPC, an unknown version, an oversized event)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ServerRefused(Exception):
    """The server answered our request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def request(request_id: int, method: str, params: JsonObject | None = None) -> bytes:
    message: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return dumps(message)


def notification(method: str, params: JsonObject | None = None) -> bytes:
    message: JsonObject = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return dumps(message)


def initialize_params() -> JsonObject:
    return {"protocolVersion": OFFERED_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO}


@attrs.frozen
class ServerInfo:
    protocol_version: str
    name: str
    version: str


def read_initialize(result: Any) -> ServerInfo:
    """The server's answer to `initialize`: its chosen version must be one we speak."""
    if not isinstance(result, dict):
        raise ProtocolError("The MCP server's initialize result is not an object")
    version = result.get("protocolVersion")
    if version not in ACCEPTED_VERSIONS:
        shown = str(version)[:40]
        raise ProtocolError(f"The MCP server chose protocol version {shown}, which this client does not speak")
    info = result.get("serverInfo")
    info = info if isinstance(info, dict) else {}
    name, server_version = info.get("name"), info.get("version")
    return ServerInfo(
        protocol_version=version,
        name=name[:200] if isinstance(name, str) else "",
        version=server_version[:100] if isinstance(server_version, str) else "",
    )


@attrs.frozen
class Response:
    id: Any
    result: Any = None
    error: ServerRefused | None = None


@attrs.frozen
class ServerRequest:
    id: Any
    method: str


@attrs.frozen
class Notification:
    method: str


Incoming = Response | ServerRequest | Notification


def classify(message: Any) -> Incoming | None:
    """What one received JSON-RPC message is; None for anything that is not a message (ignored)."""
    if not isinstance(message, dict):
        return None
    method = message.get("method")
    if isinstance(method, str):
        if "id" in message and message["id"] is not None:
            return ServerRequest(message["id"], method[:200])
        return Notification(method[:200])
    if "id" not in message:
        return None
    error = message.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        text = error.get("message")
        return Response(
            message["id"],
            error=ServerRefused(
                code if isinstance(code, int) else -32603,
                text[:2000] if isinstance(text, str) else "The MCP server answered an error",
                error.get("data"),
            ),
        )
    return Response(message["id"], result=message.get("result"))


def answer(server_request: ServerRequest) -> bytes:
    """Our reply to a server's request: `ping` is answered, everything else is a method we do not offer."""
    if server_request.method == "ping":
        return dumps({"jsonrpc": "2.0", "id": server_request.id, "result": {}})
    return dumps(
        {
            "jsonrpc": "2.0",
            "id": server_request.id,
            "error": {"code": METHOD_NOT_FOUND, "message": f"Method not found: {server_request.method}"},
        }
    )


def parse_json(raw: bytes | str) -> Any:
    """Standard JSON only: NaN and the infinities could never be passed on, and nesting deeper than Python's
    parser goes is refused like any other non-JSON (`ValueError`), not raised as a `RecursionError`."""
    try:
        return loads(raw)
    except RecursionError:
        raise ValueError("JSON nests too deep") from None


def parse_messages(body: bytes) -> list[Any]:
    """A JSON body: one message or a batch of them."""
    try:
        decoded = parse_json(body)
    except (ValueError, UnicodeDecodeError):
        raise ProtocolError("The MCP server answered something that is not JSON") from None
    return decoded if isinstance(decoded, list) else [decoded]


@attrs.frozen
class SseEvent:
    event: str
    data: str


class SseDecoder:
    """Server-sent events from a byte stream fed in any chunking. One event's data past `max_event_bytes`
    (a line that never ends, an event that never closes) is a `ProtocolError`, so a hostile stream costs a
    bounded buffer."""

    def __init__(self, *, max_event_bytes: int) -> None:
        self._max = max_event_bytes
        self._buffer = b""
        self._data: list[bytes] = []
        self._size = 0
        self._event = ""
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._pending_cr = False
        self._buffer += chunk
        events: list[SseEvent] = []
        while True:
            positions = [p for p in (self._buffer.find(b"\r"), self._buffer.find(b"\n")) if p >= 0]
            if not positions:
                break
            end = min(positions)
            line = self._buffer[:end]
            if self._buffer[end : end + 1] == b"\r":
                if end + 1 == len(self._buffer):
                    self._pending_cr = True
                    self._buffer = b""
                else:
                    self._buffer = (
                        self._buffer[end + 2 :]
                        if self._buffer[end + 1 : end + 2] == b"\n"
                        else (self._buffer[end + 1 :])
                    )
            else:
                self._buffer = self._buffer[end + 1 :]
            event = self._line(line)
            if event is not None:
                events.append(event)
        if len(self._buffer) + self._size > self._max:
            raise ProtocolError(f"The MCP server sent an event larger than {self._max} bytes")
        return events

    def _line(self, line: bytes) -> SseEvent | None:
        if not line:
            if not self._data and not self._event:
                return None
            data = b"\n".join(self._data).decode("utf-8", "replace")
            event = SseEvent(self._event or "message", data)
            self._data, self._size, self._event = [], 0, ""
            return event
        if line.startswith(b":"):
            return None
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            self._data.append(value)
            self._size += len(value) + 1
            if self._size > self._max:
                raise ProtocolError(f"The MCP server sent an event larger than {self._max} bytes")
        elif field == b"event":
            self._event = value.decode("utf-8", "replace")[:100]
        return None


def event_messages(event: SseEvent) -> list[Any]:
    """The JSON-RPC messages a `message` event carries (an empty data line is a keep-alive)."""
    if event.event != "message" or not event.data.strip():
        return []
    return parse_messages(event.data.encode())
