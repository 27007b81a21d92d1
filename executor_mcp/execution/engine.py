"""Running one execution: drive a leased sandbox worker step by step, serving its tool calls and timers.

The worker computes; this side waits. A journalled execution (one whose keeper writes its journal, see
`journal.py`) may run in several workers one after another: once its journal is durable and it waits only
on humans, the worker is given back (`drop`), and the next answer takes a fresh worker that replays every
journalled input, checking each step asked for what it asked for before, and then goes on live. A revived
execution (read back after a restart) starts that way, and asks again only the calls that were waiting at a
gate; any other call in flight then has an unknown outcome, so the execution ends rather than risk running
a tool twice. Tool calls are tasks in the execution's own nursery, which lives
inside whatever task runs the execution (a session's request), so cancelling the session cancels its
executions. Timers are entries in a heap, not tasks, so a pending timer costs the server next to nothing.
Budgets:

- CPU: enforced inside the worker on every evaluation call; exceeding it ends the execution.
- Wall clock: counted only while no tool call is in flight (a slow tool or a human approval does not
  use it up), and restarted from the last tool return, as upstream. Waiting on a timer counts.
- Fan-out: at most `max_timers` pending timers and `max_tool_calls` tool calls in flight. The prelude
  refuses past them with an error the code can catch; a worker that goes past them anyway is not running
  our prelude any more, so it is killed and the execution ends saying which bound it broke.
- A step that does not come back within the CPU budget plus a grace period means the worker is stuck:
  it is killed and the execution ends with an internal error.

Nothing the worker sends is trusted: every frame is checked for shape, counts and bounds, and delays
are clamped. A worker that sends what the prelude never would ends its execution with a message saying
so (it runs untrusted code, so that is the code's doing), not with an opaque internal error.
"""

import heapq
import json
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import attrs
import trio

from executor_mcp.codec import MAX_DEPTH, deeper_than, loads
from executor_mcp.execution.journal import (
    FIRE,
    PASS,
    SETTLE,
    START,
    Head,
    Journal,
    JournalFull,
    Mark,
    Step,
    finite,
    is_id,
    mismatch,
    summary,
    valid_clock,
)
from executor_mcp.execution.limits import Limits
from executor_mcp.sandbox.pool import Worker, WorkerLost, WorkerMisbehaved, WorkerPool
from executor_mcp.sandbox.prelude import MAX_DELAY_MS
from executor_mcp.tools.errors import ToolThrow

log = logging.getLogger(__name__)

STEP_GRACE = 5.0
RESULT_TOO_DEEP = (
    f"The execution's result is nested more than {MAX_DEPTH} levels deep, deeper than MCP clients read; "
    "return it flatter"
)
NOT_REBUILT = "Execution could not be resumed"
RERUN = "Run the execute tool again to start it afresh if its result is still needed."


@attrs.frozen
class Outcome:
    """How an execution ended, before any rendering."""

    ok: bool
    result: Any = None
    text: str | None = None
    error: str | None = None
    logs: list[str] = attrs.Factory(list)
    emitted: list[Any] = attrs.Factory(list)
    defect: bool = False  # an infrastructure failure, shown only as an opaque correlation id


def internal_error(context: str) -> str:
    """The opaque text an infrastructure defect shows; the cause is logged under the same id."""
    correlation = secrets.token_hex(4)
    log.exception("%s [%s]", context, correlation)
    return f"Internal tool error [{correlation}]"


class _Stopped(Exception):
    """The worker broke a bound or the protocol; the message is what the execution ends with."""


def _broken(reason: str) -> _Stopped:
    return _Stopped(f"The sandbox broke the execution protocol ({reason}), so the execution was stopped")


class Keeper(Protocol):
    """Who keeps a journalled execution's journal: the engine records into it, the keeper writes it down."""

    @property
    def journal(self) -> Journal: ...

    async def keep(self) -> None:
        """Write what the journal has not written yet, if it is durable; a no-op while it is not."""


@attrs.define(eq=False)
class ToolCall:
    """One tool call of the sandbox, as its invocation sees it."""

    id: int
    path: str
    _wake: Callable[[], None]
    waiting_for_a_human: bool = False

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Held while the call waits for a human: if nothing else is pending, the worker is given back meanwhile."""
        self.waiting_for_a_human = True
        self._wake()
        try:
            yield
        finally:
            self.waiting_for_a_human = False


Invoke = Callable[[ToolCall, Any], Awaitable[Any]]


# Told each execution's seconds from start to end and whether it ended well (the metrics' histogram).
Observe = Callable[[float, bool], None]


class Engine:
    def __init__(self, pool: WorkerPool, limits: Limits, observe: Observe | None = None) -> None:
        self._pool = pool
        self.limits = limits
        self._observe = observe

    def head(self, code: str, mode: str = "") -> Head:
        """A new execution of `code` under this engine's limits, with its own seed and time origin."""
        seed = (secrets.randbits(32) | 1, secrets.randbits(32), secrets.randbits(32), secrets.randbits(32))
        return Head(code=code, limits=self.limits, seed=seed, epoch=time.time() * 1000, mode=mode)

    async def run(
        self, code: str, invoke: Callable[[str, Any], Awaitable[Any]], *, account: Hashable = None
    ) -> Outcome:
        """Run `code` with no journal: nothing of it outlives this call."""
        return await self.execute(self.head(code), lambda call, args: invoke(call.path, args), account=account)

    async def execute(
        self, head: Head, invoke: Invoke, *, account: Hashable = None, keeper: Keeper | None = None
    ) -> Outcome:
        """Run the execution `head` starts; with a `keeper`, journalled, and rebuilt first from its journal if
        that holds steps already (an execution revived after a restart)."""
        started = time.perf_counter()
        outcome = await _Run(self._pool, head, invoke, account, keeper).drive()
        if self._observe is not None:
            self._observe(time.perf_counter() - started, outcome.ok)
        return outcome


@attrs.define
class _Settle:
    call_id: int
    ok: bool
    payload: str | None


def _unknown(path: str) -> str:
    return (
        f"tools.{path} was running when the server stopped, so whether it ran is unknown; it is not called a "
        "second time."
    )


def unknown_outcome(path: str) -> str:
    """How an execution ends that cannot go on after a restart: one of its calls may or may not have run."""
    return f"{NOT_REBUILT}: {_unknown(path)} {RERUN}"


class _Diverged(Exception):
    """A replay did not reproduce the journal; the message says how."""


class _Exhausted(Exception):
    """A replay reached the execution's CPU budget (it counts every worker's); the message is the worker's."""


class _Run:
    def __init__(self, pool: WorkerPool, head: Head, invoke: Invoke, account: Hashable, keeper: Keeper | None) -> None:
        self._pool = pool
        self._head = head
        self._limits = head.limits
        self._invoke = invoke
        self._account = account
        self._keeper = keeper
        self._journal = keeper.journal if keeper is not None else None
        # Never more buffered than calls in flight (bounded) and one wake-up.
        self._send, self._settled = trio.open_memory_channel[_Settle | None](self._limits.max_tool_calls + 1)
        self._woken = False
        self._calls: dict[int, ToolCall] = {}  # in flight
        self._timers: dict[int, float] = {}  # pending timer id -> when it is due
        self._due: list[tuple[float, int, int]] = []  # (due, order, id); cleared timers linger until popped
        self._order = 0
        self._spent = 0.0  # CPU seconds of the workers this execution ran in before the current one
        self._replayed_args: dict[int, Any] = {}  # the arguments of calls the replay saw started, by call id
        self._worker: Worker | None = None
        self._nursery: trio.Nursery | None = None

    async def drive(self) -> Outcome:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                return await self._incarnations()
            except (_Stopped, WorkerMisbehaved) as exc:
                if self._worker is not None:
                    self._worker.kill()
                log.warning("sandbox worker stopped: %s", exc)
                message = str(exc) if isinstance(exc, _Stopped) else str(_broken(str(exc)))
                return Outcome(ok=False, error=message)
            except (JournalFull, _Exhausted) as exc:
                return Outcome(ok=False, error=str(exc))
            except _Diverged as exc:
                return Outcome(ok=False, error=f"{NOT_REBUILT}: {exc} {RERUN}")  # as `unknown_outcome` words it
            except WorkerLost:
                return Outcome(ok=False, error=internal_error("sandbox worker lost"), defect=True)
            finally:
                nursery.cancel_scope.cancel()

    async def _incarnations(self) -> Outcome:
        """Run in a worker until the end, giving the worker back whenever only humans are awaited."""
        held: _Settle | None = None
        if self._journal is not None and self._journal.steps:
            self._spent = self._journal.pending().cpu
        while True:
            async with self._pool.lease(self._account) as worker:
                self._worker = worker
                try:
                    reply = await self._rebuild(held)
                    outcome = await self._live(reply)
                finally:
                    self._worker = None
            if outcome is not None:
                return outcome
            while (held := await self._settled.receive()) is None:
                self._woken = False

    async def _rebuild(self, held: _Settle | None) -> dict[str, Any]:
        """Bring a fresh worker to where the execution is: start it, or replay its journal and then feed it
        the answer that woke the execution up."""
        journal = self._journal
        if journal is None or not journal.steps:
            return await self._step({"op": START, **self._start_fields()})
        reply = await self._replay(journal)
        self._resume_pending(journal)
        if held is not None:
            reply = await self._feed(held)
        return reply

    def _start_fields(self) -> dict[str, Any]:
        limits, head = self._limits, self._head
        return {
            "code": head.code,
            "memory": limits.memory,
            "stack": limits.stack,
            "cpu": limits.cpu,
            "cpu_spent": self._spent,
            "max_timers": limits.max_timers,
            "max_tool_calls": limits.max_tool_calls,
            "seed": list(head.seed),
            "epoch": head.epoch,
        }

    async def _replay(self, journal: Journal) -> dict[str, Any]:
        """Feed the worker every recorded input, checking each step asked for what it asked for before."""
        reply: dict[str, Any] = {}
        for number, step in enumerate(journal.steps, start=1):
            request = {"op": START, **self._start_fields()} if step.input.get("op") == START else dict(step.input)
            request["clock"] = step.clock
            reply = await self._request(request)
            if isinstance(reply.get("diverged"), str):
                raise _Diverged(f"replaying its journal (step {number}), {reply['diverged'][:300]}.")
            if reply.get("done") is not None:
                ended = _outcome(reply["done"])
                if not ended.ok and self._cpu(reply) >= self._limits.cpu:
                    raise _Exhausted(ended.error)  # the replay used up what the earlier workers left of the budget
                raise _Diverged(f"replaying its journal (step {number}), the code finished where it had gone on.")
            outbox = self._checked(reply.get("outbox"))
            difference = mismatch(step.outbox, summary(outbox))
            if difference is not None:
                raise _Diverged(
                    f"replaying its journal (step {number}), the code {difference}: something it observed could "
                    "not be reproduced, so no tool was called again."
                )
            for item in outbox:
                if item["kind"] == "call":
                    self._replayed_args[item["id"]] = item.get("args")
        return reply

    def _resume_pending(self, journal: Journal) -> None:
        """After a replay in a process that did not run the steps (a revival): call again what was waiting at
        an approval gate, arm the timers still pending, and refuse to guess about any other call."""
        pending = journal.pending()
        for call_id, call in pending.calls.items():
            if call_id in self._calls:
                continue
            if not call.askable:
                raise _Diverged(_unknown(call.path))
            self._start_call(call_id, call.path, self._replayed_args.get(call_id), again=True)
        now = time.time()
        for timer_id, due in pending.timers.items():
            if timer_id not in self._timers:
                self._add_timer(timer_id, max(due - now, 0.0))

    async def _live(self, reply: dict[str, Any]) -> Outcome | None:
        """Serve the worker until the execution ends (its outcome), or until only humans are awaited and the
        journal is kept, when the worker is given back (None)."""
        limits = self._limits
        deadline = trio.current_time() + limits.timeout
        while reply.get("done") is None:
            if self._releasable():
                await self._request({"op": "drop"}, expect="dropped")
                self._spent = self._cpu(reply)
                assert self._worker is not None  # `_request` just used it
                self._worker.reusable = True
                return None
            if not self._calls and not self._timers:
                return Outcome(ok=False, error="Execution is waiting on a promise that can never settle")
            wake = self._next_due()
            settle: _Settle | None = None
            woken = False
            with trio.move_on_at(wake if self._calls else min(wake, deadline)):
                settle = await self._settled.receive()
                woken = settle is None
            if woken:
                self._woken = False
                continue
            if settle is not None:
                reply = await self._feed(settle)
                if not self._calls:
                    deadline = trio.current_time() + limits.timeout
            elif (timer_id := self._pop_due()) is not None:
                reply = await self._step({"op": FIRE, "id": timer_id})
            else:
                return self._timed_out()
        assert self._worker is not None  # the reply came from it
        self._worker.reusable = not reply.get("retire", True)
        return _outcome(reply["done"])

    def _releasable(self) -> bool:
        journal = self._journal
        return (
            journal is not None
            and journal.durable
            and not self._timers
            and bool(self._calls)
            and all(call.waiting_for_a_human for call in self._calls.values())
        )

    def _wake(self) -> None:
        if not self._woken:
            self._woken = True
            self._send.send_nowait(None)

    async def _feed(self, settle: _Settle) -> dict[str, Any]:
        self._calls.pop(settle.call_id, None)
        request = {"op": SETTLE, "id": settle.call_id, "ok": settle.ok, "payload": settle.payload}
        return await self._step(request)

    def _timed_out(self) -> Outcome:
        return Outcome(ok=False, error=f"Execution timed out after {self._limits.timeout * 1000:.0f}ms")

    async def _step(self, request: dict[str, Any]) -> dict[str, Any]:
        """One live step: ask the worker, journal what it observed, keep the journal, then act on its outbox."""
        reply = await self._request({**request, "clock": None})  # a live step: the worker reads the real clock
        if reply.get("done") is not None:
            return reply
        outbox = self._checked(reply.get("outbox"))
        if self._journal is not None:
            recorded = {"op": START} if request["op"] == START else request  # the head holds what a start was given
            readings = reply.get("clock")
            if not valid_clock(readings):
                raise _broken("malformed clock readings")
            step = Step(
                at=time.time(),
                input=recorded,
                clock=readings,
                outbox=summary(outbox),
                cpu=self._cpu(reply),
            )
            self._journal.record(step)
            if self._keeper is not None and self._journal.durable:
                await self._keeper.keep()
        self._schedule(outbox)
        return reply

    def _cpu(self, reply: dict[str, Any]) -> float:
        """The execution's CPU seconds so far, as the worker counts them (from the `cpu_spent` it was given)."""
        used = reply.get("cpu")
        return max(float(used), self._spent) if finite(used) and used >= 0 else self._spent

    async def _request(self, request: dict[str, Any], expect: str = "step") -> dict[str, Any]:
        assert self._worker is not None
        reply = await self._worker.request(request, answer_within=self._limits.cpu + STEP_GRACE)
        if reply.get("op") != expect:
            raise WorkerLost(f"unexpected reply from the sandbox worker: {reply.get('op')!r}")
        return reply

    def _checked(self, outbox: Any) -> list[dict[str, Any]]:
        """The outbox, every item of the shape the prelude writes; a worker that sends other is stopped."""
        limits = self._limits
        # New calls, new timers and clears of reported timers: no honest outbox holds more.
        if not isinstance(outbox, list) or len(outbox) > limits.max_tool_calls + 2 * limits.max_timers:
            raise _broken("malformed outbox")
        for item in outbox:
            if not isinstance(item, dict) or not is_id(item.get("id")):
                raise _broken("malformed outbox item")
            kind = item.get("kind")
            if kind == "call":
                path = item.get("path")
                if not isinstance(path, str) or not path:
                    raise _broken("a tool call without a path")
            elif kind == "timer":
                ms = item.get("ms")
                if isinstance(ms, bool) or not isinstance(ms, int | float):
                    raise _broken("a timer without a delay")
                item["ms"] = float(min(max(ms, 0), MAX_DELAY_MS))
            elif kind != "clear":
                raise _broken(f"unknown outbox item {str(kind)[:40]!r}")
        return outbox

    def _schedule(self, outbox: list[dict[str, Any]]) -> None:
        limits = self._limits
        for item in outbox:
            item_id, kind = item["id"], item["kind"]
            if kind == "call":
                if len(self._calls) >= limits.max_tool_calls:
                    raise _Stopped(
                        f"Execution exceeded its limit of {limits.max_tool_calls} tool calls in flight "
                        "(--execution-max-tool-calls)"
                    )
                self._start_call(item_id, item["path"], item.get("args"))
            elif kind == "timer":
                if item_id not in self._timers and len(self._timers) >= limits.max_timers:
                    raise _Stopped(
                        f"Execution exceeded its limit of {limits.max_timers} pending timers (--execution-max-timers)"
                    )
                self._add_timer(item_id, item["ms"] / 1000)
            else:
                self._timers.pop(item_id, None)

    def _start_call(self, call_id: int, path: str, args: Any, *, again: bool = False) -> None:
        assert self._nursery is not None
        call = self._calls[call_id] = ToolCall(call_id, path, self._wake)
        self._nursery.start_soon(self._call, call, args, again)

    def _add_timer(self, timer_id: int, seconds: float) -> None:
        due = trio.current_time() + seconds
        self._timers[timer_id] = due
        self._order += 1
        heapq.heappush(self._due, (due, self._order, timer_id))
        if len(self._due) > 2 * len(self._timers) + 64:  # drop what clears left behind
            self._due = [entry for entry in self._due if self._timers.get(entry[2]) == entry[0]]
            heapq.heapify(self._due)

    def _next_due(self) -> float:
        while self._due:
            due, _, timer_id = self._due[0]
            if self._timers.get(timer_id) == due:
                return due
            heapq.heappop(self._due)
        return math.inf

    def _pop_due(self) -> int | None:
        """The id of a timer that is due now, forgotten here as the worker fires it."""
        if self._next_due() > trio.current_time():
            return None
        _, _, timer_id = heapq.heappop(self._due)
        del self._timers[timer_id]
        return timer_id

    async def _call(self, call: ToolCall, args: Any, again: bool) -> None:
        try:
            if again:  # asked again after a revival: from here on its tool may run, which the journal must say
                assert self._journal is not None
                assert self._keeper is not None
                self._journal.record(Mark(PASS, call.id))
                await self._keeper.keep()
            value = await self._invoke(call, args)
            settle = _Settle(call.id, True, json.dumps(value, ensure_ascii=False))
        except ToolThrow as exc:
            settle = _Settle(call.id, False, str(exc) or f"tools.{call.path} failed without a message")
        except Exception:
            settle = _Settle(call.id, False, internal_error(f"tool call {call.path} failed"))
        self._send.send_nowait(settle)


def _outcome(done: Any) -> Outcome:
    """The worker's report, checked: it comes from a process that runs untrusted code."""
    if not isinstance(done, dict):
        raise _broken("malformed outcome")
    logs, emitted = done.get("logs"), done.get("emitted")
    if not isinstance(logs, list) or not all(isinstance(line, str) for line in logs) or not isinstance(emitted, list):
        raise _broken("malformed logs or emitted output")
    if done.get("ok") is True and isinstance(done.get("result"), str):
        text = done.get("text")
        try:
            result = loads(done["result"])
            too_deep = deeper_than(result)
        except RecursionError:
            too_deep = True
        except ValueError:
            raise _broken("a result that is not JSON") from None
        if too_deep:
            return Outcome(ok=False, error=RESULT_TOO_DEEP, logs=logs, emitted=emitted)
        return Outcome(
            ok=True,
            result=result,
            text=text if isinstance(text, str) else None,
            logs=logs,
            emitted=emitted,
        )
    if done.get("ok") is False and isinstance(error := done.get("error"), str):
        return Outcome(ok=False, error=error or "The execution failed without a message", logs=logs, emitted=emitted)
    raise _broken("malformed outcome")
