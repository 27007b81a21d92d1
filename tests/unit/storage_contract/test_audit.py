"""The audit store's contract, on every backend: append-only, newest first in pages, swept by age.

Keys here are of the shape the store is promised (`audit/model.py`'s): an org's prefix, then a time, all of one
length; the store never reads inside them."""

from executor_mcp.storage.interfaces import AuditStore


def k(org: str, at: int) -> bytes:
    return org.encode() + b":" + b"%08d" % at


def everything(_: bytes) -> bool:
    return True


async def filled(audit: AuditStore) -> None:
    await audit.append_audit([(k("a", at), b"a%d" % at) for at in range(1, 6)])
    await audit.append_audit([(k("b", at), b"b%d" % at) for at in range(1, 4)])


async def test_appending_keeps_what_is_there(audit: AuditStore) -> None:
    await audit.append_audit([(k("a", 1), b"first")])
    await audit.append_audit([(k("a", 1), b"again"), (k("a", 2), b"second")])
    found, more = await audit.audit_newest(b"a:", k("a", 0), k("a", 99), 10, everything, 100)
    assert (found, more) == ([(k("a", 2), b"second"), (k("a", 1), b"first")], None)


async def test_the_newest_come_first_a_page_at_a_time(audit: AuditStore) -> None:
    await filled(audit)
    found, more = await audit.audit_newest(b"a:", k("a", 0), k("a", 99), 2, everything, 100)
    assert [value for _, value in found] == [b"a5", b"a4"]
    assert more is not None
    found, more = await audit.audit_newest(b"a:", k("a", 0), more, 2, everything, 100)
    assert [value for _, value in found] == [b"a3", b"a2"]
    found, more = await audit.audit_newest(b"a:", k("a", 0), more, 2, everything, 100)
    assert ([value for _, value in found], more) == ([b"a1"], None)
    # A range within the org's, and the last org's entries (no key after them).
    found, more = await audit.audit_newest(b"a:", k("a", 2), k("a", 4), 10, everything, 100)
    assert ([value for _, value in found], more) == ([b"a3", b"a2"], None)
    found, _ = await audit.audit_newest(b"b:", k("b", 0), k("b", 99), 10, everything, 100)
    assert [value for _, value in found] == [b"b3", b"b2", b"b1"]
    assert await audit.audit_newest(b"c:", k("c", 0), k("c", 99), 10, everything, 100) == ([], None)


async def test_a_filter_costs_a_bounded_read(audit: AuditStore) -> None:
    await filled(audit)
    odd = lambda value: int(value[1:]) % 2 == 1  # noqa: E731
    found, more = await audit.audit_newest(b"a:", k("a", 0), k("a", 99), 10, odd, 100)
    assert ([value for _, value in found], more) == ([b"a5", b"a3", b"a1"], None)
    found, more = await audit.audit_newest(b"a:", k("a", 0), k("a", 99), 10, lambda _: False, 2)
    assert found == []
    assert more is not None  # looked at two, and says where to go on
    found, more = await audit.audit_newest(b"a:", k("a", 0), more, 10, everything, 100)
    assert [value for _, value in found] == [b"a3", b"a2", b"a1"]


async def test_a_sweep_deletes_what_expired_in_every_org(audit: AuditStore) -> None:
    await filled(audit)

    def expired(key: bytes) -> bool:
        return int(key[2:]) < 3

    def next_org(key: bytes) -> bytes:
        return key[:2] + b"\xff"

    start: bytes | None = b""
    rounds = 0
    while start is not None:
        start = await audit.sweep_audit(start, expired, next_org, 1)
        rounds += 1
    assert rounds > 1  # a batch of one goes on where it stopped
    found, _ = await audit.audit_newest(b"a:", k("a", 0), k("a", 99), 10, everything, 100)
    assert [value for _, value in found] == [b"a5", b"a4", b"a3"]
    found, _ = await audit.audit_newest(b"b:", k("b", 0), k("b", 99), 10, everything, 100)
    assert [value for _, value in found] == [b"b3"]
    assert await audit.sweep_audit(b"", expired, next_org, 100) is None
