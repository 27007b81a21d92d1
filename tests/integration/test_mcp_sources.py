"""MCP servers as integration sources, end to end: a real downstream server (the official SDK, run as a
subprocess), our real server, and the official client running code that finds, describes and calls its
tools."""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from mcp import Client

from tests.conftest import ServerUnderTest, start_server
from tests.integration.test_integrations_cli import cli
from tests.mcp_support import api, downstream
from tests.sdk import connect, execution_id, text_of

pytestmark = pytest.mark.slow
TOKEN = "downstream-token-0123456789"


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, allow_local_network=True)


async def run(client: Client, code: str) -> Any:
    result = await client.call_tool("execute", {"code": code})
    assert not result.is_error, text_of(result)
    return result.structured_content["result"]


async def add_and_connect(
    http: httpx.AsyncClient, executor: ServerUnderTest, endpoint: str, *, slug: str = "down", **extra: Any
) -> dict[str, Any]:
    added = await api(
        http, executor, "POST", "/api/mcp/servers", {"name": "Down Stream", "slug": slug, "endpoint": endpoint, **extra}
    )
    assert added == {"slug": slug, "toolCount": 0}
    body: dict[str, Any] = {"owner": "org", "name": "main", "integration": slug, "template": "none"}
    if extra.get("auth", {}).get("kind") == "header":
        body.update(template="header", value=TOKEN)
    return await api(http, executor, "POST", "/api/connections", body)


async def test_a_streamable_server_is_searched_described_and_called(
    executor: ServerUnderTest, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with downstream(tmp_path / "state") as server:
        await add_and_connect(http, executor, server.url)
        tools = await api(http, executor, "GET", "/api/tools?integration=down")
        names = sorted(row["name"] for row in tools)
        assert names == ["delete_everything", "echo", "fail", "grow", "peek", "picture"]
        async with connect(executor.url, mode="legacy") as (client, _):
            found = await run(client, 'return await tools.search({query: "echo the text"})')
            assert any(item["path"] == "down.org.main.echo" for item in found["items"]), found
            described = await run(client, 'return await tools.describe.tool({path: "down.org.main.echo"})')
            assert described["inputTypeScript"] == "{ text: string; }"
            assert "structuredContent?: { result: string; }" in described["outputTypeScript"]
            echoed = await run(client, 'return await tools.down.org.main.echo({text: "hi"})')
            assert echoed == {
                "ok": True,
                "data": {
                    "content": [{"type": "text", "text": "echo: hi"}],
                    "structuredContent": {"result": "echo: hi"},
                    "isError": False,
                },
            }
            picture = await run(client, "return await tools.down.org.main.picture({})")
            assert picture["ok"] is True
            assert [block["type"] for block in picture["data"]["content"]] == ["text", "image"]
            assert picture["data"]["structuredContent"] == {"width": 1, "height": 1}
            failed = await run(client, "return await tools.down.org.main.fail({})")
            assert failed["ok"] is False
            assert failed["error"]["code"] == "mcp_tool_error"
            assert failed["error"]["message"] == "it broke"
            # The read-only tool runs without approval, although it also claims to be destructive.
            peeked = await run(client, "return await tools.down.org.main.peek({})")
            assert peeked["data"]["content"] == [{"type": "text", "text": "0"}]
            paused = await client.call_tool(
                "execute", {"code": 'return await tools.down.org.main.delete_everything({target: "all"})'}
            )
            assert "executionId:" in text_of(paused), text_of(paused)
            assert "Delete every record" in text_of(paused)
            resumed = await client.call_tool("resume", {"executionId": execution_id(paused), "action": "accept"})
            result = resumed.structured_content["result"]
            assert result["data"]["content"][0]["text"] == "deleted all (1)"
            assert (tmp_path / "state" / "deletes").read_text() == "1"


async def test_a_header_connection_is_sent_and_a_missing_one_is_rejected(
    executor: ServerUnderTest, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with downstream(tmp_path / "state", token=TOKEN) as server:
        await add_and_connect(
            http, executor, server.url, auth={"kind": "header", "headerName": "Authorization", "prefix": "Bearer "}
        )
        await api(http, executor, "POST", "/api/mcp/servers", {"name": "open", "endpoint": server.url})
        await api(
            http,
            executor,
            "POST",
            "/api/connections",
            {"owner": "org", "name": "anon", "integration": "open", "template": "none"},
        )
        async with connect(executor.url, mode="legacy") as (client, _):
            echoed = await run(client, 'return await tools.down.org.main.echo({text: "authorized"})')
            assert echoed["data"]["content"][0]["text"] == "echo: authorized"
        # The unauthenticated connection lists nothing: why is noted, and a refresh says it.
        refused = await http.post(executor.running.url + "/api/connections/org/open/anon/refresh")
        assert refused.status_code == 502
        assert "HTTP 401" in refused.json()["message"]


async def test_a_call_rejected_with_401_is_connection_rejected(
    executor: ServerUnderTest, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with downstream(tmp_path / "state") as open_server:
        await add_and_connect(http, executor, open_server.url)
        port = open_server.port
    async with (
        downstream(tmp_path / "state", port=port, token=TOKEN),
        connect(executor.url, mode="legacy") as (
            client,
            _,
        ),
    ):
        rejected = await run(client, 'return await tools.down.org.main.echo({text: "x"})')
    assert rejected["ok"] is False
    assert rejected["error"]["code"] == "connection_rejected"
    assert rejected["error"]["status"] == 401


async def test_a_downstream_restart_mid_session_is_survived(
    executor: ServerUnderTest, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with downstream(tmp_path / "state") as server:
        await add_and_connect(http, executor, server.url)
        port = server.port
        async with connect(executor.url, mode="legacy") as (client, _):
            first = await run(client, 'return await tools.down.org.main.echo({text: "before"})')
            assert first["ok"] is True
    async with downstream(tmp_path / "state", port=port), connect(executor.url, mode="legacy") as (client, _):
        after = await run(client, 'return await tools.down.org.main.echo({text: "after"})')
    assert after["ok"] is True, after
    assert after["data"]["content"][0]["text"] == "echo: after"


async def test_a_list_change_brings_the_new_tool_and_refresh_replaces_tools(
    executor: ServerUnderTest, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with downstream(tmp_path / "state") as server:
        await add_and_connect(http, executor, server.url)
        async with connect(executor.url, mode="legacy") as (client, _):
            assert (await run(client, "return await tools.down.org.main.grow({})"))["ok"] is True
            names: list[str] = []
            with trio.fail_after(10):
                while "late_arrival" not in names:
                    await trio.sleep(0.05)
                    names = [row["name"] for row in await api(http, executor, "GET", "/api/tools?integration=down")]
            late = await run(client, "return await tools.down.org.main.late_arrival({})")
            assert late["data"]["content"][0]["text"] == "I am new"
        refreshed = await api(http, executor, "POST", "/api/connections/org/down/main/refresh")
        assert "late_arrival" in [row["name"] for row in refreshed]
    async with downstream(tmp_path / "state2", port=server.port):
        refreshed = await api(http, executor, "POST", "/api/connections/org/down/main/refresh")
        assert "late_arrival" not in [row["name"] for row in refreshed]


@pytest.mark.parametrize("transport", ["sse", "auto"])
async def test_the_legacy_sse_transport_works_and_auto_falls_back_to_it(
    executor: ServerUnderTest, http: httpx.AsyncClient, tmp_path: Path, transport: str
) -> None:
    async with downstream(tmp_path / "state", transport="sse") as server:
        await add_and_connect(http, executor, server.url, remoteTransport=transport)
        async with connect(executor.url, mode="legacy") as (client, _):
            echoed = await run(client, 'return await tools.down.org.main.echo({text: "old school"})')
            assert echoed["data"]["content"][0]["text"] == "echo: old school"


async def test_servers_are_added_shown_probed_and_removed_over_http(
    executor: ServerUnderTest, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    # Registration never dials: a dead endpoint registers fine.
    dead = await api(http, executor, "POST", "/api/mcp/servers", {"name": "Dead", "endpoint": "http://127.0.0.1:9/mcp"})
    assert dead == {"slug": "dead", "toolCount": 0}
    shown = await api(http, executor, "GET", "/api/mcp/servers/dead")
    assert shown["config"] == {"transport": "remote", "endpoint": "http://127.0.0.1:9/mcp", "remoteTransport": "auto"}
    async with downstream(tmp_path / "state") as server, downstream(tmp_path / "s2", token=TOKEN) as guarded:
        probed = await api(http, executor, "POST", "/api/mcp/probe", {"endpoint": server.url})
        assert probed["reachable"] is True
        assert probed["transport"] == "streamable-http"
        assert probed["serverName"] == "downstream"
        assert probed["toolCount"] == 6
        assert (await api(http, executor, "POST", "/api/mcp/probe", {"endpoint": guarded.url}))["requiresAuth"] is True
        configured = await api(http, executor, "POST", "/api/mcp/servers/dead/config", {"endpoint": server.url})
        assert configured["config"]["endpoint"] == server.url
        await api(
            http,
            executor,
            "POST",
            "/api/connections",
            {"owner": "org", "name": "main", "integration": "dead", "template": "none"},
        )
        assert len(await api(http, executor, "GET", "/api/tools?integration=dead")) == 6
    await api(http, executor, "DELETE", "/api/mcp/servers/dead")
    assert await api(http, executor, "GET", "/api/mcp/servers/dead") is None


async def test_code_adds_a_server_with_approval(executor: ServerUnderTest, tmp_path: Path) -> None:
    async with downstream(tmp_path / "state") as server, connect(executor.url, mode="legacy") as (client, _):
        probed = await run(
            client, f"return await tools.executor.mcp.probeEndpoint({{endpoint: {json.dumps(server.url)}}})"
        )
        assert probed["ok"] is True
        assert probed["data"]["toolCount"] == 6
        code = f'return await tools.executor.mcp.addServer({{name: "From Code", endpoint: {json.dumps(server.url)}}})'
        paused = await client.call_tool("execute", {"code": code})
        assert "Add an MCP server integration" in text_of(paused)
        resumed = await client.call_tool("resume", {"executionId": execution_id(paused), "action": "accept"})
        assert resumed.structured_content["result"] == {"ok": True, "data": {"slug": "from_code", "toolCount": 0}}
        got = await run(client, 'return await tools.executor.mcp.getServer({slug: "from_code"})')
        assert got["data"]["server"]["config"]["endpoint"] == server.url


async def test_the_cli_adds_remote_and_header_servers_and_lists_them(
    executor: ServerUnderTest, http: httpx.AsyncClient, tmp_path: Path, data_dir: Path
) -> None:
    async with downstream(tmp_path / "state", token=TOKEN) as server:
        added = await cli(
            data_dir, "integrations", "add-mcp", "--name", "Guarded", "--url", server.url,
            "--header-auth", "Authorization:Bearer ", "--header", "X-Static=1",
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert added.stdout.decode().strip() == "guarded"
        connected = await cli(
            data_dir, "connections", "add", "--integration", "guarded", "--name", "main", "--template", "header",
            "--allow-local-network", stdin=TOKEN.encode(),
        )  # fmt: skip
        assert connected.returncode == 0, connected.stderr
        listed = await cli(data_dir, "integrations", "list")
        assert ["guarded", "mcp", "Guarded", server.url] in [
            line.split() for line in listed.stdout.decode().splitlines()
        ]
        shown = json.loads((await cli(data_dir, "integrations", "show", "guarded", "--json")).stdout)
        assert shown["config"]["headers"] == {"X-Static": "1"}
        async with connect(executor.url, mode="legacy") as (client, _):
            echoed = await run(client, 'return await tools.guarded.org.main.echo({text: "from the cli"})')
        assert echoed["ok"] is True, echoed
        assert echoed["data"]["content"][0]["text"] == "echo: from the cli"
        refused = await cli(data_dir, "integrations", "add-mcp", "--name", "Local", "--command", "/bin/true")
        assert refused.returncode == 2
        assert b"MCP stdio transport is disabled." in refused.stderr


async def test_the_cli_refreshes_a_connections_tools_by_the_address_it_lists(
    executor: ServerUnderTest, http: httpx.AsyncClient, tmp_path: Path, data_dir: Path
) -> None:
    """`connections refresh` lists a connection's tools again, as `POST .../refresh` does (its `--json` is that
    answer): a server that came back with one more tool shows it."""
    async with downstream(tmp_path / "state") as server:
        added = await cli(data_dir, "integrations", "add-mcp", "--name", "Down", "--url", server.url)
        assert added.returncode == 0, added.stderr
        connected = await cli(
            data_dir, "connections", "add", "--integration", "down", "--name", "main", "--template", "none",
            "--allow-local-network",
        )  # fmt: skip
        assert connected.returncode == 0, connected.stderr
    address = (await cli(data_dir, "connections", "list")).stdout.decode().splitlines()[1].split()[0]
    assert address == "tools.down.org.main"
    async with downstream(tmp_path / "state", port=server.port, extra=True):
        refreshed = await cli(data_dir, "connections", "refresh", address, "--allow-local-network")
        assert refreshed.returncode == 0, refreshed.stderr
        header, *rows = refreshed.stdout.decode().splitlines()
        assert header.split() == ["TOOL", "DESCRIPTION"]
        extra = ["tools.down.org.main.extra_tool", "Only on servers started with --extra."]
        assert extra in [row.split(None, 1) for row in rows]
        as_json = await cli(data_dir, "connections", "refresh", address, "--json", "--allow-local-network")
        rows_json = json.loads(as_json.stdout)
        assert rows_json == await api(http, executor, "POST", "/api/connections/org/down/main/refresh")
        assert len(rows_json) == len(rows) == 7
    gone = await cli(data_dir, "connections", "refresh", address, "--allow-local-network")
    assert gone.returncode == 1  # nothing answers: the listing failed, and says so
    assert gone.stdout == b""
    assert address.encode() in gone.stderr


async def test_a_new_endpoint_makes_every_connection_list_its_tools_again(
    executor: ServerUnderTest, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with downstream(tmp_path / "a") as first, downstream(tmp_path / "b", transport="sse", extra=True) as second:
        await add_and_connect(http, executor, first.url)
        assert len(await api(http, executor, "GET", "/api/tools?integration=down")) == 6
        await api(
            http, executor, "POST", "/api/mcp/servers/down/config", {"endpoint": second.url, "remoteTransport": "sse"}
        )
        names: list[str] = []
        with trio.fail_after(10):
            while "extra_tool" not in names:
                await trio.sleep(0.05)
                names = [row["name"] for row in await api(http, executor, "GET", "/api/tools?integration=down")]
