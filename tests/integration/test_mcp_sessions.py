"""The per-use sessions (legacy SSE, stdio) against the real SDK servers, at the kind: what goes wrong inside
the session's block reaches the caller as itself (an `ServerRefused`, a `ProtocolError`), so it becomes its typed
envelope, never an exception group that nothing expects."""

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from executor_mcp.config import Settings
from executor_mcp.integrations.kinds import Invocation
from executor_mcp.integrations.mcp.kind import McpKind, Target
from executor_mcp.integrations.mcp.protocol import METHOD_NOT_FOUND, ServerRefused
from executor_mcp.outbound.client import Outbound, OutboundSettings
from executor_mcp.records.integrations import (
    AuthMethod,
    IntegrationRecord,
    Placement,
    ToolDef,
)
from tests.mcp_support import STDIO_SERVER, downstream, mcp_connection, mcp_integration

pytestmark = pytest.mark.slow


def integration(config: dict[str, Any]) -> IntegrationRecord:
    return mcp_integration("down", config)


CONNECTION = mcp_connection("down")
STDIO_CONFIG = {"transport": "stdio", "command": sys.executable, "args": [str(STDIO_SERVER)], "env": {}}


@pytest.fixture
async def kind() -> AsyncIterator[McpKind]:
    async with Outbound(OutboundSettings.of(Settings(allow_local_network=True))) as outbound:
        mcp = McpKind(outbound, allow_stdio=True, max_source_bytes=1_000_000)
        try:
            yield mcp
        finally:
            await mcp.aclose()


def target_of(kind: McpKind, config: dict[str, Any]) -> Target:
    target = kind.target(integration(config), "none", {})
    assert isinstance(target, Target)
    return target


def tool_named(name: str) -> ToolDef:
    return ToolDef(name=name, description="", input_schema=None, output_schema=None, binding={"mcp": {"name": name}})


ECHO = tool_named("whoami")


async def no_such_method(session: Any) -> Any:
    return await session.request("no/such/method", {})


async def test_a_json_rpc_error_on_a_legacy_sse_session_is_raised_as_itself(kind: McpKind, tmp_path: Path) -> None:
    async with downstream(tmp_path / "state", transport="sse") as server:
        target = target_of(kind, {"transport": "remote", "endpoint": server.url, "remoteTransport": "sse"})
        with trio.fail_after(20), pytest.raises(ServerRefused) as refused:
            await kind.run(target, no_such_method)
    assert refused.value.code == METHOD_NOT_FOUND


async def test_a_json_rpc_error_on_a_stdio_session_is_raised_as_itself(kind: McpKind) -> None:
    with trio.fail_after(20), pytest.raises(ServerRefused) as refused:
        await kind.run(target_of(kind, STDIO_CONFIG), no_such_method)
    assert refused.value.code == METHOD_NOT_FOUND


async def test_a_stdio_server_that_exits_mid_call_is_a_protocol_error_envelope(kind: McpKind) -> None:
    with trio.fail_after(20):
        answer = await kind.invoke(Invocation(integration(STDIO_CONFIG), CONNECTION, tool_named("crash"), {}, {}))
    assert answer["ok"] is False
    assert answer["error"]["code"] == "mcp_protocol_error"
    assert answer["error"]["message"].startswith("The MCP stdio server exited before answering")


async def test_a_variable_value_a_process_cannot_hold_is_a_connect_failure(kind: McpKind) -> None:
    """A connection's value with a NUL byte cannot be put in an environment: the call fails as a connect
    failure naming the command, without the value."""
    record = attrs.evolve(
        integration(STDIO_CONFIG),
        auth_methods=(AuthMethod("env", "apikey", "Env", (Placement("env", "API_KEY", variable="API_KEY"),)),),
    )
    connection = attrs.evolve(CONNECTION, template="env")
    with trio.fail_after(20):
        answer = await kind.invoke(Invocation(record, connection, ECHO, {}, {"API_KEY": "secret\0value"}))
    assert answer["ok"] is False
    assert answer["error"]["code"] == "connection_rejected"
    assert "secret" not in answer["error"]["message"]
