"""Scale: many stored (disposed) sessions and many live ones on one server, within fd and memory limits.

Creates `--stored` sessions, lets their runtimes be disposed (short session timeout), then keeps
`--live` of them live with a request each, and reports descriptors, RSS and address space of this
process (server and client share it), and the time per operation. Bounded in count and time.
"""

import argparse
import json
import os
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx
import trio

from benchmarks.common import HEADERS, open_session
from executor_mcp.app import Running, serve
from executor_mcp.config import Settings

PING = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})


def _process() -> str:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    fds = len(os.listdir("/proc/self/fd"))
    return f"fds {fds}, RSS {status['VmRSS'].strip()}, address space {status['VmSize'].strip()}"


async def main(stored: int, live: int, concurrency: int) -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(
            port=0, data_dir=Path(data_dir), log_level="warning", session_timeout=2.0, max_sessions_per_user=stored + 1
        )
        async with trio.open_nursery() as nursery:
            running: Running = await nursery.start(partial(serve, settings))
            url = running.mcp_url
            print(f"start: {_process()}")
            ids: list[str] = []
            started = time.perf_counter()
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=concurrency)) as http:

                async def create(count: int) -> None:
                    for _ in range(count):
                        ids.append(await open_session(http, url))

                async with trio.open_nursery() as creators:
                    for worker in range(concurrency):
                        creators.start_soon(create, stored // concurrency + (worker < stored % concurrency))
                took = time.perf_counter() - started
                print(f"created {len(ids)} sessions in {took:.1f} s ({took / len(ids) * 1000:.2f} ms each)")
                print(f"all live: {_process()}")
                await trio.sleep(settings.session_timeout + 1.5)
                print(f"all disposed: {_process()}")

                started = time.perf_counter()

                async def touch(chunk: list[str]) -> None:
                    for session_id in chunk:
                        response = await http.post(url, content=PING, headers={**HEADERS, "mcp-session-id": session_id})
                        assert response.status_code == 200, response.text

                async with trio.open_nursery() as touchers:
                    chosen = ids[:live]
                    for worker in range(concurrency):
                        touchers.start_soon(touch, chosen[worker::concurrency])
                took = time.perf_counter() - started
                print(f"restored {live} sessions in {took:.1f} s ({took / live * 1000:.2f} ms each)")
                print(f"{live} live, {len(ids) - live} stored: {_process()}")
            running.stop.set()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stored", type=int, default=10_000)
    parser.add_argument("--live", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=8)
    arguments = parser.parse_args()
    trio.run(main, arguments.stored, arguments.live, arguments.concurrency)
