"""A TCP relay on 127.0.0.1 that cuts the first connection carrying a primed `tools/call` stream."""

from functools import partial

import attrs
import trio


@attrs.define
class SeveringRelay:
    """Forwards to `target`; once, cuts the connection whose response started a primed tools/call stream."""

    target_port: int
    cut_after: float = 0.3
    severed: trio.Event = attrs.Factory(trio.Event)
    url: str = ""

    async def start(self, nursery: trio.Nursery, path: str = "/mcp") -> None:
        listeners = await nursery.start(partial(trio.serve_tcp, self._relay, 0, host="127.0.0.1"))
        self.url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}{path}"

    async def _relay(self, client: trio.SocketStream) -> None:
        upstream = await trio.open_tcp_stream("127.0.0.1", self.target_port)
        asked, answered = bytearray(), bytearray()
        async with client, upstream, trio.open_nursery() as pumps:

            async def pump(source: trio.SocketStream, sink: trio.SocketStream, seen: bytearray) -> None:
                while data := await source.receive_some(65536):
                    seen.extend(data[-4096:])
                    await sink.send_all(data)
                    if not self.severed.is_set() and b'"tools/call"' in asked and b"\ndata: \n\n" in answered:
                        self.severed.set()
                        await trio.sleep(self.cut_after)
                        pumps.cancel_scope.cancel()
                pumps.cancel_scope.cancel()

            pumps.start_soon(pump, client, upstream, asked)
            pumps.start_soon(pump, upstream, client, answered)
