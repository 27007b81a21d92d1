"""Organizations (`interfaces.OrgStore`) and API keys (`interfaces.ApiKeyStore`) in LMDB.

A revocation is the org's record alone: running servers read it (`revoked_among`) each poll. Data dirs of
before keep a `revocation-requests` table that nothing opens any more (left as it is: it holds no data worth a
migration).
"""

from collections.abc import Callable, Collection
from typing import Any

import attrs

from executor_mcp.storage.environment import Environment, Txn
from executor_mcp.storage.exported import lmdb_text_keyed, lmdb_text_keyed_import
from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.lmdb import keys
from executor_mcp.storage.records import (
    ApiKeyRecord,
    OrgRecord,
    UsageLimits,
    decode,
    decoded_or_skipped,
    encode,
)


class LmdbOrgs:
    def __init__(self, env: Environment) -> None:
        self._env = env
        self._orgs = env.database(b"orgs")

    async def get_org(self, org_id: str) -> OrgRecord | None:
        raw = await self._env.read(lambda txn: txn.get(org_id.encode(), db=self._orgs))
        return None if raw is None else decode(raw, OrgRecord)

    async def note_org(self, org_id: str, at: float) -> OrgRecord:
        def _note(txn: Txn) -> OrgRecord:
            raw = txn.get(org_id.encode(), db=self._orgs)
            if raw is not None:
                return decode(raw, OrgRecord)
            record = OrgRecord(org_id=org_id, first_seen_at=at)
            txn.put(org_id.encode(), encode(record), db=self._orgs)
            return record

        return await self._env.write(_note)

    async def set_org_revoked(self, org_id: str, revoked: bool, at: float) -> OrgRecord:
        return await self._env.write(lambda txn: self._change(txn, org_id, at, lambda _: {"revoked": revoked}))

    async def set_org_limits(
        self, org_id: str, change: Callable[[UsageLimits | None], UsageLimits | None], at: float
    ) -> OrgRecord:
        return await self._env.write(
            lambda txn: self._change(txn, org_id, at, lambda known: {"limits": change(known.limits)})
        )

    def _change(self, txn: Txn, org_id: str, at: float, edit: Callable[[OrgRecord], dict[str, Any]]) -> OrgRecord:
        raw = txn.get(org_id.encode(), db=self._orgs)
        known = None if raw is None else decoded_or_skipped(raw, OrgRecord, org_id)
        base = known or OrgRecord(org_id=org_id, first_seen_at=at)
        record = attrs.evolve(base, changed_at=at, **edit(base))
        txn.put(org_id.encode(), encode(record), db=self._orgs)
        return record

    async def orgs(self) -> list[OrgRecord]:
        return await self._env.read(lambda txn: [decode(v, OrgRecord) for _, v in txn.cursor(db=self._orgs)])

    async def revoked_among(self, org_ids: Collection[str]) -> set[str]:
        def _revoked(txn: Txn) -> set[str]:
            revoked = set()
            for org_id in set(org_ids):
                raw = keys.get(txn, self._orgs, org_id.encode())  # too long to store: never revoked
                record = None if raw is None else decoded_or_skipped(raw, OrgRecord, org_id)
                if record is not None and record.revoked:
                    revoked.add(org_id)
            return revoked

        return await self._env.read(_revoked) if org_ids else set()

    async def export_records(self) -> Exported:
        return await self._env.read(lambda txn: lmdb_text_keyed(txn, self._orgs, OrgRecord))

    async def import_records(self, records: Exported) -> None:
        await self._env.write(lambda txn: lmdb_text_keyed_import(txn, self._orgs, records, OrgRecord))


class LmdbApiKeys:
    """Keyed by the secret's digest: a bearer's look-up is a point read; a revocation by public id scans the
    keys (an admin command, over a table of operator-made keys)."""

    def __init__(self, env: Environment) -> None:
        self._env = env
        self._keys = env.database(b"api-keys")

    async def put_api_key(self, digest: str, record: ApiKeyRecord) -> None:
        await self._env.write(lambda txn: txn.put(digest.encode(), encode(record), db=self._keys))

    async def get_api_key(self, digest: str) -> ApiKeyRecord | None:
        raw = await self._env.read(lambda txn: txn.get(digest.encode(), db=self._keys))
        return None if raw is None else decode(raw, ApiKeyRecord)

    async def revoke_api_key(self, key_id: str) -> ApiKeyRecord | None:
        def _revoke(txn: Txn) -> ApiKeyRecord | None:
            for digest, raw in txn.cursor(db=self._keys):
                record = decode(raw, ApiKeyRecord)
                if record.key_id == key_id:
                    record = attrs.evolve(record, revoked=True)
                    txn.put(digest, encode(record), db=self._keys)
                    return record
            return None

        return await self._env.write(_revoke)

    async def api_keys(self) -> list[ApiKeyRecord]:
        return await self._env.read(lambda txn: [decode(v, ApiKeyRecord) for _, v in txn.cursor(db=self._keys)])

    async def export_records(self) -> Exported:
        return await self._env.read(lambda txn: lmdb_text_keyed(txn, self._keys, ApiKeyRecord))

    async def import_records(self, records: Exported) -> None:
        await self._env.write(lambda txn: lmdb_text_keyed_import(txn, self._keys, records, ApiKeyRecord))
