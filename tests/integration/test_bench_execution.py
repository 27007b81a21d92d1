"""`benchmarks.execution` end to end, with tiny counts: every figure it prints, resume by replay included."""

import re
import sys
from pathlib import Path

import pytest
import trio

ROOT = Path(__file__).resolve().parents[2]
BOUND = 180
LATENCY = re.compile(r"^(?P<label>.+?)\s+p50\s+(?P<p50>[\d.]+) ms\s+p95\s+(?P<p95>[\d.]+) ms\s+\(n=(?P<n>\d+)\)$")
DIFFERENCE = re.compile(r"^(?P<label>.+?)\s+[+-][\d.]+ ms$")


@pytest.mark.slow
async def test_the_execution_bench_prints_every_figure():
    with trio.fail_after(BOUND):
        done = await trio.run_process(
            [sys.executable, "-m", "benchmarks.execution", "--requests", "3", "--resumes", "2"],
            cwd=ROOT,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    latencies, differences = {}, set()
    for text in done.stdout.decode().splitlines():
        if match := LATENCY.match(text):
            latencies[match["label"]] = (float(match["p50"]), float(match["p95"]), int(match["n"]))
        elif match := DIFFERENCE.match(text):
            differences.add(match["label"])

    replayed = {
        figure
        for counted in ("1 call", "10 calls", "100 calls")
        for figure in (
            f"resume by replay, {counted}",
            f"execute {counted}, no pause",
            f"execute {counted} to the pause",
        )
    }
    plain = {"tools/list", "execute return 6*7", "execute return 1, alone", "execute return 1, beside while(true)"}
    assert set(latencies) == replayed | plain
    for label, (p50, p95, count) in latencies.items():
        assert 0 < p50 <= p95, label
        assert count == (2 if label in replayed else 3), label
    assert differences == {
        "execute over tools/list at p50",
        "p95 raised by the runaway",
        *(f"resume over execute, {counted}, p50" for counted in ("1 call", "10 calls", "100 calls")),
    }
