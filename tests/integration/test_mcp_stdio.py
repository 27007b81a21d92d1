"""stdio MCP servers: only with --allow-stdio-mcp, started with an empty environment plus the connection's
named variables, in their own process group, gone after the call and with the server (even SIGKILLed)."""

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from executor_mcp.integrations.mcp.registration import STDIO_DISABLED
from executor_mcp.integrations.mcp.transports import lifeline_command
from tests.conftest import ServerUnderTest, start_server
from tests.mcp_support import STDIO_SERVER, api
from tests.sdk import connect, text_of

pytestmark = pytest.mark.slow
SECRET = "stdio-secret-value-42"


def stdio_server(**extra: Any) -> dict[str, Any]:
    return {
        "transport": "stdio",
        "name": "Local Tools",
        "command": sys.executable,
        "args": [str(STDIO_SERVER)],
        "env": {"STATIC_SETTING": "on"},
        "authenticationTemplate": [{"slug": "env", "kind": "stdio_env", "vars": ["API_KEY"]}],
        **extra,
    }


def gone(pid: int) -> bool:
    """No such process, or only its zombie (a container's init may not reap orphans at once)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def wait_gone(pid: int) -> None:
    with trio.fail_after(10):
        while not gone(pid):  # noqa: ASYNC110
            await trio.sleep(0.02)


async def run(executor: ServerUnderTest, code: str) -> Any:
    async with connect(executor.url, mode="legacy") as (client, _):
        result = await client.call_tool("execute", {"code": code})
    assert not result.is_error, text_of(result)
    return result.structured_content["result"]


async def test_stdio_is_refused_without_the_flag(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    executor = await start_server(nursery, data_dir, allow_local_network=True)
    refused = await http.post(executor.running.url + "/api/mcp/servers", json=stdio_server())
    assert refused.status_code == 400
    assert refused.json()["message"] == STDIO_DISABLED
    assert STDIO_DISABLED.startswith("MCP stdio transport is disabled. ")


async def test_a_stdio_server_sees_only_its_connection_s_variables_and_dies_after_the_call(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient
) -> None:
    executor = await start_server(nursery, data_dir, allow_stdio_mcp=True)
    assert await api(http, executor, "POST", "/api/mcp/servers", stdio_server()) == {
        "slug": "local_tools",
        "toolCount": 0,
    }
    await api(
        http,
        executor,
        "POST",
        "/api/connections",
        {
            "owner": "org",
            "name": "main",
            "integration": "local_tools",
            "template": "env",
            "values": {"API_KEY": SECRET},
        },
    )
    names = await run(executor, "return await tools.local_tools.org.main.environment({})")
    seen = set(names["data"]["structuredContent"]["names"])
    # Python coerces a C locale by setting LC_CTYPE in its own environment at startup (PEP 538): the only
    # variable the server sees that nobody gave it.
    assert seen - {"LC_CTYPE"} == {"API_KEY", "STATIC_SETTING"}
    value = await run(executor, 'return await tools.local_tools.org.main.variable({name: "API_KEY"})')
    assert value["data"]["content"][0]["text"] == SECRET
    who = await run(executor, "return await tools.local_tools.org.main.whoami({})")
    ids = who["data"]["structuredContent"]
    assert ids["pgid"] != os.getpgid(0)
    await wait_gone(ids["pid"])


async def test_a_stdio_server_mid_call_dies_with_the_server(
    nursery: trio.Nursery, data_dir: Path, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    executor = await start_server(nursery, data_dir, allow_stdio_mcp=True)
    await api(http, executor, "POST", "/api/mcp/servers", stdio_server(authenticationTemplate=None))
    await api(
        http,
        executor,
        "POST",
        "/api/connections",
        {"owner": "org", "name": "main", "integration": "local_tools", "template": "none"},
    )
    pid_file = tmp_path / "pid"
    code = f"return await tools.local_tools.org.main.linger({{path: {json.dumps(str(pid_file))}, seconds: 60}})"

    async def call(cancel_scope: trio.CancelScope) -> None:
        # The server stops under this call: whatever the client makes of that is not what is tested here.
        with cancel_scope, contextlib.suppress(Exception):
            await run(executor, code)

    scope = trio.CancelScope()
    nursery.start_soon(call, scope)
    with trio.fail_after(20):
        while not pid_file.exists() or not pid_file.read_text():  # noqa: ASYNC110
            await trio.sleep(0.05)
    pid = int(pid_file.read_text())
    await executor.stop()
    scope.cancel()
    await wait_gone(pid)


async def test_the_lifeline_kills_the_group_when_its_pipe_hangs_up() -> None:
    """What happens when the server is SIGKILLed: the write end of the lifeline closes with it."""
    read_end, write_end = os.pipe()
    child = "import os, sys, time; print(os.getpid(), flush=True); time.sleep(60)"
    process = await trio.lowlevel.open_process(
        [*lifeline_command(), str(read_end), "", "--", sys.executable, "-c", child],
        stdout=subprocess.PIPE,
        start_new_session=True,
        pass_fds=(read_end,),
        env={},
    )
    os.close(read_end)
    assert process.stdout is not None
    with trio.fail_after(10):
        line = await process.stdout.receive_some(100)
    pid = int(line.split()[0])
    assert not gone(pid)
    os.close(write_end)
    with trio.fail_after(10):
        await process.wait()
    await process.stdout.aclose()
    await wait_gone(pid)
