"""A real `SessionManager` on a test's nursery, for the tests that drive it without an HTTP server in front."""

from pathlib import Path

import trio

from executor_mcp.app import idle_policy
from executor_mcp.config import Settings
from executor_mcp.sessions.manager import SessionManager
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.records import SessionMeta
from executor_mcp.toolserver.registry import ToolRegistry


def _no_tools(_: SessionMeta) -> ToolRegistry:
    return ToolRegistry()


async def start_manager(
    nursery: trio.Nursery, control: ControlPlane, data_dir: Path, instance: str = ""
) -> SessionManager:
    """One instance's manager with the default settings: its own data dir (its session files), `control`
    shared with any other instance started on it."""
    settings = Settings()
    manager = SessionManager(
        control,
        data_dir,
        _no_tools,
        idle=idle_policy(settings),
        max_sessions_per_user=settings.max_sessions_per_user,
        retention=settings.session_retention,
        instance=instance,
    )
    await nursery.start(manager.run)
    return manager
