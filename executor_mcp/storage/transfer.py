"""Moving a control plane to another backend (`executor-mcp migrate --from-lmdb DIR`): every domain's records
copied from one `ControlPlane` into an empty one, then checked on both sides.

Each domain moves through its store's `Transferable` methods, in the form every backend shares
(`storage/exported.py`): signing keys as they are (existing console sign-ins, approval `requestState`s and
workspace ids stay valid), secret items sealed as they are (the target's instances open them with the same
master key), the catalog with its sources, compiled catalogs and discovered state, the OAuth clients (not the
sign-ins in progress: each lives minutes, and one cut short is started again). What the check compares is
each domain's export from the source and from the target: their counts, and a digest over the records, which
match only when every record arrived whole.

The session directory does not move. A 2025-era session lives in its file on the data dir that served it, and
its id names no instance; on the new backend every session id names its home instance. Its clients initialize
again (the restart envelope tells them to), and a pause kept in such a session is not carried over.

Copying refuses a target that holds any record: a merge would have to choose between two installs' keys and
rules, and a check of a merged target could not tell a copy from what was there. A copy that fails part-way
leaves the domains it wrote; the target is then not empty, so the way back is a fresh database.
"""

import hashlib
from collections.abc import Callable

import attrs

from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import Exported, Transferable

# Each domain that moves, and its store on a control plane, in the order they are copied.
DOMAINS: dict[str, Callable[[ControlPlane], Transferable]] = {
    "orgs": lambda plane: plane.orgs,
    "api_keys": lambda plane: plane.api_keys,
    "policies": lambda plane: plane.policies,
    "toolkits": lambda plane: plane.toolkits,
    "audit": lambda plane: plane.audit,
    "signing_keys": lambda plane: plane.signing_keys,
    "console_links": lambda plane: plane.sign_ins,
    "data_dir_facts": lambda plane: plane.facts,
    "catalog": lambda plane: plane.catalog,
    "secrets": lambda plane: plane.secrets,
    "oauth_clients": lambda plane: plane.oauth,
}


class TargetNotEmpty(Exception):
    """The target already holds records; `held` says how many, by domain."""

    def __init__(self, held: dict[str, int]) -> None:
        self.held = held
        listed = ", ".join(f"{domain} {count}" for domain, count in held.items())
        super().__init__(f"the target already holds records ({listed}): move into an empty database")


@attrs.frozen
class DomainCheck:
    """One domain on both sides: how many records each holds, their digests, and (when they differ) how many
    of the source's keys the target lacks, holds with another value, or holds beyond them."""

    domain: str
    source_records: int
    target_records: int
    source_digest: str
    target_digest: str
    missing: int = 0
    changed: int = 0
    extra: int = 0

    @property
    def verified(self) -> bool:
        return self.source_records == self.target_records and self.source_digest == self.target_digest

    def difference(self) -> str:
        """What differs, in words (empty when nothing does)."""
        if self.verified:
            return ""
        return (
            f"{self.domain}: source {self.source_records} records, target {self.target_records}; "
            f"{self.missing} missing, {self.changed} changed, {self.extra} extra"
        )


@attrs.frozen
class LeftBehind:
    """What the source holds that does not move: its session directory's entries, and how many keep a pause."""

    sessions: int
    paused: int


def digest(records: Exported) -> str:
    """SHA-256 over the records in key order, each key and value length-prefixed (no two lists collide)."""
    hasher = hashlib.sha256()
    for key, value in sorted(records):
        for part in (key, value):
            hasher.update(len(part).to_bytes(8, "big"))
            hasher.update(part)
    return hasher.hexdigest()


async def held(plane: ControlPlane) -> dict[str, int]:
    """How many records each domain of `plane` holds, for the domains that hold any."""
    counts = {domain: len(await store(plane).export_records()) for domain, store in DOMAINS.items()}
    return {domain: count for domain, count in counts.items() if count}


async def copy(source: ControlPlane, target: ControlPlane) -> dict[str, int]:
    """Copy every domain of `source` into the empty `target`, one transaction per domain; how many records
    each domain copied. `TargetNotEmpty`, with nothing written, when the target holds any record."""
    already = await held(target)
    if already:
        raise TargetNotEmpty(already)
    copied = {}
    for domain, store in DOMAINS.items():
        records = await store(source).export_records()
        if records:
            await store(target).import_records(records)
        copied[domain] = len(records)
    return copied


async def verify(source: ControlPlane, target: ControlPlane) -> list[DomainCheck]:
    """Every domain exported from both sides and compared."""
    checks = []
    for domain, store in DOMAINS.items():
        ours, theirs = await store(source).export_records(), await store(target).export_records()
        checks.append(_compared(domain, ours, theirs))
    return checks


async def left_behind(source: ControlPlane) -> LeftBehind:
    return LeftBehind(await source.sessions.session_count(), len(await source.paused.paused_sessions()))


def _compared(domain: str, ours: Exported, theirs: Exported) -> DomainCheck:
    check = DomainCheck(domain, len(ours), len(theirs), digest(ours), digest(theirs))
    if check.verified:
        return check
    mine, yours = dict(ours), dict(theirs)
    return attrs.evolve(
        check,
        missing=len(mine.keys() - yours.keys()),
        changed=sum(1 for key in mine.keys() & yours.keys() if mine[key] != yours[key]),
        extra=len(yours.keys() - mine.keys()),
    )
