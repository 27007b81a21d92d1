"""The control plane: the server-level stores shared by the server and the admin commands, one per domain.

It holds the session directory (which ids exist, whom they belong to, whether they are condemned) and which of
them keep a paused execution, the organizations (which are revoked) and API keys, the tool policies and
toolkits, the audit log, the signing keys, the console's sign-in links, the settings the server runs with that
every command on the data dir shares (`config.DATA_DIR_FACTS`), the catalog of integrations and connections, and
the sealed secret items. Each is typed by its interface (`storage/interfaces.py`); `open` builds them over the
embedded backend, one LMDB environment in which an admin command (`executor-mcp orgs revoke`, `keys create`) writes
while a server runs on the same data dir, and the server sees the change on its next read.
"""

from pathlib import Path

import attrs
import trio

from executor_mcp.config import Settings
from executor_mcp.storage.environment import Environment, Txn
from executor_mcp.storage.interfaces import (
    ApiKeyStore,
    AuditStore,
    CatalogStore,
    Closable,
    DataDirFacts,
    InFlightStore,
    InstanceLeases,
    OAuthStore,
    OrgStore,
    PausedDirectory,
    PolicyStore,
    RateStore,
    SecretStore,
    SessionDirectory,
    SharedExecutions,
    SigningKeys,
    SignInStore,
    ToolkitStore,
)
from executor_mcp.storage.lmdb.audit import LmdbAudit
from executor_mcp.storage.lmdb.catalog import LmdbCatalog
from executor_mcp.storage.lmdb.console import LmdbDataDirFacts, LmdbSigningKeys, LmdbSignIns
from executor_mcp.storage.lmdb.in_flight import MemoryInFlight
from executor_mcp.storage.lmdb.oauth import LmdbOAuth
from executor_mcp.storage.lmdb.orgs import LmdbApiKeys, LmdbOrgs
from executor_mcp.storage.lmdb.policies import LmdbPolicies
from executor_mcp.storage.lmdb.rates import MemoryRates
from executor_mcp.storage.lmdb.secrets import LmdbSecrets
from executor_mcp.storage.lmdb.sessions import LmdbPausedDirectory, LmdbSessionDirectory
from executor_mcp.storage.lmdb.toolkits import LmdbToolkits
from executor_mcp.storage.postgres.audit import PgAudit
from executor_mcp.storage.postgres.catalog import PgCatalog
from executor_mcp.storage.postgres.console import PgDataDirFacts, PgSigningKeys, PgSignIns
from executor_mcp.storage.postgres.database import Database
from executor_mcp.storage.postgres.executions import PgExecutions
from executor_mcp.storage.postgres.in_flight import PgInFlight
from executor_mcp.storage.postgres.instances import PgInstanceLeases
from executor_mcp.storage.postgres.migrations import migrate
from executor_mcp.storage.postgres.oauth import PgOAuth
from executor_mcp.storage.postgres.orgs import PgApiKeys, PgOrgs
from executor_mcp.storage.postgres.policies import PgPolicies
from executor_mcp.storage.postgres.rates import PgRates
from executor_mcp.storage.postgres.secrets import PgSecrets
from executor_mcp.storage.postgres.sessions import PgPausedDirectory, PgSessionDirectory
from executor_mcp.storage.postgres.toolkits import PgToolkits

CONTROL_FILE = "control.mdb"
# Named databases one environment may open: the stores' 22 and the 3 legacy ones an upgrade drops, with room.
_MAX_DBS = 32


@attrs.frozen
class ControlPlane:
    """The stores of one backend, one per domain, typed by their interfaces so that callers never see which
    backend they are on; `close` releases what the stores share."""

    sessions: SessionDirectory
    paused: PausedDirectory
    orgs: OrgStore
    api_keys: ApiKeyStore
    policies: PolicyStore
    toolkits: ToolkitStore
    rates: RateStore
    in_flight: InFlightStore
    audit: AuditStore
    signing_keys: SigningKeys
    sign_ins: SignInStore
    facts: DataDirFacts
    catalog: CatalogStore
    secrets: SecretStore
    oauth: OAuthStore
    backend: Closable  # what the stores share and `close` releases
    # Only on a backend several instances share: their durable executions (else each session's file keeps its
    # own), and which process serves each instance id (else the data dir's `server.lock` is the only lease).
    executions: SharedExecutions | None = None
    leases: InstanceLeases | None = None

    @classmethod
    async def open(cls, data_dir: Path) -> "ControlPlane":
        """The embedded backend: every store over the data dir's one LMDB environment, upgraded in place from
        the layouts of older versions (in one transaction, before any store is used)."""
        env = await Environment.open(data_dir / CONTROL_FILE, max_dbs=_MAX_DBS)
        sessions, policies = LmdbSessionDirectory(env), LmdbPolicies(env)

        def _upgrade(txn: Txn) -> None:
            sessions.upgrade(txn)
            policies.upgrade(txn)

        await env.write(_upgrade)
        return cls(
            sessions=sessions,
            paused=LmdbPausedDirectory(env),
            orgs=LmdbOrgs(env),
            api_keys=LmdbApiKeys(env),
            policies=policies,
            toolkits=LmdbToolkits(env),
            rates=MemoryRates(),
            in_flight=MemoryInFlight(),
            audit=LmdbAudit(env),
            signing_keys=LmdbSigningKeys(env),
            sign_ins=LmdbSignIns(env),
            facts=LmdbDataDirFacts(env),
            catalog=LmdbCatalog(env),
            secrets=LmdbSecrets(env),
            oauth=LmdbOAuth(env),
            backend=env,
        )

    @classmethod
    async def open_postgres(cls, url: str, *, pool_size: int) -> "ControlPlane":
        """The shared backend: every store in one PostgreSQL database, its schema migrated first (under an
        advisory lock, so instances starting together migrate once)."""
        database = await Database.open(url, size=pool_size)
        try:
            await database.transact(migrate)
        except BaseException:
            with trio.CancelScope(shield=True):
                await database.close()
            raise
        return cls(
            sessions=PgSessionDirectory(database),
            paused=PgPausedDirectory(database),
            orgs=PgOrgs(database),
            api_keys=PgApiKeys(database),
            policies=PgPolicies(database),
            toolkits=PgToolkits(database),
            rates=PgRates(database),
            in_flight=PgInFlight(database),
            audit=PgAudit(database),
            signing_keys=PgSigningKeys(database),
            sign_ins=PgSignIns(database),
            facts=PgDataDirFacts(database),
            catalog=PgCatalog(database),
            secrets=PgSecrets(database),
            oauth=PgOAuth(database),
            backend=database,
            executions=PgExecutions(database),
            leases=PgInstanceLeases(database),
        )

    async def close(self) -> None:
        await self.backend.close()


async def open_control_plane(settings: Settings) -> ControlPlane:
    """The control plane the settings name: PostgreSQL with `--database-url` (several instances share it), else
    the data dir's own LMDB file."""
    if settings.database_url is not None:
        return await ControlPlane.open_postgres(settings.database_url, pool_size=settings.database_pool_size)
    return await ControlPlane.open(settings.data_dir)


async def migrate_database(url: str) -> list[int]:
    """Apply the schema's missing migrations to the database at `url`; the versions applied now."""
    database = await Database.open(url, size=1)
    try:
        return await database.transact(migrate)
    finally:
        with trio.CancelScope(shield=True):
            await database.close()
