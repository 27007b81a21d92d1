"""The keys every process on the data dir signs with (`interfaces.SigningKeys`), the console's sign-in links
(`interfaces.SignInStore`) and the server's recorded settings (`interfaces.DataDirFacts`), in LMDB."""

import logging
import secrets
from collections.abc import Mapping

from executor_mcp.codec import dumps, loads
from executor_mcp.storage.environment import Environment, Txn
from executor_mcp.storage.exported import (
    canonical_json,
    key_parts,
    lmdb_text_keyed,
    lmdb_text_keyed_import,
    record_key,
)
from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.records import ConsoleLinkRecord, decoded_or_skipped, encode

log = logging.getLogger(__name__)

_CONSOLE_KEY = b"cookie-key"
_REQUEST_STATE_KEY = b"request-state-key"
_WORKSPACE_KEY = b"workspace-id-key"
_FACTS_KEY = b"data-dir-facts"
_SIGNING_KEYS = (_CONSOLE_KEY, _REQUEST_STATE_KEY, _WORKSPACE_KEY)


class LmdbSigningKeys:
    def __init__(self, env: Environment) -> None:
        self._env = env
        self._keys = env.database(b"console")

    async def console_key(self) -> bytes:
        return await self._signing_key(_CONSOLE_KEY)

    async def request_state_key(self) -> bytes:
        return await self._signing_key(_REQUEST_STATE_KEY)

    async def workspace_key(self) -> bytes:
        return await self._signing_key(_WORKSPACE_KEY)

    async def _signing_key(self, name: bytes) -> bytes:
        def _key(txn: Txn) -> bytes:
            key = txn.get(name, db=self._keys)
            if key is None:
                key = secrets.token_bytes(32)
                txn.put(name, key, db=self._keys)
            return bytes(key)

        return await self._env.write(_key)

    async def export_records(self) -> Exported:
        """The keys made so far, by name (one never asked for is made on the target when first asked)."""

        def _export(txn: Txn) -> Exported:
            found = [(record_key(name.decode()), txn.get(name, db=self._keys)) for name in _SIGNING_KEYS]
            return sorted((key, bytes(value)) for key, value in found if value is not None)

        return await self._env.read(_export)

    async def import_records(self, records: Exported) -> None:
        def _import(txn: Txn) -> None:
            for key, value in records:
                (name,) = key_parts(key, 1)
                if name.encode() not in _SIGNING_KEYS:
                    raise ValueError(f"not a signing key: {name!r}")
                txn.put(name.encode(), value, db=self._keys)

        await self._env.write(_import)


class LmdbSignIns:
    def __init__(self, env: Environment) -> None:
        self._env = env
        self._links = env.database(b"console-links")

    async def put_console_link(self, digest: str, record: ConsoleLinkRecord, now: float) -> None:
        """Expired links are swept here, on the next link made: there are never many."""

        def _put(txn: Txn) -> None:
            for key, raw in list(txn.cursor(db=self._links)):
                old = decoded_or_skipped(raw, ConsoleLinkRecord, bytes(key))
                if old is None or old.expires_at <= now:
                    txn.delete(key, db=self._links)
            txn.put(digest.encode(), encode(record), db=self._links)

        await self._env.write(_put)

    async def take_console_link(self, digest: str, now: float) -> ConsoleLinkRecord | None:
        def _take(txn: Txn) -> ConsoleLinkRecord | None:
            raw = txn.pop(digest.encode(), db=self._links)
            record = None if raw is None else decoded_or_skipped(raw, ConsoleLinkRecord, digest)
            return record if record is not None and record.expires_at > now else None

        return await self._env.write(_take)

    async def export_records(self) -> Exported:
        """Expired links too: they are swept on the next link made, on either backend."""
        return await self._env.read(lambda txn: lmdb_text_keyed(txn, self._links, ConsoleLinkRecord))

    async def import_records(self, records: Exported) -> None:
        await self._env.write(lambda txn: lmdb_text_keyed_import(txn, self._links, records, ConsoleLinkRecord))


class LmdbDataDirFacts:
    def __init__(self, env: Environment) -> None:
        self._env = env
        self._server = env.database(b"server")

    async def record_data_dir_facts(self, facts: Mapping[str, object]) -> None:
        await self._env.write(lambda txn: txn.put(_FACTS_KEY, dumps(dict(facts)), db=self._server))

    async def data_dir_facts(self) -> dict[str, object]:
        def _read(txn: Txn) -> dict[str, object]:
            raw = txn.get(_FACTS_KEY, db=self._server)
            try:
                facts = loads(bytes(raw)) if raw is not None else {}
            except ValueError:  # not JSON, or not UTF-8
                log.error("ignoring an unreadable record of the server's settings")
                return {}
            return facts if isinstance(facts, dict) else {}

        return await self._env.read(_read)

    async def export_records(self) -> Exported:
        facts = await self.data_dir_facts()
        return [(record_key(_FACTS_KEY.decode()), canonical_json(facts))] if facts else []

    async def import_records(self, records: Exported) -> None:
        def _import(txn: Txn) -> None:
            for key, value in records:
                if key_parts(key, 1) != [_FACTS_KEY.decode()] or not isinstance(loads(value), dict):
                    raise ValueError("not an exported record of the server's settings")
                txn.put(_FACTS_KEY, value, db=self._server)

        await self._env.write(_import)
