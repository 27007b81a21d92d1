"""The floor under the throughput figures: what the same hypercorn (its trio worker, as `executor-mcp serve` runs
it) serves on this machine for a trivial JSON-RPC route, measured by the same client in the same run.

    python -m benchmarks.floor        (announces `MCP: http://127.0.0.1:<port>/mcp` on stderr, as the server does)

The app is `benchmarks.mcp_source`'s smallest Streamable HTTP server: every POST answered at once in JSON (a
`tools/call` with a text echo), a notification 202; it builds nothing, stores nothing and runs no code. So a phase
against it costs what the HTTP stack and the client cost per call, and nothing of ours: `benchmarks.mcp_bench
--phases floor` reads the execute throughput as a share of it.
"""

import sys

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from benchmarks.mcp_source import raw_mcp


async def main() -> None:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = config.errorlog = None

    async def announced(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        await serve(raw_mcp, config, task_status=task_status)  # type: ignore[arg-type]

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(announced)
        sys.stderr.write(f"MCP: {binds[0]}/mcp\n")
        sys.stderr.flush()


if __name__ == "__main__":
    trio.run(main)
