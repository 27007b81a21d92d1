"""The contract suite's backends: every test here runs once per backend, through the store interfaces only.

A backend gives each test a fresh `ControlPlane` (LMDB in the test's temporary directory, PostgreSQL in a
database of its own on the run's throwaway server, `tests/postgres.py`); a session's `ExecutionJournals` have
their own table (its file, or its share of the shared executions). Adding a backend is one entry in a table below.
"""

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import (
    ApiKeyStore,
    AuditStore,
    CatalogStore,
    DataDirFacts,
    ExecutionJournals,
    InFlightStore,
    OAuthStore,
    OrgStore,
    PausedDirectory,
    PolicyStore,
    RateStore,
    SecretStore,
    SessionDirectory,
    SigningKeys,
    SignInStore,
    ToolkitStore,
)
from executor_mcp.storage.records import Owner, SessionMeta
from executor_mcp.storage.session_file import SessionFile
from tests.postgres import PostgresServer

JOURNAL_SESSION = "s" * 64


@asynccontextmanager
async def _lmdb_journals(request: pytest.FixtureRequest, directory: Path) -> AsyncIterator[ExecutionJournals]:
    """A session's own file."""
    meta = SessionMeta(
        session_id=JOURNAL_SESSION,
        owner=Owner("alice", "acme"),
        resource="/mcp",
        protocol_version="2025-06-18",
        client_info={},
        client_capabilities={},
        created_at=1.0,
    )
    store = await SessionFile.create(SessionFile.path_for(directory, meta.session_id), meta, b"{}")
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def _postgres_journals(request: pytest.FixtureRequest, directory: Path) -> AsyncIterator[ExecutionJournals]:
    """A session's share of the shared executions."""
    control = await _postgres(request, directory)()
    try:
        assert control.executions is not None
        yield control.executions.of(JOURNAL_SESSION)
    finally:
        await control.close()


def _lmdb(request: pytest.FixtureRequest, directory: Path) -> Callable[[], Awaitable[ControlPlane]]:
    return functools.partial(ControlPlane.open, directory)


def _postgres(request: pytest.FixtureRequest, directory: Path) -> Callable[[], Awaitable[ControlPlane]]:
    server: PostgresServer = request.getfixturevalue("postgres")
    return functools.partial(ControlPlane.open_postgres, server.new_database(), pool_size=4)


# A backend: given the test, where its control plane lives (a fresh one for each test).
CONTROL_PLANES: dict[str, Callable[[pytest.FixtureRequest, Path], Callable[[], Awaitable[ControlPlane]]]] = {
    "lmdb": _lmdb,
    "postgres": _postgres,
}
JOURNALS: dict[str, Callable[[pytest.FixtureRequest, Path], AbstractAsyncContextManager[ExecutionJournals]]] = {
    "lmdb": _lmdb_journals,
    "postgres": _postgres_journals,
}


# Writes per plane in the concurrency tests: enough for their transactions to interleave.
EACH = 30
# Backends a process opens once: LMDB refuses a second environment on one file in a process, so its two
# "planes" are one (concurrent calls in one process; other processes wait on LMDB's own writer lock).
ONE_PLANE_PER_PROCESS = {"lmdb"}


@asynccontextmanager
async def two_planes(
    open_plane: Callable[[], Awaitable[ControlPlane]], backend: str
) -> AsyncIterator[tuple[ControlPlane, ControlPlane]]:
    """Two control planes on one store at once, as two processes on a data dir or two instances on a database
    have them."""
    first = await open_plane()
    try:
        if backend in ONE_PLANE_PER_PROCESS:
            yield first, first
            return
        second = await open_plane()
        try:
            yield first, second
        finally:
            await second.close()
    finally:
        await first.close()


@pytest.fixture(params=sorted(CONTROL_PLANES))
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def open_plane(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Awaitable[ControlPlane]]:
    """Open the backend's control plane on the test's data, again after closing it: what was written before
    is there (a test using this does not use `plane`, which holds one open)."""
    return CONTROL_PLANES[backend](request, tmp_path)


@pytest.fixture
async def planes(
    backend: str, open_plane: Callable[[], Awaitable[ControlPlane]]
) -> AsyncIterator[tuple[ControlPlane, ControlPlane]]:
    async with two_planes(open_plane, backend) as opened:
        yield opened


@pytest.fixture
async def plane(open_plane: Callable[[], Awaitable[ControlPlane]]) -> AsyncIterator[ControlPlane]:
    control = await open_plane()
    try:
        yield control
    finally:
        await control.close()


@pytest.fixture(params=sorted(JOURNALS))
async def journals(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ExecutionJournals]:
    async with JOURNALS[request.param](request, tmp_path / "sessions") as store:
        yield store


@pytest.fixture
def sessions(plane: ControlPlane) -> SessionDirectory:
    return plane.sessions


@pytest.fixture
def paused(plane: ControlPlane) -> PausedDirectory:
    return plane.paused


@pytest.fixture
def orgs(plane: ControlPlane) -> OrgStore:
    return plane.orgs


@pytest.fixture
def api_keys(plane: ControlPlane) -> ApiKeyStore:
    return plane.api_keys


@pytest.fixture
def policies(plane: ControlPlane) -> PolicyStore:
    return plane.policies


@pytest.fixture
def toolkits(plane: ControlPlane) -> ToolkitStore:
    return plane.toolkits


@pytest.fixture
def rates(plane: ControlPlane) -> RateStore:
    return plane.rates


@pytest.fixture
def in_flight(plane: ControlPlane) -> InFlightStore:
    return plane.in_flight


@pytest.fixture
def audit(plane: ControlPlane) -> AuditStore:
    return plane.audit


@pytest.fixture
def signing_keys(plane: ControlPlane) -> SigningKeys:
    return plane.signing_keys


@pytest.fixture
def sign_ins(plane: ControlPlane) -> SignInStore:
    return plane.sign_ins


@pytest.fixture
def facts(plane: ControlPlane) -> DataDirFacts:
    return plane.facts


@pytest.fixture
def catalog(plane: ControlPlane) -> CatalogStore:
    return plane.catalog


@pytest.fixture
def secrets(plane: ControlPlane) -> SecretStore:
    return plane.secrets


@pytest.fixture
def oauth(plane: ControlPlane) -> OAuthStore:
    return plane.oauth
