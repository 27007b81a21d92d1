"""A raw HTTP/1.1 upstream on 127.0.0.1 that records exactly what reached it (request line, headers, body)
and answers through a scripted handler, which may stall, stream, or redirect."""

from collections.abc import Awaitable, Callable
from functools import partial

import attrs
import h11
import trio

MAX_REQUESTS_PER_CONNECTION = 100


@attrs.define
class Received:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = [value for key, value in self.headers if key == name.lower()]
        return ", ".join(values) if values else None

    def names(self) -> set[str]:
        return {key for key, _ in self.headers}


@attrs.define
class Reply:
    stream: trio.SocketStream
    connection: h11.Connection

    async def _send(self, event: h11.Event) -> None:
        data = self.connection.send(event)
        if data:
            await self.stream.send_all(data)

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        await self._send(h11.Response(status_code=status, headers=headers))

    async def data(self, chunk: bytes) -> None:
        await self._send(h11.Data(data=chunk))

    async def end(self) -> None:
        await self._send(h11.EndOfMessage())

    async def send(self, status: int, headers: list[tuple[str, str]] | None = None, body: bytes = b"") -> None:
        await self.start(status, [*(headers or []), ("content-length", str(len(body)))])
        if body:
            await self.data(body)
        await self.end()


Handler = Callable[[Received, Reply], Awaitable[None]]


async def _ok(received: Received, reply: Reply) -> None:
    await reply.send(200, [("content-type", "application/json")], b'{"ok":true}')


@attrs.define
class RecordingUpstream:
    handler: Handler = _ok
    received: list[Received] = attrs.Factory(list)
    port: int = 0

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, stream: trio.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER)
        for _ in range(MAX_REQUESTS_PER_CONNECTION):
            request: h11.Request | None = None
            body = bytearray()
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return
                    connection.receive_data(chunk)
                    continue
                if isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    return
            assert request is not None
            received = Received(
                method=request.method.decode(),
                target=request.target.decode(),
                headers=[(name.decode().lower(), value.decode()) for name, value in request.headers],
                body=bytes(body),
            )
            self.received.append(received)
            await self.handler(received, Reply(stream, connection))
            if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
                return
            connection.start_next_cycle()

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            await self._serve(stream)
        except (trio.BrokenResourceError, h11.ProtocolError):
            return
        finally:
            await stream.aclose()


async def start_upstream(nursery: trio.Nursery, handler: Handler = _ok) -> RecordingUpstream:
    upstream = RecordingUpstream(handler=handler)
    listeners = await nursery.start(partial(trio.serve_tcp, upstream._handle, 0, host="127.0.0.1"))
    upstream.port = listeners[0].socket.getsockname()[1]
    return upstream


def free_port() -> int:
    """A port nothing listens on (bound, then released), so a connect is refused."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


LISTEN_PORTS = range(20_000, 32_000)


def listen_port() -> int:
    """A port for a server the test starts later but must name first (a proxy's configuration, a public URL):
    free now, and below the ephemeral range, where the kernel never picks the local port of an outgoing connection
    (a port from `free_port` was once taken by an instance's database connection before the server bound it)."""
    import random
    import socket

    for _ in range(100):
        port = random.choice(LISTEN_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")
