"""A session handle in this process: its lifecycle, its runtime, its requests in flight.

The runtime's nursery is where every request of the session runs, so cancelling the session's scope
cancels all of its work at once. Requests still in flight when that happens are answered by
`fail_in_flight`, called from the one place a runtime ends (the session task's exit handling in the
manager), with the refusal the lifecycle table gives for the state the session ended in. The keepers
that write detached streams to the session file die with the runtime's nursery, so the exit handling
then writes down what they had not (`write_down_kept`): a refusal added at the end is stored too.
"""

import contextlib
import functools
from contextlib import AbstractContextManager

import attrs
import trio
from opentelemetry.trace import Span

from executor_mcp import traces
from executor_mcp.background import once, retrying
from executor_mcp.protocol.errors import Refusal, Refused
from executor_mcp.protocol.jsonrpc import ErrorResponse, Message, Request
from executor_mcp.sessions.lifecycle import Event as LifecycleEvent
from executor_mcp.sessions.lifecycle import Lifecycle, State, workspace_refusal
from executor_mcp.sessions.streams import Call, Listener, Stream, StreamEvent
from executor_mcp.storage.records import SessionMeta, SessionRecord
from executor_mcp.storage.session_file import SessionFile
from executor_mcp.toolserver.server import Serve, ToolServer

SUPERSEDED_COMMENT = "superseded by a newer stream"
# Undelivered finished streams kept in memory per session; older ones are replayed from the file.
MAX_KEPT_IN_MEMORY = 32


@attrs.define(eq=False)
class Runtime:
    file: SessionFile
    meta: SessionMeta
    server: ToolServer
    nursery: trio.Nursery


class Session:
    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.lifecycle = Lifecycle()
        self.record: SessionRecord | None = None
        self.runtime: Runtime | None = None
        self.calls: set[Call] = set()
        self.listener: Listener | None = None
        self.last_activity = 0.0
        self.persisted_activity = 0.0
        self.paused = 0  # executions of this session waiting for approval (a lease on the runtime)
        # Resumable (tools/call) streams whose answers have not been delivered yet, by stream id.
        self.streams: dict[str, Stream] = {}
        self._kept: set[str] = set()  # undelivered streams written (or being written) to the session file
        self._keeping: dict[str, Stream] = {}  # kept streams whose keeper has not finished writing them
        # A handle serves one run of the runtime, restore to exit; the manager drops it afterwards.
        self.scope = trio.CancelScope()
        self.settled = trio.Event()
        self.stopped = trio.Event()
        self._drained = trio.Event()

    @property
    def state(self) -> State:
        return self.lifecycle.state

    def end(self, event: LifecycleEvent) -> None:
        """Tell the lifecycle why the runtime ends (idle, condemnation, shutdown) and cancel it."""
        self.lifecycle.fire(event)
        self.scope.cancel()

    def start_call(self, request: Request, stream: Stream, serve: Serve = ToolServer.handle) -> Call:
        """Serve `request` in the runtime's nursery, answering on `stream`; `serve` is how its era is served."""
        refusal = self.lifecycle.service_refusal
        if refusal is not None or self.runtime is None:
            raise Refused(refusal or Refusal.INTERNAL)
        call = Call(request=request, stream=stream)
        self.calls.add(call)
        self.runtime.nursery.start_soon(self._work, call, self.runtime.server, serve)
        return call

    async def _work(self, call: Call, server: ToolServer, serve: Serve) -> None:
        request = call.request
        with call.scope, method_span(request) as span:
            response = await serve(server, request, call.stream.send)
            traces.note(span, "mcp.outcome", "error" if isinstance(response, ErrorResponse) else "ok")
            if self._settle(call):
                call.stream.answer(response)

    def abandon(self, calls: list[Call]) -> None:
        """The client went away: stop the work nobody is waiting for."""
        for call in calls:
            if self._settle(call):
                call.scope.cancel()

    def _settle(self, call: Call) -> bool:
        """Take a call out of flight; False if something else already answered or dropped it."""
        if call not in self.calls:
            return False
        self.calls.discard(call)
        if not self.calls:
            self._drained.set()
        return True

    async def drained(self) -> None:
        """Wait until no request is in flight."""
        while self.calls:
            self._drained = trio.Event()
            await self._drained.wait()

    def open_stream(self, expected: int, priming: bytes | None) -> Stream:
        stream = Stream(expected, priming)
        if priming is not None:
            self.streams[stream.id] = stream
        return stream

    def detach(self, stream: Stream) -> None:
        """The stream's reader left before the end: its work goes on, and its answers are kept (in memory
        and in the session file) until a GET delivers them (at-least-once)."""
        if stream.id in self.streams:
            stream.detach()
            self._kept.add(stream.id)
            self._keeping[stream.id] = stream
            if self.runtime is not None:
                self.runtime.nursery.start_soon(self._keep, stream, self.runtime.file)
            # else the runtime is ending: its exit handling writes the stream down (`write_down_kept`)
            finished = [kept for kept in self.streams.values() if kept.finished and kept.id in self._kept]
            for oldest in finished[: max(len(finished) - MAX_KEPT_IN_MEMORY, 0)]:
                del self.streams[oldest.id]  # still in the session file, replayed from there

    async def _keep(self, stream: Stream, file: SessionFile) -> None:
        """Write a detached stream down as it progresses; a failed write is retried, never fatal."""
        what = f"session {self.id[:12]}: writing down stream {stream.id}"
        cursor = 0
        while events := await stream.read(cursor):
            store = functools.partial(file.store_events, stream.id, _stored(events), keep_from=stream.events[0].seq)
            await retrying(what, store)
            cursor = events[-1].seq
        await retrying(what, functools.partial(self._settle_kept, stream, file))
        self._keeping.pop(stream.id, None)

    async def _settle_kept(self, stream: Stream, file: SessionFile) -> None:
        if stream.id in self._kept:
            await file.mark_undelivered(stream.id)
        else:
            await file.acknowledge(stream.id)  # delivered while we were writing it down

    async def write_down_kept(self, file: SessionFile) -> None:
        """At the runtime's end, after `fail_in_flight`: write what the keepers had not, refusals included,
        and streams whose reader leaves meanwhile too. One stream that cannot be written costs only itself."""
        while self._keeping:
            stream_id, stream = next(iter(self._keeping.items()))
            del self._keeping[stream_id]
            what = f"session {self.id[:12]}: writing down stream {stream_id}"
            await once(what, functools.partial(self._write_down, stream, file))

    async def _write_down(self, stream: Stream, file: SessionFile) -> None:
        if stream.events:
            await file.store_events(stream.id, _stored(stream.events), keep_from=stream.events[0].seq)
        await self._settle_kept(stream, file)

    async def delivered(self, stream_id: str, *, stored: bool = False) -> None:
        """A reader got the stream to its end: forget it, here and (if it was written) in the file."""
        self.streams.pop(stream_id, None)
        was_kept = stream_id in self._kept
        self._kept.discard(stream_id)
        if (stored or was_kept) and self.runtime is not None:
            await self.runtime.file.acknowledge(stream_id)

    def receive(self, message: Message) -> None:
        if self.runtime is not None:
            self.runtime.server.receive(message)

    def listen(self) -> Listener:
        """Open the GET listen stream; a newer one supersedes (closes) the older."""
        if self.listener is not None:
            self.listener.close(SUPERSEDED_COMMENT)
        self.listener = Listener()
        return self.listener

    def unlisten(self, listener: Listener) -> None:
        if self.listener is listener:
            self.listener = None

    @property
    def running(self) -> int:
        """Work that holds the runtime up: requests in flight and an open listen stream."""
        return len(self.calls) + (self.listener is not None)

    def fail_in_flight(self) -> None:
        refusal = self.lifecycle.in_flight_refusal
        refused = Refused(workspace_refusal(refusal) if self.record is not None and self.record.workspace else refusal)
        for call in list(self.calls):
            self._settle(call)
            call.stream.refuse(call.request.id, refused)
        if self.listener is not None:
            self.listener.close()
            self.listener = None


def _stored(events: list[StreamEvent]) -> list[tuple[int, bytes]]:
    return [(event.seq, event.payload) for event in events]


# A tool name a span carries: what a client names, so bounded (the product's own are short words).
MAX_TRACED_TOOL_NAME = 64


def method_span(request: Request) -> AbstractContextManager[Span | None]:
    """The span of one MCP request: its method (and, for `tools/call`, the tool), under the trace its `_meta` names
    (MCP 2026's trace context; a 2025 request may carry it too), else under the HTTP request's."""
    if not traces.enabled():
        return contextlib.nullcontext()
    params = request.params if isinstance(request.params, dict) else {}
    title, attributes = request.method, {"mcp.method.name": request.method}
    tool = params.get("name") if request.method == "tools/call" else None
    if isinstance(tool, str) and len(tool) <= MAX_TRACED_TOOL_NAME and tool.isprintable():
        title, attributes["gen_ai.tool.name"] = f"{request.method} {tool}", tool
    meta = params.get("_meta")
    return traces.span(
        title, attributes=attributes, parent=traces.parent_from(meta) if isinstance(meta, dict) else None
    )
