"""The contract suite's backends: every test here runs once per backend, through the store interfaces only.

A backend is an opener of a fresh `ControlPlane` (and of a session's `ExecutionJournals`) in the test's
temporary directory. Adding one (PostgreSQL) is one entry in each table below.
"""

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import (
    ApiKeyStore,
    AuditStore,
    CatalogStore,
    DataDirFacts,
    ExecutionJournals,
    OrgStore,
    PausedDirectory,
    PolicyStore,
    SecretStore,
    SessionDirectory,
    SigningKeys,
    SignInStore,
)
from executor_mcp.storage.records import Owner, SessionMeta
from executor_mcp.storage.session_file import SessionFile

Opener = Callable[[Path], Awaitable[ControlPlane]]


async def _lmdb_journals(directory: Path) -> SessionFile:
    meta = SessionMeta(
        session_id="s" * 64,
        owner=Owner("alice", "acme"),
        resource="/mcp",
        protocol_version="2025-06-18",
        client_info={},
        client_capabilities={},
        created_at=1.0,
    )
    return await SessionFile.create(SessionFile.path_for(directory, meta.session_id), meta, b"{}")


CONTROL_PLANES: dict[str, Opener] = {"lmdb": ControlPlane.open}
JOURNALS: dict[str, Callable[[Path], Awaitable[SessionFile]]] = {"lmdb": _lmdb_journals}


@pytest.fixture(params=sorted(CONTROL_PLANES))
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def open_plane(backend: str, tmp_path: Path) -> Callable[[], Awaitable[ControlPlane]]:
    """Open the backend's control plane on the test's data, again after closing it: what was written before
    is there (a test using this does not use `plane`, which holds one open)."""
    return functools.partial(CONTROL_PLANES[backend], tmp_path)


@pytest.fixture
async def plane(backend: str, tmp_path: Path) -> AsyncIterator[ControlPlane]:
    control = await CONTROL_PLANES[backend](tmp_path)
    try:
        yield control
    finally:
        await control.close()


@pytest.fixture
async def journals(backend: str, tmp_path: Path) -> AsyncIterator[ExecutionJournals]:
    store = await JOURNALS[backend](tmp_path / "sessions")
    try:
        yield store
    finally:
        await store.close()


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
