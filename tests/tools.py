"""Test tools registered through the real tool registry, to hold requests in flight on purpose.

The product's catalog is empty until the execution capability lands; these tools exist only so
tests can observe a request that is running when its session is terminated or the server stops.
"""

import attrs
import trio

from executor_mcp.codec import JsonObject
from executor_mcp.protocol.mcp import Tool
from executor_mcp.storage.records import SessionMeta
from executor_mcp.toolserver.registry import RegisteredTool, ToolContext, ToolFactory, ToolRegistry


def text_result(text: str) -> JsonObject:
    return {"content": [{"type": "text", "text": text}], "isError": False}


@attrs.define
class Probe:
    """What the test sees of the `wait` tool: it started, it was released, it was cancelled."""

    started: trio.Event = attrs.Factory(trio.Event)
    release: trio.Event = attrs.Factory(trio.Event)
    cancelled: trio.Event = attrs.Factory(trio.Event)


def probe_tools(probe: Probe) -> ToolFactory:
    async def wait(arguments: JsonObject, context: ToolContext) -> JsonObject:
        probe.started.set()
        try:
            await probe.release.wait()
        except trio.Cancelled:
            probe.cancelled.set()
            raise
        return text_result("released")

    async def echo(arguments: JsonObject, context: ToolContext) -> JsonObject:
        await trio.sleep(float(arguments.get("delay", 0)))
        return text_result(str(arguments["text"]))

    schema: JsonObject = {"type": "object"}
    registry = ToolRegistry(
        [
            RegisteredTool(Tool("wait", "Waits until the test releases it.", schema), wait),
            RegisteredTool(Tool("echo", "Answers its text after an optional delay.", schema), echo),
        ]
    )

    def factory(_: SessionMeta) -> ToolRegistry:
        return registry

    return factory


def call_body(request_id: int | str, name: str, **arguments: object) -> JsonObject:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
