"""The audit trail through a store outage: records handed over while the store refuses are held (bounded) and
written once it answers again, none lost and none written twice; a shutdown during the outage says what it
could not write."""

import logging
from collections.abc import Callable
from typing import Any

import pytest
import trio

from executor_mcp.audit import trail as trail_module
from executor_mcp.audit.model import AuditRecord, to_bytes
from executor_mcp.audit.trail import AuditTrail
from executor_mcp.storage.interfaces import StoreUnavailable

NOW = 1_800_000_000.0


def record(index: int) -> AuditRecord:
    return AuditRecord(
        at=NOW + index,
        account="alice",
        org="acme",
        session_id="s" * 64,
        tool=f"github.issues.t{index}",
        decision="approve",
        outcome="ok",
        duration_ms=1.0,
    )


class FlakyStore:
    """An audit store that refuses while `down`, as a PostgreSQL outage does, and keeps what it accepts."""

    def __init__(self) -> None:
        self.down = False
        self.rows: dict[bytes, bytes] = {}
        self.refused = 0

    async def append_audit(self, entries: list[tuple[bytes, bytes]]) -> None:
        await trio.lowlevel.checkpoint()
        if self.down:
            self.refused += 1
            raise StoreUnavailable("the database is unavailable (OperationalError: connection refused)")
        for key, value in entries:
            self.rows.setdefault(key, value)

    async def sweep_audit(self, start: bytes, expired: Callable[[bytes], bool], after: Any, batch: int) -> None:
        return None


async def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    with trio.fail_after(seconds):
        while not condition():  # noqa: ASYNC110
            await trio.sleep(0.01)


async def test_records_held_through_an_outage_are_all_written_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    store = FlakyStore()
    trail = AuditTrail(store, retention=3600.0)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(trail.run)
        await trail.record(record(0))
        await wait_until(lambda: len(store.rows) == 1)

        store.down = True
        for index in range(1, 40):
            await trail.record(record(index))
        await wait_until(lambda: store.refused >= 3)  # tried again and again, the records held meanwhile
        assert len(store.rows) == 1

        store.down = False
        await wait_until(lambda: len(store.rows) == 40, seconds=trail_module.WRITE_BACKOFF.ceiling + 3)
        nursery.cancel_scope.cancel()
    assert sorted(store.rows.values()) == sorted(to_bytes(record(index)) for index in range(40))
    # One line per failed attempt, no traceback: an outage is a condition, not a defect.
    assert all(entry.exc_info is None for entry in caplog.records if "audit" in entry.getMessage())


async def test_memory_stays_bounded_while_the_store_is_down(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = FlakyStore()
    store.down = True
    trail = AuditTrail(store, retention=3600.0)  # type: ignore[arg-type]
    bound = trail_module.QUEUED + trail_module.BATCH
    async with trio.open_nursery() as nursery:
        await nursery.start(trail.run)
        for index in range(bound):
            await trail.record(record(index))
        # The writer holds one batch and the channel is full: the next call waits for room instead of growing
        # memory, and past its bound gives up, saying so.
        await wait_until(lambda: trail._unwritten() == bound)
        monkeypatch.setattr(trail_module, "HAND_OVER_SECONDS", 0.2)
        await trail.record(record(-1))
        assert trail._unwritten() == bound
        assert "dropped" in caplog.text
        store.down = False
        await wait_until(lambda: len(store.rows) == bound, seconds=10)
        nursery.cancel_scope.cancel()


async def test_a_shutdown_during_an_outage_says_what_it_could_not_write(caplog: pytest.LogCaptureFixture) -> None:
    store = FlakyStore()
    store.down = True
    trail = AuditTrail(store, retention=3600.0)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(trail.run)
        for index in range(3):
            await trail.record(record(index))
        with caplog.at_level(logging.ERROR, logger="executor_mcp.audit.trail"):
            await trail.drained(0.3)
        nursery.cancel_scope.cancel()
    assert "3 audit records could not be written" in caplog.text
