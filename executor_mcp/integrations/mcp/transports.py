"""MCP sessions over Streamable HTTP, the legacy HTTP+SSE transport and stdio: thin trio adapters around the
sans-I/O `protocol`, every byte from the network through `Outbound` (guarded, capped, deadlined).

A session answers `request(method, params)` with the result or raises: `HttpStatus` (the server answered a
non-2xx status), `ServerRefused` (a JSON-RPC error), `ProtocolError` (nothing usable), `OutboundFailure` (no
answer). The legacy SSE and stdio sessions read in a nursery owned by the `async with` that opened them, so
no reader outlives the one call or discovery it serves.
"""

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from executor_mcp.codec import JsonObject
from executor_mcp.integrations.mcp import protocol
from executor_mcp.integrations.mcp.protocol import (
    ACCEPT,
    LIST_CHANGED,
    Notification,
    ProtocolError,
    Response,
    ServerInfo,
    ServerRequest,
    SseDecoder,
)
from executor_mcp.outbound.client import Outbound, StreamedResponse
from executor_mcp.outbound.model import OutboundFailure, OutboundRequest
from executor_mcp.outbound.useragent import DEFAULT_USER_AGENT

log = logging.getLogger(__name__)

# What an error answer's body is read for (its JSON-RPC code, a scope challenge), and shown of it.
ERROR_BODY_BYTES = 64 * 1024
# A DELETE of a dropped session is a courtesy: it may not hold anything up for longer.
CLOSE_TIMEOUT = 2.0
# The stdio server's stderr kept for a failure message (secret values redacted); the rest is read and dropped.
STDERR_TAIL_BYTES = 2048


class HttpStatus(Exception):
    """The server answered a non-2xx status."""

    def __init__(self, status: int, headers: Mapping[str, str], body: Any) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.headers = dict(headers)
        self.body = body

    @property
    def rpc_code(self) -> int | None:
        error = self.body.get("error") if isinstance(self.body, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        return code if isinstance(code, int) else None


@attrs.frozen
class Remote:
    """Where a remote server is and what every request to it carries (auth rendered over the static ones)."""

    endpoint: str = attrs.field(repr=False)
    headers: Mapping[str, str] = attrs.field(repr=False)
    query: Mapping[str, str] = attrs.field(repr=False)
    credential_headers: frozenset[str] = frozenset()
    credential_query: frozenset[str] = frozenset()

    def url(self, base: str | None = None) -> str:
        target = base or self.endpoint
        if not self.query:
            return target
        parts = urllib.parse.urlsplit(target)
        pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True) + list(self.query.items())
        return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(pairs)))


async def _error_body(answer: StreamedResponse) -> Any:
    try:
        raw = await answer.body(max_bytes=ERROR_BODY_BYTES)
    except OutboundFailure:
        return None
    try:
        return protocol.parse_json(raw)
    except (ValueError, UnicodeDecodeError):
        return raw[:2000].decode("utf-8", "replace")


class _Pending:
    """Answers awaited by id on a stream shared by every request of the session (legacy SSE, stdio)."""

    def __init__(self) -> None:
        self._waiting: dict[int, tuple[trio.Event, list[Response]]] = {}
        self.failure: Exception | None = None

    def expect(self, request_id: int) -> tuple[trio.Event, list[Response]]:
        slot: tuple[trio.Event, list[Response]] = (trio.Event(), [])
        self._waiting[request_id] = slot
        if self.failure is not None:
            slot[0].set()
        return slot

    def deliver(self, response: Response) -> None:
        slot = self._waiting.get(response.id) if isinstance(response.id, int) else None
        if slot is not None and not slot[0].is_set():
            slot[1].append(response)
            slot[0].set()

    def forget(self, request_id: int) -> None:
        self._waiting.pop(request_id, None)

    def fail(self, failure: Exception) -> None:
        if self.failure is None:
            self.failure = failure
        for event, _ in self._waiting.values():
            event.set()

    async def wait(self, request_id: int, slot: tuple[trio.Event, list[Response]]) -> Any:
        try:
            await slot[0].wait()
        finally:
            self._waiting.pop(request_id, None)
        if not slot[1]:
            raise self.failure or ProtocolError("The MCP server closed the session before answering")
        response = slot[1][0]
        if response.error is not None:
            raise response.error
        return response.result


class _Session:
    """What every transport shares: request ids, the handshake, and the list-changed flag."""

    def __init__(self) -> None:
        self.server: ServerInfo | None = None
        self.list_changed = False
        self._next_id = 0

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def request(self, method: str, params: JsonObject | None = None) -> Any:
        raise NotImplementedError

    async def notify(self, method: str, params: JsonObject | None = None) -> None:
        raise NotImplementedError

    async def initialize(self) -> ServerInfo:
        self.server = protocol.read_initialize(await self.request("initialize", protocol.initialize_params()))
        self._negotiated(self.server.protocol_version)
        await self.notify("notifications/initialized")
        return self.server

    def _negotiated(self, version: str) -> None:
        return None

    def _noticed(self, incoming: protocol.Incoming | None) -> None:
        if isinstance(incoming, Notification) and incoming.method == LIST_CHANGED:
            self.list_changed = True


class StreamableSession(_Session):
    """One Streamable HTTP session: every message a POST, answered by JSON or by an SSE stream."""

    transport = "streamable-http"

    def __init__(self, outbound: Outbound, remote: Remote, *, max_bytes: int) -> None:
        super().__init__()
        self._outbound = outbound
        self._remote = remote
        self._max_bytes = max_bytes
        self.session_id: str | None = None
        self._version: str | None = None

    def _negotiated(self, version: str) -> None:
        self._version = version

    def _outbound_request(self, method: str, body: bytes | None, accept: str = ACCEPT) -> OutboundRequest:
        headers = [("User-Agent", DEFAULT_USER_AGENT), *self._remote.headers.items(), ("Accept", accept)]
        if body is not None:
            headers.append(("Content-Type", "application/json"))
        if self._version is not None:
            headers.append(("mcp-protocol-version", self._version))
        if self.session_id is not None:
            headers.append(("mcp-session-id", self.session_id))
        return OutboundRequest(
            method=method,
            url=self._remote.url(),
            headers=tuple(headers),
            body=body,
            credential_headers=self._remote.credential_headers,
            credential_query=self._remote.credential_query,
        )

    async def request(self, method: str, params: JsonObject | None = None) -> Any:
        request_id = self._new_id()
        return await self._post(protocol.request(request_id, method, params), request_id)

    async def notify(self, method: str, params: JsonObject | None = None) -> None:
        await self._post(protocol.notification(method, params), None)

    async def _post(self, body: bytes, request_id: int | None) -> Any:
        async with self._outbound.stream(self._outbound_request("POST", body)) as answer:
            if not 200 <= answer.status < 300:
                raise HttpStatus(answer.status, answer.headers, await _error_body(answer))
            minted = answer.headers.get("mcp-session-id")
            if self.session_id is None and minted and len(minted) <= 256 and minted.isprintable():
                self.session_id = minted
            if request_id is None:
                return None
            if answer.media_type == "text/event-stream":
                return await self._read_events(answer, request_id)
            found: list[Response] = []
            for message in protocol.parse_messages(await answer.body(max_bytes=self._max_bytes)):
                incoming = protocol.classify(message)
                self._noticed(incoming)
                if isinstance(incoming, Response) and incoming.id == request_id:
                    found.append(incoming)
        return _settled(found)

    async def _read_events(self, answer: StreamedResponse, request_id: int) -> Any:
        decoder = SseDecoder(max_event_bytes=self._max_bytes)
        found: list[Response] = []

        async def take(chunk: bytes) -> bool:
            for event in decoder.feed(chunk):
                for message in protocol.event_messages(event):
                    incoming = protocol.classify(message)
                    self._noticed(incoming)
                    if isinstance(incoming, ServerRequest):
                        await self._reply(protocol.answer(incoming))
                    elif isinstance(incoming, Response) and incoming.id == request_id:
                        found.append(incoming)
                        return False
            return True

        await answer.read(take, max_bytes=self._max_bytes)
        if not found:
            raise ProtocolError("The MCP server's event stream ended before it answered")
        return _settled(found)

    async def _reply(self, body: bytes) -> None:
        """Our answer to a server's request met on a stream; a server that cannot take it loses only that."""
        try:
            async with self._outbound.stream(self._outbound_request("POST", body)) as answer:
                await answer.body(max_bytes=ERROR_BODY_BYTES)
        except OutboundFailure as failure:
            log.info("an answer to an MCP server's request was not delivered (%s)", failure.code)

    async def close(self) -> None:
        """DELETE the session, best effort and bounded, even while the caller is being cancelled."""
        if self.session_id is None:
            return
        with trio.CancelScope(shield=True) as scope, contextlib.suppress(OutboundFailure):
            scope.deadline = trio.current_time() + CLOSE_TIMEOUT
            async with self._outbound.stream(self._outbound_request("DELETE", None), headers_timeout=CLOSE_TIMEOUT):
                pass
        self.session_id = None


def _settled(found: list[Response]) -> Any:
    if not found:
        raise ProtocolError("The MCP server's answer did not hold a response to our request")
    if found[0].error is not None:
        raise found[0].error
    return found[0].result


class SseSession(_Session):
    """The legacy HTTP+SSE transport: a GET event stream names an endpoint; messages are POSTed there and
    answered on the stream."""

    transport = "sse"

    def __init__(self, outbound: Outbound, remote: Remote, *, max_bytes: int) -> None:
        super().__init__()
        self._outbound = outbound
        self._remote = remote
        self._max_bytes = max_bytes
        self._pending = _Pending()
        self._post_url: str | None = None
        self._start_failure: BaseException | None = None

    def _headers(self, accept: str, json_body: bool) -> tuple[tuple[str, str], ...]:
        headers = [("User-Agent", DEFAULT_USER_AGENT), *self._remote.headers.items(), ("Accept", accept)]
        if json_body:
            headers.append(("Content-Type", "application/json"))
        return tuple(headers)

    def _endpoint(self, data: str) -> str:
        try:
            target = urllib.parse.urljoin(self._remote.endpoint, data.strip())
            ours, theirs = urllib.parse.urlsplit(self._remote.endpoint), urllib.parse.urlsplit(target)
        except ValueError:
            raise ProtocolError("The MCP server's SSE stream named a message endpoint that is not a URL") from None
        if (ours.scheme, ours.netloc) != (theirs.scheme, theirs.netloc):
            # Our credentials go wherever messages go: only to the origin we were configured with.
            raise ProtocolError("The MCP server's SSE stream named a message endpoint on another origin")
        return self._remote.url(target)

    async def listen(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the event stream for as long as the owning nursery runs; any failure ends the session's
        pending requests instead of escaping (and, before the endpoint is known, is raised by the opener)."""
        started = False
        request = OutboundRequest(
            method="GET",
            url=self._remote.url(),
            headers=self._headers("text/event-stream", False),
            credential_headers=self._remote.credential_headers,
            credential_query=self._remote.credential_query,
        )
        try:
            async with self._outbound.stream(request) as answer:
                if answer.status != 200:
                    raise HttpStatus(answer.status, answer.headers, await _error_body(answer))
                if answer.media_type != "text/event-stream":
                    raise ProtocolError("The MCP server's SSE endpoint did not answer an event stream")
                decoder = SseDecoder(max_event_bytes=self._max_bytes)

                async def take(chunk: bytes) -> bool:
                    nonlocal started
                    for event in decoder.feed(chunk):
                        if event.event == "endpoint" and not started:
                            self._post_url = self._endpoint(event.data)
                            started = True
                            task_status.started()
                            continue
                        for message in protocol.event_messages(event) if started else ():
                            incoming = protocol.classify(message)
                            self._noticed(incoming)
                            if isinstance(incoming, Response):
                                self._pending.deliver(incoming)
                            elif isinstance(incoming, ServerRequest):
                                await self._post(protocol.answer(incoming))
                    return True

                await answer.read(take, max_bytes=4 * self._max_bytes)
            raise ProtocolError("The MCP server closed its event stream")
        except (HttpStatus, ProtocolError, OutboundFailure) as failure:
            self._pending.fail(failure)
            if not started:
                self._start_failure = failure
                task_status.started()

    async def _post(self, body: bytes) -> None:
        assert self._post_url is not None
        request = OutboundRequest(
            method="POST",
            url=self._post_url,
            headers=self._headers(ACCEPT, True),
            body=body,
            credential_headers=self._remote.credential_headers,
            credential_query=self._remote.credential_query,
        )
        async with self._outbound.stream(request) as answer:
            if not 200 <= answer.status < 300:
                raise HttpStatus(answer.status, answer.headers, await _error_body(answer))
            await answer.body(max_bytes=ERROR_BODY_BYTES)

    async def request(self, method: str, params: JsonObject | None = None) -> Any:
        request_id = self._new_id()
        slot = self._pending.expect(request_id)
        try:
            await self._post(protocol.request(request_id, method, params))
        except BaseException:
            self._pending.forget(request_id)
            raise
        return await self._pending.wait(request_id, slot)

    async def notify(self, method: str, params: JsonObject | None = None) -> None:
        await self._post(protocol.notification(method, params))


@asynccontextmanager
async def _readers() -> AsyncIterator[trio.Nursery]:
    """The nursery a per-use session's readers run in, cancelled when the block ends. The readers record their
    failures instead of raising, so what leaves the nursery is the block's own exception: it is re-raised as
    itself, not wrapped in the ExceptionGroup a nursery makes of it, since callers tell `HttpStatus`,
    `ServerRefused`, `ProtocolError` and `OutboundFailure` apart."""
    try:
        async with trio.open_nursery() as nursery:
            try:
                yield nursery
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        leaves = group.exceptions
        if len(leaves) == 1 and not isinstance(leaves[0], BaseExceptionGroup):
            raise leaves[0] from leaves[0].__cause__
        raise


@asynccontextmanager
async def open_sse(outbound: Outbound, remote: Remote, *, max_bytes: int) -> AsyncIterator[SseSession]:
    """An initialized legacy SSE session whose stream reader lives exactly as long as the block."""
    session = SseSession(outbound, remote, max_bytes=max_bytes)
    async with _readers() as nursery:
        await nursery.start(session.listen)
        if session._start_failure is not None:
            raise session._start_failure
        await session.initialize()
        yield session


# -- stdio --------------------------------------------------------------------------------------------


def lifeline_command() -> list[str]:
    """How to start the shim a stdio server runs under (the single binary re-executes itself)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "mcp-stdio-lifeline"]
    return [sys.executable, "-I", "-m", "executor_mcp.integrations.mcp.lifeline"]


@attrs.frozen
class Command:
    """A stdio server to start: its environment is exactly `env` (no variable of ours reaches it)."""

    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] = attrs.field(repr=False)
    cwd: str | None = None


class StdioSession(_Session):
    """Newline-delimited JSON-RPC over a child process's stdin and stdout."""

    transport = "stdio"

    def __init__(self, process: trio.Process, *, max_bytes: int, secrets: Sequence[str]) -> None:
        super().__init__()
        self.process = process
        self._max_bytes = max_bytes
        self._secrets = [value for value in secrets if value]
        self._pending = _Pending()
        self._writing = trio.Lock()
        self._stderr_tail = b""

    def _redacted_tail(self) -> str:
        text = self._stderr_tail.decode("utf-8", "replace")
        for value in self._secrets:
            text = text.replace(value, "***")
        return text.strip()[-500:]

    async def _write(self, body: bytes) -> None:
        assert self.process.stdin is not None
        async with self._writing:
            try:
                await self.process.stdin.send_all(body + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                raise self._exited() from None

    def _exited(self) -> ProtocolError:
        tail = self._redacted_tail()
        return ProtocolError("The MCP stdio server exited before answering" + (f": {tail}" if tail else ""))

    async def read_stdout(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        try:
            while True:
                chunk = await self.process.stdout.receive_some(65536)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                if len(buffer) > self._max_bytes:
                    raise ProtocolError(f"The MCP stdio server wrote a line longer than {self._max_bytes} bytes")
                for line in lines:
                    await self._line(line)
            await trio.sleep(0.05)  # let stderr's last words arrive for the failure message
            raise self._exited()
        except ProtocolError as failure:
            self._pending.fail(failure)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._pending.fail(self._exited())

    async def _line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = protocol.parse_json(line)
        except (ValueError, UnicodeDecodeError):
            return  # a server that logs to stdout: not a message
        incoming = protocol.classify(message)
        self._noticed(incoming)
        if isinstance(incoming, Response):
            self._pending.deliver(incoming)
        elif isinstance(incoming, ServerRequest):
            with contextlib.suppress(ProtocolError):
                await self._write(protocol.answer(incoming))

    async def drain_stderr(self) -> None:
        assert self.process.stderr is not None
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while chunk := await self.process.stderr.receive_some(65536):
                self._stderr_tail = (self._stderr_tail + chunk)[-STDERR_TAIL_BYTES:]

    async def request(self, method: str, params: JsonObject | None = None) -> Any:
        request_id = self._new_id()
        slot = self._pending.expect(request_id)
        await self._write(protocol.request(request_id, method, params))
        return await self._pending.wait(request_id, slot)

    async def notify(self, method: str, params: JsonObject | None = None) -> None:
        await self._write(protocol.notification(method, params))


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def resolve_program(command: str, env: Mapping[str, str], server_path: str | None) -> str:
    """The program to start: a bare name is looked up in the PATH the integration's static env gives, else in
    the server's own PATH, so `npx` or `uvx` are found although the child's environment is empty (a script
    behind `#!/usr/bin/env node` still needs `PATH` in the static env to find its interpreter). A name found
    nowhere is passed on as it is, and the shim reports it."""
    if "/" in command:
        return command
    return shutil.which(command, path=env.get("PATH") or server_path) or command


@asynccontextmanager
async def open_stdio(command: Command, *, max_bytes: int, secrets: Sequence[str]) -> AsyncIterator[StdioSession]:
    """Start the command under the lifeline shim, in its own session and process group, for one block.

    The shim holds the read end of a pipe only this process writes to: when the block ends the whole group
    is killed here, and should the server die without running this (SIGKILL), the pipe hangs up and the
    shim kills the group itself, as sandbox workers do on their stdin.
    """
    lifeline_read, lifeline_write = os.pipe()
    names = ",".join(sorted(command.env))
    try:
        process = await trio.lowlevel.open_process(
            [
                *lifeline_command(),
                str(lifeline_read),
                names,
                "--",
                resolve_program(command.command, command.env, os.environ.get("PATH")),
                *command.args,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(command.env),
            cwd=command.cwd,
            start_new_session=True,
            pass_fds=(lifeline_read,),
        )
    except OSError as error:
        os.close(lifeline_write)
        raise ProtocolError(f"The MCP stdio server could not be started: {error.strerror or error}") from None
    except ValueError:  # a NUL byte in a value: said without the value, which may be a secret
        os.close(lifeline_write)
        raise ProtocolError("The MCP stdio server could not be started: a variable's value holds a NUL byte") from None
    finally:
        os.close(lifeline_read)
    try:
        session = StdioSession(process, max_bytes=max_bytes, secrets=secrets)
        async with _readers() as nursery:
            nursery.start_soon(session.read_stdout)
            nursery.start_soon(session.drain_stderr)
            await session.initialize()
            yield session
    finally:
        kill_group(process.pid)
        os.close(lifeline_write)
        with trio.CancelScope(shield=True):
            await process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                with trio.CancelScope(shield=True), contextlib.suppress(trio.ClosedResourceError):
                    await stream.aclose()
