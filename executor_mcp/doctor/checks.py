"""The doctor's verdicts, from facts the probes gathered: no I/O here, so each rule is tested directly.

A verdict is `ok` (serve will be fine with it), `warn` (serve works, but something deserves a look) or
`fail` (serve will not work, or not correctly). Details name paths, ports, pids and modes, never the
content of a file: the doctor reads no secret.
"""

import stat
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

import attrs

# The clock is wrong if it says a time before this: no build of this code can be older (it was written in 2025).
EARLIEST_SANE = datetime(2025, 1, 1, tzinfo=UTC)


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@attrs.frozen
class Check:
    check: str
    status: Status
    detail: str


def exit_status(checks: list[Check]) -> int:
    return 1 if any(check.status is Status.FAIL for check in checks) else 0


def text_line(check: Check) -> str:
    return f"{check.status.value:<4}  {check.check:<13}  {check.detail}"


@attrs.frozen
class PathFacts:
    """What `lstat`-like probing found along a data dir's path."""

    path: Path
    is_dir: bool  # the path exists and is a directory
    exists: bool  # the path exists, whatever it is
    nearest: Path | None  # with the path missing: its nearest existing ancestor
    nearest_is_dir: bool
    write_error: str | None  # what writing a scratch file in the path (or its nearest ancestor) answered


def data_dir(facts: PathFacts) -> Check:
    if facts.exists and not facts.is_dir:
        return Check("data-dir", Status.FAIL, f"{facts.path} exists but is not a directory")
    if not facts.exists:
        if facts.nearest is None or not facts.nearest_is_dir:
            return Check("data-dir", Status.FAIL, f"{facts.path} cannot be created: {facts.nearest} is not a directory")
        if facts.write_error is not None:
            return Check(
                "data-dir", Status.FAIL, f"{facts.path} cannot be created in {facts.nearest}: {facts.write_error}"
            )
        return Check("data-dir", Status.OK, f"{facts.path} does not exist yet; serve creates it")
    if facts.write_error is not None:
        return Check("data-dir", Status.FAIL, f"cannot write in {facts.path}: {facts.write_error}")
    return Check("data-dir", Status.OK, f"{facts.path} exists and is writable")


def control_plane(path: Path, exists: bool, error: str | None, counts: dict[str, int] | None) -> Check:
    if not exists:
        return Check("control-plane", Status.OK, f"{path.name} does not exist yet; serve creates it")
    if error is not None:
        return Check("control-plane", Status.FAIL, f"{path} cannot be opened: {error}")
    shown = ", ".join(f"{count} {name}" for name, count in (counts or {}).items())
    return Check("control-plane", Status.OK, f"{path} opens and reads ({shown})")


def _exposed(mode: int) -> bool:
    return bool(mode & (stat.S_IRWXG | stat.S_IRWXO))


def permissions(data_dir: Path, dir_mode: int | None, key_mode: int | None, key_from_env: bool) -> Check:
    """`dir_mode`, `key_mode`: the permission bits, None for a missing path. Group or world access to either is
    a warning: the data dir holds sessions and their tool results, and secret.key unlocks every stored secret."""
    if dir_mode is None:
        return Check("permissions", Status.OK, f"no directory at {data_dir} yet; nothing to check")
    problems = []
    if _exposed(dir_mode):
        problems.append(f"{data_dir} is open to group or others (mode {dir_mode:04o}; chmod 700 it)")
    key = data_dir / "secret.key"
    if key_mode is not None and _exposed(key_mode):
        problems.append(f"{key} is open to group or others (mode {key_mode:04o}; chmod 600 it)")
    if problems:
        return Check("permissions", Status.WARN, "; ".join(problems))
    if key_from_env:
        where = "the master key comes from EXECUTOR_MCP_SECRET_KEY"
    elif key_mode is None:
        where = "no secret.key yet (made when first needed, mode 0600)"
    else:
        where = f"secret.key mode {key_mode:04o}"
    return Check("permissions", Status.OK, f"{data_dir} mode {dir_mode:04o}; {where}")


@attrs.frozen
class PortFacts:
    host: str
    port: int
    bind_error: str | None  # None: it could be bound (and was let go at once)
    in_use: bool  # the bind failed because something listens there
    mcp_answers: bool  # what listens answered our protected-resource metadata with an MCP resource
    holders: list[int] | None  # other processes with this data dir's control plane open; None: cannot tell here


def port(facts: PortFacts) -> Check:
    where = f"{facts.host}:{facts.port}"
    if facts.port == 0:
        return Check("port", Status.OK, "port 0: serve picks a free port and announces it")
    if facts.bind_error is None:
        return Check("port", Status.OK, f"{where} is free")
    if not facts.in_use:
        return Check("port", Status.FAIL, f"cannot bind {where}: {facts.bind_error}")
    if facts.mcp_answers and facts.holders:
        pids = ", ".join(str(pid) for pid in facts.holders)
        return Check("port", Status.OK, f"{where} is in use by the server running on this data dir (pid {pids})")
    if facts.mcp_answers and facts.holders is None:
        return Check("port", Status.WARN, f"{where} is in use by an MCP server, perhaps this data dir's")
    if facts.mcp_answers:
        return Check("port", Status.FAIL, f"{where} is in use by an MCP server on another data dir")
    return Check("port", Status.FAIL, f"{where} is in use by another program")


def sandbox(ok: bool, detail: str, seconds: float) -> Check:
    if ok:
        return Check("sandbox", Status.OK, f"a sandbox worker started and ran a program in {seconds:.2f} s")
    return Check("sandbox", Status.FAIL, detail)


def clock(wall: float, monotonic_before: float, monotonic_after: float) -> Check:
    now = datetime.fromtimestamp(wall, UTC)
    if now < EARLIEST_SANE:
        return Check(
            "clock",
            Status.FAIL,
            f"the wall clock says {now.isoformat(timespec='seconds')}, before this build could exist "
            "(tokens, links and retention would be judged wrongly)",
        )
    if monotonic_after <= monotonic_before:
        return Check("clock", Status.FAIL, "the monotonic clock did not advance across a sleep")
    return Check("clock", Status.OK, f"{now.isoformat(timespec='seconds')}; the monotonic clock advances")
