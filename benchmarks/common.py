"""What the benchmarks share: opening a session over raw HTTP, timing a call in a bounded loop, and reading
percentiles."""

import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from executor_mcp.tools.approval import Interaction

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}
# Every measuring loop stops after this many seconds, whatever its count.
TIME_BOUND = 60.0


async def no_gate(interaction: Interaction) -> None:
    raise AssertionError(f"the benchmark's calls need no approval: {interaction.address}")


async def timed(work: Callable[[], Awaitable[Any]], repeat: int) -> list[float]:
    """Seconds per call of `work`, `repeat` times at most, and for at most `TIME_BOUND` seconds in all."""
    samples: list[float] = []
    deadline = time.monotonic() + TIME_BOUND
    while len(samples) < repeat and time.monotonic() < deadline:
        started = time.perf_counter()
        await work()
        samples.append(time.perf_counter() - started)
    return samples


def percentiles_ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000


def line(label: str, samples: list[float]) -> str:
    p50, p95 = percentiles_ms(samples)
    return f"{label:<36} p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  (n={len(samples)})"


def overhead_line(direct: list[float], through: list[float]) -> str:
    """What a call through the server adds at p50 over the same call made directly."""
    return f"call overhead at p50: {percentiles_ms(through)[0] - percentiles_ms(direct)[0]:.2f} ms"


async def open_session(http: httpx.AsyncClient, url: str) -> str:
    response = await http.post(url, content=json.dumps(INITIALIZE), headers=HEADERS)
    response.raise_for_status()
    return response.headers["mcp-session-id"]
