"""Sandbox workers die with their server, also when it is SIGKILLed mid-execution and cannot clean up."""

import contextlib
import os
from pathlib import Path

import httpx
import trio

from tests.mcp_http import open_session, post
from tests.process import server_process
from tests.tools import call_body

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _workers_of(parent: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or (fields := _stat(int(entry))) is None or int(fields[1]) != parent:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if b"executor_mcp.sandbox.worker" in cmdline.read():
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"  # a zombie has stopped; only its reaping is left


def _cpu_seconds(pid: int) -> float:
    fields = _stat(pid)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


async def test_a_busy_worker_dies_when_its_server_is_killed(tmp_path: Path, http: httpx.AsyncClient) -> None:
    workers: list[int] = []
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
                    while not any(_cpu_seconds(pid) > 0.5 for pid in workers):
                        await trio.sleep(0.1)
                        workers = _workers_of(server.process.pid)
                server.kill()
                await server.process.wait()
                with trio.fail_after(5):
                    while any(_alive(pid) for pid in workers):  # noqa: ASYNC110
                        await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
    finally:
        for pid in workers:  # only if the test failed: these are the workers our server started
            if _alive(pid):
                os.kill(pid, 9)
