"""Scale-out: execute calls/s and latency with one instance on LMDB, one on PostgreSQL, and one or two on
PostgreSQL behind nginx, side by side in one run.

  python -m benchmarks.scale_out [--duration S] [--concurrency 8,32] [--setups 0,1,2,3] [--limits]

Every server is a real `executor-mcp serve` process; PostgreSQL and nginx are Debian's (`scripts/install-scale-out`),
started for the run the way the tests start them (`tests/postgres.py`, `tests/nginx.py`). Two workloads: `return 1`
(what the server adds around the sandbox) and one tool call (`coreTools.policies.list`: a policy decision, the
tool's read and an audit record, so the control plane's cost shows). The load comes from this process over
loopback, on the same cores as the servers: on a 2-core machine the figures say what the path costs, not what N
instances give on N machines. `--limits` runs each setup chosen twice, the second time with every rate limit and
the org's executions-in-flight limit set far above the load (each call and execution counted, none refused), so
the limiters' cost shows beside the same setup without them. Every loop is bounded by its duration and by
`MAX_CALLS_PER_SESSION`.
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import httpx
import trio

from benchmarks.common import HEADERS, INITIALIZE
from executor_mcp.config import SECRET_KEY_ENV
from executor_mcp.proxy_config import Instance, render
from tests.integration.test_cli_operations import free_port
from tests.nginx import nginx
from tests.postgres import postgres_server
from tests.process import server_process

MAX_CALLS_PER_SESSION = 100_000
FAR_ABOVE = "10000000"
LIMITS = tuple(
    part
    for flag in (
        "--tool-calls-per-minute-per-org",
        "--tool-calls-per-minute-per-account",
        "--tool-calls-per-minute-per-connection",
        "--max-executions-per-org",
    )
    for part in (flag, FAR_ABOVE)
)
WORKLOADS = {
    "return 1": "return 1;",
    "one tool call": "return (await tools.executor.coreTools.policies.list({})).ok;",
}


def _execute(code: str) -> bytes:
    body = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "execute", "arguments": {"code": code}},
    }
    return json.dumps(body).encode()


async def _session(http: httpx.AsyncClient, mcp: str) -> str:
    response = await http.post(mcp, content=json.dumps(INITIALIZE), headers=HEADERS)
    response.raise_for_status()
    session_id = response.headers["mcp-session-id"]
    notified = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await http.post(mcp, content=json.dumps(notified), headers={**HEADERS, "mcp-session-id": session_id})
    return session_id


async def _load(mcp: str, code: str, concurrency: int, duration: float) -> tuple[float, float, float, int]:
    """(calls/s, p50 ms, p95 ms, errors) of `concurrency` sessions calling `execute` for `duration` seconds."""
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=30, limits=limits) as http:
        sessions = [await _session(http, mcp) for _ in range(concurrency)]
        body = _execute(code)
        latencies: list[float] = []
        errors = 0

        async def calls(session_id: str, until: float, measured: bool) -> None:
            nonlocal errors
            headers = {**HEADERS, "mcp-session-id": session_id}
            for _ in range(MAX_CALLS_PER_SESSION):
                started = time.perf_counter()
                if started >= until:
                    return
                response = await http.post(mcp, content=body, headers=headers)
                if measured:
                    if response.status_code == 200 and b'"isError":true' not in response.content:
                        latencies.append(time.perf_counter() - started)
                    else:
                        errors += 1

        for measured, seconds in ((False, min(1.0, duration)), (True, duration)):
            until = time.perf_counter() + seconds
            async with trio.open_nursery() as nursery:
                for session_id in sessions:
                    nursery.start_soon(calls, session_id, until, measured)
    ordered = sorted(latencies) or [0.0]
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return len(latencies) / duration, statistics.median(ordered) * 1000, p95 * 1000, errors


@asynccontextmanager
async def _instances(
    root: Path, count: int, database: str | None, proxy_port: int | None, limits: tuple[str, ...] = ()
) -> AsyncIterator[str]:
    """`count` instances (on `database`, or one on LMDB), behind nginx on `proxy_port` when given, with the
    `limits` flags; the MCP URL."""
    async with AsyncExitStack() as stack:
        ports = {f"i{n}": free_port() for n in range(count)}
        servers = []
        for name, port in ports.items():
            extra = ["--port", str(port), "--log-level", "warning", "--max-sessions-per-user", "100000", *limits]
            if database is not None:
                extra += ["--database-url", database, "--instance-id", name]
            if proxy_port is not None:
                extra += ["--allowed-host", f"127.0.0.1:{proxy_port}"]
            servers.append(await stack.enter_async_context(server_process(root / name, *extra)))
        try:
            if proxy_port is None:
                yield f"http://127.0.0.1:{next(iter(ports.values()))}/mcp"
            else:
                instances = [Instance(name, f"127.0.0.1:{port}") for name, port in ports.items()]
                async with nginx(render("nginx", instances, f"127.0.0.1:{proxy_port}"), proxy_port) as base:
                    yield base + "/mcp"
        finally:
            for server in servers:
                server.terminate()
                await server.wait()


async def main(duration: float, concurrencies: list[int], chosen: list[int], with_limits: bool) -> None:
    os.environ.setdefault(SECRET_KEY_ENV, "benchmark key")
    with postgres_server() as postgres, tempfile.TemporaryDirectory(prefix="executor-mcp-bench-") as scratch:
        root = Path(scratch)
        setups = [
            ("1 instance, LMDB", 1, False, False),
            ("1 instance, PostgreSQL", 1, True, False),
            ("1 instance, PostgreSQL, nginx", 1, True, True),
            ("2 instances, PostgreSQL, nginx", 2, True, True),
        ]
        print(
            f"{'setup':<40} {'workload':<14} {'sessions':>8} {'calls/s':>9} {'p50 ms':>8} {'p95 ms':>8} {'errors':>7}"
        )
        runs = [(index, limits) for index in chosen for limits in ((), LIMITS)[: 2 if with_limits else 1]]
        for run, (index, limits) in enumerate(runs):
            label, count, on_postgres, proxied = setups[index]
            label += ", limits" if limits else ""
            database = postgres.new_database() if on_postgres else None  # each run on an empty database
            port = free_port() if proxied else None
            async with _instances(root / str(run), count, database, port, limits) as mcp:
                for workload, code in WORKLOADS.items():
                    for concurrency in concurrencies:
                        rate, p50, p95, errors = await _load(mcp, code, concurrency, duration)
                        figures = f"{concurrency:>8} {rate:>9.1f} {p50:>8.2f} {p95:>8.2f} {errors:>7}"
                        print(f"{label:<40} {workload:<14} {figures}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds per figure (after 1 s warm-up)")
    parser.add_argument("--concurrency", default="8,32", help="comma-separated session counts")
    parser.add_argument("--setups", default="0,1,2,3", help="which setups (by their order above), comma-separated")
    parser.add_argument("--limits", action="store_true", help="run each setup again with every limit set far above")
    arguments = parser.parse_args()
    trio.run(
        main,
        arguments.duration,
        [int(n) for n in arguments.concurrency.split(",")],
        [int(n) for n in arguments.setups.split(",")],
        arguments.limits,
    )
