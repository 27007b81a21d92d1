"""The audit log in a running server: records written in batches, read back per org, swept after retention.

A tool call hands its record over and goes on: a bounded channel carries it to one writer task, which puts
what has gathered over `GATHER_SECONDS` in one transaction (a burst of calls costs one write, not one each).
A full channel makes the calls wait rather than lose records. The writer and the sweeper are owned by the
server's root nursery; a failed write is logged and retried by the background loop, and the records it held
are kept for the retry (an outage of the shared database is such a failure: the writes resume, every held
record in them, within `WRITE_BACKOFF`'s ceiling of its end; `append_audit` ignores a key already written, so a
batch whose commit went unconfirmed is written again harmlessly). Memory stays bounded meanwhile: at most
`BATCH` held and `QUEUED` in the channel, after which calls wait for room (and past `HAND_OVER_SECONDS` a record
is dropped, said in the log). At shutdown the channel is drained before the control plane closes; what could not
be written by then is said in the log.
"""

import logging
import time
from collections.abc import Callable

import attrs
import trio

from executor_mcp.audit.model import (
    MAX_LISTED,
    AuditQuery,
    AuditRecord,
    from_bytes,
    made_before,
    next_org,
    org_prefix,
    record_key,
    time_key,
    to_bytes,
)
from executor_mcp.background import Backoff, forever
from executor_mcp.storage.interfaces import AuditStore
from executor_mcp.storage.records import decoded_or_skipped

log = logging.getLogger(__name__)

QUEUED = 4096  # records waiting for the writer; one more makes its call wait
BATCH = 512
HAND_OVER_SECONDS = 30.0  # how long a call waits for room in a full queue before its record is dropped, said
GATHER_SECONDS = 0.2  # what a crash (not a shutdown, which drains) may lose of the newest records
SWEEP_INTERVAL = 3600.0
# A failed write is tried again soon: held records should reach the store within seconds of its return.
WRITE_BACKOFF = Backoff(first=0.1, factor=2.0, ceiling=2.0)
SWEEP_BATCH = 1000
SCAN_FACTOR = 20  # a filtered page looks at up to this many records per one it may return


@attrs.frozen
class Page:
    records: list[AuditRecord]
    next_before: bytes | None  # where the next (older) page starts; None when this one reached the end


class AuditTrail:
    def __init__(self, store: AuditStore, retention: float, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._retention = retention
        self._clock = clock
        self._send, self._receive = trio.open_memory_channel[AuditRecord](QUEUED)
        self._held: list[AuditRecord] = []  # taken from the channel, not yet written
        self._idle = trio.Event()
        self._idle.set()

    async def record(self, record: AuditRecord) -> None:
        """Hand a record to the writer (waits only while the writer is `QUEUED` behind). Shielded: a call's
        record is written however the call ended; bounded, so that a writer gone for good cannot hold it."""
        with trio.CancelScope(shield=True, deadline=trio.current_time() + HAND_OVER_SECONDS) as waited:
            self._idle = trio.Event() if self._idle.is_set() else self._idle
            await self._send.send(record)
        if waited.cancelled_caught:
            log.error("an audit record of %s was dropped: the audit writer is %d records behind", record.tool, QUEUED)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(forever, "writing the audit log", self._write_forever, 0.0, WRITE_BACKOFF)
            nursery.start_soon(forever, "sweeping the audit log", self.sweep, SWEEP_INTERVAL)
            task_status.started()

    async def drained(self, bound: float) -> None:
        """Wait (at most `bound` seconds) until every record handed over is written: before the store closes."""
        with trio.move_on_after(bound):
            while self._unwritten():
                await self._idle.wait()
                await trio.lowlevel.checkpoint()
        if unwritten := self._unwritten():
            log.error("%d audit records could not be written before the audit log closed", unwritten)

    def _unwritten(self) -> int:
        return len(self._held) + self._receive.statistics().current_buffer_used

    async def _write_forever(self) -> None:
        while True:
            if not self._held:
                self._held.append(await self._receive.receive())
            # Gather before committing: a commit holds the control plane (policy look-ups wait on it) through its
            # sync to disk, so a program's burst of calls should cost a few commits, not one each.
            with trio.move_on_after(GATHER_SECONDS):
                while len(self._held) < BATCH:
                    self._held.append(await self._receive.receive())
            await self._store.append_audit([(record_key(record), to_bytes(record)) for record in self._held])
            self._held.clear()
            if not self._receive.statistics().current_buffer_used:
                self._idle.set()

    async def page(self, query: AuditQuery) -> Page:
        """One page of an org's records, newest first, and where the next page starts."""
        limit = max(1, min(query.limit, MAX_LISTED))
        prefix = org_prefix(query.org)
        start = time_key(query.org, query.since) if query.since is not None else prefix
        end = query.before if query.before is not None else prefix + b"\xff"

        def admits(raw: bytes) -> bool:
            record = decoded_or_skipped(raw, AuditRecord, "audit record")
            return record is not None and query.admits(record)

        scan = limit * SCAN_FACTOR if query.narrowed else limit
        found, next_before = await self._store.audit_newest(prefix, start, end, limit, admits, scan)
        return Page([from_bytes(value) for _, value in found], next_before)

    async def sweep(self) -> None:
        """Remove every org's records older than the retention, a bounded batch per transaction."""
        before = self._clock() - self._retention
        start: bytes | None = b""
        while start is not None:
            start = await self._store.sweep_audit(start, lambda key: made_before(key, before), next_org, SWEEP_BATCH)
