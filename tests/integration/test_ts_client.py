"""The official TypeScript MCP client (@modelcontextprotocol/client 2.4, Streamable HTTP) against the real
server: a second SDK, written by others, agrees with ours on both eras. Its default connect is the plain 2025
`initialize`; `versionNegotiation: {mode: "auto"}` probes with server/discover and must land on 2026-07-28."""

import json
from pathlib import Path

import pytest
import trio

from tests.conftest import ServerUnderTest, start_server
from tests.node_tools import TS_CLIENT, require, run_node
from tests.sdk import PRODUCT_TOOLS


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir)


@pytest.mark.parametrize(
    ("mode", "version", "era"), [("default", "2025-11-25", "legacy"), ("auto", "2026-07-28", "modern")]
)
async def test_the_typescript_client_lists_and_executes(
    executor: ServerUnderTest, mode: str, version: str, era: str
) -> None:
    drive = require(TS_CLIENT / "drive.mjs")
    run = await run_node(str(drive), executor.url, mode)
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-3000:]
    (line,) = run.stdout.decode().splitlines()
    assert json.loads(line) == {"protocolVersion": version, "era": era, "tools": PRODUCT_TOOLS, "result": "3"}
