"""Executions that outlive the request that started them: pause for approval, resume, settle once.

A `Run` is one `execute`, from its code to its outcome. It lives as a task in its session's nursery
(ending the session ends it), so a pause can wait for a human while the MCP request that reported it
is long answered. Whoever waits for the run's next result holds `run.next`: first the `execute` call,
then, after each pause, the `resume` that answered it.

A pause is durable: before it is reported, the execution's journal (`journal.py`) and a pause record are
written to the session's file, and from then on every step is written before it takes effect. Once only
humans are awaited, the engine gives the worker back; the answer brings a fresh worker that replays the
journal. A restart ends the task but not the records: when the session's runtime comes up again
(`revive`), each execution with a live pause is back as a task waiting for that pause's answer, as before.
Any other end of a run (its outcome, its window closing, its session disposed of) forgets its records.
With a shared store (several instances on one database) a resume that finds no pause here may adopt one kept
by any session, on any instance, its home up or down: `AdoptionJudge` decides, in the store's transaction,
whether it moves (the owner's, in its window, its call still waiting at the gate); the resuming session then
revives it as a restart would, and its old run, at its next write, hears `ExecutionMoved` and stops.

`PendingApprovals` is process-wide: it finds a pause by id for any session of the same account and org, makes
resumes exactly-once (a duplicate that arrives while the first runs joins it; one that arrives after
replays the same result), and remembers ids that expired or settled so a late resume gets guidance
instead of a shrug. A pause is answered once, by whoever comes first: the model's `resume` or a person on
the console's approvals page (`decide`); every later answer hears the first one's outcome.
"""

import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Generic, TypeVar

import attrs
import trio

from executor_mcp.background import once
from executor_mcp.codec import JsonObject, converter, dumps, loads
from executor_mcp.execution.admission import Slot
from executor_mcp.execution.engine import ToolCall
from executor_mcp.execution.journal import (
    GATE,
    PASS,
    REFUSED,
    BadJournal,
    Journal,
    Mark,
    Pending,
    decode_entry,
    decode_head,
)
from executor_mcp.execution.results import (
    expired_result,
    forbidden_result,
    not_found_result,
    render_paused,
    settled_result,
    ttl_words,
)
from executor_mcp.logs import note, safe_id
from executor_mcp.protocol.results import text_result
from executor_mcp.storage.interfaces import ExecutionJournals, ExecutionMoved
from executor_mcp.storage.records import Owner
from executor_mcp.tools.approval import (
    ACCEPT,
    CLIENT,
    CONSOLE,
    OUTCOMES,
    Approval,
    ApprovalAnswer,
    Interaction,
    refuse_unless_accepted,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

# Per owner, so one account ending many pauses never pushes another's out of memory; and owners
# themselves are remembered least recently used first.
REPLAYS = 64
REMEMBERED = 1024
OWNERS_REMEMBERED = 4096
# An owner's live pauses are bounded by their admitted executions (one pause each at a time); a listing of
# them is bounded again so a page never grows past what a person reads.
MAX_LISTED = 100

PAUSE_ID_PREFIX = "exec_"  # then a UUID: what the paused result calls its `executionId`
_PAUSE_ID_LENGTH = len(PAUSE_ID_PREFIX) + 36


def is_pause_id(text: str) -> bool:
    """Whether `text` has a pause id's shape: only such text is looked for in a shared store."""
    return len(text) == _PAUSE_ID_LENGTH and text.startswith(PAUSE_ID_PREFIX)


# What became of a pause nobody answered.
EXPIRED = "expired"  # nobody answered within the approval window
ENDED = "ended"  # the execution ended (its session closed, or it failed) before anyone answered


class Deferred(Generic[T]):
    """A value that arrives once; any number of tasks can wait for it."""

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: T | None = None

    @property
    def done(self) -> bool:
        return self._event.is_set()

    @property
    def value(self) -> T | None:
        """The value once it arrived, else None."""
        return self._value

    def set(self, value: T) -> None:
        if not self._event.is_set():
            self._value = value
            self._event.set()

    async def wait(self) -> T:
        await self._event.wait()
        return self._value  # type: ignore[return-value]


@attrs.define(eq=False)
class Pause:
    id: str
    owner: Owner
    interaction: Interaction
    expires_at: float  # epoch seconds
    ttl: float
    created_at: float = 0.0
    mode: str = "model"  # the elicitation mode of the session whose execution paused
    call_id: int = 0  # the sandbox's id of the gated call
    answer: Deferred[ApprovalAnswer] = attrs.Factory(Deferred)
    resolution: Deferred[JsonObject] = attrs.Factory(Deferred)


@attrs.frozen
class Ended:
    """A pause that is no longer live, remembered so a late resume (or a late decision) hears what became of it."""

    owner: Owner
    expired: bool  # else settled
    answer: ApprovalAnswer | None = None  # None: nobody answered
    ran_out: bool = True  # expired because the approval window closed, not because its execution ended
    led_to: str | None = None  # the status of what answering led to: "completed", "error", or a new pause's
    next_id: str | None = None  # that new pause, when the execution paused again

    @property
    def outcome(self) -> str:
        if self.answer is not None:
            return OUTCOMES[self.answer.action]
        return EXPIRED if self.expired and self.ran_out else ENDED


@attrs.frozen
class Decided:
    """A decision from the console: its outcome, who gave the answer that counts, and whether it was this one."""

    execution_id: str
    outcome: str  # approved | declined | cancelled | expired | ended
    by: str | None
    first: bool


class _Memory:
    """One owner's ended pauses: what became of each, and the results kept for replays."""

    def __init__(self) -> None:
        self.ended: OrderedDict[str, Ended] = OrderedDict()
        self.replays: OrderedDict[str, JsonObject] = OrderedDict()


class PendingApprovals:
    """Every live pause, and a bounded memory, per owner, of the ones that ended.

    The owner is checked before anything else: a stranger (another account, or the same account name in
    another org) hears `execution_forbidden` for a live pause and `execution_not_found` for one that ended
    (it is looked for only in the caller's own memory), and never its result. The console's look-ups and
    decisions do not even admit that a stranger's live pause exists: to them it is not found.
    """

    def __init__(self, approval_window: float) -> None:
        self.approval_window = approval_window
        self._live: dict[str, Pause] = {}
        self._live_by_owner: dict[Owner, dict[str, Pause]] = {}  # the same pauses, oldest first per owner
        self._memories: OrderedDict[Owner, _Memory] = OrderedDict()
        self.restarting = False

    @property
    def live_count(self) -> int:
        """Pauses waiting for their answer, of every owner: for the metrics."""
        return len(self._live)

    def open(self, pause: Pause) -> None:
        note(execution_id=pause.id)  # the request the execution paused in logs which it was
        self._live[pause.id] = pause
        self._live_by_owner.setdefault(pause.owner, {})[pause.id] = pause

    def resolve(self, pause: Pause, result: JsonObject) -> None:
        """What resuming `pause` led to (a completion, an error or the next pause), kept for replays."""
        self._close(pause)
        pause.resolution.set(result)
        memory = self._memory_of(pause.owner)
        _remember(memory.replays, pause.id, result, REPLAYS)
        structured = result.get("structuredContent")
        led_to = structured.get("status") if isinstance(structured, dict) else None
        next_id = structured.get("executionId") if isinstance(structured, dict) else None
        ended = Ended(
            pause.owner,
            expired=False,
            answer=_how_answered(pause),
            led_to=led_to if isinstance(led_to, str) else None,
            next_id=next_id if isinstance(next_id, str) and next_id != pause.id else None,
        )
        _remember(memory.ended, pause.id, ended, REMEMBERED)

    def expire(self, pause: Pause, *, ran_out: bool = True) -> None:
        """`pause` is over with no result for its resume: its window closed (`ran_out`), or its execution ended
        (its session closed) first, which a page tells apart, keeping any answer it was given."""
        if self._live.get(pause.id) is pause:
            self._close(pause)
            ended = Ended(pause.owner, expired=True, answer=_how_answered(pause), ran_out=ran_out)
            _remember(self._memory_of(pause.owner).ended, pause.id, ended, REMEMBERED)
            pause.resolution.set(expired_result(pause.id, self.approval_window))

    def expire_kept(self, pause: Pause) -> None:
        """A pause read back after a restart whose window had closed meanwhile: remembered as expired."""
        self.open(pause)
        self.expire(pause)

    def settle_kept(self, pause: Pause, result: JsonObject) -> None:
        """A pause read back after a restart whose execution cannot go on: its resume hears `result`."""
        self.open(pause)
        self.resolve(pause, result)

    def keep_for_restart(self) -> None:
        """The process is shutting down: a run it ends leaves its pause for the next process, so a resume
        waiting on it is not told it expired (it gets the restart envelope with its session)."""
        self.restarting = True

    async def resume(self, execution_id: str, owner: Owner, answer: ApprovalAnswer | None) -> JsonObject:
        """The answer to a resume: what answering led to, or why there is nothing to resume. With `answer`
        None (browser mode) the caller only waits for someone else's answer; that wait ends with the
        approval window, when the run expires the pause it holds."""
        note(execution_id=safe_id(execution_id))
        pause = self._live.get(execution_id)
        if pause is not None:
            if not owner.may_act_on(pause.owner):
                return forbidden_result(execution_id)
            if answer is not None:
                pause.answer.set(answer)  # a concurrent duplicate finds it already set and just joins below
            return await pause.resolution.wait()
        memory = self._memories.get(owner)
        ended = memory.ended.get(execution_id) if memory is not None else None
        if memory is None or ended is None:
            return not_found_result(execution_id)
        if not owner.may_act_on(ended.owner):
            return forbidden_result(execution_id)
        replay = memory.replays.get(execution_id)
        if replay is not None:
            return replay
        return expired_result(execution_id, self.approval_window) if ended.expired else settled_result(execution_id)

    def pending(self, owner: Owner) -> list[Pause]:
        """The owner's live pauses nobody has answered yet, newest first, at most `MAX_LISTED`."""
        mine = self._live_by_owner.get(owner, {})
        waiting = [p for p in reversed(mine.values()) if not p.answer.done and owner.may_act_on(p.owner)]
        return waiting[:MAX_LISTED]

    def lookup(self, execution_id: str, owner: Owner) -> Pause | Ended | None:
        """The owner's pause by id: live, or remembered as ended; None for an unknown or a stranger's one."""
        pause = self._live.get(execution_id)
        if pause is not None:
            return pause if owner.may_act_on(pause.owner) else None
        memory = self._memories.get(owner)
        ended = memory.ended.get(execution_id) if memory is not None else None
        return ended if ended is not None and owner.may_act_on(ended.owner) else None

    def decide(self, execution_id: str, owner: Owner, action: str) -> Decided | None:
        """A person's answer from the console, given exactly as `resume <action>` would give it: the first
        answer wins, whoever gives it, and a later one is told which answer that was. None when there is no
        such pause for this owner (a stranger's included)."""
        found = self.lookup(execution_id, owner)
        if found is None:
            return None
        if isinstance(found, Ended):
            return Decided(execution_id, found.outcome, found.answer.by if found.answer else None, first=False)
        first = not found.answer.done
        found.answer.set(ApprovalAnswer(action=action, by=CONSOLE))
        given = found.answer.value
        assert given is not None
        return Decided(execution_id, OUTCOMES[given.action], given.by, first=first)

    def _close(self, pause: Pause) -> None:
        self._live.pop(pause.id, None)
        mine = self._live_by_owner.get(pause.owner)
        if mine is not None:
            mine.pop(pause.id, None)
            if not mine:
                del self._live_by_owner[pause.owner]

    def _memory_of(self, owner: Owner) -> _Memory:
        memory = self._memories.get(owner) or _Memory()
        _remember(self._memories, owner, memory, OWNERS_REMEMBERED)
        return memory


def _remember(memory: OrderedDict[Any, Any], key: Any, value: Any, limit: int) -> None:
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > limit:
        memory.popitem(last=False)


def _how_answered(pause: Pause) -> ApprovalAnswer | None:
    """Who answered `pause` and how, for its `Ended`: without the answer's content, which may be as large as a
    request and would be kept with each of the many ended pauses remembered."""
    answer = pause.answer.value
    return attrs.evolve(answer, content=None) if answer is not None else None


@attrs.frozen
class PauseRecord:
    """A pause as the session's file keeps it: enough to ask the same question again after a restart."""

    id: str
    execution: str  # the key of its journal
    call_id: int
    owner: Owner
    interaction: Interaction
    created_at: float
    expires_at: float
    ttl: float
    mode: str

    @classmethod
    def of(cls, pause: Pause, execution: str) -> "PauseRecord":
        return cls(execution=execution, **{name: getattr(pause, name) for name in _PAUSE_FIELDS})

    def pause(self) -> Pause:
        return Pause(**{name: getattr(self, name) for name in _PAUSE_FIELDS})


# What a record and a live pause have in common: all of the record but the journal's key.
_PAUSE_FIELDS = tuple(field.name for field in attrs.fields(PauseRecord) if field.name != "execution")


@attrs.frozen
class Kept:
    """A durable execution read back from a session's file: its journal, and the pause it waits on."""

    journal: Journal
    pending: Pending  # what it waits on at its journal's end
    pause: PauseRecord
    stale: tuple[str, ...]  # ids of its earlier pauses, answered long ago, whose records go when it ends


def _pause_record(raw: bytes) -> PauseRecord | None:
    try:
        return converter.structure(loads(raw), PauseRecord)
    except Exception as exc:
        log.error("skipping an unreadable pause record: %s", type(exc).__name__)
        return None


async def kept_executions(
    store: ExecutionJournals, only: str | None = None
) -> tuple[list[Kept], list[tuple[str, list[str]]]]:
    """The executions a session keeps with a live pause (of them, only execution `only` if given), and (key,
    pause ids) of the records that wait on nothing any more (to forget). A record that does not decode costs
    only its own execution."""
    by_execution: dict[str, list[PauseRecord]] = {}
    for raw in await store.pauses():
        record = _pause_record(raw)
        if record is not None and only in (None, record.execution):
            by_execution.setdefault(record.execution, []).append(record)
    kept, dead = [], []
    for key, records in by_execution.items():
        ids = [record.id for record in records]
        try:
            entries = await store.journal(key)
            if not entries:
                raise BadJournal("no journal")
            journal = Journal(key, decode_head(entries[0]), [decode_entry(entry) for entry in entries[1:]])
        except BadJournal as exc:
            log.error("forgetting paused execution %s: %s", ids[-1], exc)
            dead.append((key, ids))
            continue
        pending = journal.pending()
        calls = pending.calls
        live = [record for record in records if (call := calls.get(record.call_id)) is not None and call.askable]
        if not live:
            dead.append((key, ids))
            continue
        newest = max(live, key=lambda record: record.created_at)
        kept.append(Kept(journal, pending, newest, tuple(pause_id for pause_id in ids if pause_id != newest.id)))
    return kept, dead


# What a pause kept by another session (on any instance) is to a resume that found it in the shared store.
ADOPTED = "adopted"  # it moves to the resuming session, which revives it and answers it
FORBIDDEN = "forbidden"  # another owner's
SETTLED = "settled"  # its call is no longer waiting for an answer: it was answered and runs, or cannot go on
LAPSED = "lapsed"  # its approval window closed


@attrs.frozen
class Adoption:
    outcome: str
    execution: str = ""  # the key of the journal that moves

    @property
    def move(self) -> bool:
        return self.outcome == ADOPTED


@attrs.frozen
class AdoptionJudge:
    """Whether the execution a pause waits on may move to `owner`'s resuming session: run where it is stored,
    holding the execution against its old session's writes, so the answer cannot change before it moves."""

    owner: Owner
    now: float

    def __call__(self, raw_pause: bytes, raw_journal: list[bytes]) -> Adoption:
        record = _pause_record(raw_pause)
        if record is None or not self.owner.may_act_on(record.owner):
            return Adoption(FORBIDDEN)
        if record.expires_at <= self.now:
            return Adoption(LAPSED)
        try:
            if not raw_journal:
                raise BadJournal("no journal")
            journal = Journal(record.execution, decode_head(raw_journal[0]), [decode_entry(e) for e in raw_journal[1:]])
        except BadJournal:
            return Adoption(SETTLED)
        pending = journal.pending()
        call = pending.calls.get(record.call_id)
        if call is None or not call.askable or pending.unknown() is not None:
            return Adoption(SETTLED)
        return Adoption(ADOPTED, record.execution)


class Run:
    """One execution; `drive` runs it, `gate` and `ask_inline` are the approval gates its tool calls pass.

    It holds its owner's admission `slot` from creation until `drive` ends, and marks it paused (with
    the session's pause lease) whenever it waits on a human, in either elicitation mode. With a `journal`
    and a `store` its pauses are durable (model and browser mode; native mode asks inline, within the
    request, and keeps nothing).
    """

    def __init__(
        self,
        approvals: PendingApprovals,
        slot: Slot,
        lease: Callable[[], AbstractContextManager[None]] = nullcontext,
        *,
        mode: str,
        worded: Callable[[Pause], JsonObject] | None = None,
        journal: Journal | None = None,
        store: ExecutionJournals | None = None,
        pause_kept: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        """`mode` is the session's elicitation mode, `worded` how a pause reads to its model (model mode's
        wording by default), `pause_kept` tells the control plane until when a pause of the session is kept
        (so that a restart revives the session)."""
        self._approvals = approvals
        self._slot = slot
        self._lease = lease
        self._mode = mode
        self._worded = worded or model_worded
        self._journal = journal
        self._store = store
        self._pause_kept = pause_kept
        self._gate_lock = trio.Lock()
        self._keeping = trio.Lock()
        self._resolving: Pause | None = None  # the pause whose resume waits on `next`
        self._revived: Pause | None = None  # the pause a revived run waits on, asked again by its call
        self._pause_ids: list[str] = []  # every pause with a record in the store
        self._moved = False  # another session adopted the execution: it runs there, not here
        self.scope = trio.CancelScope()
        self.next: Deferred[JsonObject] = Deferred()

    @property
    def owner(self) -> Owner:
        return self._slot.owner

    @property
    def journal(self) -> Journal:
        assert self._journal is not None
        return self._journal

    def revived(self, kept: Kept) -> None:
        """Make this run the one `kept` was before a restart: its pause is live again, and its answer goes
        to whoever resumes it."""
        pause = kept.pause.pause()
        self._pause_ids = [*kept.stale, pause.id]
        self._approvals.open(pause)
        self._revived = self._resolving = pause
        self.next = pause.resolution

    async def drive(self, run: Callable[[], Awaitable[JsonObject]], defect: Callable[[], JsonObject]) -> None:
        """Run the execution and deliver its rendered result; never raises into the session's nursery."""
        ended = False
        result: JsonObject | None = None
        try:
            with self.scope:
                if self._revived is not None:
                    await self._await_revived(self._revived)
                result = await run()
            ended = True
        except Exception:
            result = defect()
            ended = True
        finally:
            await self._slot.release()  # before the result goes out: its caller may run again at once
            if result is not None:
                self._deliver(result)
            resolving = self._resolving
            if resolving is not None and not resolving.resolution.done and self._moved:
                self._approvals.resolve(resolving, settled_result(resolving.id))  # its result is the adopter's
            elif resolving is not None and not resolving.resolution.done and not self._approvals.restarting:
                self._approvals.expire(resolving, ran_out=False)  # the run ended under a pending resume: tell it
        # Ended by its own outcome or scope, not by its session's end (which decides about the records itself).
        if ended and self._pause_ids:
            assert self._store is not None
            await once("forgetting an ended execution", self._forget)

    async def _forget(self) -> None:
        assert self._store is not None
        await self._store.forget_execution(self.journal.key, self._pause_ids)

    async def _await_revived(self, pause: Pause) -> None:
        """A revived run waits for its pause's answer before it takes a worker, as its call would have."""
        answered = None
        with self._lease(), trio.move_on_at(_deadline(pause)):
            async with self._slot.pausing(pause.id):
                answered = await pause.answer.wait()
        if (answered or pause.answer.value) is None:
            self._approvals.expire(pause)
            self.scope.cancel()
            await trio.lowlevel.checkpoint()

    async def keep(self) -> None:
        """Write what the journal has not written yet, once it is durable (see `Keeper`)."""
        if self._journal is not None and self._journal.durable:
            await self._write()

    async def _write(self, pause: Pause | None = None) -> None:
        assert self._store is not None
        journal = self.journal
        async with self._keeping:
            records = journal.unwritten()
            pauses = {pause.id: dumps(converter.unstructure(PauseRecord.of(pause, journal.key)))} if pause else None
            if records or pauses:
                try:
                    await self._store.keep_execution(journal.key, records, pauses)
                except ExecutionMoved:
                    # Adopted by a session elsewhere before this step was kept: nothing more runs here.
                    self._moved = True
                    self.scope.cancel()
                    await trio.lowlevel.checkpoint()
            journal.written(len(records))

    async def _mark(self, kind: str, call: ToolCall) -> None:
        if self._journal is not None:
            self._journal.record(Mark(kind, call.id))
            await self.keep()

    async def refuse_if_declined_before(self, call: ToolCall) -> None:
        """A call asked again after a revival, whose pause was answered with anything but accept, throws as its
        gate would, before its tool's policy is looked at again: a policy that no longer gates the tool must
        not turn the person's decline into a run."""
        revived = self._revived
        answer = revived.answer.value if revived is not None and revived.call_id == call.id else None
        if revived is not None and answer is not None and answer.action != ACCEPT:
            self._revived = None
            await self._mark(REFUSED, call)
            refuse_unless_accepted(revived.interaction, answer.action)

    async def gate(self, call: ToolCall, interaction: Interaction) -> Approval:
        """Pause until a human answers; concurrent gated calls of one execution queue here. A call waiting its
        turn waits for a human as much as the one asked, so the worker can be given back meanwhile."""
        await self._mark(GATE, call)
        revived = self._revived
        if revived is not None and revived.call_id == call.id:
            # Answered before the run took a worker: it queues behind no other call, and a call that reaches
            # the gate before it (the revived calls race there) does not make it be asked again.
            self._revived = None
            return await self._answered(interaction, revived, call)
        with call.waiting():
            await self._gate_lock.acquire()
        try:
            return await self._answered(interaction, await self._open(call, interaction), call)
        finally:
            self._gate_lock.release()

    async def _answered(self, interaction: Interaction, pause: Pause, call: ToolCall) -> Approval:
        """Wait for `pause`'s answer within its window: the answer, or the execution's end if none came."""
        answer = None
        # Already answered (a revived pause): no wait, so the engine keeps its worker for the call going on.
        waiting = nullcontext() if pause.answer.done else call.waiting()
        with self._lease(), waiting, trio.move_on_at(_deadline(pause)):
            async with self._slot.pausing(pause.id):
                answer = await pause.answer.wait()
        # An answer given after the deadline fired but before this task woke was already told it counts.
        answer = answer or pause.answer.value
        if answer is None:
            # Nobody answered in time: the execution ends, and a late resume hears it expired.
            self._approvals.expire(pause)
            self.scope.cancel()
            await trio.lowlevel.checkpoint()
        assert answer is not None
        # Written before the call goes on either way: what the answer was decides what may run it.
        await self._mark(PASS if answer.action == ACCEPT else REFUSED, call)
        return Approval(answer.action, answer.by, pause.id)

    async def _open(self, call: ToolCall, interaction: Interaction) -> Pause:
        """A new pause, kept durably (with the journal so far) before anyone hears of it, then reported."""
        window, now = self._approvals.approval_window, time.time()
        pause = Pause(
            id=f"{PAUSE_ID_PREFIX}{uuid.uuid4()}",
            owner=self.owner,
            interaction=interaction,
            expires_at=now + window,
            ttl=window,
            created_at=now,
            mode=self._mode,
            call_id=call.id,
        )
        if self._journal is not None and self._store is not None:
            self._journal.durable = True  # before the write: a step recorded meanwhile is written after it
            try:
                await self._write(pause)
            except BaseException:
                self._journal.durable = False  # nothing was written (one transaction): nothing to forget later
                raise
            self._pause_ids.append(pause.id)
            if self._pause_kept is not None:
                await self._pause_kept(pause.expires_at)
        self._approvals.open(pause)
        self._deliver(self._worded(pause))
        self._resolving, self.next = pause, pause.resolution
        return pause

    async def ask_inline(self, interaction: Interaction, ask: Callable[[Interaction], Awaitable[str]]) -> Approval:
        """Native elicitation: `ask` puts the question to the client and returns its action.

        The wait follows the approval window like a pause: unanswered in time, the execution ends and
        the `execute` call gets a result that says so, and the worker goes back to the pool.
        """
        window = self._approvals.approval_window
        action = None
        with self._lease(), trio.move_on_after(window):
            async with self._slot.pausing(None):
                action = await ask(interaction)
        if action is None:
            self._deliver(unanswered_result(interaction.address, window))
            self.scope.cancel()
            await trio.lowlevel.checkpoint()
        assert action is not None
        return Approval(action, CLIENT)

    def _deliver(self, result: JsonObject) -> None:
        if self._resolving is not None:
            self._approvals.resolve(self._resolving, result)
        else:
            self.next.set(result)


def _deadline(pause: Pause) -> float:
    """The pause's window end on trio's clock (its `expires_at` is wall-clock time, kept across restarts)."""
    return trio.current_time() + max(pause.expires_at - time.time(), 0.0)


def model_worded(pause: Pause) -> JsonObject:
    """A pause as model mode words it: the question, the rule or default that asked it, and how to answer it
    with `resume`."""
    interaction = pause.interaction
    return render_paused(
        pause.id,
        interaction.message,
        interaction.address,
        interaction.args,
        interaction.requested_schema,
        pause.expires_at,
        pause.ttl,
        why=interaction.asked_by.reason(interaction.address),
    )


def unanswered_result(address: str, window: float) -> JsonObject:
    """How an execution ends when its inline approval request went unanswered for the whole window."""
    error = (
        f'Execution ended: the approval request for tool "{address}" was not answered within the '
        f"{ttl_words(window)} approval window, so the tool did not run. Ask the user, then run execute again "
        "to ask once more."
    )
    return text_result(f"Error: {error}", {"status": "error", "error": error, "reason": "approval_expired"}, error=True)
