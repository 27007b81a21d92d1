"""Sandbox workers and the zygote die with their server, also when it is SIGKILLed and cannot clean up."""

import contextlib
import os
from pathlib import Path

import httpx
import trio

from tests import sandbox_processes
from tests.mcp_http import open_session, post
from tests.process import server_process
from tests.tools import call_body

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    fields = sandbox_processes.stat_fields(pid)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


async def _all_gone(pids: list[int]) -> None:
    with trio.fail_after(5):
        while any(sandbox_processes.alive(pid) for pid in pids):  # noqa: ASYNC110
            await trio.sleep(0.05)


def _kill_leftovers(pids: list[int]) -> None:
    for pid in pids:  # only if the test failed: these are the processes our server started
        if sandbox_processes.alive(pid):
            os.kill(pid, 9)


async def test_a_busy_worker_dies_when_its_server_is_killed(tmp_path: Path, http: httpx.AsyncClient) -> None:
    processes: list[int] = []
    try:
        async with server_process(tmp_path / "data", "--execution-cpu-limit", "300") as server:
            session_id = await open_session(http, server.url)

            async def busy() -> None:
                body = call_body(2, "execute", code="while (true) {}")
                with contextlib.suppress(httpx.HTTPError):  # the server is killed under it
                    await post(http, server.url, body, session_id)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(busy)
                with trio.fail_after(30):
                    while not any(_cpu_seconds(pid) > 0.5 for pid in processes):
                        await trio.sleep(0.1)
                        pid = server.process.pid
                        processes = sandbox_processes.workers(pid) + sandbox_processes.zygotes(pid)
                server.kill()
                await server.process.wait()
                await _all_gone(processes)
                nursery.cancel_scope.cancel()
    finally:
        _kill_leftovers(processes)


async def test_the_zygote_and_its_idle_workers_die_when_their_server_is_killed(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    processes: list[int] = []
    try:
        async with server_process(tmp_path / "data") as server:
            session_id = await open_session(http, server.url)
            pid = server.process.pid
            overlapping = "await new Promise((resolve) => setTimeout(resolve, 200)); return 1"
            # Each round has more executions at once than the last, so the pool starts more workers: forked
            # ones once the zygote is ready.
            with trio.fail_after(30):
                for at_once in range(1, 20):
                    zygotes = sandbox_processes.zygotes(pid)
                    if any(sandbox_processes.children(zygote, sandbox_processes.ZYGOTE) for zygote in zygotes):
                        break
                    async with trio.open_nursery() as nursery:
                        for request in range(at_once):
                            body = call_body(request + 2, "execute", code=overlapping)
                            nursery.start_soon(post, http, server.url, body, session_id)
            processes = sandbox_processes.workers(pid) + sandbox_processes.zygotes(pid)
            server.kill()
            await server.process.wait()
            await _all_gone(processes)
    finally:
        _kill_leftovers(processes)
