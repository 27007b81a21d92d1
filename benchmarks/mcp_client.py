"""A minimal MCP client for the benchmark: HTTP/1.1 keep-alive over trio sockets, SSE parsed.

Raw sockets rather than httpx because the load generator shares 2 cores with the server it measures:
httpx (httpcore + h11 + anyio) spends several times more CPU per request than this does, CPU the server
then lacks (decision 2 in docs/decisions-benchjson.md has the figures). Only what an MCP server on
127.0.0.1 answers is understood: a status line, headers, and a body framed by content-length or chunked.
"""

import itertools
import json
from urllib.parse import urlsplit

import attrs
import trio

EVENT_STREAM = "text/event-stream"
ACCEPT = f"application/json, {EVENT_STREAM}"
PROTOCOL = "2025-06-18"
RECEIVE_BYTES = 65536
# A response head or a chunk-size line longer than this is not an MCP server's answer.
MAX_HEAD_BYTES = 65536


class ProtocolError(Exception):
    """The server's answer is not what an MCP request should get."""


@attrs.frozen
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """The status and the headers (names lowercased) of a response head, without its blank line."""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


def find_answer(content_type: str, body: bytes, request_id: int) -> dict:
    """The JSON-RPC response to `request_id` in a JSON or SSE body (what mcp-bench's reader accepts)."""
    if EVENT_STREAM not in content_type:
        if not body:
            raise ProtocolError("empty body")
        message = json.loads(body)
        messages = message if isinstance(message, list) else [message]
        return next((m for m in messages if isinstance(m, dict) and m.get("id") == request_id), messages[0])
    for block in body.decode().replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:"))
        if not data:
            continue
        try:
            message = json.loads(data)
        except ValueError:
            continue
        for candidate in message if isinstance(message, list) else [message]:
            if (
                isinstance(candidate, dict)
                and candidate.get("id") == request_id
                and candidate.keys() & {"result", "error"}
            ):
                return candidate
    raise ProtocolError(f"SSE stream ended without response to id {request_id}")


class Connection:
    """One keep-alive connection; a request that fails leaves it closed (the pool then drops it)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self.usable = True

    async def request(self, head: bytes, body: bytes) -> Response:
        try:
            await self._stream.send_all(head + body)
            status, headers = parse_head(await self._read_until(b"\r\n\r\n"))
            if "content-length" in headers:
                payload = await self._read_exactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                payload = await self._read_chunked()
            else:
                raise ProtocolError("a response without content-length or chunked framing")
            if headers.get("connection", "").lower() == "close":
                await self.close()
            return Response(status, headers, payload)
        except BaseException:
            self._abort()
            raise

    def _abort(self) -> None:
        """Synchronous, so a cancellation that ended the request cannot also interrupt the close."""
        self.usable = False
        self._stream.socket.close()

    async def close(self) -> None:
        self.usable = False
        await self._stream.aclose()

    async def _fill(self) -> None:
        chunk = await self._stream.receive_some(RECEIVE_BYTES)
        if not chunk:
            raise ProtocolError("the server closed the connection")
        self._buffer += chunk

    async def _read_until(self, separator: bytes) -> bytes:
        while (end := self._buffer.find(separator)) < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise ProtocolError("a response line or head too long")
            await self._fill()
        taken = bytes(self._buffer[:end])
        del self._buffer[: end + len(separator)]
        return taken

    async def _read_exactly(self, count: int) -> bytes:
        while len(self._buffer) < count:
            await self._fill()
        taken = bytes(self._buffer[:count])
        del self._buffer[:count]
        return taken

    async def _read_chunked(self) -> bytes:
        parts = []
        while size := int((await self._read_until(b"\r\n")).split(b";")[0], 16):
            parts.append(await self._read_exactly(size))
            await self._read_exactly(2)
        while await self._read_until(b"\r\n"):  # trailers, up to the blank line
            pass
        return b"".join(parts)


class Client:
    """Requests to one MCP endpoint over a pool of keep-alive connections, as fetch pools them: a request
    takes an idle connection or opens one, and gives it back when its answer is read.

    Unless `keep_sse_connections`, a connection that carried an SSE answer is closed instead: what fetch
    (mcp-bench's client) does when the answer arrives before the end of the body, since it cancels the
    body once the answer is in and an unfinished body costs the connection. The server writes the answer
    with the end of the body (`executor_mcp/transport/last_write.py`), so fetch keeps them and so does
    this client by default; closing them shows what a new connection per call costs.
    """

    def __init__(self, url: str, timeout: float, *, keep_sse_connections: bool = True) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"an http://HOST:PORT/PATH URL is needed, not {url!r}")
        self.url = url
        self._host, self._port, self._path = parts.hostname, parts.port, parts.path or "/"
        self._timeout = timeout
        self._keep_sse_connections = keep_sse_connections
        self._idle: list[Connection] = []
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    async def send(self, method: str, headers: dict[str, str], body: bytes = b"") -> Response:
        lines = [f"{method} {self._path} HTTP/1.1", f"host: {self._host}:{self._port}", f"content-length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        with trio.fail_after(self._timeout):
            connection = (
                self._idle.pop() if self._idle else Connection(await trio.open_tcp_stream(self._host, self._port))
            )
            response = await connection.request(head, body)
            reusable = self._keep_sse_connections or EVENT_STREAM not in response.headers.get("content-type", "")
            if connection.usable and reusable:
                self._idle.append(connection)
            elif connection.usable:
                await connection.close()
        return response

    async def aclose(self) -> None:
        while self._idle:
            await self._idle.pop().close()


class Session:
    """One MCP session, as mcp-bench's `Session`: initialize + initialized, calls, DELETE."""

    def __init__(self, client: Client, protocol: str = PROTOCOL) -> None:
        self._client = client
        self._protocol = protocol
        self.session_id: str | None = None

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": ACCEPT}
        if self.session_id:
            headers |= {"mcp-session-id": self.session_id, "mcp-protocol-version": self._protocol}
        return headers

    async def rpc(self, method: str, params: dict | None = None) -> dict:
        request_id = self._client.next_id()
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, **({"params": params} if params else {})}
        response = await self._client.send("POST", self._headers(), json.dumps(message).encode())
        if method == "initialize" and "mcp-session-id" in response.headers:
            self.session_id = response.headers["mcp-session-id"]
        content_type = response.headers.get("content-type", "")
        if response.status >= 400 and "json" not in content_type:
            raise ProtocolError(f"HTTP {response.status}: {response.body[:200].decode(errors='replace')}")
        answer = find_answer(content_type, response.body, request_id)
        if "error" in answer:
            raise ProtocolError(f"JSON-RPC error {answer['error'].get('code')}: {answer['error'].get('message')}")
        return answer.get("result") or {}

    async def notify(self, method: str) -> None:
        response = await self._client.send(
            "POST", self._headers(), json.dumps({"jsonrpc": "2.0", "method": method}).encode()
        )
        if response.status >= 400:
            raise ProtocolError(f"notify {method}: HTTP {response.status}")

    async def open(self) -> dict:
        result = await self.rpc(
            "initialize",
            {
                "protocolVersion": self._protocol,
                "capabilities": {},
                "clientInfo": {"name": "scripts/bench", "version": "1"},
            },
        )
        self._protocol = result.get("protocolVersion") or self._protocol
        await self.notify("notifications/initialized")
        return result

    async def call(self, tool: str, arguments: dict) -> dict:
        result = await self.rpc("tools/call", {"name": tool, "arguments": arguments})
        if result.get("isError"):
            raise ProtocolError(f"tool isError: {json.dumps(result.get('content'))[:200]}")
        return result

    async def close(self) -> int | None:
        if not self.session_id:
            return None
        response = await self._client.send("DELETE", self._headers())
        self.session_id = None
        return response.status
