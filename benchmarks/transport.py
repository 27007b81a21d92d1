"""Transport benchmark: latency of session requests and cost of opening and deleting sessions.

Starts a real server in-process on 127.0.0.1:0 over a temp data dir and drives it with httpx from the
same process (so client overhead is included; read the numbers as relative). Every loop is bounded
in count and in time.
"""

import argparse
import json
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx
import trio

from benchmarks.common import HEADERS, TIME_BOUND, line, open_session
from executor_mcp.app import Running, serve
from executor_mcp.config import Settings


async def _latency(http: httpx.AsyncClient, url: str, session_id: str, method: str, count: int) -> list[float]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method})
    headers = {**HEADERS, "mcp-session-id": session_id}
    samples = []
    deadline = time.perf_counter() + TIME_BOUND
    for _ in range(count):
        started = time.perf_counter()
        response = await http.post(url, content=body, headers=headers)
        samples.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
        if started > deadline:
            break
    return samples


async def _sessions(http: httpx.AsyncClient, url: str, count: int) -> tuple[list[float], list[float]]:
    opened, deleted, ids = [], [], []
    for _ in range(count):
        started = time.perf_counter()
        ids.append(await open_session(http, url))
        opened.append(time.perf_counter() - started)
    for session_id in ids:
        started = time.perf_counter()
        response = await http.delete(url, headers={"mcp-session-id": session_id})
        deleted.append(time.perf_counter() - started)
        assert response.status_code == 200
    return opened, deleted


async def main(requests: int, sessions: int) -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(
            host="127.0.0.1", port=0, data_dir=Path(data_dir), log_level="warning", max_sessions_per_user=sessions + 1
        )
        async with trio.open_nursery() as nursery:
            running: Running = await nursery.start(partial(serve, settings))
            url = running.mcp_url
            async with httpx.AsyncClient(timeout=30) as http:
                session_id = await open_session(http, url)
                await _latency(http, url, session_id, "ping", 50)  # warm-up
                for method in ("ping", "tools/list"):
                    print(line(method, await _latency(http, url, session_id, method, requests)))
                opened, deleted = await _sessions(http, url, sessions)
                print(line("initialize", opened))
                print(line("DELETE", deleted))
            running.stop.set()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=300)
    args = parser.parse_args()
    trio.run(main, args.requests, args.sessions)
