"""Hostile or runaway code: every limit ends with a descriptive error, and everyone else keeps going."""

import os
import signal
from pathlib import Path

import pytest
import trio
from mcp import Client

from executor_mcp.sandbox.worker import ADDRESS_SPACE_LIMIT
from tests import sandbox_processes
from tests.conftest import ServerUnderTest, start_server
from tests.sdk import connect, text_of
from tests.sdk import execute as run

CPU_LIMIT = 1.5


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(
        nursery, data_dir, execution_cpu_limit=CPU_LIMIT, execution_timeout=2.0, execution_memory_limit=16
    )


@pytest.mark.slow
async def test_a_busy_loop_is_stopped_and_does_not_hold_up_other_sessions(executor: ServerUnderTest) -> None:
    latencies: list[float] = []
    looped = None

    async def loop() -> None:
        nonlocal looped
        async with connect(executor.url, mode="legacy") as (client, _):
            looped = await run(client, "while (true) {}")

    async def neighbour(ready: trio.Event) -> None:
        async with connect(executor.url, mode="legacy") as (client, _):
            await run(client, "return 0")
            ready.set()
            for _ in range(10):
                started = trio.current_time()
                result = await run(client, "return 1")
                latencies.append(trio.current_time() - started)
                assert text_of(result) == "1"
                await trio.sleep(0.05)

    ready = trio.Event()
    async with trio.open_nursery() as both:
        both.start_soon(neighbour, ready)
        await ready.wait()
        both.start_soon(loop)
    assert looped is not None
    assert looped.is_error
    assert text_of(looped) == f"Error: Execution exceeded its CPU time limit of {CPU_LIMIT:g}s"
    assert max(latencies) < 0.5, latencies


async def test_a_loop_in_a_timer_callback_is_stopped(client: Client) -> None:
    result = await run(client, "await new Promise(() => setTimeout(() => { while (true) {} }, 1));")
    assert text_of(result) == f"Error: Execution exceeded its CPU time limit of {CPU_LIMIT:g}s"


async def test_a_memory_bomb_is_stopped(client: Client) -> None:
    result = await run(client, "const hog = []; while (true) hog.push(new Array(100000).fill(7));")
    assert text_of(result) == "Error: Execution exceeded its memory limit of 16 MiB"
    assert text_of(await run(client, "return 'still serving'")) == "still serving"


async def test_deep_recursion_is_a_range_error(client: Client) -> None:
    result = await run(client, "const down = (n) => down(n + 1) + 1; return down(0);")
    assert result.is_error
    assert "RangeError: Maximum call stack size exceeded" in text_of(result)


async def test_a_huge_string_is_refused(client: Client) -> None:
    result = await run(client, "let s = 'x'; while (true) s += s; return s.length;")
    assert result.is_error
    assert text_of(result) in {
        "Error: Execution exceeded its memory limit of 16 MiB",
        "Error: InternalError: string too long (1:32)",
    }


async def test_waiting_on_nothing_fails_fast(client: Client) -> None:
    with trio.fail_after(5):
        result = await run(client, "await new Promise(() => {}); return 1;")
    assert text_of(result) == "Error: Execution is waiting on a promise that can never settle"


async def test_the_wall_clock_budget_counts_timers(client: Client) -> None:
    result = await run(client, "await new Promise((resolve) => setTimeout(resolve, 60000)); return 1;")
    assert text_of(result) == "Error: Execution timed out after 2000ms"


async def test_no_host_capabilities(client: Client) -> None:
    code = """
    const probes = {};
    for (const name of ["process", "require", "module", "std", "os", "Deno", "Bun", "print", "XMLHttpRequest",
                        "WebSocket", "__executor_invokeTool", "python"]) {
      probes[name] = typeof globalThis[name];
    }
    try { fetch("http://127.0.0.1/"); } catch (e) { probes.fetch = e.message; }
    try {
      probes.escape = typeof (function () {}).constructor("return process")();
    } catch (e) {
      probes.escape = e.name;
    }
    try { await import("os"); probes.importOs = "loaded"; } catch (e) { probes.importOs = e.name; }
    probes.globals = Object.getOwnPropertyNames(globalThis).filter((n) => !/^[A-Z]/.test(n)).sort();
    return probes;
    """
    probes = (await run(client, code)).structured_content["result"]
    for name in (
        "process",
        "require",
        "module",
        "std",
        "os",
        "Deno",
        "Bun",
        "print",
        "XMLHttpRequest",
        "WebSocket",
        "__executor_invokeTool",
        "python",
    ):
        assert probes[name] == "undefined", name
    assert probes["fetch"] == "fetch is disabled in the executor sandbox"
    assert probes["escape"] == "ReferenceError"
    assert probes["importOs"] != "loaded"
    host_globals = {"clearTimeout", "console", "emit", "fetch", "setTimeout", "tools", "__executor"}
    assert host_globals <= set(probes["globals"])
    unexpected = (
        set(probes["globals"])
        - host_globals
        - {
            "globalThis",
            "parseInt",
            "parseFloat",
            "isNaN",
            "isFinite",
            "decodeURI",
            "decodeURIComponent",
            "encodeURI",
            "encodeURIComponent",
            "escape",
            "unescape",
            "eval",
            "queueMicrotask",
            "performance",
            "atob",
            "btoa",
            "undefined",
            "NaN",
            "Infinity",
            "navigator",
        }
    )
    assert not unexpected, unexpected


def _sandbox_workers() -> list[int]:
    """Pids of the sandbox workers this test process started (the in-process server's), spawned or forked."""
    return sandbox_processes.workers(os.getpid())


async def test_a_killed_worker_fails_its_execution_and_the_pool_recovers(client: Client) -> None:
    async def kill_workers_once_busy() -> None:
        await trio.sleep(0.3)
        for pid in _sandbox_workers():
            os.kill(pid, signal.SIGKILL)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(kill_workers_once_busy)
        result = await run(client, "while (true) {}")
    assert result.is_error
    assert text_of(result).startswith("Error: Internal tool error [")
    assert text_of(await run(client, "return 'recovered'")) == "recovered"


async def test_workers_start_with_nothing_inherited(client: Client) -> None:
    """Spawned and forked workers alike, and the zygote that forks them."""

    async def overlapping() -> None:
        assert text_of(await run(client, "await new Promise((resolve) => setTimeout(resolve, 200)); return 1")) == "1"

    # Until the zygote is ready (it may still be importing), new workers are spawned; each round of more
    # executions at once than the last makes the pool start more, which the zygote forks once it can.
    with trio.fail_after(30):
        for at_once in range(1, 20):
            if any(sandbox_processes.children(zygote, sandbox_processes.ZYGOTE) for zygote in _zygotes()):
                break
            async with trio.open_nursery() as nursery:
                for _ in range(at_once):
                    nursery.start_soon(overlapping)
    workers = _sandbox_workers()
    assert workers
    for pid in [*workers, *_zygotes()]:
        assert _environment(pid) == b""
        assert os.readlink(f"/proc/{pid}/cwd") == "/"
        descriptors = {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
        assert descriptors <= {0, 1, 2}, descriptors
    for pid in workers:
        # A spare may still be importing; it confines itself before it reads its first request.
        with trio.fail_after(10):
            while (limits := _limits(pid))["Max open files"][:2] != ["16", "16"]:  # noqa: ASYNC110
                await trio.sleep(0.05)
        assert limits["Max file size"][:2] == ["0", "0"]
        assert limits["Max core file size"][:2] == ["0", "0"]
        assert limits["Max address space"][:2] == [str(ADDRESS_SPACE_LIMIT)] * 2


def _zygotes() -> list[int]:
    return sandbox_processes.zygotes(os.getpid())


def _environment(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as environ:
        return environ.read()


def _limits(pid: int) -> dict[str, list[str]]:
    with open(f"/proc/{pid}/limits") as limits:
        return {line[:26].strip(): line[26:].split() for line in limits if line[:26].strip()}
