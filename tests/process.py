"""`executor-mcp serve` as a real child process, for restart and signal tests."""

import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

_ANNOUNCE = re.compile(rb"MCP: (http://\S+/mcp)\n")
STARTUP_BOUND = 30


@attrs.define
class ServerProcess:
    process: trio.Process
    url: str
    stderr: bytearray

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.process.kill()

    async def wait(self) -> int:
        with trio.fail_after(STARTUP_BOUND):
            return await self.process.wait()


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "executor_mcp", *args]


@asynccontextmanager
async def server_process(
    data_dir: Path, *extra: str, preexec_fn: Callable[[], None] | None = None
) -> AsyncIterator[ServerProcess]:
    """`preexec_fn` runs in the child before it executes the server (to drop privileges, say)."""
    process = await trio.lowlevel.open_process(
        command("serve", "--port", "0", "--data-dir", str(data_dir), *extra),
        stderr=subprocess.PIPE,
        preexec_fn=preexec_fn,
    )
    assert process.stderr is not None
    stderr = bytearray()
    try:
        with trio.fail_after(STARTUP_BOUND):
            while (match := _ANNOUNCE.search(stderr)) is None:
                chunk = await process.stderr.receive_some()
                if not chunk:
                    raise AssertionError(f"server exited before listening: {stderr.decode(errors='replace')}")
                stderr += chunk
        async with trio.open_nursery() as nursery:

            async def drain() -> None:
                while chunk := await process.stderr.receive_some():
                    stderr.extend(chunk)

            nursery.start_soon(drain)
            yield ServerProcess(process=process, url=match.group(1).decode(), stderr=stderr)
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


async def run_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(command(*args), capture_stdout=True, capture_stderr=True, check=False)
