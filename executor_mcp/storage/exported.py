"""The form a store's records take between backends (`interfaces.Transferable`): (key, value) pairs that say
the same on every backend, whatever each one keeps on disk, so that a copy is checked by comparing them.

A key is the record's identifying parts as JSON strings joined by NUL (`lmdb.keys.key`: no part can forge the
separator); a value is the record's canonical bytes: an attrs record decoded and encoded again (`records.encode`,
fields in their declared order: PostgreSQL's `jsonb` keeps neither the stored key order nor its spacing, so
the stored bytes are not compared), a JSON object with its keys sorted, or opaque bytes (sealed secrets, audit
entries, sources, signing keys) as they are. A record that no longer decodes is logged and left out, as every
listing leaves it out: the copy holds what the source can be read as, and says so by its counts.
"""

import json
from typing import Any, TypeVar

from executor_mcp.storage.environment import Database, Txn
from executor_mcp.storage.interfaces import Exported
from executor_mcp.storage.lmdb import keys
from executor_mcp.storage.records import decoded_or_skipped, encode

R = TypeVar("R")

# The kinds of record a catalog exports, each the first part of its key: integrations (org, slug), connections
# (org, owner, account, integration, name), a held hash's source and compiled catalog, an org's revision.
INTEGRATION, CONNECTION, SOURCE, COMPILED, REVISION = "integration", "connection", "source", "compiled", "revision"


def record_key(*parts: str) -> bytes:
    return keys.key(*parts)


def key_parts(raw: bytes, count: int) -> list[str]:
    """A key made by `record_key` of `count` parts; `ValueError` for anything else (an import of records that
    were not exported is refused, not half written)."""
    parts = keys.parts_of(raw)
    if parts is None or len(parts) != count:
        raise ValueError(f"not an exported record key: {raw[:80]!r}")
    return parts


def catalog_key_parts(raw: bytes) -> list[str]:
    """A catalog record's key: its kind, then its identifying parts (the caller checks how many)."""
    parts = keys.parts_of(raw)
    if not parts:
        raise ValueError(f"not an exported catalog record: {raw[:80]!r}")
    return parts


def canonical(raw: bytes, cls: type[R], what: Any) -> tuple[R, bytes] | None:
    """The stored record and its canonical bytes; None (logged) when it no longer decodes."""
    record = decoded_or_skipped(bytes(raw), cls, what)
    return None if record is None else (record, encode(record))


def lmdb_text_keyed(txn: Txn, db: Database, cls: type[Any]) -> Exported:
    """An LMDB table keyed by one identifier's UTF-8 (orgs, API keys, console links), exported."""
    found = []
    for key, raw in txn.cursor(db=db):
        try:
            name = bytes(key).decode()
        except UnicodeDecodeError:
            continue  # no write of ours makes such a key
        kept = canonical(raw, cls, name)
        if kept is not None:
            found.append((record_key(name), kept[1]))
    return sorted(found)


def lmdb_text_keyed_import(txn: Txn, db: Database, records: Exported, cls: type[Any]) -> None:
    """`lmdb_text_keyed`'s records written back, each value checked to decode first."""
    for key, value in records:
        (name,) = key_parts(key, 1)
        if canonical(value, cls, name) is None:
            raise ValueError(f"not an exported {cls.__name__}: {name!r}")
        txn.put(keys.writable(name.encode()), value, db=db)


def text_keyed(rows: list[tuple[str, str]], cls: type[Any]) -> Exported:
    """A PostgreSQL table of one identifier and its `jsonb` record (orgs, API keys, console links), exported
    from its `(identifier, record::text)` rows."""
    found = []
    for name, raw in rows:
        kept = canonical(raw.encode(), cls, name)
        if kept is not None:
            found.append((record_key(name), kept[1]))
    return sorted(found)


def text_keyed_rows(records: Exported, cls: type[R]) -> list[tuple[str, R, str]]:
    """`text_keyed`'s records as rows to insert: (identifier, record, its JSON text), each checked."""
    rows = []
    for key, value in records:
        (name,) = key_parts(key, 1)
        kept = canonical(value, cls, name)
        if kept is None:
            raise ValueError(f"not an exported {cls.__name__}: {name!r}")
        rows.append((name, kept[0], kept[1].decode()))
    return rows


def canonical_json(value: Any) -> bytes:
    """A JSON value with its objects' keys sorted: equal values, equal bytes, whichever backend kept them."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
