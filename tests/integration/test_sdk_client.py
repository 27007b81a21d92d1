"""The official MCP Python SDK client against the real server."""

import httpx
import pytest
import trio
from mcp import MCPError

from tests.conftest import ServerUnderTest, start_server
from tests.sdk import PRODUCT_TOOLS, connect, resume


@pytest.mark.parametrize(
    ("mode", "version", "session"), [("auto", "2026-07-28", False), ("legacy", "2025-11-25", True)]
)
async def test_initialize_and_list_tools(server: ServerUnderTest, mode: str, version: str, session: bool) -> None:
    """The default client discovers the 2026 revision and opens no session; a legacy one initializes a session."""
    async with connect(server.url, mode=mode) as (client, recorder):
        assert client.server_info is not None
        assert client.server_info.name == "executor"
        assert client.protocol_version == version
        listed = await client.list_tools()
        assert [tool.name for tool in listed.tools] == PRODUCT_TOOLS
        assert (recorder.session_id is not None) is session


async def test_session_resumed_by_id_from_a_new_client(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    async with connect(server.url, mode="legacy") as (client, recorder):
        initialized = client.session.initialize_result
        session_id = recorder.session_id
        assert initialized is not None
        assert session_id is not None
        # Leaving the first client sends DELETE; keep the session by resuming before that.
        async with resume(server.url, session_id, initialized) as resumed:
            listed = await resumed.list_tools()
            assert [tool.name for tool in listed.tools] == PRODUCT_TOOLS


async def test_unknown_session_fails_fast_with_an_envelope(server: ServerUnderTest) -> None:
    async with connect(server.url, mode="legacy") as (client, _):
        initialized = client.session.initialize_result
    assert initialized is not None
    with trio.fail_after(15):
        async with resume(server.url, "0" * 64, initialized) as session:
            with pytest.raises(MCPError) as caught:
                await session.list_tools()
    assert caught.value.error.code == -32001
    assert caught.value.error.message == "Session not found"


async def test_client_exit_deletes_the_session(server: ServerUnderTest, http: httpx.AsyncClient) -> None:
    async with connect(server.url, mode="legacy") as (client, recorder):
        initialized = client.session.initialize_result
    assert recorder.session_id is not None
    assert initialized is not None
    async with resume(server.url, recorder.session_id, initialized) as session:
        with pytest.raises(MCPError) as caught:
            await session.list_tools()
    assert caught.value.error.code == -32001
    assert caught.value.error.message in {"Session timed out, please reconnect", "Session not found"}


async def test_session_survives_an_in_process_restart(nursery: trio.Nursery, data_dir) -> None:
    first = await start_server(nursery, data_dir)
    async with connect(first.url, mode="legacy") as (client, recorder):
        initialized = client.session.initialize_result
        session_id = recorder.session_id
        assert session_id is not None
        assert initialized is not None
        await first.stop()
        second = await start_server(nursery, data_dir)
        async with resume(second.url, session_id, initialized) as resumed:
            assert [tool.name for tool in (await resumed.list_tools()).tools] == PRODUCT_TOOLS
        await second.stop()
