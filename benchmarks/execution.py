"""Execution benchmark: what `execute` adds over `tools/list`, and what a runaway session costs others.

1. p50/p95 of `tools/list` and of `execute` with `return 6*7` on the same session (raw HTTP, SSE parsed).
2. p50/p95 of `execute return 1` in one session, first alone, then while another session keeps a
   `while (true) {}` running (restarted whenever its CPU budget ends it).

Every loop is bounded in count and time; the server is in-process on 127.0.0.1:0 with a temp data dir.
"""

import argparse
import json
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx
import trio

from benchmarks.common import HEADERS, TIME_BOUND, line, open_session, percentiles_ms
from executor_mcp.app import Running, serve
from executor_mcp.config import Settings


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
                session = await open_session(http, url)
                await _timed(http, url, session, _execute("return 1"), 50)  # warm-up
                listed = await _timed(http, url, session, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, count)
                executed = await _timed(http, url, session, _execute("return 6*7"), count)
                print(line("tools/list", listed))
                print(line("execute return 6*7", executed))
                added = percentiles_ms(executed)[0] - percentiles_ms(listed)[0]
                print(f"{'execute over tools/list at p50':<36} {added:+.2f} ms")

                alone = await _timed(http, url, session, _execute("return 1"), count)
                print(line("execute return 1, alone", alone))
                hog = await open_session(http, url)
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
                print(line("execute return 1, beside while(true)", beside))
                raised = percentiles_ms(beside)[1] - percentiles_ms(alone)[1]
                print(f"{'p95 raised by the runaway':<36} {raised:+.2f} ms")
            running.stop.set()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=500)
    trio.run(main, parser.parse_args().requests)
