"""One connection's failure stays with that connection; a request h11 cannot frame gets an envelope.

hypercorn runs each TCP connection as a task of the listeners' handler nursery, and an exception escaping
one propagates through `worker_serve` into the server's root nursery: the process exits. hypercorn 0.18
has such an exception on a plain race. A request with a body and no `Content-Length` (so h11 reads no
body) leaves those bytes to be read as the next request while the answer is being written; h11 then
fails, and hypercorn both writes its error response and half-closes the socket. The half-close
(`send_eof`) does not take the connection's send lock, so it and a write of the answer, or of the error
response, can meet inside trio's conflict detector, and `trio.BusyResourceError` ends the process.

So, installed once before serving:

- the half-close waits for the send lock (the last bytes go out before the EOF), and a write that still
  finds the stream busy counts as the connection closing, as a broken pipe does;
- whatever else a connection raises is logged and closes that connection only;
- HTTP/2 is not spoken: an `Upgrade: h2c` header is ignored (as RFC 9110 lets a server do) and a
  prior-knowledge `PRI *` preface is answered as the HTTP/1.1 request it parses as. hypercorn's cleartext
  HTTP/2 connections outlived a graceful shutdown (a stop waited on one forever), and nothing needs them:
  without TLS, clients and proxies (nginx's `proxy_pass`) speak HTTP/1.1 to us;
- the error response hypercorn writes for a request h11 cannot frame (a malformed request line or header,
  an unsupported `Transfer-Encoding`, headers past the size limit) carries the contract's JSON-RPC envelope
  instead of an empty body, with h11's status.

hypercorn is pinned; on another version nothing is patched and a warning says so (`last_write.py` leans
on the same internals).
"""

import importlib.metadata
import json
import logging

import h11
import hypercorn.trio.run
import trio
from hypercorn.events import Closed, Event
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.tcp_server import TCPServer

from executor_mcp.protocol.errors import Refusal, Refused, envelope_body
from executor_mcp.transport.last_write import SUPPORTED_HYPERCORN

log = logging.getLogger(__name__)

# What a framing failure answers, by h11's status hint; h11's own message (which may quote the client's
# bytes) is never echoed.
FRAMING_REFUSALS = {
    431: Refusal.HEADERS_TOO_LARGE,
    501: Refusal.UNSUPPORTED_TRANSFER_ENCODING,
}


def framing_refusal(status: int) -> Refusal:
    return FRAMING_REFUSALS.get(status, Refusal.MALFORMED_HTTP)


class IsolatedConnection(TCPServer):
    """hypercorn's connection task, with the half-close serialised and every failure kept to itself."""

    async def run(self) -> None:
        try:
            await super().run()
        except Exception:
            log.exception("connection failed; closing it")
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    async def protocol_send(self, event: Event) -> None:
        try:
            await super().protocol_send(event)
        except trio.BusyResourceError:
            # Another task is half-closing the stream: these bytes cannot go out any more.
            await self.protocol.handle(Closed())

    async def _close(self) -> None:
        owner = self.send_lock.statistics().owner
        if owner is trio.lowlevel.current_task():  # a write under the lock found the peer gone
            await super()._close()
            return
        async with self.send_lock:
            await super()._close()


async def _http11_only(self: H11Protocol, event: h11.Request) -> None:
    """Where hypercorn would switch the connection to HTTP/2: stay on HTTP/1.1."""


async def _enveloped_error_response(self: H11Protocol, status_code: int) -> None:
    refusal = framing_refusal(status_code)
    status_code = refusal.value.status
    body = json.dumps(envelope_body(Refused(refusal))).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        *self.config.response_headers("h11"),
    ]
    await self._send_h11_event(h11.Response(status_code=status_code, headers=headers))
    await self._send_h11_event(h11.Data(data=body))
    await self._send_h11_event(h11.EndOfMessage())


def install() -> bool:
    """Patch hypercorn's connection handler and framing answer, once; False (and a warning) on another version."""
    if hypercorn.trio.run.TCPServer is IsolatedConnection:
        return True
    version = importlib.metadata.version("hypercorn")
    if version != SUPPORTED_HYPERCORN:
        log.warning("hypercorn %s: a failing connection is not isolated from the server", version)
        return False
    hypercorn.trio.run.TCPServer = IsolatedConnection  # type: ignore[misc]
    setattr(H11Protocol, "_send_error_response", _enveloped_error_response)  # noqa: B010
    setattr(H11Protocol, "_check_protocol", _http11_only)  # noqa: B010
    return True
