"""Shared fixtures: a real server on 127.0.0.1:0 over real LMDB files in a temp dir."""

import gc
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from mcp import Client

from executor_mcp.app import Running, serve
from executor_mcp.auth.principal import LOCAL_PRINCIPAL
from executor_mcp.config import Settings
from executor_mcp.integrations.handoff import HandoffBook
from executor_mcp.policies.service import Policies
from executor_mcp.storage.control import ControlPlane
from executor_mcp.tools.approval import Approval, Interaction
from executor_mcp.tools.context import CallContext
from executor_mcp.toolserver.registry import ToolFactory
from tests.auth_support import SECRET as AUTH_SECRET
from tests.postgres import PostgresServer, postgres_server
from tests.sdk import connect


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """A full collection as each test file ends: a socket or stream left unclosed in a reference cycle is then
    reported in the file that leaked it, not in whichever later test the collector happened to run in."""
    if nextitem is None or nextitem.path != item.path:
        gc.collect()


@attrs.define
class ServerUnderTest:
    """An in-process server started on the test's nursery, stoppable like a SIGTERM would."""

    running: Running
    done: trio.Event

    @property
    def url(self) -> str:
        return self.running.mcp_url

    async def stop(self) -> None:
        self.running.stop.set()
        await self.done.wait()


async def start_server(
    nursery: trio.Nursery,
    data_dir: Path,
    *,
    tools: ToolFactory | None = None,
    handoffs: HandoffBook | None = None,
    **overrides: Any,
) -> ServerUnderTest:
    """A server with the product's catalog, or with `tools` instead; `overrides` are settings, `handoffs` the
    book of connect links (one with the test's clock)."""
    settings = Settings(**{"host": "127.0.0.1", "port": 0, "data_dir": data_dir, **overrides})
    done = trio.Event()

    async def run(task_status: trio.TaskStatus[Running]) -> None:
        try:
            await serve(settings, tools=tools, handoffs=handoffs, task_status=task_status)
        finally:
            done.set()

    running = await nursery.start(partial(run))
    return ServerUnderTest(running=running, done=done)


async def jwt_server(nursery: trio.Nursery, data_dir: Path, tmp_path: Path, **overrides: Any) -> ServerUnderTest:
    """A server with `--auth jwt`, verifying HS256 bearers minted by `tests.auth_support.mint`."""
    secret = tmp_path / "hs256.key"
    secret.write_bytes(AUTH_SECRET)
    return await start_server(nursery, data_dir, auth="jwt", jwt_secret_file=secret, **overrides)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
async def server(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


@pytest.fixture
async def client(executor: ServerUnderTest) -> AsyncIterator[Client]:
    """An SDK client session on the module's `executor` server."""
    async with connect(executor.url, mode="legacy") as (connected, _):
        yield connected


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    """A real control plane in a temp dir."""
    plane = await ControlPlane.open(tmp_path / "control")
    yield plane
    await plane.close()


@pytest.fixture
def context(control: ControlPlane) -> CallContext:
    """A tool-call context for the local principal, with real (empty) policies and a gate that approves."""

    async def approve(_: Interaction) -> Approval:
        return Approval("accept", "tests")

    return CallContext(principal=LOCAL_PRINCIPAL, policies=Policies(control.policies), gate=approve)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server for the whole run, started by the first test that asks; each test takes a
    database of its own from it (`postgres.new_database()`)."""
    with postgres_server() as server:
        yield server
