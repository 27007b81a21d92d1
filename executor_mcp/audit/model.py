"""The audit log's records, keys and filters. No I/O.

One record per tool call that sandboxed code made: who (account, org), where (session, and the execution's id
once it paused), what (the tool path), what the policies decided and by which rule, how an approval was
answered and by whom, how long it took and how it ended. Never an argument, a result or a secret: what a call
carried stays in its session's journal, which the audit does not read.

Records are kept in the control plane under `org digest, time, random suffix`, so one org's records are one key
range in time order: a listing is a range read from the newest back, and the retention sweep reads each org's
range from its oldest record forward, up to the first it keeps, then jumps to the next org.
"""

import fnmatch
import hashlib
import os
import struct
from datetime import UTC, datetime
from typing import Any

import attrs

from executor_mcp.storage.records import decode, encode

# Decisions, as the policy engine names its actions.
APPROVE, REQUIRE_APPROVAL, BLOCK = "approve", "require_approval", "block"
# How a gated call's approval ended; None when it was not gated.
ACCEPTED, DECLINED, CANCELLED, UNANSWERED = "accepted", "declined", "cancelled", "unanswered"
APPROVAL_OUTCOMES = {"accept": ACCEPTED, "decline": DECLINED, "cancel": CANCELLED}
# How a call ended when it produced no `{ok: false, error: {code}}` of its own; a call whose approval was refused
# ends as its approval did (`declined`, `cancelled`), not as `threw`, though the refusal throws in the sandbox.
OK, THREW, CUT_OFF = "ok", "threw", "cut_off"

MAX_LISTED = 1000
MAX_TOOL_PATH = 512  # longer paths (which name no tool) are kept cut
_ORG_BYTES = 16
_TIME = struct.Struct(">Q")  # microseconds since the epoch, big-endian: byte order is time order
_LATEST_MICROS = 2**64 - 1
_LATEST_SECONDS = 2.0**63 / 1_000_000


@attrs.frozen
class AuditRecord:
    at: float  # epoch seconds, when the call began
    account: str
    org: str
    session_id: str
    tool: str
    decision: str | None  # None: the call never reached a policy (an unknown tool, invalid arguments)
    outcome: str  # ok, threw, declined, cancelled, cut_off, or the failure code of the call's result
    duration_ms: float
    rule_id: str | None = None  # the rule that decided; None with a decision: the tool's own default
    rule_owner: str | None = None
    rule_pattern: str | None = None
    approval: str | None = None
    answered_by: str | None = None  # agent (a resume), console, client (native elicitation)
    execution_id: str | None = None  # the id an approval's pause gave the execution


@attrs.frozen
class AuditQuery:
    """What a listing wants: one org's records, newest first, at most `limit`, optionally narrowed."""

    org: str
    since: float | None = None
    before: bytes | None = None  # a key from a previous page: only records older than it
    session_id: str | None = None
    tool: str | None = None  # a glob (`tools.github.*`, `*issues*`)
    account: str | None = None  # only this account's (an org member who is not its admin sees only its own)
    limit: int = 100

    @classmethod
    def seen_by(cls, org: str, account: str, *, org_admin: bool, **narrowing: Any) -> "AuditQuery":
        """What a member may list: an org admin sees the org's calls, any other member only their own (the API's
        rule, and the console page's)."""
        return cls(org=org, account=None if org_admin else account, **narrowing)

    @property
    def narrowed(self) -> bool:
        return self.session_id is not None or self.tool is not None or self.account is not None

    def admits(self, record: AuditRecord) -> bool:
        if self.session_id is not None and record.session_id != self.session_id:
            return False
        if self.account is not None and record.account != self.account:
            return False
        return self.tool is None or fnmatch.fnmatchcase(record.tool, self.tool)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float) -> float:
    """`--since`/`since=`: a duration back from now (`90s`, `15m`, `2h`, `7d`), an ISO 8601 time (UTC unless it
    says otherwise), or epoch milliseconds. ValueError in words otherwise."""
    value = text.strip()
    if len(value) > 64:
        raise ValueError("since is too long")
    if value[-1:] in _UNITS and value[:-1].replace(".", "", 1).isdigit():
        return now - float(value[:-1]) * _UNITS[value[-1]]
    if value.isdigit():
        return int(value) / 1000
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        words = "since must be a duration (15m, 2h, 7d), an ISO 8601 time or epoch milliseconds"
        raise ValueError(f"{words}: {value}") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def integration_of(tool: str) -> str:
    """The integration a tool path belongs to (its first segment); the catalog's own built-ins are `builtin`."""
    first = tool.removeprefix("tools.").split(".", 1)[0]
    return "builtin" if first in ("search", "describe") else first


def org_prefix(org: str) -> bytes:
    """A fixed-length digest of the org: an org id is a token's claim, so nothing in it may reach into another
    org's range (a separator it contains, a prefix of a longer id)."""
    return hashlib.sha256(b"audit org\x00" + org.encode("utf-8", "surrogatepass")).digest()[:_ORG_BYTES]


def record_key(record: AuditRecord, suffix: bytes | None = None) -> bytes:
    """Unique however many records share a microsecond: a random suffix follows the time."""
    return time_key(record.org, record.at) + (suffix or os.urandom(6))


def time_key(org: str, at: float) -> bytes:
    """The first key of `org` at or after `at`."""
    return org_prefix(org) + _TIME.pack(_micros(at))


def key_time(key: bytes) -> float | None:
    """When the record under `key` was made; None for a key not of this shape."""
    if len(key) < _ORG_BYTES + _TIME.size:
        return None
    return _TIME.unpack(key[_ORG_BYTES : _ORG_BYTES + _TIME.size])[0] / 1e6


def to_bytes(record: AuditRecord) -> bytes:
    return encode(record)


def from_bytes(raw: bytes) -> AuditRecord:
    return decode(raw, AuditRecord)


def record_json(record: AuditRecord) -> dict[str, object]:
    """A record as the API and `audit list --json` show it (times in milliseconds)."""
    rule = None
    if record.decision is not None:
        rule = (
            {"source": "annotation"}
            if record.rule_id is None
            else {"source": "policy", "id": record.rule_id, "owner": record.rule_owner, "pattern": record.rule_pattern}
        )
    return {
        "at": int(record.at * 1000),
        "account": record.account,
        "org": record.org,
        "sessionId": record.session_id,
        "executionId": record.execution_id,
        "tool": record.tool,
        "decision": record.decision,
        "rule": rule,
        "approval": record.approval,
        "answeredBy": record.answered_by,
        "durationMs": round(record.duration_ms, 3),
        "outcome": record.outcome,
    }


def made_before(key: bytes, before: float) -> bool:
    """Whether the record under `key` was made before `before` (a key of another shape is kept)."""
    made = key_time(key)
    return made is not None and made < before


def next_org(key: bytes) -> bytes:
    """A key after every key of `key`'s org: where the sweep goes on once an org's old records are gone."""
    return key[:_ORG_BYTES] + b"\xff"


def _micros(at: float) -> int:
    """Clamped to what a key holds: a `since` of sixty digits is a time after every record, not a 500."""
    if at != at:  # NaN
        return 0
    return min(max(0, int(min(at, _LATEST_SECONDS) * 1_000_000)), _LATEST_MICROS)
