"""One session's MCP method dispatch: ping, tools/list, tools/call.

`initialize` never reaches here: it creates the session, so the transport and session manager own it.
Every request gets exactly one response message; errors are values (`ErrorResponse`), and a defect in
a tool becomes a -32603 answer with a correlation id in the log, never an exception that could take
the session's nursery down.
"""

import logging
import secrets
from collections.abc import Callable

from executor_mcp.codec import JsonObject
from executor_mcp.protocol.errors import Code, RpcError
from executor_mcp.protocol.jsonrpc import ErrorResponse, Message, Notification, Request, Response, error_response
from executor_mcp.protocol.mcp import CallToolParams, structure_params, tools_list_result
from executor_mcp.storage.records import SessionMeta
from executor_mcp.toolserver.registry import ToolContext, ToolRegistry

log = logging.getLogger(__name__)

Notify = Callable[[Notification], None]


class ToolServer:
    def __init__(self, meta: SessionMeta, tools: ToolRegistry) -> None:
        self.meta = meta
        self._tools = tools

    async def handle(self, request: Request, notify: Notify) -> Response | ErrorResponse:
        try:
            return Response(id=request.id, result=await self._dispatch(request, notify))
        except RpcError as exc:
            return error_response(request.id, exc.code, exc.message, exc.data)
        except Exception:
            correlation = secrets.token_hex(4)
            log.exception("request %s (%s) failed [%s]", request.id, request.method, correlation)
            return error_response(request.id, Code.INTERNAL_ERROR, f"Internal error [{correlation}]")

    def receive(self, message: Message) -> None:
        """Client notifications and responses: nothing in the catalog waits on them yet."""
        log.debug("session %s: %s", self.meta.session_id, getattr(message, "method", "response"))

    async def _dispatch(self, request: Request, notify: Notify) -> JsonObject:
        match request.method:
            case "ping":
                return {}
            case "tools/list":
                return tools_list_result([entry.tool for entry in self._tools])
            case "tools/call":
                params: CallToolParams = structure_params(request.params, CallToolParams)
                entry = self._tools.get(params.name)
                if entry is None:
                    raise RpcError(Code.INVALID_PARAMS, f"Tool {params.name} not found")
                return await entry.handler(params.arguments, ToolContext(session=self.meta, notify=notify))
            case _:
                raise RpcError(Code.METHOD_NOT_FOUND, "Method not found")
