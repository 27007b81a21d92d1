"""One session's MCP method dispatch: ping, tools/list, tools/call.

`initialize` never reaches here: it creates the session, so the transport and session manager own it.
Every request gets exactly one response message; errors are values (`ErrorResponse`), and a defect in
a tool becomes a -32603 answer with a correlation id in the log, never an exception that could take
the session's nursery down.
"""

import functools
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager

import trio

from executor_mcp.codec import JsonObject
from executor_mcp.execution.runs import Deferred
from executor_mcp.protocol.errors import Code, Refusal, RpcError
from executor_mcp.protocol.jsonrpc import ErrorResponse, Message, Request, RequestId, Response, error_response
from executor_mcp.protocol.mcp import CallToolParams, Tool, structure_params, tools_list_result
from executor_mcp.storage.interfaces import ExecutionJournals, StoreUnavailable
from executor_mcp.storage.records import SessionMeta
from executor_mcp.toolserver.registry import RegisteredTool, ToolContext, ToolRegistry

log = logging.getLogger(__name__)

Send = Callable[[Message], None]


class ClientError(Exception):
    """The client answered a server-initiated request with a JSON-RPC error."""


class ToolServer:
    def __init__(
        self,
        meta: SessionMeta,
        tools: ToolRegistry,
        nursery: trio.Nursery,
        lease: Callable[[], AbstractContextManager[None]],
        store: ExecutionJournals,
        pause_kept: Callable[[float], Awaitable[None]],
    ) -> None:
        self.meta = meta
        self._tools = tools
        self._nursery = nursery
        self._lease = lease
        self._store = store
        self._pause_kept = pause_kept
        self._ids = itertools.count(1)
        self._asked: dict[RequestId, Deferred[Message]] = {}
        self._listing: JsonObject | None = None  # the `tools/list` result (read only), and when it was made
        self._listed_at = 0.0

    async def handle(self, request: Request, notify: Send) -> Response | ErrorResponse:
        return await answer(request, self._dispatch(request, notify))

    def entry(self, name: str) -> RegisteredTool:
        """The tool a `tools/call` names; an unknown name is the caller's error (-32602), as in the SDKs."""
        entry = self._tools.get(name)
        if entry is None:
            raise RpcError(Code.INVALID_PARAMS, f"Tool {name} not found")
        return entry

    async def listing(self, max_age: float | None = None) -> JsonObject:
        """The `tools/list` result, made on the first asking of this runtime (the execute tool's description
        names the owner's integrations as they were then), or made again once older than `max_age` seconds:
        a workspace serves every client of its principal for as long as any of them is active."""
        stale = max_age is not None and trio.current_time() - self._listed_at >= max_age
        if self._listing is None or stale:
            listed: list[Tool] = [
                await entry.listing(self.meta) if entry.listing is not None else entry.tool for entry in self._tools
            ]
            self._listing, self._listed_at = tools_list_result(listed), trio.current_time()
        return self._listing

    def context(self, notify: Send) -> ToolContext:
        """What a tool called by a request on `notify`'s stream may know and do."""
        return self._context(notify, functools.partial(self.ask, notify))

    async def revive(self) -> float:
        """Bring back what the session's file keeps (its durable pauses), before the runtime serves requests,
        and say until when the latest of them waits (0 when none). Revived work belongs to no request: it
        notifies nobody, and asking the client fails."""
        if self._tools.revive is None:
            return 0.0
        return await self._tools.revive(self._context(_notify_nobody, _ask_nobody))

    def _context(self, notify: Send, ask: Callable[[str, JsonObject], Awaitable[JsonObject]]) -> ToolContext:
        return ToolContext(
            session=self.meta,
            notify=notify,
            nursery=self._nursery,
            ask=ask,
            pause_lease=self._lease,
            store=self._store,
            pause_kept=self._pause_kept,
        )

    def receive(self, message: Message) -> None:
        """Client messages that are not requests: answers to our own requests are routed to their askers."""
        if isinstance(message, Response | ErrorResponse) and message.id in self._asked:
            self._asked[message.id].set(message)
        else:
            log.debug("session %s: %s", self.meta.session_id, getattr(message, "method", "response"))

    async def ask(self, send: Send, method: str, params: JsonObject) -> JsonObject:
        """Send a request to the client on `send`'s stream and wait for its answer."""
        request_id = f"executor-{next(self._ids)}"
        answered = self._asked[request_id] = Deferred[Message]()
        try:
            send(Request(id=request_id, method=method, params=params))
            answer = await answered.wait()
        finally:
            self._asked.pop(request_id, None)
        if isinstance(answer, ErrorResponse):
            raise ClientError(answer.error.message)
        assert isinstance(answer, Response)
        return answer.result

    async def _dispatch(self, request: Request, notify: Send) -> JsonObject:
        match request.method:
            case "ping":
                return {}
            case "tools/list":
                return await self.listing()
            case "tools/call":
                params: CallToolParams = structure_params(request.params, CallToolParams)
                return await self.entry(params.name).handler(params.arguments, self.context(notify))
            case _:
                raise RpcError(Code.METHOD_NOT_FOUND, "Method not found")


# How a request is served by a session's tool server: `ToolServer.handle` (the 2025 era), or a 2026 request's
# own (`stateless.py`).
Serve = Callable[[ToolServer, Request, Send], Awaitable[Response | ErrorResponse]]


async def answer(request: Request, work: Awaitable[JsonObject]) -> Response | ErrorResponse:
    """`request`'s one answer: `work`'s result, or its error as a value; a defect is -32603 with a correlation
    id that finds it in the log."""
    try:
        return Response(id=request.id, result=await work)
    except RpcError as exc:
        return error_response(request.id, exc.code, exc.message, exc.data)
    except StoreUnavailable as exc:  # transient, as the envelope says when no response has started
        log.warning("request %s (%s) answered %s: %s", request.id, request.method, Code.SESSION, exc)
        return error_response(request.id, Code.SESSION, Refusal.STORE_UNAVAILABLE.value.message)
    except Exception:
        correlation = secrets.token_hex(4)
        log.exception("request %s (%s) failed [%s]", request.id, request.method, correlation)
        return error_response(request.id, Code.INTERNAL_ERROR, f"Internal error [{correlation}]")


def _notify_nobody(message: Message) -> None:
    log.debug("a revived execution notified nobody: %s", getattr(message, "method", "response"))


async def _ask_nobody(method: str, params: JsonObject) -> JsonObject:
    raise ClientError(f"no client to ask ({method}): the work was revived after a restart")
