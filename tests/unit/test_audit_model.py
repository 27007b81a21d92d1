"""The audit log's keys, filters and parsing (no I/O), and its store on a real control plane: pages in time
order within one org, a sweep of every org's expired records in bounded batches."""

from datetime import UTC, datetime

import pytest

from executor_mcp.audit.model import (
    AuditQuery,
    AuditRecord,
    integration_of,
    key_time,
    made_before,
    next_org,
    org_prefix,
    parse_since,
    record_key,
    time_key,
    to_bytes,
)
from executor_mcp.audit.trail import AuditTrail
from executor_mcp.storage.control import ControlPlane

NOW = 1_800_000_000.0


def record(at: float = NOW, org: str = "acme", tool: str = "github.issues.list", **fields: object) -> AuditRecord:
    values: dict = {"account": "alice", "session_id": "s" * 64, "decision": "approve", "outcome": "ok"}
    return AuditRecord(at=at, org=org, tool=tool, duration_ms=1.5, **{**values, **fields})


def test_keys_are_in_time_order_within_an_org_and_carry_their_time() -> None:
    early, late = record_key(record(NOW)), record_key(record(NOW + 0.000001))
    assert early < late
    assert key_time(early) == pytest.approx(NOW)
    assert made_before(early, NOW + 1)
    assert not made_before(late, NOW)
    assert time_key("acme", NOW) <= early < next_org(early)


def test_an_org_cannot_reach_into_another_orgs_range() -> None:
    """Org ids are token claims: one that is a prefix of another, or holds a separator, gets a range of its own."""
    prefixes = {org_prefix(org) for org in ("acme", "acme\x00", "acm", "acme\x00evil", "")}
    assert len(prefixes) == 5
    assert len({len(prefix) for prefix in prefixes}) == 1
    assert not record_key(record(org="acme\x00evil")).startswith(org_prefix("acme"))


def test_filters() -> None:
    query = AuditQuery(org="acme", session_id="s" * 64, tool="github.*", account="alice")
    assert query.admits(record())
    assert not query.admits(record(tool="slack.post"))
    assert not query.admits(record(account="bob"))
    assert not query.admits(record(session_id="t" * 64))
    assert not AuditQuery(org="acme").narrowed


def test_since() -> None:
    assert parse_since("15m", NOW) == NOW - 900
    assert parse_since("2h", NOW) == NOW - 7200
    assert parse_since("1.5d", NOW) == NOW - 129600
    assert parse_since("1800000000000", NOW) == NOW
    assert parse_since("2027-01-15T08:00:00", NOW) == datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()
    assert parse_since("2027-01-15T08:00:00+01:00", NOW) == datetime(2027, 1, 15, 7, tzinfo=UTC).timestamp()
    for bad in ("yesterday", "15x", "", "-5m", "9" * 80):
        with pytest.raises(ValueError, match="since"):
            parse_since(bad, NOW)


def test_integration_of() -> None:
    assert integration_of("github.issues.list") == "github"
    assert integration_of("tools.executor.coreTools.policies.list") == "executor"
    assert integration_of("search") == integration_of("describe.tool") == "builtin"


async def test_pages_newest_first_and_the_sweep_removes_only_the_expired(control: ControlPlane) -> None:
    trail = AuditTrail(control.audit, retention=100.0, clock=lambda: NOW)
    stored = [record(NOW - age, org=org) for age in (500, 300, 50, 10) for org in ("acme", "globex")]
    await control.audit.append_audit([(record_key(item), to_bytes(item)) for item in stored])
    page = await trail.page(AuditQuery(org="acme", limit=3))
    assert [item.at for item in page.records] == [NOW - 10, NOW - 50, NOW - 300]
    rest = await trail.page(AuditQuery(org="acme", limit=3, before=page.next_before))
    assert ([item.at for item in rest.records], rest.next_before) == ([NOW - 500], None)
    recent = await trail.page(AuditQuery(org="acme", since=NOW - 60))
    assert [item.at for item in recent.records] == [NOW - 10, NOW - 50]

    await trail.sweep()
    for org in ("acme", "globex"):
        kept = await trail.page(AuditQuery(org=org))
        assert [item.at for item in kept.records] == [NOW - 10, NOW - 50]
