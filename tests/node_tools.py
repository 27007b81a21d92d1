"""The pinned Node tools of `tests/ts_client/` (installed by `scripts/install-node-tools`, which `scripts/test` runs):
Node 22, the official TypeScript MCP client and the MCP conformance suite. A missing install fails the tests that
need it, with the command that fixes it, instead of skipping them: a lost check would look like a passing one."""

import subprocess
from pathlib import Path

import pytest
import trio

TS_CLIENT = Path(__file__).resolve().parent / "ts_client"
NODE = TS_CLIENT / "node_modules" / ".bin" / "node"
CONFORMANCE = TS_CLIENT / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
# Generous next to the ~1 s a run takes on an idle machine: a hang fails the test instead of stalling the suite.
NODE_BOUND = 120


def require(path: Path) -> Path:
    """`path`, or a failed test naming the install step that brings it."""
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/install-node-tools")
    return path


async def run_node(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """The cache's Node 22 running `args`, bounded by NODE_BOUND; its exit code is the caller's to judge."""
    command = [str(require(NODE)), *args]
    with trio.fail_after(NODE_BOUND):
        return await trio.run_process(command, cwd=cwd, capture_stdout=True, capture_stderr=True, check=False)
