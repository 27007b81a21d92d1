"""`executor-mcp stdio` as a desktop client starts it: a child process spoken to on its pipes, through the official
`mcp` client's stdio transport (both eras) and with raw lines. The same execute, pause and resume flow as over
HTTP, a pause that outlives the process, and hostile lines answered in JSON-RPC without losing the session."""

import json
import sys
from pathlib import Path

import pytest
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from executor_mcp.protocol.errors import MAX_BODY_BYTES
from tests.process import command, run_cli, server_process
from tests.sdk import PRODUCT_TOOLS, execution_id, text_of

GATED = "executor.coreTools.policies.list"
LIST = f"return (await tools.{GATED}({{}})).data.policies.map((p) => p.pattern);"
BOUND = 60


def stdio_server(data_dir: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "executor_mcp", "stdio", "--data-dir", str(data_dir), *extra]
    )


async def gate(data_dir: Path) -> None:
    """Every list of the local org's policies asks for approval (the CLI writes the rule while nothing runs)."""
    added = await run_cli(
        "policies",
        "add",
        "--org",
        "local",
        "--pattern",
        GATED,
        "--action",
        "require_approval",
        "--data-dir",
        str(data_dir),
    )
    assert added.returncode == 0, added.stderr


@pytest.mark.parametrize(("mode", "version"), [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
async def test_execute_pause_and_resume_over_stdio(tmp_path: Path, mode: str, version: str) -> None:
    await gate(tmp_path)
    with trio.fail_after(BOUND):
        async with Client(stdio_server(tmp_path), mode=mode) as client:
            assert client.protocol_version == version
            assert [tool.name for tool in (await client.list_tools()).tools] == PRODUCT_TOOLS
            assert text_of(await client.call_tool("execute", {"code": "return 6 * 7"})) == "42"
            paused = await client.call_tool("execute", {"code": LIST})
            assert text_of(paused).startswith(f"Execution paused: Approve {GATED}?")
            resumed = await client.call_tool("resume", {"executionId": execution_id(paused), "action": "accept"})
            assert resumed.structured_content["status"] == "completed"
            assert resumed.structured_content["result"] == [GATED]


async def test_a_pause_outlives_the_stdio_process(tmp_path: Path) -> None:
    """The desktop client quits with an approval pending; started again, the server revives the pause from its
    data dir and the new session's `resume` answers it."""
    await gate(tmp_path)
    with trio.fail_after(BOUND):
        async with Client(stdio_server(tmp_path), mode="legacy") as first:
            execution = execution_id(await first.call_tool("execute", {"code": LIST}))
        async with Client(stdio_server(tmp_path), mode="legacy") as second:
            resumed = await second.call_tool("resume", {"executionId": execution, "action": "accept"})
    assert resumed.structured_content["status"] == "completed"
    assert resumed.structured_content["result"] == [GATED]


def _initialize(request_id: int) -> bytes:
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}).encode()


async def test_hostile_lines_are_answered_and_the_session_goes_on(tmp_path: Path) -> None:
    """Bad JSON, JSON nested past the parser's depth and an over-long line each get a JSON-RPC parse error (the
    long one is never buffered whole), and the session's requests before and after them are served: every line
    out is one JSON-RPC message."""
    too_long = b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"pad":"' + b"x" * (MAX_BODY_BYTES + 10) + b'"}}'
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "execute", "arguments": {"code": "1"}},
    }
    lines = [
        _initialize(1),
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        b"this is not json",
        b"[" * 100_000 + b"]" * 100_000,  # 200 KB, under the line cap, past the parser's recursion limit
        too_long,
        b"",
        b'{"jsonrpc":"2.0","id":2,"method":"ping"}',
        json.dumps(call).encode(),
    ]
    with trio.fail_after(BOUND):
        done = await trio.run_process(
            command("stdio", "--data-dir", str(tmp_path)),
            stdin=b"\n".join(lines) + b"\n",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    by_id = {answer["id"]: answer for answer in answers}
    assert by_id[1]["result"]["protocolVersion"] == "2025-06-18"
    assert by_id[2] == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert by_id[3]["result"]["structuredContent"]["status"] == "completed"
    parse_errors = [answer["error"] for answer in answers if answer["id"] is None]
    assert [error["code"] for error in parse_errors] == [-32700, -32700, -32700]
    assert 9 not in by_id  # the over-long request was refused unread


async def test_stdio_logs_only_to_stderr(tmp_path: Path) -> None:
    """Standard output is the protocol's: at debug level too, every byte the server writes there is a message."""
    with trio.fail_after(BOUND):
        done = await trio.run_process(
            command("stdio", "--data-dir", str(tmp_path), "--log-level", "debug"),
            stdin=_initialize(1) + b"\n",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0
    assert done.stderr  # it did log, there
    assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == [1]


async def test_one_server_per_data_dir(tmp_path: Path) -> None:
    """A stdio server (or a second `serve`) refuses a data dir a running server holds, naming its pid; it is
    free again once that server has stopped."""
    async with server_process(tmp_path) as running:
        for refused in (
            await run_cli("stdio", "--data-dir", str(tmp_path)),
            await run_cli("serve", "--port", "0", "--data-dir", str(tmp_path)),
        ):
            assert refused.returncode == 2
            assert f"in use by another executor-mcp server (pid {running.process.pid})" in refused.stderr.decode()
        running.terminate()
        assert await running.wait() == 0
    with trio.fail_after(BOUND):
        done = await trio.run_process(
            command("stdio", "--data-dir", str(tmp_path)), stdin=_initialize(1) + b"\n", capture_stdout=True
        )
    assert json.loads(done.stdout)["id"] == 1
