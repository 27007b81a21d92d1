"""`scripts/bench --json` end to end, with tiny counts: a real server child process, the whole document."""

import json
import math
import sys
from pathlib import Path

import pytest
import trio

ROOT = Path(__file__).resolve().parents[2]
BOUND = 180
TINY = ("--n", "5", "--warmup", "2", "--duration", "0.5", "--sessions", "5")


def positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@pytest.mark.slow
async def test_the_json_bench_prints_every_figure():
    with trio.fail_after(BOUND):
        done = await trio.run_process(
            [sys.executable, "-m", "benchmarks.mcp_bench", *TINY],
            cwd=ROOT,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    doc = json.loads(done.stdout)

    server = doc["server"]
    assert server["tools"][0] == "execute"
    assert server["sampleCall"]["structuredContent"]["result"] == 42
    for moment in ("beforeFirstRequest", "idle", "final"):
        assert all(positive(server[moment][key]) for key in ("pids", "rssMiB", "cpuS"))

    phases = doc["phases"]
    for name in ("handshake", "toolsList", "toolsCall"):
        assert phases[name]["errors"] == 0, phases[name]["firstErrors"]
        assert phases[name]["latencyMs"]["n"] == 5
        assert all(positive(phases[name]["latencyMs"][key]) for key in ("min", "p50", "p95", "p99", "max", "mean"))
        assert number(phases[name]["serverCpuS"])
    assert phases["handshake"]["deleteLatencyMs"]["n"] == 5
    assert set(phases["throughput"]) == {"c8", "c32"}
    for level in phases["throughput"].values():
        assert level["errors"] == 0, level["firstErrors"]
        assert all(positive(level[key]) for key in ("callsPerS", "serverRssMiBAfter"))
        assert positive(level["latencyMs"]["p95"])
        assert number(level["serverCpuS"])
        assert positive(level["serverProcessCpuMsPerCall"])
        assert number(level["workersCpuMsPerCall"])
    # The floor: the same hypercorn serving a trivial JSON-RPC route, measured by the same client in the run.
    assert set(phases["floor"]) == {"c8", "c32"}
    for level in phases["floor"].values():
        assert level["errors"] == 0, level["firstErrors"]
        assert positive(level["callsPerS"])
        assert positive(level["serverProcessCpuMsPerCall"])

    memory = phases["memory"]
    assert memory["sessionsOpened"] == memory["sessionsClosed"] == 5
    assert all(positive(value) for value in memory["rssMiB"].values())
    # Five sessions may fit in memory the allocator already holds: the growth is a number, not always > 0.
    assert all(number(memory[key]) for key in ("rssPerSessionKiB", "rssPerDeletedSessionKiB"))
    disposed = memory["disposed"]
    assert disposed["runtimesDisposed"] == disposed["sessionsOpened"] == 5
    assert number(disposed["rssPerDisposedSessionKiB"])
    for moment in ("idle", "final"):
        workers = memory["warmWorkers"][moment]
        assert positive(workers["serverProcessRssMiB"])
        # A pool may keep no warm worker while idle; then there is no mean to report.
        assert positive(workers["workerRssMiBMean"]) if workers["workers"] else workers["workerRssMiBMean"] is None
