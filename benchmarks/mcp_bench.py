"""The figures `../shared/bench/mcp-bench.mjs` prints, for this server, as one JSON document (or as lines).

Starts `executor-mcp serve` as a real child process on 127.0.0.1:0 over a temp data dir (as
`../shared/bench/side-by-side.sh` does), so RSS and CPU are read from /proc over the server pid and every
descendant (the sandbox workers count). Phases, in mcp-bench's order: a probe session, `mem` (sessions
opened on the idle server, then DELETEd), `a` initialize+initialized, `b` tools/list, `c` sequential
tools/call, `tp` concurrent sessions calling for `--duration` seconds each. Then `disposed`: a second
server with a short `--session-timeout`, sessions opened and left until their runtimes are disposed of.
With `--url` and `--pid` it measures a server already running instead (and skips `disposed`).
Every loop is bounded by its count and by `--max-phase` seconds.
"""

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import attrs
import trio

from benchmarks.figures import (
    DisposalReadings,
    MemoryReadings,
    ProcessReading,
    ProcessTree,
    Timing,
    descendants,
    disposal_phase,
    document,
    latency_stats,
    memory_lines,
    memory_phase,
    parse_pss_kib,
    parse_rss_kib,
    parse_stat,
    sequential_phase,
    throughput_phase,
)
from benchmarks.mcp_client import Client, Session

PHASES = ("a", "b", "c", "tp", "mem", "disposed", "floor")
_ANNOUNCE = re.compile(rb"MCP: (http://\S+/mcp)\n")
_DISPOSED = b"idle: disposing of its runtime"
STARTUP_BOUND = 30.0
STOP_BOUND = 10.0
POLL_INTERVAL = 0.1
# mcp-bench lets the server settle this long before each memory reading.
SETTLE = 1.0
# The most calls one session makes in a throughput phase, whatever the duration.
MAX_CALLS_PER_SESSION = 1_000_000
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@attrs.frozen
class Options:
    n: int = 200
    warmup: int = 10
    duration: float = 10.0
    concurrency: tuple[int, ...] = (8, 32)
    sessions: int = 200
    tool: str = "execute"
    arguments: dict = attrs.field(factory=lambda: {"code": "return 6*7"})
    timeout: float = 30.0
    max_phase: float = 120.0
    phases: frozenset[str] = frozenset(PHASES)
    dispose_after: float = 1.0
    keep_sse_connections: bool = True
    url: str | None = None
    pid: int | None = None

    def client(self, url: str) -> Client:
        return Client(url, self.timeout, keep_sse_connections=self.keep_sse_connections)

    def config(self) -> dict[str, object]:
        return {
            "n": self.n,
            "warmup": self.warmup,
            "durationS": self.duration,
            "concurrency": list(self.concurrency),
            "sessions": self.sessions,
            "tool": self.tool,
            "args": self.arguments,
            "protocol": "2025-06-18",
            "timeoutS": self.timeout,
            "maxPhaseS": self.max_phase,
            "phases": sorted(self.phases),
            "disposeAfterS": self.dispose_after,
            "client": "raw HTTP/1.1 over trio sockets, keep-alive"
            + ("" if self.keep_sse_connections else "; a connection that carried an SSE answer is closed"),
        }


# -- /proc ------------------------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path) as file:
            return file.read()
    except OSError:  # the process ended meanwhile, or the file is not ours to read
        return None


def read_tree(root: int) -> ProcessTree:
    """One pass over /proc: the parent of every process, then the readings of `root`'s tree."""
    parents, stats = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (text := _read(f"/proc/{entry}/stat")) is not None:
            stats[int(entry)] = stat = parse_stat(text)
            parents[int(entry)] = stat.ppid
    readings = []
    for pid in descendants(root, parents):
        status = _read(f"/proc/{pid}/status")
        rollup = _read(f"/proc/{pid}/smaps_rollup")
        if pid not in stats or status is None:
            continue
        readings.append(
            ProcessReading(
                pid=pid,
                rss_kib=parse_rss_kib(status) or 0,
                cpu_s=stats[pid].cpu_ticks / CLOCK_TICKS,
                pss_kib=parse_pss_kib(rollup) if rollup is not None else None,
                # Forked workers show the zygote's command line too, but they are the zygote's children.
                zygote=parents.get(pid) == root and "zygote" in (_read(f"/proc/{pid}/cmdline") or ""),
            )
        )
    return ProcessTree(tuple(readings))


# -- the server -------------------------------------------------------------------------------------


@attrs.frozen
class Server:
    url: str
    pid: int
    log: Path | None = None  # the stderr of a server this bench started

    def tree(self) -> ProcessTree:
        return read_tree(self.pid)

    def disposals(self) -> int:
        if self.log is None:
            raise RuntimeError("disposals are counted only on a server this bench started")
        return self.log.read_bytes().count(_DISPOSED)


def _serve_command(data_dir: Path, *extra: str) -> list[str]:
    """The console script installed beside this interpreter, as side-by-side.sh runs `.venv/bin/executor-mcp`."""
    script = Path(sys.executable).with_name("executor-mcp")
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", "executor_mcp"]
    return [*launcher, "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", str(data_dir), *extra]


@asynccontextmanager
async def running_server(*extra: str, command: list[str] | None = None) -> AsyncIterator[Server]:
    """A server child process (`command`, or `executor-mcp serve`); its stderr goes to a file (read for the URL
    and the disposals)."""
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        data_dir, log = Path(scratch) / "data", Path(scratch) / "stderr.log"
        with log.open("wb") as stderr:
            process = await trio.lowlevel.open_process(
                command or _serve_command(data_dir, "--max-sessions-per-user", "100000", *extra),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        try:
            match = None
            for _ in range(math.ceil(STARTUP_BOUND / POLL_INTERVAL)):
                if (match := _ANNOUNCE.search(log.read_bytes())) is not None or process.returncode is not None:
                    break
                await trio.sleep(POLL_INTERVAL)
            if match is None:
                raise RuntimeError(f"the server did not start listening: {log.read_text(errors='replace')}")
            yield Server(url=match.group(1).decode(), pid=process.pid, log=log)
        finally:
            with trio.CancelScope(shield=True):
                process.terminate()
                with trio.move_on_after(STOP_BOUND):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()


@asynccontextmanager
async def _attached(url: str, pid: int | None) -> AsyncIterator[Server]:
    """A server someone else started (for a side-by-side with mcp-bench on one process); loopback only."""
    host = urlsplit(url).hostname or ""
    if host != "localhost" and not (host.startswith("127.") or host == "::1"):
        raise SystemExit(f"refusing non-loopback target {host!r}")
    if pid is None:
        raise SystemExit("--url needs --pid: the figures come from /proc")
    yield Server(url=url, pid=pid)


# -- phases -----------------------------------------------------------------------------------------


def _error(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


async def _timed_loop(
    count: int, max_phase: float, step: Callable[[], Awaitable[object]], after: Callable[[], Awaitable[None]] | None
) -> Timing:
    """mcp-bench's `sequential`: `count` timed steps (each followed by an untimed `after`), within `max_phase`."""
    latencies, errors = [], []
    started, cpu_started = time.perf_counter(), time.process_time()
    while len(latencies) + len(errors) < count and time.perf_counter() - started < max_phase:
        begun = time.perf_counter()
        try:
            await step()
            latencies.append((time.perf_counter() - begun) * 1000)
        except Exception as exc:
            errors.append(_error(exc))
        if after is not None:
            await after()
    return Timing(tuple(latencies), tuple(errors), time.perf_counter() - started, time.process_time() - cpu_started)


async def _warm_up(options: Options, step: Callable[[], Awaitable[object]]) -> None:
    """The unmeasured calls before a phase: `--warmup` of them, and never longer than `--max-phase`."""
    with trio.move_on_after(options.max_phase):
        for _ in range(options.warmup):
            await step()


async def _sequential(server: Server, options: Options, step, after=None) -> dict[str, object]:
    before = server.tree()
    timing = await _timed_loop(options.n, options.max_phase, step, after)
    return sequential_phase(timing, options.n, before, server.tree())


async def probe(client: Client, options: Options) -> dict[str, object]:
    session = Session(client)
    initialized = await session.open()
    listed = await session.rpc("tools/list", {})
    server: dict[str, object] = {
        "serverInfo": initialized.get("serverInfo"),
        "protocolVersion": initialized.get("protocolVersion"),
        "capabilities": initialized.get("capabilities"),
        "tools": [tool["name"] for tool in listed.get("tools", [])],
    }
    try:
        server["sampleCall"] = await session.call(options.tool, options.arguments)
    except Exception as exc:
        server["sampleCallError"] = _error(exc)
    await session.close()
    return server


async def memory(server: Server, client: Client, options: Options) -> dict[str, object]:
    before_open = server.tree()
    held, errors = [], []
    started = time.perf_counter()
    while len(held) + len(errors) < options.sessions and time.perf_counter() - started < options.max_phase:
        session = Session(client)
        try:
            await session.open()
            held.append(session)
        except Exception as exc:
            errors.append(_error(exc))
    open_wall = time.perf_counter() - started
    await trio.sleep(SETTLE)
    with_open = server.tree()
    closed, closing = 0, time.perf_counter()
    for session in held:
        if time.perf_counter() - closing > options.max_phase:
            break
        try:
            await session.close()
            closed += 1
        except Exception:  # counted: sessionsClosed falls short of sessionsOpened
            pass
    await trio.sleep(SETTLE)
    readings = MemoryReadings(len(held), tuple(errors), open_wall, closed, before_open, with_open, server.tree())
    return memory_phase(readings)


async def handshake(server: Server, client: Client, options: Options) -> dict[str, object]:
    async def warm() -> None:
        session = Session(client)
        await session.open()
        await session.close()

    await _warm_up(options, warm)
    opened: list[Session] = []
    deletes: list[float] = []

    async def step() -> None:
        session = Session(client)
        await session.open()
        opened.append(session)

    async def delete() -> None:
        while opened:
            begun = time.perf_counter()
            try:
                await opened.pop().close()
                deletes.append((time.perf_counter() - begun) * 1000)
            except Exception:  # mcp-bench ignores a failed DELETE too; its latency is just not counted
                pass

    phase = await _sequential(server, options, step, delete)
    phase["deleteLatencyMs"] = latency_stats(deletes)
    phase["note"] = (
        "timed: POST initialize + POST notifications/initialized on a fresh session; each session is then "
        "DELETEd (untimed, reported as deleteLatencyMs; wallS and serverCpuS include the DELETEs)"
    )
    return phase


async def tools_list(server: Server, client: Client, options: Options) -> dict[str, object]:
    session = Session(client)
    await session.open()
    await _warm_up(options, lambda: session.rpc("tools/list", {}))
    phase = await _sequential(server, options, lambda: session.rpc("tools/list", {}))
    await session.close()
    return phase


async def tools_call(server: Server, client: Client, options: Options) -> dict[str, object]:
    session = Session(client)
    await session.open()
    await _warm_up(options, lambda: session.call(options.tool, options.arguments))
    phase = await _sequential(server, options, lambda: session.call(options.tool, options.arguments))
    await session.close()
    return phase


async def throughput(server: Server, client: Client, options: Options, concurrency: int) -> dict[str, object]:
    sessions = [Session(client) for _ in range(concurrency)]
    for session in sessions:
        await session.open()

    async def warm(session: Session) -> None:
        with contextlib.suppress(Exception):  # a failing warm-up call shows again, counted, in the measured loop
            await session.call(options.tool, options.arguments)

    async with trio.open_nursery() as nursery:
        for session in sessions:
            nursery.start_soon(warm, session)
    latencies: list[float] = []
    errors: list[str] = []
    before, cpu_started = server.tree(), time.process_time()
    started = time.perf_counter()
    deadline = started + options.duration
    hard_stop = started + min(options.max_phase, options.duration + options.timeout)

    async def calls(session: Session) -> None:
        for _ in range(MAX_CALLS_PER_SESSION):
            if (now := time.perf_counter()) >= deadline or now >= hard_stop:
                return
            try:
                await session.call(options.tool, options.arguments)
                latencies.append((time.perf_counter() - now) * 1000)
            except Exception as exc:
                errors.append(_error(exc))

    with trio.move_on_after(hard_stop - started + options.timeout):
        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(calls, session)
    timing = Timing(tuple(latencies), tuple(errors), time.perf_counter() - started, time.process_time() - cpu_started)
    after = server.tree()
    for session in sessions:
        with contextlib.suppress(Exception):  # the session ends with the server anyway
            await session.close()
    return throughput_phase(concurrency, timing, before, after)


async def floor(options: Options) -> dict[str, object]:
    """The throughput phases against `benchmarks.floor` (the same hypercorn, a trivial JSON route), and the
    execute throughput as a share of it."""
    measured: dict[str, object] = {}
    async with running_server(command=[sys.executable, "-m", "benchmarks.floor"]) as server:
        client = options.client(server.url)
        try:
            for concurrency in options.concurrency:
                phase = await throughput(server, client, options, concurrency)
                measured[f"c{concurrency}"] = phase
                _progress(f"floor c={concurrency}: {phase['callsPerS']}/s, errors {phase['errors']}")
        finally:
            await client.aclose()
    return measured


async def disposal(options: Options) -> dict[str, object]:
    """Runtimes disposed of by idleness, on a second server whose `--session-timeout` is short."""
    async with running_server("--session-timeout", str(options.dispose_after)) as server:
        client = options.client(server.url)
        try:
            warm = Session(client)  # the first session pays one-time costs; they are not a session's
            await warm.open()
            await _await_disposals(server, 1, options)
            await trio.sleep(SETTLE)
            before_open = server.tree()
            opened = 0
            started = time.perf_counter()
            while opened < options.sessions and time.perf_counter() - started < options.max_phase:
                await Session(client).open()
                opened += 1
            waiting = time.perf_counter()
            disposed = await _await_disposals(server, 1 + opened, options) - 1
            waited = time.perf_counter() - waiting
            await trio.sleep(SETTLE)
            readings = DisposalReadings(
                session_timeout_s=options.dispose_after,
                opened=opened,
                disposed=disposed,
                wait_s=waited,
                before_open=before_open,
                after_disposal=server.tree(),
            )
        finally:
            await client.aclose()
    return disposal_phase(readings)


async def _await_disposals(server: Server, expected: int, options: Options) -> int:
    """How many runtimes the server logged as disposed of, once `expected` are, or at `--max-phase`."""
    for _ in range(math.ceil((options.dispose_after + options.max_phase) / POLL_INTERVAL)):
        if server.disposals() >= expected:
            break
        await trio.sleep(POLL_INTERVAL)
    return server.disposals()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _host() -> dict[str, object]:
    return {
        "cpus": os.cpu_count(),
        "loadavg": [round(load, 2) for load in os.getloadavg()],
        "python": platform.python_version(),
        "platform": f"{sys.platform}-{platform.machine()}",
    }


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def bench(options: Options) -> dict[str, object]:
    started_at = _now()
    phases: dict[str, object] = {}
    target = _attached(options.url, options.pid) if options.url else running_server()
    async with target as server:
        client = options.client(server.url)
        try:
            facts: dict[str, object] = {"beforeFirstRequest": server.tree().snapshot()}
            facts |= await probe(client, options)
            idle = server.tree()
            facts["idle"] = idle.snapshot()
            if "mem" in options.phases and options.sessions > 0:
                phases["memory"] = await memory(server, client, options)
                _progress(f"mem: {phases['memory']['sessionsOpened']} sessions, rss {phases['memory']['rssMiB']}")
            if "a" in options.phases:
                phases["handshake"] = await handshake(server, client, options)
                _progress(f"a) initialize+initialized: p50 {phases['handshake']['latencyMs'].get('p50')} ms")
            if "b" in options.phases:
                phases["toolsList"] = await tools_list(server, client, options)
                _progress(f"b) tools/list: p50 {phases['toolsList']['latencyMs'].get('p50')} ms")
            if "c" in options.phases:
                phases["toolsCall"] = await tools_call(server, client, options)
                _progress(f"c) tools/call {options.tool}: p50 {phases['toolsCall']['latencyMs'].get('p50')} ms")
            if "tp" in options.phases:
                phases["throughput"] = {}
                for concurrency in options.concurrency:
                    phase = await throughput(server, client, options, concurrency)
                    phases["throughput"][f"c{concurrency}"] = phase
                    _progress(f"tp c={concurrency}: {phase['callsPerS']}/s, errors {phase['errors']}")
            final = server.tree()
            facts["final"] = final.snapshot()
        finally:
            await client.aclose()
    if "memory" in phases:
        phases["memory"]["warmWorkers"] = {"idle": idle.workers(), "final": final.workers()}
    if "floor" in options.phases and "tp" in options.phases:
        phases["floor"] = await floor(options)
    if "disposed" in options.phases and options.sessions > 0 and not options.url:
        phases.setdefault("memory", {})["disposed"] = await disposal(options)
        _progress(f"disposed: {phases['memory']['disposed']['rssPerDisposedSessionKiB']} KiB per session")
    server_keys = ("beforeFirstRequest", "serverInfo", "protocolVersion", "capabilities", "tools")
    ordered = {key: facts[key] for key in server_keys} | {
        key: facts[key] for key in ("sampleCall", "sampleCallError") if key in facts
    }
    ordered |= {"idle": facts["idle"], "final": facts["final"]}
    return document(
        url=server.url,
        started_at=started_at,
        finished_at=_now(),
        config=options.config(),
        host=_host(),
        server=ordered,
        phases=phases,
    )


def _concurrency(text: str) -> tuple[int, ...]:
    levels = tuple(int(part) for part in text.split(",") if part.strip())
    if any(not 0 < level <= 1024 for level in levels):
        raise argparse.ArgumentTypeError("each concurrency is between 1 and 1024")
    return levels


def _phases(text: str) -> frozenset[str]:
    chosen = frozenset(part.strip() for part in text.split(",") if part.strip())
    if unknown := chosen - set(PHASES):
        raise argparse.ArgumentTypeError(f"unknown phases {sorted(unknown)}; known: {','.join(PHASES)}")
    return chosen


_DEFAULTS = Options()


def parse_options(argv: list[str]) -> tuple[Options, bool]:
    parser = argparse.ArgumentParser(prog="scripts/bench --json", description=__doc__)
    parser.add_argument("--n", type=int, default=_DEFAULTS.n, help="samples for each sequential phase")
    parser.add_argument("--warmup", type=int, default=_DEFAULTS.warmup, help="unmeasured calls before each phase")
    parser.add_argument("--duration", type=float, default=_DEFAULTS.duration, help="seconds of each concurrency phase")
    parser.add_argument("--concurrency", type=_concurrency, default=_DEFAULTS.concurrency, help="e.g. 8,32")
    parser.add_argument("--sessions", type=int, default=_DEFAULTS.sessions, help="sessions of the memory phases")
    parser.add_argument("--tool", default=_DEFAULTS.tool)
    parser.add_argument("--code", default="return 6*7", help="code passed as {code} to the tool")
    parser.add_argument("--args", type=json.loads, help="raw JSON arguments instead of {code}")
    parser.add_argument("--timeout", type=float, default=_DEFAULTS.timeout, help="seconds per request")
    parser.add_argument("--max-phase", type=float, default=_DEFAULTS.max_phase, help="seconds any one phase may take")
    parser.add_argument("--phases", type=_phases, default=frozenset(PHASES), help=",".join(PHASES))
    parser.add_argument(
        "--dispose-after", type=float, default=_DEFAULTS.dispose_after, help="--session-timeout of the second server"
    )
    parser.add_argument(
        "--close-sse-connections",
        action="store_true",
        help="close a connection after each SSE answer, to show what a new connection per call costs",
    )
    parser.add_argument("--url", help="an MCP URL on this machine to measure instead of starting a server")
    parser.add_argument("--pid", type=int, help="with --url: the server's pid (its tree's RSS and CPU are read)")
    parser.add_argument("--lines", action="store_true", help="print the memory figures as lines, not JSON")
    args = parser.parse_args(argv)
    if not 1 <= args.n <= 100_000 or not 0 <= args.warmup <= 10_000 or not 0 <= args.sessions <= 10_000:
        parser.error("--n is 1..100000, --warmup 0..10000, --sessions 0..10000")
    if not 0.5 <= args.duration <= 600 or not 0 < args.timeout <= 600 or not 0 < args.max_phase <= 3600:
        parser.error("--duration is 0.5..600 s, --timeout up to 600 s, --max-phase up to 3600 s")
    if not 0 < args.dispose_after <= 60:
        parser.error("--dispose-after is up to 60 s")
    options = Options(
        n=args.n,
        warmup=args.warmup,
        duration=args.duration,
        concurrency=args.concurrency,
        sessions=args.sessions,
        tool=args.tool,
        arguments=args.args if args.args is not None else {"code": args.code},
        timeout=args.timeout,
        max_phase=args.max_phase,
        phases=args.phases,
        dispose_after=args.dispose_after,
        keep_sse_connections=not args.close_sse_connections,
        url=args.url,
        pid=args.pid,
    )
    return options, args.lines


def main(argv: list[str]) -> None:
    options, lines = parse_options(argv)
    result = trio.run(bench, options)
    if lines:
        print("\n".join(memory_lines(result)))
    else:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
