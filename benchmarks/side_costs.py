"""What the rate limiter and tracing cost on the execute path, side by side in one run:

    python -m benchmarks.side_costs [--duration 10] [--n 400] [--order plain,limits,traces]

The same code (one built-in tool call, so the limiter and a tool-call span are on its path) against three servers
started one after the other: without limits or traces, with the org's and account's tool-call limits and the org's
executions-in-flight limit set far above the load (every call and execution is counted, none refused), and with
`--otlp-endpoint` pointing at a local OTLP/HTTP receiver (`tests/otlp_receiver.py`, which keeps what it gets: five
spans a call). Each is measured by `benchmarks.mcp_bench` (`--phases c,tp --concurrency 8`); runs on a shared
machine differ by 10-20%, so run it in both orders. Then the
stores alone, in memory and on a throwaway PostgreSQL (`tests/postgres.py`), sequentially and 8 at once: one rate
check of three limits, and an execution's place taken and given back (`--order ""` measures only these). Every loop
is bounded in count and time.
"""

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

import trio

from benchmarks.mcp_bench import running_server
from executor_mcp.ratelimits.in_flight import ceilings_for
from executor_mcp.ratelimits.model import limits_for
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import InFlightStore, RateStore
from executor_mcp.storage.lmdb.in_flight import MemoryInFlight
from executor_mcp.storage.lmdb.rates import MemoryRates
from tests.otlp_receiver import start_otlp_receiver
from tests.postgres import PostgresMissing, postgres_server

CODE = "const r = await tools.executor.coreTools.policies.list({}); return r.ok;"
FAR_ABOVE = "10000000"
LIMITS = (
    "--tool-calls-per-minute-per-org", FAR_ABOVE,
    "--tool-calls-per-minute-per-account", FAR_ABOVE,
    "--max-executions-per-org", FAR_ABOVE,
)  # fmt: skip
CHECKS = 400
CONCURRENT = 8
TIME_BOUND = 60.0


async def measure_server(extra: tuple[str, ...], options: argparse.Namespace) -> dict:
    async with running_server(*extra) as server:
        done = await trio.run_process(
            [
                sys.executable, "-m", "benchmarks.mcp_bench", "--url", server.url, "--pid", str(server.pid),
                "--phases", "c,tp", "--concurrency", "8", "--duration", str(options.duration), "--n", str(options.n),
                "--code", CODE,
            ],
            capture_stdout=True,
        )  # fmt: skip
    phases = json.loads(done.stdout)["phases"]
    sequential, loaded = phases["toolsCall"], phases["throughput"]["c8"]
    return {
        "p50Ms": sequential["latencyMs"]["p50"],
        "p95Ms": sequential["latencyMs"]["p95"],
        "c8CallsPerS": loaded["callsPerS"],
        "serverCpuMsPerCall": loaded.get("serverProcessCpuMsPerCall"),
    }


def rate_check(store: RateStore) -> Callable[[int], Awaitable[object]]:
    """One check of three limits (none near), by worker."""
    return lambda worker: store.take(
        limits_for("acme", f"a{worker}", "c", org=10**7, account=10**7, per_connection=10**7)
    )


def execution_place(store: InFlightStore) -> Callable[[int], Awaitable[object]]:
    """An execution's place taken and given back (its org's and account's ceilings, none near), by worker."""

    async def enter_and_leave(worker: int) -> None:
        holder = uuid.uuid4().hex
        ceilings = ceilings_for("acme", f"a{worker}", org=10**7, account=10**7)
        assert await store.enter("bench", holder, ceilings) is None
        await store.leave(holder)

    return enter_and_leave


async def measure_store(step: Callable[[int], Awaitable[object]]) -> dict:
    samples: list[float] = []
    deadline = time.monotonic() + TIME_BOUND
    while len(samples) < CHECKS and time.monotonic() < deadline:
        started = time.perf_counter()
        await step(0)
        samples.append(time.perf_counter() - started)
    started = time.perf_counter()
    with trio.move_on_after(TIME_BOUND):
        async with trio.open_nursery() as nursery:
            for worker in range(1, CONCURRENT + 1):

                async def steps(worker: int = worker) -> None:
                    for _ in range(CHECKS // CONCURRENT):
                        await step(worker)

                nursery.start_soon(steps)
    return {
        "p50Ms": round(statistics.median(samples) * 1000, 3),
        "concurrentPerS": round(CHECKS / (time.perf_counter() - started)),
    }


async def main(options: argparse.Namespace) -> None:
    figures: dict[str, dict] = {}
    async with trio.open_nursery() as nursery:
        receiver = await start_otlp_receiver(nursery)
        configs = {"plain": (), "limits": LIMITS, "traces": ("--otlp-endpoint", receiver.endpoint)}
        for name in filter(None, options.order.split(",")):
            figures[name] = await measure_server(configs[name], options)
        nursery.cancel_scope.cancel()
    figures["memoryRateStore"] = await measure_store(rate_check(MemoryRates()))
    figures["memoryExecutionPlaces"] = await measure_store(execution_place(MemoryInFlight()))
    try:
        with postgres_server() as server:
            plane = await ControlPlane.open_postgres(server.new_database(), pool_size=CONCURRENT)
            try:
                figures["postgresRateStore"] = await measure_store(rate_check(plane.rates))
                figures["postgresExecutionPlaces"] = await measure_store(execution_place(plane.in_flight))
            finally:
                await plane.close()
    except PostgresMissing as missing:
        figures["postgresRateStore"] = {"skipped": str(missing)}
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of the 8-session phase")
    parser.add_argument("--n", type=int, default=400, help="sequential calls")
    parser.add_argument("--order", default="plain,limits,traces", help="which servers, in which order")
    trio.run(main, parser.parse_args())
