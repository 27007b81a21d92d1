"""A real HTTP upstream on 127.0.0.1 for integration tests: it records every request it receives and
answers with what the test's `respond` function returns (or serves a spec it holds)."""

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import attrs
import hypercorn.trio
import trio
from hypercorn.config import Config


@attrs.frozen
class Received:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lowercased names; repeated headers joined with ", "
    body: bytes


@attrs.frozen
class Answer:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


Respond = Callable[[Received], Answer | Awaitable[Answer]]


async def serve_lifespan(receive: Any, send: Any) -> None:
    """Answer an ASGI lifespan scope: started at once, and done when the server shuts down."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def read_body(receive: Any) -> bytes:
    """A request's whole body, from its ASGI `http.request` messages."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


@attrs.define
class Upstream:
    respond: Respond
    received: list[Received] = attrs.Factory(list)
    url: str = ""

    def calls(self, path_prefix: str = "/") -> list[Received]:
        """What reached the API (spec fetches excluded when they are served under `/spec`)."""
        return [r for r in self.received if r.path.startswith(path_prefix) and not r.path.startswith("/spec")]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        body = await read_body(receive)
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        request = Received(
            method=scope["method"],
            path=scope["raw_path"].decode("latin-1"),
            query=scope["query_string"].decode("latin-1"),
            headers=headers,
            body=body,
        )
        self.received.append(request)
        answer = self.respond(request)
        if not isinstance(answer, Answer):
            answer = await answer
        response_headers = [(b"content-type", answer.content_type.encode())] if answer.content_type else []
        response_headers += [(name.encode(), value.encode()) for name, value in answer.headers]
        await send({"type": "http.response.start", "status": answer.status, "headers": response_headers})
        await send({"type": "http.response.body", "body": answer.body})


async def start_upstream(nursery: trio.Nursery, respond: Respond) -> Upstream:
    upstream = Upstream(respond)
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    binds = await nursery.start(partial(hypercorn.trio.serve, upstream, config))
    upstream.url = binds[0]
    return upstream
