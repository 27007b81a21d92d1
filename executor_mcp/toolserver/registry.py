"""The tools a session's MCP server exposes.

A session gets its registry from a factory when its runtime is built (and rebuilt on restore), so a
tool may depend on who the session is. The product's own tools (`execute`, `skills`, `resume`) are
registered here by the capabilities that provide them.
"""

from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager

import attrs
import trio

from executor_mcp.codec import JsonObject
from executor_mcp.protocol.jsonrpc import Message
from executor_mcp.protocol.mcp import Tool
from executor_mcp.storage.interfaces import ExecutionJournals
from executor_mcp.storage.records import SessionMeta


@attrs.frozen
class ToolContext:
    """What a running tool may know and do: its session, its request's stream (to notify the client or
    ask it something), and the session's nursery for work that must outlive the request."""

    session: SessionMeta
    notify: Callable[[Message], None]
    nursery: trio.Nursery
    ask: Callable[[str, JsonObject], Awaitable[JsonObject]]
    pause_lease: Callable[[], AbstractContextManager[None]]  # hold while waiting on a human
    store: ExecutionJournals  # where the session keeps its durable executions
    # Tells the control plane a pause of the session is kept until then, so that a restart revives the session.
    pause_kept: Callable[[float], Awaitable[None]]


ToolHandler = Callable[[JsonObject, ToolContext], Awaitable[JsonObject]]


@attrs.frozen
class RegisteredTool:
    tool: Tool
    handler: ToolHandler
    # The tool as one session lists it, when that depends on who the session is (`execute` names the
    # integrations its owner connected); asked once per runtime build, on the first `tools/list`.
    listing: Callable[[SessionMeta], Awaitable[Tool]] | None = None


# Brings back what a session's file keeps when its runtime comes up; returns until when the latest pause it
# brought back waits (0 when none).
Revive = Callable[[ToolContext], Awaitable[float]]


class ToolRegistry:
    def __init__(self, tools: list[RegisteredTool] | None = None, revive: Revive | None = None) -> None:
        """`revive` brings back, when a runtime comes up, the work the session's file keeps (durable pauses)."""
        self._tools = {entry.tool.name: entry for entry in tools or ()}
        self.revive = revive

    def __iter__(self) -> Iterator[RegisteredTool]:
        return iter(self._tools.values())

    def get(self, name: str) -> RegisteredTool | None:
        return self._tools.get(name)


ToolFactory = Callable[[SessionMeta], ToolRegistry]
