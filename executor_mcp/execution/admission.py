"""How many executions one account, and one org, may have at once, and the words that refuse one more.

A paused execution keeps its sandbox worker until it is answered or expires, and a runaway one keeps it
until its CPU budget ends; unbounded, one account could hold every worker and leave everyone else's
`execute` waiting. So each account (of an org: `alice` of `acme` and `alice` of `evil` are strangers) may have
at most so many executions in progress, running and paused together, and so may each org (both the stricter of
the operator's limit and the org admin's own, `tools/rates.Rates.effective`); one more is refused at once with
a text that says how many are in progress and how to free a place.

Each account's guard on this process's workers is counted in memory here; limits an operator or org admin sets
are counted by the control plane's `InFlightStore`: in memory on a data dir, in PostgreSQL where several
instances share one (so a limit holds across them). A run holds its `Slot` from `admit` until it ends, and marks
it paused while it waits on a human, so a refusal can count the pauses and name the account's own.
"""

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
import trio

from executor_mcp.codec import JsonObject
from executor_mcp.protocol.results import text_result
from executor_mcp.ratelimits.in_flight import ACCOUNT, Ceiling, Full, ceilings_for
from executor_mcp.storage.interfaces import InFlightStore
from executor_mcp.storage.lmdb.in_flight import MemoryInFlight
from executor_mcp.storage.records import Owner, UsageLimits

log = logging.getLogger(__name__)

LISTED_PAUSES = 10  # a refusal names at most this many paused executions
# How often an instance gives back the places failures lost, and sweeps those of instances long gone.
MEND_SECONDS = 10.0
MAX_LOST = 100_000
# Longer than any statement may run on the server (the control plane's statement timeout is 30 s).
LOST_SETTLES_SECONDS = 40.0


@attrs.define(eq=False)
class Slot:
    """One admitted execution's place in its account's and org's budgets."""

    owner: Owner
    holder: str
    _admission: "Admission"
    _waits: int = 0  # gated calls of this execution waiting on a human right now
    _pause_ids: list[str] = attrs.Factory(list)
    released: bool = False
    counted_in_store: bool = False  # it holds a place in the control plane's store too (a limit is configured)
    marks: int = 0  # how many times its state was marked: the store keeps the latest

    @property
    def paused(self) -> bool:
        return self._waits > 0

    @asynccontextmanager
    async def pausing(self, pause_id: str | None) -> AsyncIterator[None]:
        """Held while the execution waits on a human; `pause_id` is what `resume` takes (none in native mode)."""
        self._waits += 1
        if pause_id is not None:
            self._pause_ids.append(pause_id)
        try:
            await self._admission.mark(self)  # may wait on the store: a deadline already past cancels it here
            yield
        finally:
            self._waits -= 1
            if pause_id is not None:
                self._pause_ids.remove(pause_id)
            with trio.CancelScope(shield=True):
                await self._admission.mark(self)

    async def release(self) -> None:
        """The execution ended; idempotent, so every exit path may call it. Shielded: a place must be given
        back even by a run its session's end cancels."""
        if not self.released:
            self.released = True
            with trio.CancelScope(shield=True):
                await self._admission.forget(self)


@attrs.frozen
class Refusal:
    """Why one more execution was not started: the account's budget (`scope` "account") or the org's is full."""

    limit: int
    running: int
    paused: int
    pause_ids: tuple[str, ...]
    scope: str = ACCOUNT


class Admission:
    def __init__(
        self,
        store: InFlightStore,
        limits: Callable[[str | None], Awaitable[UsageLimits]],
        instance: str = "",
        *,
        guard: int,
    ) -> None:
        """Two counts. `guard`: the most executions one account may have in progress in this process, counted
        here, since the sandbox workers it keeps an account from holding are this process's. `limits`: an org's
        configured limits (`UsageLimits.executions_*`, the operator's flags and the org admin's own), counted in
        `store`, across every instance sharing it; only where one is set, so that a deployment that sets none
        pays no store round trip per execution. `instance` names this process among those sharing `store`."""
        self._store = store
        self._limits = limits
        self._instance = instance
        self._guard = guard
        self._here = MemoryInFlight()
        self._live: dict[str, Slot] = {}
        # Places the store may hold that no execution here does (a `leave` that failed, or an `enter` whose
        # answer was lost), each with when: `mend` gives them back; past the bound the oldest are left to `clear`.
        self._lost: dict[str, float] = {}

    async def admit(self, owner: Owner) -> Slot | Refusal:
        return await self._enter(owner, beyond=False)

    async def readmit(self, owner: Owner) -> Slot:
        """A place for an execution admitted before a restart and revived now: it keeps its place even over the
        limit (which may have been lowered meanwhile), as it would have without the restart; and even when the
        store cannot be reached, uncounted there, rather than leave the execution unrevived."""
        slot = await self._enter(owner, beyond=True)
        assert isinstance(slot, Slot)
        return slot

    async def _enter(self, owner: Owner, *, beyond: bool) -> Slot | Refusal:
        org_id, account_id = owner.org_id or "", owner.account_id
        slot = Slot(owner, uuid.uuid4().hex, self)
        guard = ceilings_for(org_id, account_id, org=None, account=self._guard)
        full = await self._here.enter(self._instance, slot.holder, guard, beyond=beyond)
        if full is not None:
            return _refusal(full)
        self._live[slot.holder] = slot
        configured: list[Ceiling] = []
        try:
            limits = await self._limits(owner.org_id)
            configured = ceilings_for(org_id, account_id, org=limits.executions_org, account=limits.executions_account)
            if configured:
                full = await self._store.enter(self._instance, slot.holder, configured, beyond=beyond)
        except BaseException as exc:
            if configured:
                self._lose(slot.holder)  # the store may have taken the place and lost the answer
            if beyond and isinstance(exc, Exception):
                log.warning("a revived execution's place is not counted across instances: %s", exc)
                return slot
            await self._forget_here(slot)
            raise
        if full is not None:
            await self._forget_here(slot)
            return _refusal(full)
        slot.counted_in_store = bool(configured)
        return slot

    def in_progress(self, owner: Owner) -> int:
        """This process's executions of `owner` in progress."""
        return sum(1 for slot in self._live.values() if slot.owner == owner)

    async def mark(self, slot: Slot) -> None:
        if slot.holder in self._live:
            slot.marks += 1
            waits, pause_ids, version = slot._waits, tuple(slot._pause_ids), slot.marks
            await self._here.mark(slot.holder, waits, pause_ids, version)
            if slot.counted_in_store:
                marked = self._store.mark(slot.holder, waits, pause_ids, version)
                await _best_effort("marking an execution paused", marked)

    async def forget(self, slot: Slot) -> None:
        if slot.holder in self._live:
            await self._forget_here(slot)
            if slot.counted_in_store:
                try:
                    await self._store.leave(slot.holder)
                except Exception as exc:
                    log.warning("giving an execution's place back failed (retried later): %s", exc)
                    self._lose(slot.holder)

    async def _forget_here(self, slot: Slot) -> None:
        del self._live[slot.holder]
        await self._here.leave(slot.holder)

    def _lose(self, holder: str) -> None:
        self._lost[holder] = trio.current_time()
        while len(self._lost) > MAX_LOST:
            del self._lost[next(iter(self._lost))]

    async def clear(self) -> None:
        """At start, before serving: the places a previous process of this instance left are not ours."""
        dropped = await self._store.clear(self._instance)
        if dropped:
            log.info("dropped %d place(s) of executions a previous process held", dropped)

    async def mend(self) -> None:
        """Give back the places lost to failures (one that fails again stays for the next time), and sweep the
        places of instances long gone. Run every `MEND_SECONDS` by the server. A place lost less than
        `LOST_SETTLES_SECONDS` ago waits: the statement whose answer was lost may still be running, and a place it
        takes after being given back would stay."""
        settled = trio.current_time() - LOST_SETTLES_SECONDS
        for holder, lost_at in list(self._lost.items()):
            if lost_at <= settled:
                await self._store.leave(holder)
                self._lost.pop(holder, None)
        swept = await self._store.sweep()
        if swept:
            log.info("swept %d place(s) of instances gone long ago", swept)


async def _best_effort(what: str, step: Awaitable[None]) -> None:
    """A mark that fails (the database is away) costs only the running/paused split of a refusal; it never fails
    the execution that paused."""
    try:
        await step
    except Exception as exc:
        log.warning("%s failed: %s", what, exc)


def _refusal(full: Full) -> Refusal:
    mine = full.ceiling.scope == ACCOUNT  # an org's pauses are other accounts' too: their ids are not listed
    return Refusal(
        limit=full.ceiling.most,
        running=full.held.running,
        paused=full.held.paused,
        pause_ids=full.held.pause_ids if mine else (),
        scope=full.ceiling.scope,
    )


def refusal_result(refusal: Refusal) -> JsonObject:
    """The `execute` error result a model reads: how many are in progress, and what frees a place."""
    total = refusal.running + refusal.paused
    who, one = (
        ("this account", "one account") if refusal.scope == ACCOUNT else ("this organization", "one organization")
    )
    sentences = [
        f"Execution refused: {who} already has {total} execution{'s' if total != 1 else ''} in progress "
        f"({refusal.running} running, {refusal.paused} paused waiting for approval), the most {one} may "
        f"have at once ({refusal.limit}). Nothing was run."
    ]
    if refusal.pause_ids:
        listed = ", ".join(refusal.pause_ids[:LISTED_PAUSES])
        more = len(refusal.pause_ids) - LISTED_PAUSES
        sentences.append(
            'To free a place, answer paused executions with the resume tool (action "accept" to let one go on, '
            f'"decline" or "cancel" to end it): {listed}' + (f" and {more} more." if more > 0 else ".")
        )
    elif refusal.paused and refusal.scope == ACCOUNT:
        sentences.append("To free a place, answer or dismiss the approval requests your client is showing.")
    elif refusal.paused:
        sentences.append("Paused executions free their place when they are answered or their window closes.")
    if refusal.running:
        sentences.append("Running executions free their place when they finish.")
    sentences.append("Then run execute again; retrying at once without doing either is refused the same way.")
    structured = {
        "status": "execution_limit_reached",
        "scope": refusal.scope,
        "limit": refusal.limit,
        "running": refusal.running,
        "paused": refusal.paused,
        "pausedExecutionIds": list(refusal.pause_ids),
    }
    text = " ".join(sentences)
    return text_result(text, structured, error=True)
