"""Transport benchmark: latency of session requests, of the same calls as 2026-07-28 requests (served by the
principal's workspace), and cost of opening and deleting sessions.

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

from benchmarks.common import HEADERS, TIME_BOUND, line, open_session, timed
from executor_mcp.app import Running, serve
from executor_mcp.config import Settings
from executor_mcp.protocol.stateless import META_CAPABILITIES, META_VERSION, STATELESS_VERSION


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


def _stateless(method: str, params: dict) -> tuple[str, dict[str, str]]:
    """A 2026-07-28 request: its body, and its headers (the version, method and name repeated)."""
    meta = {META_VERSION: STATELESS_VERSION, META_CAPABILITIES: {}}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}})
    headers = {**HEADERS, "mcp-protocol-version": STATELESS_VERSION, "mcp-method": method}
    if "name" in params:
        headers["mcp-name"] = params["name"]
    return body, headers


async def _era_latency(
    http: httpx.AsyncClient, url: str, body: str, headers: dict[str, str], count: int
) -> list[float]:
    async def post() -> None:
        response = await http.post(url, content=body, headers=headers)
        assert response.status_code == 200, response.text
        assert b'"error"' not in response.content, response.text

    return await timed(post, count)


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
                execute = {"name": "execute", "arguments": {"code": "return 1"}}
                legacy_call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": execute})
                legacy_headers = {**HEADERS, "mcp-session-id": session_id}
                for label, (body, headers) in (
                    ("2026 tools/list", _stateless("tools/list", {})),
                    ("2025 tools/call execute", (legacy_call, legacy_headers)),
                    ("2026 tools/call execute", _stateless("tools/call", execute)),
                ):
                    await _era_latency(http, url, body, headers, 20)  # warm-up (a workspace's first request makes it)
                    print(line(label, await _era_latency(http, url, body, headers, requests // 10)))
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
