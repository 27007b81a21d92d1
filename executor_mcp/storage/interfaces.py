"""The control plane's stores, one per domain, as the interfaces every backend implements.

LMDB (`storage/lmdb/`) is the embedded backend; a second one (PostgreSQL) implements the same protocols and
passes the same contract suite (`tests/unit/storage_contract/`). What every backend keeps:

- Every method is one transaction: a server and an admin command (another process on the same data dir, or
  another instance on the same database) never see half a change, and a write is durable when it returns.
- An operation that changes records of two tables is on the store that owns the primary record and changes
  the dependent ones in the same transaction: removing an integration removes its connections; a connection
  is only written while its integration exists; condemning a session leaves its termination request. No caller
  composes such a change out of two calls. (Revoking an org is its record alone: every instance asks which of
  its live sessions' orgs are revoked, `OrgStore.revoked_among`.)
- A stored record that no longer decodes is logged and treated as absent (skipped in listings), never the
  end of a read; an identifier too long to store is `InvalidInput` on a write and nothing on a read.
- Records are the attrs classes of `storage/records.py` and `records/integrations.py`; bytes parameters
  (sources, compiled catalogs, sealed secret items, audit entries, journals) are opaque to the store.
"""

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Protocol, TypeVar

import attrs

from executor_mcp.ratelimits.in_flight import Ceiling, Full
from executor_mcp.ratelimits.model import Limit, RateLimited
from executor_mcp.records.integrations import ConnectionRecord, IntegrationRecord
from executor_mcp.records.oauth import OAuthClientRecord, OAuthFlowRecord
from executor_mcp.storage.records import (
    ApiKeyRecord,
    ConsoleLinkRecord,
    OrgRecord,
    Owner,
    PolicyRecord,
    SessionRecord,
    ToolkitRecord,
    UsageLimits,
)

T = TypeVar("T")


class StoreUnavailable(ConnectionError):
    """The store could not be reached, or the connection to it broke mid-transaction: transient. A shared
    backend (PostgreSQL) raises it; the edges answer it with the transient envelope, whatever the backend."""


def store_unavailable(exc: BaseException) -> bool:
    """Whether `exc` is the database out of reach: `StoreUnavailable` itself, or a group (a nursery's) made of
    nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(StoreUnavailable)[1] is None
    return isinstance(exc, StoreUnavailable)


# Who owns a connection (and the secret items it holds): the org (everyone in it), or one account in it.
ORG_OWNER = "org"
USER_OWNER = "user"

# A store's records in the form every backend shares (`storage/exported.py`): (key, value), sorted by key.
Exported = list[tuple[bytes, bytes]]


class Transferable(Protocol):
    """What moves a store's records to another backend (`storage/transfer.py`, `executor-mcp migrate
    --from-lmdb`): every record it holds, and the same written into an empty store, each in one transaction."""

    async def export_records(self) -> Exported:
        """Every readable record, in the shared form (`storage/exported.py`), sorted by key: what a copy
        writes, and what its check compares on both sides."""

    async def import_records(self, records: Exported) -> None:
        """Write what `export_records` of another backend's store gave, into this store while it is empty
        (the caller checks), in one transaction: afterwards this store's `export_records` equals `records`.
        `ValueError` (`InvalidInput` for an identifier this backend cannot store), and nothing written, for a
        record in no exported form."""


class SessionDirectory(Protocol):
    """Which sessions exist, whom they belong to, whether they are condemned: enough to route, refuse or
    sweep a session without opening its file."""

    async def put_session(self, record: SessionRecord) -> None:
        """Create or replace the entry; the owner's count grows only when the id is new."""

    async def get_session(self, session_id: str) -> SessionRecord | None: ...

    async def update_session(self, session_id: str, **changes: object) -> SessionRecord | None:
        """Change fields of the entry in one transaction; None (nothing written) when it is gone."""

    async def delete_session(self, session_id: str) -> None:
        """Remove the entry (and its owner's count of it); nothing when there is none."""

    async def owner_session_count(self, owner: Owner) -> int:
        """How many sessions `owner` has (an account within one org), without listing them: asked on every
        session opened, so it must be a point read."""

    async def owner_sessions(self, owner: Owner) -> list[SessionRecord]:
        """One owner's sessions, without reading anyone else's."""

    async def request_termination(self, session_id: str, at: float) -> bool:
        """Condemn a session from outside the server (admin): mark it, and leave a request that a running
        server takes (`take_termination_requests`), in one transaction. False if there is no such session."""

    async def take_termination_requests(self, id_prefix: str) -> list[str]:
        """The session ids, starting with `id_prefix`, of the pending termination requests, removed as they are
        taken: two takers never get the same request. An instance takes those of the sessions it is home to
        (`sessions.ids.id_prefix(instance)`) and leaves the others for theirs; "" takes every request (a server
        with no instance id)."""

    async def sessions(self) -> list[SessionRecord]:
        """Every readable entry."""

    async def session_count(self) -> int:
        """How many entries there are, readable or not, without a scan: for the metrics."""

    async def session_ids(self) -> set[str]:
        """The ids the directory names, readable entry or not: what start-up recovery compares files to."""


class PausedDirectory(Protocol):
    """Which sessions keep a paused execution in their file, and until when: what start-up revives. (The
    pauses and journals themselves are the session's own, `ExecutionJournals`.) Backed by the session
    directory's entries (`SessionRecord.paused_until`)."""

    async def mark_paused(self, session_id: str, until: float) -> SessionRecord | None:
        """Say that the session keeps a pause until `until` (0: none any more); the updated entry, or None
        when the session is gone."""

    async def paused_sessions(self) -> list[SessionRecord]:
        """The sessions, not condemned, that keep a pause."""


class ExecutionMoved(Exception):
    """The execution's records are no longer this session's: another session (on any instance) adopted its
    pause (`SharedExecutions.adopt`), or it was forgotten. Whoever was running it must stop without another
    step, so that only the adopter runs what the journal has not run yet."""


class ExecutionJournals(Protocol):
    """Where one session keeps its durable executions: each one's journal records and the pauses that wait
    on it, as bytes the execution layer encodes: the session's own file (`SessionFile`), or with a shared
    database the session's share of `SharedExecutions`, so that any instance can adopt a pause.

    With a shared store a journal is created by its first write (the one holding record 0, its head); a later
    write to a journal another session adopted, or that was forgotten, raises `ExecutionMoved` and writes
    nothing."""

    async def keep_execution(
        self, key: str, records: list[tuple[int, bytes]], pauses: dict[str, bytes] | None = None
    ) -> None:
        """Append numbered journal records of execution `key` and write pause records, in one transaction."""

    async def journal(self, key: str) -> list[bytes]:
        """The execution's records in number order; empty when there is none."""

    async def pauses(self) -> list[bytes]:
        """Every pause record of the session."""

    async def forget_execution(self, key: str, pause_ids: list[str]) -> None:
        """Drop the execution's journal and the given pause records (the execution ended)."""

    async def forget_executions(self) -> None:
        """Drop every journal and pause record of the session."""


class Verdict(Protocol):
    """A judgement on a pause's execution, made where it is stored (`SharedExecutions.adopt`): whether it
    moves to the adopter."""

    @property
    def move(self) -> bool: ...


V = TypeVar("V", bound=Verdict)


@attrs.frozen
class Fence:
    """An instance's lease as its holder knows it (`InstanceLeases`): a write checked against it is refused
    once another process holds the instance, so a process that lost its lease can no longer take a step."""

    instance: str
    holder: str


class SharedExecutions(Protocol):
    """Every session's durable executions in one store that every instance reaches (PostgreSQL): a pause made
    on one instance can be resumed from a session on another, while its home is down or serving."""

    def of(self, session_id: str, fence: Fence | None = None) -> ExecutionJournals:
        """One session's executions, as its runtime keeps them; with a `fence`, a journal write is refused
        (`ExecutionMoved`) unless that lease is held and live."""

    async def adopt(self, pause_id: str, into: str, judge: Callable[[bytes, list[bytes]], V]) -> V | None:
        """Move the execution that pause `pause_id` waits on, with its journal and pauses, to session `into`,
        if `judge` (given the pause record and the journal records, in one transaction that holds the
        execution against every other writer) says it moves. The verdict; None when no such pause is kept.
        Its old session's next write of it raises `ExecutionMoved`, so it runs on one instance only."""


class InstanceLeases(Protocol):
    """Which process serves each instance id, so that two never serve one instance's sessions at once (two
    processes given one `--instance-id`, or a restart while the old process still runs). A lease is held
    until it expires by the database's clock, so no two machines' clocks are compared."""

    async def acquire(self, instance: str, holder: str, ttl: float) -> str | None:
        """Take or renew `instance`'s lease for `holder` for `ttl` seconds: None when taken, else whoever holds
        it and has not let it expire."""

    async def release(self, instance: str, holder: str) -> None:
        """Give the lease up (a clean shutdown), if `holder` still holds it."""


class OrgStore(Transferable, Protocol):
    """The organizations the server has seen or been told about, and which are revoked."""

    async def get_org(self, org_id: str) -> OrgRecord | None: ...

    async def note_org(self, org_id: str, at: float) -> OrgRecord:
        """The org's record, created (live, first seen `at`) the first time; never changes a known one."""

    async def set_org_revoked(self, org_id: str, revoked: bool, at: float) -> OrgRecord:
        """Revoke or reinstate (creating the record if the org was never seen)."""

    async def set_org_limits(
        self, org_id: str, change: Callable[[UsageLimits | None], UsageLimits | None], at: float
    ) -> OrgRecord:
        """Set the org's own limits (None: none) to `change` of the stored ones, read and written in one
        transaction (two admins changing different limits at once lose neither), creating the record if the org
        was never seen."""

    async def orgs(self) -> list[OrgRecord]: ...

    async def revoked_among(self, org_ids: Collection[str]) -> set[str]:
        """Which of `org_ids` are revoked, in one read: what every instance asks each poll about the orgs of
        the sessions it holds live, so a revocation (`set_org_revoked`) reaches all of them. An unknown org is
        not revoked, nor is one whose record no longer decodes (logged): one damaged record must not keep the
        others' sessions alive."""


class RateStore(Protocol):
    """Rate-limit state: each key's theoretical arrival time (`ratelimits/model.py`). Nothing in it moves between
    backends: a count older than a minute means nothing."""

    async def take(self, limits: list[Limit]) -> RateLimited | None:
        """Charge one call to every key of `limits` if it fits them all (atomically, across every instance
        sharing the store); else charge none and answer the refusal."""

    async def forget_expired(self) -> int:
        """Drop the keys whose state a fresh key would have; how many went."""


class InFlightStore(Protocol):
    """The places of executions in progress (`ratelimits/in_flight.py`), each under a `holder` id unique to its
    execution and named by the `instance` whose process runs it. A place counts while that instance's process
    lives: on a shared backend, an instance whose lease has lapsed holds nothing, and an instance starting again
    drops what its previous process held (`clear`). Nothing in it moves between backends."""

    async def enter(self, instance: str, holder: str, ceilings: list[Ceiling], *, beyond: bool = False) -> Full | None:
        """Take a place under every key of `ceilings` if one more fits them all (atomically, across every instance
        sharing the store), else take none and answer the first that is full; `beyond`: take it even over them
        (an execution revived after a restart keeps the place it had). A holder that has its place is admitted."""

    async def mark(self, holder: str, waits: int, pause_ids: tuple[str, ...], version: int) -> None:
        """The holder's execution now waits on a human `waits` times (0: running), for these pauses; `version`
        grows with each mark of the holder, and a mark older than the one kept is ignored."""

    async def leave(self, holder: str) -> None:
        """Give the place back (nothing if it is not held)."""

    async def clear(self, instance: str) -> int:
        """Drop every place of the instance: what its previous process left, before this one serves. How many
        went."""

    async def sweep(self) -> int:
        """Drop the places of instances gone long ago (they already count for nothing). How many went."""


class ApiKeyStore(Transferable, Protocol):
    """API keys, stored by the SHA-256 of their secret (the key itself is never kept)."""

    async def put_api_key(self, digest: str, record: ApiKeyRecord) -> None: ...

    async def get_api_key(self, digest: str) -> ApiKeyRecord | None: ...

    async def revoke_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """Revoke by the key's public id; the revoked record, or None if no key has that id."""

    async def api_keys(self) -> list[ApiKeyRecord]: ...


class Owned(Protocol):
    """A record of an org (`account_id` None) or of one account in it: a policy, a toolkit."""

    @property
    def id(self) -> str: ...
    @property
    def org_id(self) -> str: ...
    @property
    def account_id(self) -> str | None: ...


class PolicyStore(Transferable, Protocol):
    """Tool policies: an org's rules, and each account's own rules within the org."""

    async def policies(self, org_id: str, account_id: str | None) -> list[PolicyRecord]:
        """The org's rules and, with `account_id`, that account's own in the org (never another org's or
        another member's)."""

    async def edit_policies(
        self,
        org_id: str,
        account_id: str | None,
        edit: Callable[[list[PolicyRecord]], tuple[list[PolicyRecord], list[PolicyRecord], T]],
    ) -> T:
        """Read what `policies` would and write `edit`'s (records to put, records to delete, result) in one
        transaction, so concurrent edits (a server and an admin command) cannot interleave. `edit` may run
        more than once (a backend may retry a conflicting transaction): it must not have side effects."""


class ToolkitStore(Transferable, Protocol):
    """Toolkits: the org's, and each account's own within the org, each with its rules and connection patterns."""

    async def toolkits(self, org_id: str, account_id: str | None) -> list[ToolkitRecord]:
        """The org's toolkits and, with `account_id`, that account's own in the org (never another org's or
        another member's)."""

    async def edit_toolkits(
        self,
        org_id: str,
        account_id: str | None,
        edit: Callable[[list[ToolkitRecord]], tuple[list[ToolkitRecord], list[ToolkitRecord], T]],
    ) -> T:
        """Read what `toolkits` would and write `edit`'s (records to put, records to delete, result) in one
        transaction, so two edits (two instances, a server and an admin command) cannot interleave: a slug is
        checked free and taken with nothing between. `edit` may run more than once; it has no side effects."""


class AuditStore(Transferable, Protocol):
    """The audit log's entries, as keys and values `audit/model.py` makes: keys sort by (org, time), and the
    store only keeps them in key order."""

    async def append_audit(self, entries: list[tuple[bytes, bytes]]) -> None:
        """Add entries in one transaction; a key already there keeps its value (append-only)."""

    async def audit_newest(
        self, prefix: bytes, start: bytes, end: bytes, limit: int, admits: Callable[[bytes], bool], scan: int
    ) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
        """Up to `limit` entries of `prefix` in [start, end), newest (greatest key) first, whose value
        `admits`; at most `scan` looked at. Also the key to page on from (exclusive `end` of the next page),
        or None when the range was read to its start."""

    async def sweep_audit(
        self, start: bytes, expired: Callable[[bytes], bool], skip: Callable[[bytes], bytes], batch: int
    ) -> bytes | None:
        """Delete up to `batch` entries whose key is `expired`, from `start` on in key order; at the first kept
        key, go on from `skip(key)`. Where to go on from, or None when done."""


class SigningKeys(Transferable, Protocol):
    """Random keys shared by every process on the data dir, each made on first use in one transaction, so
    two processes starting together agree on it."""

    async def console_key(self) -> bytes:
        """Signs console cookies. Losing it only signs everyone out."""

    async def request_state_key(self) -> bytes:
        """Signs 2026 approvals' `requestState`, which outlives a restart as its durable pause does."""

    async def workspace_key(self) -> bytes:
        """Derives workspace ids, so that nobody else can compute a principal's."""


class SignInStore(Transferable, Protocol):
    """One-time console sign-in links (`executor-mcp console-link`), by the SHA-256 of their token."""

    async def put_console_link(self, digest: str, record: ConsoleLinkRecord, now: float) -> None:
        """Keep a new link, forgetting those that expired by `now` unopened."""

    async def take_console_link(self, digest: str, now: float) -> ConsoleLinkRecord | None:
        """The link's record if it has not expired by `now`, removed in the same transaction: of two
        processes opening one link, one gets it. A link is taken once, expired or not."""


class DataDirFacts(Transferable, Protocol):
    """The settings the last server on the data dir ran with that decide what its records may do
    (`config.DATA_DIR_FACTS`), for the admin commands to share."""

    async def record_data_dir_facts(self, facts: Mapping[str, object]) -> None:
        """Replace what the last server recorded."""

    async def data_dir_facts(self) -> dict[str, object]:
        """What was recorded: {} when nothing (readable) was."""


class IntegrationStore(Protocol):
    """An org's integrations, with the sources and compiled catalogs they hold.

    Sources and compiled catalogs are stored once per `source_hash` and shared by every holder (integrations
    of any org, and connections whose tools were discovered); the last holder to let go deletes them, in the
    transaction that lets go."""

    async def catalog_revision(self, org_id: str) -> int:
        """A counter bumped by every change of the org's integrations or connections, by any process: a cache
        of the org's catalog built at revision N is stale once this is not N. 0 for an org never changed."""

    async def integrations(self, org_id: str) -> list[IntegrationRecord]:
        """The org's readable integrations, sorted by slug."""

    async def get_integration(self, org_id: str, slug: str) -> IntegrationRecord | None: ...

    async def add_integration(self, record: IntegrationRecord, source: bytes, compiled: bytes) -> bool:
        """Store a new integration holding its source and compiled catalog; False, and nothing written, when
        the org already has that slug."""

    async def replace_integration(
        self, record: IntegrationRecord, source: bytes | None = None, compiled: bytes | None = None
    ) -> bool:
        """Update an existing integration (same org and slug); False, and nothing written, when it is gone.
        A changed `source_hash` needs `source` and `compiled` unless the hash is stored already, and lets go
        of the old one; a `compiled` for an unchanged hash replaces the stored one."""

    async def remove_integration(self, org_id: str, slug: str) -> list[ConnectionRecord] | None:
        """Remove the integration and every connection to it (of every owner) in one transaction; the
        removed readable connections (for their secret items), or None when there was no integration."""

    async def get_source(self, source_hash: str) -> bytes | None: ...

    async def get_compiled(self, source_hash: str) -> bytes | None: ...

    async def put_compiled(self, source_hash: str, raw: bytes) -> bool:
        """Replace the compiled catalog of a stored source; False, and nothing written, when nothing holds the
        hash any more (a fill racing a removal leaves no orphan)."""


class ConnectionStore(Protocol):
    """Connections to an org's integrations: the org's (`ORG_OWNER`, no account) and each account's own
    (`USER_OWNER`). Every change bumps the org's `catalog_revision`."""

    async def connections(
        self, org_id: str, account_id: str, *, integration: str | None = None, owner: str | None = None
    ) -> list[ConnectionRecord]:
        """What `account_id` sees in the org: the org's connections and its own (never another account's),
        optionally of one integration or one owner, sorted by (integration, owner, name)."""

    async def get_connection(
        self, org_id: str, owner: str, account_id: str, integration: str, name: str
    ) -> ConnectionRecord | None:
        """One connection; for `ORG_OWNER` the account is ignored."""

    async def put_connection(self, record: ConnectionRecord) -> bool:
        """Create or replace; False, and nothing written, when its integration is gone (checked in the same
        transaction). The discovered-catalog fields are the stored ones, whatever `record` says.
        `InvalidInput` for an owner and account that do not fit together."""

    async def set_discovered(
        self,
        connection: ConnectionRecord,
        *,
        synced_at: float,
        source_hash: str | None = None,
        source: bytes | None = None,
        compiled: bytes | None = None,
        error: str | None = None,
    ) -> ConnectionRecord | None:
        """Record a discovery of the connection's tools: with a new `source_hash` it holds that catalog and
        lets go of the old one; with `error` it keeps its tools and notes why. Only these fields change; None
        when the connection is gone."""

    async def remove_connection(
        self, org_id: str, owner: str, account_id: str, integration: str, name: str
    ) -> ConnectionRecord | None:
        """Remove one connection (letting go of its catalog) and return it; None when there was none or it
        was unreadable."""


class CatalogStore(IntegrationStore, ConnectionStore, Transferable, Protocol):
    """Integrations and their connections: one store, since removing an integration removes its connections
    and a connection is written only while its integration exists, each in one transaction."""


class SecretStore(Transferable, Protocol):
    """Sealed secret items (bytes the secrets layer encrypts), partitioned by (org, account): the account is
    empty for what org-owned connections hold. An item id is only looked up in the caller's partition."""

    async def get_secret_item(self, org_id: str, account_id: str, item_id: str) -> bytes | None: ...

    async def put_secret_items(self, org_id: str, account_id: str, items: Mapping[str, bytes]) -> None:
        """Write (replacing) several items of one partition in one transaction."""

    async def delete_secret_items(self, org_id: str, account_id: str, item_ids: Iterable[str]) -> None:
        """Delete items of one partition; ids that are not there are ignored."""

    async def secret_items(self, org_id: str, account_id: str) -> list[str]:
        """The ids of one partition's items, sorted."""


# A connection's identity: (org, owner, account, integration, name), the account empty for the org's.
ConnectionKey = tuple[str, str, str, str, str]


def connection_key(connection: ConnectionRecord) -> ConnectionKey:
    return (connection.org_id, connection.owner, connection.account_id, connection.integration, connection.name)


class OAuthStore(Transferable, Protocol):
    """OAuth clients (per org, owned by the org or one account) and the sign-in flows in progress.

    A client is keyed (org, owner, account, slug), the account empty for what the org owns (`ORG_OWNER`), as
    connections are. A flow is keyed by the digest of its `state` and counted per (org, account) that started it.
    `Transferable` moves the clients only: a flow lives minutes, and a sign-in in progress during a move is
    started again. A record holding a NUL in any text is `InvalidInput` on every backend (PostgreSQL's `jsonb`
    holds none), so what one backend stores, the other can."""

    async def put_client(self, record: OAuthClientRecord, max_per_owner: int | None = None) -> bool:
        """Create or replace the client keyed (org, owner, account, slug). `InvalidInput` for an owner and account
        that do not fit together (`ORG_OWNER` with an account, `USER_OWNER` without one, another owner). With
        `max_per_owner`, a new slug is kept only while its owner (org, owner, account) holds fewer clients: False,
        and nothing written, past that (a replacement always fits); two processes putting at once never leave
        more."""

    async def get_client(self, org_id: str, owner: str, account_id: str, slug: str) -> OAuthClientRecord | None:
        """One client; for `ORG_OWNER` the account is ignored. None when there is none or it is unreadable."""

    async def clients(self, org_id: str, account_id: str) -> list[OAuthClientRecord]:
        """What `account_id` sees in the org: the org's clients and its own (never another account's), sorted by
        (owner, slug); an empty account sees the org's alone."""

    async def remove_client(self, org_id: str, owner: str, account_id: str, slug: str) -> OAuthClientRecord | None:
        """Remove one client (for `ORG_OWNER` the account is ignored) and return it; None when there was none,
        or when it was unreadable (removed all the same, and logged)."""

    async def put_flow(self, record: OAuthFlowRecord, max_per_account: int, now: float) -> bool:
        """Keep a new flow (replacing one under the same digest), in one transaction that first deletes the
        flows of its account (org, account) that expired by `now` and counts the others: False, and nothing else
        written, when that account already holds `max_per_account` flows not expired at `now`. Two processes
        putting flows of one account at once never leave it more than `max_per_account`."""

    async def take_flow(
        self, state_digest: str, now: float, account: tuple[str, str] | None = None
    ) -> OAuthFlowRecord | None:
        """The flow, if it has not expired by `now`, removed in the same transaction: of two processes taking
        one flow at once, one gets it. A flow is taken once, expired (then None) or not; None too when there is
        none or it is unreadable (removed all the same). With `account` (org, account), only a flow that account
        started is taken: another's is left as it was, and None answered."""

    async def sweep_flows(self, now: float) -> int:
        """Delete every flow that expired by `now`, readable or not, of every account; how many."""

    async def claim_refresh(self, connection: ConnectionKey, holder: str, until: float, now: float) -> bool:
        """Claim the refresh of one connection's tokens (org, owner, account, integration, name) for `holder` until
        `until`: True when no other holder's claim lasts past `now` (the holder's own is renewed). Of instances
        racing to refresh one connection, one wins: a rotating authorization server that sees a spent refresh
        token used twice revokes the whole grant. A claim whose holder died lapses at its `until`."""

    async def release_refresh(self, connection: ConnectionKey, holder: str) -> None:
        """End `holder`'s claim on the connection's refresh; another holder's is left alone."""


class Closable(Protocol):
    """What a backend holds open (an environment, a connection pool) until the control plane closes."""

    async def close(self) -> None: ...
