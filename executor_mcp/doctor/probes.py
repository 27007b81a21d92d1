"""What the doctor observes, each probe bounded: a scratch file is removed at once, the port is let go at once, the
sandbox worker is killed with its pool, and a running server is only asked what any client may ask.

A missing data dir stays missing (writing is tried in its nearest existing ancestor); an existing control plane is
opened as the admin commands open it (which is safe beside a running server, and leaves LMDB's lock file).
"""

import errno
import os
import socket
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from executor_mcp.config import SECRET_KEY_ENV, Settings
from executor_mcp.doctor import checks
from executor_mcp.doctor.checks import Check, PathFacts, PortFacts
from executor_mcp.execution.engine import Engine
from executor_mcp.execution.limits import Limits
from executor_mcp.sandbox.pool import WorkerPool
from executor_mcp.sandbox.processes import worker_command
from executor_mcp.storage import ownership
from executor_mcp.storage.control import CONTROL_FILE, ControlPlane

SANDBOX_BOUND = 30.0  # seconds a worker gets to start and run `return 1 + 1`; a cold interpreter takes well under 1
PROBE_BOUND = 3.0  # seconds a server already on the port gets to answer its metadata
CONTROL_BOUND = 15.0


async def run_all(settings: Settings) -> list[Check]:
    """Every check, in the order an operator fixes things; a broken data dir does not stop the others."""
    found = [checks.data_dir(_path_facts(settings.data_dir))]
    if found[0].status is checks.Status.OK:
        found.append(await _control_plane(settings.data_dir))
    found.append(_permissions(settings.data_dir))
    found.append(await _port(settings))
    found.append(await _sandbox())
    found.append(await _clock())
    return found


def _write_error(directory: Path) -> str | None:
    """Whether a file can be made in `directory`: made and removed at once, since `os.access` lies to root."""
    try:
        fd, scratch = tempfile.mkstemp(prefix=".executor-mcp-doctor-", dir=directory)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(scratch)
    return None


def _path_facts(path: Path) -> PathFacts:
    if path.exists() or path.is_symlink():
        is_dir = path.is_dir()
        return PathFacts(path, is_dir, True, None, False, _write_error(path) if is_dir else None)
    nearest = path.parent
    while not (nearest.exists() or nearest.is_symlink()) and nearest != nearest.parent:
        nearest = nearest.parent
    nearest_is_dir = nearest.is_dir()
    return PathFacts(path, False, False, nearest, nearest_is_dir, _write_error(nearest) if nearest_is_dir else None)


async def _control_plane(data_dir: Path) -> Check:
    path = data_dir / CONTROL_FILE
    if not _exists(path):
        return checks.control_plane(path, False, None, None)
    try:
        with trio.fail_after(CONTROL_BOUND):
            control = await ControlPlane.open(data_dir)
            try:
                counts = {
                    "sessions": len(await control.sessions.sessions()),
                    "orgs": len(await control.orgs.orgs()),
                    "API keys": len(await control.api_keys.api_keys()),
                }
            finally:
                await control.close()
    except trio.TooSlowError:
        return checks.control_plane(path, True, f"no answer within {CONTROL_BOUND:g} s", None)
    except Exception as exc:  # whatever LMDB or a damaged record raises is the finding itself
        said = str(_leaf(exc)).removeprefix(f"{path}: ")  # LMDB names the file, and so does the verdict
        return checks.control_plane(path, True, said or type(_leaf(exc)).__name__, None)
    return checks.control_plane(path, True, None, counts)


def _exists(path: Path) -> bool:
    return path.exists()


def _mode(path: Path) -> int | None:
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return None


def _permissions(data_dir: Path) -> Check:
    dir_mode = _mode(data_dir) if data_dir.is_dir() else None
    key_mode = _mode(data_dir / "secret.key") if dir_mode is not None else None
    return checks.permissions(data_dir, dir_mode, key_mode, bool(os.environ.get(SECRET_KEY_ENV)))


def _bind_error(host: str, port: int) -> tuple[str | None, bool]:
    """Bind and let go, as serve would bind (with SO_REUSEADDR, so a socket lingering in TIME_WAIT is no finding)."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"{host} does not resolve: {exc.strerror}", False
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                return exc.strerror or str(exc), exc.errno == errno.EADDRINUSE
    return None, False


def _holders(control: Path) -> list[int] | None:
    """Other processes with `control` open, from /proc (Linux); None where that cannot be seen."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    target = str(control.resolve())
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if any(os.readlink(fd) == target for fd in (entry / "fd").iterdir()):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to look at
            continue
    return sorted(found)


def _client_host(host: str) -> str:
    """Where a client on this machine reaches a server bound to `host`."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host.strip("[]") == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


async def _mcp_answers(host: str, port: int) -> bool:
    url = f"http://{_client_host(host)}:{port}/.well-known/oauth-protected-resource"
    try:
        async with httpx.AsyncClient(timeout=PROBE_BOUND, trust_env=False) as http:
            answer = await http.get(url)
        body: Any = answer.json()
    except (httpx.HTTPError, ValueError):
        return False
    return isinstance(body, dict) and str(body.get("resource", "")).endswith("/mcp")


def _announced(data_dir: Path) -> tuple[str, int, int] | None:
    """Where the server holding the data dir said it listens (host, port, its pid), if one does and has said."""
    running = ownership.holder(data_dir)
    if running is None or running.url is None:
        return None
    parts = urllib.parse.urlsplit(running.url)
    if parts.hostname is None or parts.port is None:
        return None
    return parts.hostname, parts.port, running.pid


async def _port(settings: Settings) -> Check:
    """The port the server on this data dir announced, when one runs (a second server on the data dir is refused
    anyway, and it may run on a port these settings do not name); else the port these settings name."""
    announced = _announced(settings.data_dir)
    host, port = (settings.host, settings.port) if announced is None else announced[:2]
    if port == 0:
        return checks.port(PortFacts(host, 0, None, False, False, None))
    bind_error, in_use = _bind_error(host, port)
    mcp, holders = False, None
    if in_use:
        mcp = await _mcp_answers(host, port)
        # The lock names who holds this data dir; without an announcement, who has its control plane open.
        holders = _holders(settings.data_dir / CONTROL_FILE) if announced is None else [announced[2]]
    return checks.port(PortFacts(host, port, bind_error, in_use, mcp, holders))


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception of a group: nurseries nest groups, whose own text says nothing."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


async def _nothing(path: str, args: Any) -> Any:
    raise LookupError(f"the doctor's program calls no tool ({path})")


# The default limits, bounded in time by the check's own bound.
_DOCTOR_LIMITS = attrs.evolve(Limits.of(Settings()), timeout=SANDBOX_BOUND)


async def _sandbox() -> Check:
    """One real worker (spawned, as serve does while its zygote starts) running `return 1 + 1`."""
    started = trio.current_time()
    pool = WorkerPool(spares=0, max_workers=1, command=worker_command())
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(pool.run)
            with trio.move_on_after(SANDBOX_BOUND) as bound:
                outcome = await Engine(pool, _DOCTOR_LIMITS).run("return 1 + 1", _nothing)
            nursery.cancel_scope.cancel()
    except Exception as exc:  # a worker that cannot start is the finding
        return checks.sandbox(False, f"a sandbox worker could not run: {_leaf(exc)}", 0)
    if bound.cancelled_caught:
        return checks.sandbox(False, f"a sandbox worker did not finish `return 1 + 1` within {SANDBOX_BOUND:g} s", 0)
    if not outcome.ok or outcome.result != 2:
        return checks.sandbox(False, f"a sandbox worker ran `return 1 + 1` wrongly: {outcome.error}", 0)
    return checks.sandbox(True, "", trio.current_time() - started)


async def _clock() -> Check:
    before = time.monotonic()
    await trio.sleep(0.01)
    return checks.clock(time.time(), before, time.monotonic())
