"""The benchmark's figures, computed without I/O: latency statistics, /proc parsing, the JSON document.

The document has the shape `../shared/bench/mcp-bench.mjs` prints (same keys, same rounding, same
percentile rule), so one table script reads both; what this bench adds (client CPU, memory per disposed
session, per warm worker) comes as extra keys beside the ones mcp-bench has.
"""

import math
import re
from collections.abc import Iterable, Mapping, Sequence

import attrs

_VM_RSS = re.compile(r"^VmRSS:\s+(\d+)\s+kB", re.MULTILINE)
_PSS = re.compile(r"^Pss:\s+(\d+)\s+kB", re.MULTILINE)
# How many distinct error messages a phase keeps, as mcp-bench does.
FIRST_ERRORS = 3


def latency_stats(samples_ms: Sequence[float]) -> dict[str, float | int]:
    """mcp-bench's `stats`: nearest-rank percentiles (the ceil(p*n)-th smallest), rounded to 3 decimals."""
    if not samples_ms:
        return {"n": 0}
    ordered = sorted(samples_ms)
    count = len(ordered)

    def rank(p: float) -> float:
        return ordered[min(count - 1, max(0, math.ceil(p * count) - 1))]

    return {
        "n": count,
        "min": round(ordered[0], 3),
        "p50": round(rank(0.5), 3),
        "p95": round(rank(0.95), 3),
        "p99": round(rank(0.99), 3),
        "max": round(ordered[-1], 3),
        "mean": round(sum(ordered) / count, 3),
    }


def first_errors(errors: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(errors))[:FIRST_ERRORS]


# -- /proc ------------------------------------------------------------------------------------------


@attrs.frozen
class Stat:
    """What this bench needs from /proc/PID/stat."""

    ppid: int
    cpu_ticks: int


def parse_stat(text: str) -> Stat:
    """The command name may hold spaces and parentheses, so fields are counted from the last ')'."""
    fields = text[text.rindex(")") + 2 :].split(" ")
    # fields[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
    return Stat(ppid=int(fields[1]), cpu_ticks=int(fields[11]) + int(fields[12]))


def parse_rss_kib(status: str) -> int | None:
    match = _VM_RSS.search(status)
    return int(match.group(1)) if match else None


def parse_pss_kib(smaps_rollup: str) -> int | None:
    match = _PSS.search(smaps_rollup)
    return int(match.group(1)) if match else None


def descendants(root: int, parents: Mapping[int, int]) -> list[int]:
    """`root` first, then every process whose parent chain reaches it (sandbox workers count)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, pending = [root], [root]
    while pending and len(found) <= len(parents):  # a pid cycle cannot loop: each pid is found once
        for child in sorted(children.get(pending.pop(), ())):
            if child not in found:
                found.append(child)
                pending.append(child)
    return found


@attrs.frozen
class ProcessReading:
    pid: int
    rss_kib: int
    cpu_s: float
    pss_kib: int | None = None
    zygote: bool = False  # the process sandbox workers are forked from: no worker itself


@attrs.frozen
class ProcessTree:
    """One reading of the server process (first) and its descendants."""

    readings: tuple[ProcessReading, ...]

    @property
    def rss_kib(self) -> int:
        return sum(reading.rss_kib for reading in self.readings)

    @property
    def cpu_s(self) -> float:
        return sum(reading.cpu_s for reading in self.readings)

    def snapshot(self) -> dict[str, float | int]:
        """mcp-bench's `procSnapshot`."""
        return {"pids": len(self.readings), "rssMiB": round(self.rss_kib / 1024, 1), "cpuS": round(self.cpu_s, 2)}

    def workers(self) -> dict[str, float | int | None]:
        """The server process, the zygote, and the sandbox workers (every other descendant)."""
        server = self.readings[0]
        zygotes = [reading for reading in self.readings[1:] if reading.zygote]
        workers = [reading for reading in self.readings[1:] if not reading.zygote]
        pss = [reading.pss_kib for reading in workers]
        known_pss = [value for value in pss if value is not None]
        return {
            "serverProcessRssMiB": round(server.rss_kib / 1024, 1),
            "zygoteRssMiB": round(sum(r.rss_kib for r in zygotes) / 1024, 1) if zygotes else None,
            "workers": len(workers),
            "workerRssMiBMean": round(sum(r.rss_kib for r in workers) / len(workers) / 1024, 1) if workers else None,
            "workerRssMiBTotal": round(sum(r.rss_kib for r in workers) / 1024, 1),
            "workerPssMiBMean": (
                round(sum(known_pss) / len(known_pss) / 1024, 1) if known_pss and len(known_pss) == len(pss) else None
            ),
        }


def per_session_kib(before: ProcessTree, after: ProcessTree, sessions: int) -> float:
    """From unrounded KiB (mcp-bench divides MiB rounded to 0.1, i.e. ~100 KiB of noise over the count)."""
    return round((after.rss_kib - before.rss_kib) / max(1, sessions), 1)


# -- phases -----------------------------------------------------------------------------------------


@attrs.frozen
class Timing:
    """What a measured loop saw: latencies of the calls that worked, the errors of the others."""

    latencies_ms: tuple[float, ...]
    errors: tuple[str, ...]
    wall_s: float
    client_cpu_s: float


def _cpu_delta(before: ProcessTree | None, after: ProcessTree | None) -> dict[str, float]:
    return {"serverCpuS": round(after.cpu_s - before.cpu_s, 2)} if before and after else {}


def _cpu_per_call(before: ProcessTree | None, after: ProcessTree | None, calls: int) -> dict[str, float]:
    """CPU ms per call of the server process itself and of its descendants (the zygote and the sandbox workers):
    a process started in between counts whole, one that ended in between takes its CPU with it."""
    if not before or not after or not calls or not before.readings or not after.readings:
        return {}
    server_pid = after.readings[0].pid
    earlier = {reading.pid: reading.cpu_s for reading in before.readings}
    server = after.readings[0].cpu_s - earlier.get(server_pid, after.readings[0].cpu_s)
    workers = sum(reading.cpu_s - earlier.get(reading.pid, 0.0) for reading in after.readings[1:])
    return {
        "serverProcessCpuMsPerCall": round(server * 1000 / calls, 3),
        "workersCpuMsPerCall": round(workers * 1000 / calls, 3),
    }


def sequential_phase(
    timing: Timing, planned: int, before: ProcessTree | None, after: ProcessTree | None
) -> dict[str, object]:
    return {
        "latencyMs": latency_stats(timing.latencies_ms),
        "errors": len(timing.errors),
        "firstErrors": first_errors(timing.errors),
        "wallS": round(timing.wall_s, 2),
        "truncatedByMaxPhase": len(timing.latencies_ms) + len(timing.errors) < planned,
        **_cpu_delta(before, after),
        "clientCpuS": round(timing.client_cpu_s, 2),
    }


def throughput_phase(
    concurrency: int, timing: Timing, before: ProcessTree | None, after: ProcessTree | None
) -> dict[str, object]:
    ok = len(timing.latencies_ms)
    return {
        "concurrency": concurrency,
        "wallS": round(timing.wall_s, 2),
        "ok": ok,
        "errors": len(timing.errors),
        "firstErrors": first_errors(timing.errors),
        "callsPerS": round(ok / timing.wall_s, 1) if timing.wall_s > 0 else 0.0,
        "latencyMs": latency_stats(timing.latencies_ms),
        **_cpu_delta(before, after),
        **_cpu_per_call(before, after, ok),
        **({"serverRssMiBAfter": round(after.rss_kib / 1024, 1)} if after else {}),
        "clientCpuS": round(timing.client_cpu_s, 2),
        "clientCpuMsPerCall": round(timing.client_cpu_s * 1000 / ok, 3) if ok else None,
    }


@attrs.frozen
class MemoryReadings:
    """The memory phase: N sessions opened on an idle server, then DELETEd."""

    opened: int
    errors: tuple[str, ...]
    open_wall_s: float
    closed: int
    before_open: ProcessTree
    with_sessions_open: ProcessTree
    after_delete: ProcessTree


def memory_phase(readings: MemoryReadings) -> dict[str, object]:
    return {
        "sessionsOpened": readings.opened,
        "openErrors": len(readings.errors),
        "firstErrors": first_errors(readings.errors),
        "openWallS": round(readings.open_wall_s, 2),
        "sessionsClosed": readings.closed,
        "rssMiB": {
            "beforeOpen": readings.before_open.snapshot()["rssMiB"],
            "withSessionsOpen": readings.with_sessions_open.snapshot()["rssMiB"],
            "afterDelete": readings.after_delete.snapshot()["rssMiB"],
        },
        "rssPerSessionKiB": per_session_kib(readings.before_open, readings.with_sessions_open, readings.opened),
        "rssPerDeletedSessionKiB": per_session_kib(readings.before_open, readings.after_delete, readings.opened),
    }


@attrs.frozen
class DisposalReadings:
    """A second server with a short `--session-timeout`: N sessions opened, then left until every runtime
    was disposed of (the stored sessions stay valid; only the runtimes are gone)."""

    session_timeout_s: float
    opened: int
    disposed: int
    wait_s: float
    before_open: ProcessTree
    after_disposal: ProcessTree


def disposal_phase(readings: DisposalReadings) -> dict[str, object]:
    server_only_kib = readings.after_disposal.readings[0].rss_kib - readings.before_open.readings[0].rss_kib
    return {
        "sessionTimeoutS": readings.session_timeout_s,
        "sessionsOpened": readings.opened,
        "runtimesDisposed": readings.disposed,
        "waitS": round(readings.wait_s, 2),
        "rssMiB": {
            "beforeOpen": readings.before_open.snapshot()["rssMiB"],
            "afterDisposal": readings.after_disposal.snapshot()["rssMiB"],
        },
        "rssPerDisposedSessionKiB": per_session_kib(readings.before_open, readings.after_disposal, readings.opened),
        "serverProcessRssPerDisposedSessionKiB": round(server_only_kib / max(1, readings.opened), 1),
    }


def document(
    *,
    url: str,
    started_at: str,
    finished_at: str,
    config: Mapping[str, object],
    host: Mapping[str, object],
    server: Mapping[str, object],
    phases: Mapping[str, object],
) -> dict[str, object]:
    """The whole JSON document, keys in mcp-bench's order."""
    return {
        "tool": "scripts/bench",
        "url": url,
        "auth": "none",
        "startedAt": started_at,
        "config": dict(config),
        "host": dict(host),
        "server": dict(server),
        "phases": dict(phases),
        "phaseOrder": "probe (1 session: initialize, tools/list, 1 call, DELETE) -> mem -> a -> b -> c -> tp "
        "-> disposed (a second server)",
        "finishedAt": finished_at,
    }


# -- the human-readable lines -----------------------------------------------------------------------


def _dig(tree: object, *path: str) -> object:
    for key in path:
        tree = tree.get(key) if isinstance(tree, Mapping) else None
    return tree


def memory_lines(doc: Mapping[str, object]) -> list[str]:
    """The memory figures of a document as the lines `scripts/bench` prints without `--json`."""
    rows: list[tuple[str, object, str]] = [
        ("RSS per live session", _dig(doc, "phases", "memory", "rssPerSessionKiB"), "KiB"),
        ("RSS per deleted session", _dig(doc, "phases", "memory", "rssPerDeletedSessionKiB"), "KiB"),
        ("RSS per disposed session", _dig(doc, "phases", "memory", "disposed", "rssPerDisposedSessionKiB"), "KiB"),
        ("idle RSS, server and workers", _dig(doc, "server", "idle", "rssMiB"), "MiB"),
    ]
    for moment in ("idle", "final"):
        workers = _dig(doc, "phases", "memory", "warmWorkers", moment)
        if isinstance(workers, Mapping):
            rows.append((f"{moment}: server process RSS", workers["serverProcessRssMiB"], "MiB"))
            rows.append((f"{moment}: warm workers", workers["workers"], ""))
            rows.append((f"{moment}: RSS per warm worker (mean)", workers["workerRssMiBMean"], "MiB"))
            rows.append((f"{moment}: PSS per warm worker (mean)", workers["workerPssMiBMean"], "MiB"))
    return [f"{label:<36} {value} {unit}".rstrip() for label, value, unit in rows if value is not None]
