"""OAuth clients and the sign-in flows in progress (`interfaces.OAuthStore`) in LMDB.

Three named databases. `oauth-clients` is keyed (org, owner, account, slug), the account empty for what the org
owns, so what one caller lists, its org's clients and its own, is two prefix ranges (`lmdb/keys.py`: no part can
forge another's). `oauth-flows` is keyed by the flow's state digest: the callback's look-up is a point read.
`oauth-flows-by-account` indexes them by (org, account, digest), its value the flow's expiry, so that
`put_flow` counts and sweeps one account's flows in that account's range without reading anyone else's. A fourth,
`oauth-refresh-claims`, holds who refreshes a connection now: its holder and when that claim lapses.

The index and the flows are written in the same transaction. An entry whose flow is gone (taken while it no
longer decoded, so its account could not be told) or now belongs to another account is dropped when it is met,
and never counted; a flow that no longer decodes is counted (as PostgreSQL counts its row) until it expires.
Every method is one transaction, and LMDB has one writer at a time: a count and the insert it allows, or a take,
are never interleaved with another process's.
"""

import math

from executor_mcp.codec import converter
from executor_mcp.records.integration_errors import InvalidInput
from executor_mcp.records.oauth import OAuthClientRecord, OAuthFlowRecord
from executor_mcp.storage.environment import Environment, Txn
from executor_mcp.storage.exported import canonical, key_parts, record_key
from executor_mcp.storage.interfaces import ORG_OWNER, USER_OWNER, ConnectionKey, Exported
from executor_mcp.storage.lmdb import keys
from executor_mcp.storage.records import decoded_or_skipped, encode


class LmdbOAuth:
    def __init__(self, env: Environment) -> None:
        self._env = env
        self._clients = env.database(b"oauth-clients")
        self._flows = env.database(b"oauth-flows")
        self._by_account = env.database(b"oauth-flows-by-account")
        self._claims = env.database(b"oauth-refresh-claims")

    # -- clients ------------------------------------------------------------------------------------

    async def put_client(self, record: OAuthClientRecord, max_per_owner: int | None = None) -> bool:
        check_client(record)
        check_text(record)
        key = keys.writable(client_key(*client_identity(record)))
        owner = keys.prefix(record.org_id, record.owner, record.account_id)

        def _put(txn: Txn) -> bool:
            if max_per_owner is not None and txn.get(key, db=self._clients) is None:
                held = sum(1 for _ in keys.ranged(txn, self._clients, owner))
                if held >= max_per_owner:
                    return False
            txn.put(key, encode(record), db=self._clients)
            return True

        return await self._env.write(_put)

    async def get_client(self, org_id: str, owner: str, account_id: str, slug: str) -> OAuthClientRecord | None:
        key = client_key(org_id, owner, account_id, slug)
        return await self._env.read(lambda txn: self._client(key, keys.get(txn, self._clients, key)))

    async def clients(self, org_id: str, account_id: str) -> list[OAuthClientRecord]:
        owners = [(ORG_OWNER, "")] + ([(USER_OWNER, account_id)] if account_id else [])

        def _list(txn: Txn) -> list[OAuthClientRecord]:
            records = []
            for owner, account in owners:
                for key, raw in keys.ranged(txn, self._clients, keys.prefix(org_id, owner, account)):
                    record = self._client(key, raw)
                    if record is not None:
                        records.append(record)
            return sorted(records, key=lambda record: (record.owner, record.slug))

        return await self._env.read(_list)

    async def remove_client(self, org_id: str, owner: str, account_id: str, slug: str) -> OAuthClientRecord | None:
        key = client_key(org_id, owner, account_id, slug)

        def _remove(txn: Txn) -> OAuthClientRecord | None:
            raw = keys.get(txn, self._clients, key)
            if raw is None:
                return None
            txn.delete(key, db=self._clients)
            return self._client(key, raw)

        return await self._env.write(_remove)

    @staticmethod
    def _client(key: bytes, raw: bytes | None) -> OAuthClientRecord | None:
        """The record stored under `key`, if it decodes and is the one that key names."""
        record = None if raw is None else decoded_or_skipped(raw, OAuthClientRecord, key)
        return record if record is not None and client_key(*client_identity(record)) == key else None

    # -- flows --------------------------------------------------------------------------------------

    async def put_flow(self, record: OAuthFlowRecord, max_per_account: int, now: float) -> bool:
        check_text(record)
        entry = keys.writable(keys.key(record.org_id, record.account_id, record.state_digest))
        flow_key = keys.key(record.state_digest)

        def _put(txn: Txn) -> bool:
            live = 0
            for key, expiry in list(keys.ranged(txn, self._by_account, keys.prefix(record.org_id, record.account_id))):
                parts = keys.parts_of(key)
                if parts is None or len(parts) != 3 or not self._owns(txn, parts):
                    txn.delete(key, db=self._by_account)  # no flow of this account's any more
                elif _expiry(expiry) <= now:
                    txn.delete(key, db=self._by_account)
                    txn.delete(keys.key(parts[2]), db=self._flows)
                elif parts[2] != record.state_digest:  # the one replaced is not counted
                    live += 1
            if live >= max_per_account:
                return False
            old = txn.get(flow_key, db=self._flows)
            previous = None if old is None else decoded_or_skipped(old, OAuthFlowRecord, record.state_digest)
            if previous is not None:
                keys.delete(txn, self._by_account, keys.key(previous.org_id, previous.account_id, record.state_digest))
            txn.put(flow_key, encode(record), db=self._flows)
            txn.put(entry, repr(record.expires_at).encode(), db=self._by_account)
            return True

        return await self._env.write(_put)

    async def take_flow(
        self, state_digest: str, now: float, account: tuple[str, str] | None = None
    ) -> OAuthFlowRecord | None:
        flow_key = keys.key(state_digest)

        def _take(txn: Txn) -> OAuthFlowRecord | None:
            raw = txn.get(flow_key, db=self._flows)
            record = None if raw is None else decoded_or_skipped(raw, OAuthFlowRecord, state_digest)
            if account is not None and (record is None or (record.org_id, record.account_id) != account):
                return None  # not that account's (an unreadable flow's account cannot be told): left as it was
            txn.delete(flow_key, db=self._flows)
            if record is None:
                return None  # an unreadable flow's entry is dropped when next met
            keys.delete(txn, self._by_account, keys.key(record.org_id, record.account_id, state_digest))
            return record if record.expires_at > now else None

        if len(flow_key) > keys.MAX_KEY_BYTES:
            return None
        return await self._env.write(_take)

    async def sweep_flows(self, now: float) -> int:
        """Reads the whole index (every account's entries) and the flows of those that expired."""

        def _sweep(txn: Txn) -> int:
            swept = 0
            for key, expiry in list(txn.cursor(db=self._by_account)):
                parts = keys.parts_of(key)
                if parts is None or len(parts) != 3 or not self._owns(txn, parts):
                    txn.delete(key, db=self._by_account)
                elif _expiry(expiry) <= now:
                    txn.delete(key, db=self._by_account)
                    swept += txn.delete(keys.key(parts[2]), db=self._flows)
            return swept

        return await self._env.write(_sweep)

    def _owns(self, txn: Txn, parts: list[str]) -> bool:
        """Whether the index entry (org, account, digest) still names a stored flow of that account: one that
        no longer decodes is taken to be (its account cannot be told otherwise)."""
        raw = txn.get(keys.key(parts[2]), db=self._flows)
        if raw is None:
            return False
        flow = decoded_or_skipped(raw, OAuthFlowRecord, parts[2])
        return flow is None or (flow.org_id, flow.account_id) == (parts[0], parts[1])

    # -- refresh claims -----------------------------------------------------------------------------

    async def claim_refresh(self, connection: ConnectionKey, holder: str, until: float, now: float) -> bool:
        key = keys.writable(keys.key(*connection))

        def _claim(txn: Txn) -> bool:
            raw = txn.get(key, db=self._claims)
            if raw is not None:
                held_by, _, lapses = bytes(raw).partition(b"\x00")
                if held_by != holder.encode() and _expiry(lapses) > now:
                    return False
            txn.put(key, holder.encode() + b"\x00" + repr(until).encode(), db=self._claims)
            return True

        return await self._env.write(_claim)

    async def release_refresh(self, connection: ConnectionKey, holder: str) -> None:
        key = keys.key(*connection)

        def _release(txn: Txn) -> None:
            raw = keys.get(txn, self._claims, key)
            if raw is not None and bytes(raw).partition(b"\x00")[0] == holder.encode():
                txn.delete(key, db=self._claims)

        await self._env.write(_release)

    # -- moving between backends ----------------------------------------------------------------------

    async def export_records(self) -> Exported:
        """The readable clients, each under (org, owner, account, slug): its key here already. Flows do not move."""

        def _export(txn: Txn) -> Exported:
            found = []
            for key, raw in txn.cursor(db=self._clients):
                kept = canonical(raw, OAuthClientRecord, bytes(key))
                if kept is not None and client_key(*client_identity(kept[0])) == key:
                    found.append((record_key(*client_identity(kept[0])), kept[1]))
            return sorted(found)

        return await self._env.read(_export)

    async def import_records(self, records: Exported) -> None:
        checked = []
        for key, value in records:
            record = exported_client(key, value)
            checked.append((keys.writable(client_key(*client_identity(record))), value))

        def _import(txn: Txn) -> None:
            for key, value in checked:
                txn.put(key, value, db=self._clients)

        await self._env.write(_import)


def client_identity(record: OAuthClientRecord) -> tuple[str, str, str, str]:
    return record.org_id, record.owner, record.account_id, record.slug


def client_key(org_id: str, owner: str, account_id: str, slug: str) -> bytes:
    """The account part is empty for what the org owns, whoever asks."""
    return keys.key(org_id, owner, "" if owner == ORG_OWNER else account_id, slug)


def check_client(record: OAuthClientRecord) -> None:
    if record.owner == ORG_OWNER and record.account_id:
        raise InvalidInput("An org-owned OAuth client belongs to no account.")
    if record.owner == USER_OWNER and not record.account_id:
        raise InvalidInput("A user-owned OAuth client needs its account.")
    if record.owner not in (ORG_OWNER, USER_OWNER):
        raise InvalidInput('An OAuth client owner is "org" or "user".')


def check_text(record: OAuthClientRecord | OAuthFlowRecord) -> None:
    """`InvalidInput` for a record holding a NUL in any text: PostgreSQL's `jsonb` holds none, so neither
    backend keeps one, and what either stores moves to the other."""
    if _holds_nul(converter.unstructure(record)):
        raise InvalidInput("The OAuth record holds a character that cannot be stored.")


def exported_client(key: bytes, value: bytes) -> OAuthClientRecord:
    """An exported client, checked: its value decodes, its key names it, its owner and text fit; `ValueError` or
    `InvalidInput` else."""
    kept = canonical(value, OAuthClientRecord, key)
    if kept is None or key_parts(key, 4) != list(client_identity(kept[0])):
        raise ValueError(f"not an exported OAuthClientRecord: {key[:80]!r}")
    check_client(kept[0])
    check_text(kept[0])
    return kept[0]


def _holds_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list | tuple):
        return any(_holds_nul(item) for item in value)
    if isinstance(value, dict):
        return any(_holds_nul(item) for pair in value.items() for item in pair)
    return False


def _expiry(raw: bytes) -> float:
    """An index entry's expiry; one that does not read as a number is long past."""
    try:
        expiry = float(raw)
    except ValueError:
        return -math.inf
    return expiry if not math.isnan(expiry) else -math.inf
