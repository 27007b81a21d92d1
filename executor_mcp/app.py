"""The server process: one root nursery owning the session manager and hypercorn.

Shutdown is a sequence, not a cancellation: the trigger first lets the session manager drain (new
work refused with the restart envelope, work in flight given the grace period, the rest answered with
the restart envelope), and only then lets hypercorn stop, so every request gets its answer written
before connections close.
"""

import logging
import resource
import signal
import sys
from functools import partial
from pathlib import Path

import attrs
import hypercorn.trio
import trio
from hypercorn.config import Config

from executor_mcp.auth.principal import NoAuth
from executor_mcp.config import Settings
from executor_mcp.execution.engine import Engine, Limits
from executor_mcp.sandbox.pool import WorkerPool
from executor_mcp.sessions.manager import SessionManager
from executor_mcp.storage.control import ControlPlane
from executor_mcp.tools.core import build_catalog
from executor_mcp.toolserver.executor_tools import executor_tools
from executor_mcp.toolserver.registry import ToolFactory
from executor_mcp.transport.endpoint import create_app

log = logging.getLogger(__name__)

# Connections still open after the sessions drained (idle keep-alives) get this long before they close.
HTTP_GRACE_SECONDS = 2.0


class UnsafeBind(Exception):
    """Serving without authentication anywhere but loopback would hand the tools to the network."""


@attrs.frozen
class Running:
    """What a started server tells its starter: where it listens and how to stop it."""

    url: str
    data_dir: Path
    stop: trio.Event

    @property
    def mcp_url(self) -> str:
        return self.url + "/mcp"


def raise_descriptor_limit() -> None:
    """Each open session holds LMDB descriptors; take the hard limit rather than fail at ~1000."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _hypercorn_config(settings: Settings) -> Config:
    config = Config()
    host = f"[{settings.host}]" if ":" in settings.host and not settings.host.startswith("[") else settings.host
    config.bind = [f"{host}:{settings.port}"]
    config.graceful_timeout = HTTP_GRACE_SECONDS
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


def ensure_safe_bind(settings: Settings) -> None:
    if not settings.loopback:
        raise UnsafeBind(
            f"refusing to bind {settings.host} without authentication: "
            "bind a loopback address (127.0.0.1, ::1) or enable --auth"
        )


async def serve(
    settings: Settings,
    *,
    tools: ToolFactory | None = None,
    task_status: trio.TaskStatus[Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    ensure_safe_bind(settings)
    raise_descriptor_limit()
    control = await ControlPlane.open(settings.data_dir)
    try:
        pool = WorkerPool(max_workers=settings.sandbox_workers)
        limits = Limits(
            timeout=settings.execution_timeout,
            cpu=settings.execution_cpu_limit,
            memory=settings.execution_memory_limit * 1024 * 1024,
        )
        manager = SessionManager(
            control, settings.data_dir, tools or executor_tools(Engine(pool, limits), build_catalog())
        )
        app = create_app(manager, NoAuth())
        stop = trio.Event()

        async def shutdown_trigger() -> None:
            await stop.wait()
            await manager.shutdown(settings.shutdown_grace)

        async with trio.open_nursery() as root:
            await root.start(pool.run)
            await root.start(manager.run)

            async def http(task_status: trio.TaskStatus[list[str]]) -> None:
                await hypercorn.trio.serve(
                    app, _hypercorn_config(settings), shutdown_trigger=shutdown_trigger, task_status=task_status
                )
                root.cancel_scope.cancel()

            binds = await root.start(http)
            task_status.started(Running(url=binds[0], data_dir=settings.data_dir, stop=stop))
    finally:
        with trio.CancelScope(shield=True):
            await control.close()


async def serve_until_signalled(settings: Settings) -> None:
    """Run until SIGTERM or SIGINT, announcing the endpoint on stderr once listening."""
    async with trio.open_nursery() as nursery:
        running: Running = await nursery.start(partial(serve, settings))
        print(f"MCP: {running.mcp_url}", file=sys.stderr, flush=True)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                running.stop.set()
                break
