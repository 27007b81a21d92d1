"""Execution benchmark: what `execute` adds over `tools/list`, and what a runaway session costs others.

1. p50/p95 of `tools/list` and of `execute` with `return 6*7` on the same session (raw HTTP, SSE parsed).
2. p50/p95 of `execute return 1` in one session, first alone, then while another session keeps a
   `while (true) {}` running (restarted whenever its CPU budget ends it).

Every loop is bounded in count and time; the server is in-process on 127.0.0.1:0 with a temp data dir.
"""

import argparse
import json
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx
import trio

from executor_mcp.app import Running, serve
from executor_mcp.config import Settings

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}
TIME_BOUND = 60.0


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000


def _line(label: str, samples: list[float]) -> str:
    p50, p95 = _ms(samples)
    return f"{label:<34} p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  (n={len(samples)})"


async def _open(http: httpx.AsyncClient, url: str) -> str:
    response = await http.post(url, content=json.dumps(INITIALIZE), headers=HEADERS)
    response.raise_for_status()
    return response.headers["mcp-session-id"]


async def _timed(http: httpx.AsyncClient, url: str, session_id: str, body: dict, count: int) -> list[float]:
    payload, headers = json.dumps(body), {**HEADERS, "mcp-session-id": session_id}
    samples: list[float] = []
    deadline = time.perf_counter() + TIME_BOUND
    while len(samples) < count and time.perf_counter() < deadline:
        started = time.perf_counter()
        response = await http.post(url, content=payload, headers=headers)
        samples.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
        assert '"isError":true' not in response.text, response.text
    return samples


def _execute(code: str) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "execute", "arguments": {"code": code}},
    }


async def main(count: int) -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(
            host="127.0.0.1", port=0, data_dir=Path(data_dir), log_level="warning", execution_cpu_limit=5.0
        )
        async with trio.open_nursery() as nursery:
            running: Running = await nursery.start(partial(serve, settings))
            url = running.mcp_url
            async with httpx.AsyncClient(timeout=30) as http:
                session = await _open(http, url)
                await _timed(http, url, session, _execute("return 1"), 50)  # warm-up
                listed = await _timed(http, url, session, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, count)
                executed = await _timed(http, url, session, _execute("return 6*7"), count)
                print(_line("tools/list", listed))
                print(_line("execute return 6*7", executed))
                print(f"{'execute over tools/list at p50':<34} {(_ms(executed)[0] - _ms(listed)[0]):+.2f} ms")

                alone = await _timed(http, url, session, _execute("return 1"), count)
                print(_line("execute return 1, alone", alone))
                hog = await _open(http, url)
                stop = trio.Event()

                async def run_away() -> None:
                    async with httpx.AsyncClient(timeout=30) as own:
                        while not stop.is_set():
                            await own.post(
                                url,
                                content=json.dumps(_execute("while (true) {}")),
                                headers={**HEADERS, "mcp-session-id": hog},
                            )

                nursery.start_soon(run_away)
                await trio.sleep(0.5)
                beside = await _timed(http, url, session, _execute("return 1"), count)
                stop.set()
                print(_line("execute return 1, beside while(true)", beside))
                print(f"{'p95 raised by the runaway':<34} {(_ms(beside)[1] - _ms(alone)[1]):+.2f} ms")
            running.stop.set()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=500)
    trio.run(main, parser.parse_args().requests)
