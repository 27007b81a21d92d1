"""Running one execution: drive a leased sandbox worker step by step, serving its tool calls and timers.

The worker computes; this side waits. Tool calls are tasks in the execution's own nursery, which lives
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
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import attrs
import trio

from executor_mcp.codec import MAX_DEPTH, deeper_than, loads
from executor_mcp.sandbox.pool import Worker, WorkerLost, WorkerMisbehaved, WorkerPool
from executor_mcp.sandbox.prelude import MAX_DELAY_MS
from executor_mcp.tools.errors import ToolThrow

log = logging.getLogger(__name__)

STEP_GRACE = 5.0
RESULT_TOO_DEEP = (
    f"The execution's result is nested more than {MAX_DEPTH} levels deep, deeper than MCP clients read; "
    "return it flatter"
)
_MAX_ID = 2**53


@attrs.frozen
class Limits:
    timeout: float = 300.0
    cpu: float = 60.0
    memory: int = 64 * 1024 * 1024
    stack: int = 1024 * 1024
    max_timers: int = 10_000
    max_tool_calls: int = 1_000


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


Invoke = Callable[[str, Any], Awaitable[Any]]


def internal_error(context: str) -> str:
    """The opaque text an infrastructure defect shows; the cause is logged under the same id."""
    correlation = secrets.token_hex(4)
    log.exception("%s [%s]", context, correlation)
    return f"Internal tool error [{correlation}]"


class _Stopped(Exception):
    """The worker broke a bound or the protocol; the message is what the execution ends with."""


def _broken(reason: str) -> _Stopped:
    return _Stopped(f"The sandbox broke the execution protocol ({reason}), so the execution was stopped")


class Engine:
    def __init__(self, pool: WorkerPool, limits: Limits) -> None:
        self._pool = pool
        self.limits = limits

    async def run(self, code: str, invoke: Invoke, *, account: Hashable = None) -> Outcome:
        async with self._pool.lease(account) as worker:
            return await _Run(worker, invoke, self.limits).drive(code)


@attrs.define
class _Settle:
    call_id: int
    ok: bool
    payload: str | None


class _Run:
    def __init__(self, worker: Worker, invoke: Invoke, limits: Limits) -> None:
        self._worker = worker
        self._invoke = invoke
        self._limits = limits
        # Never more buffered than calls in flight, which are bounded.
        self._send, self._settled = trio.open_memory_channel[_Settle](limits.max_tool_calls)
        self._in_flight = 0
        self._timers: dict[int, float] = {}  # pending timer id -> when it is due
        self._due: list[tuple[float, int, int]] = []  # (due, order, id); cleared timers linger until popped
        self._order = 0

    async def drive(self, code: str) -> Outcome:
        async with trio.open_nursery() as nursery:
            try:
                return await self._loop(nursery, code)
            except (_Stopped, WorkerMisbehaved) as exc:
                self._worker.kill()
                log.warning("sandbox worker stopped: %s", exc)
                message = str(exc) if isinstance(exc, _Stopped) else str(_broken(str(exc)))
                return Outcome(ok=False, error=message)
            except WorkerLost:
                return Outcome(ok=False, error=internal_error("sandbox worker lost"), defect=True)
            finally:
                nursery.cancel_scope.cancel()

    async def _loop(self, nursery: trio.Nursery, code: str) -> Outcome:
        limits = self._limits
        deadline = trio.current_time() + limits.timeout
        start = {
            "op": "start",
            "code": code,
            "memory": limits.memory,
            "stack": limits.stack,
            "cpu": limits.cpu,
            "max_timers": limits.max_timers,
            "max_tool_calls": limits.max_tool_calls,
        }
        reply = await self._step(start)
        while reply.get("done") is None:
            self._schedule(nursery, reply.get("outbox"))
            if not self._in_flight and not self._timers:
                return Outcome(ok=False, error="Execution is waiting on a promise that can never settle")
            wake = self._next_due()
            settle: _Settle | None = None
            with trio.move_on_at(wake if self._in_flight else min(wake, deadline)):
                settle = await self._settled.receive()
            if settle is not None:
                self._in_flight -= 1
                if not self._in_flight:
                    deadline = trio.current_time() + limits.timeout
                reply = await self._step(
                    {"op": "settle", "id": settle.call_id, "ok": settle.ok, "payload": settle.payload}
                )
            elif (timer_id := self._pop_due()) is not None:
                reply = await self._step({"op": "fire", "id": timer_id})
            else:
                return self._timed_out()
        self._worker.reusable = not reply.get("retire", True)
        return _outcome(reply["done"])

    def _timed_out(self) -> Outcome:
        return Outcome(ok=False, error=f"Execution timed out after {self._limits.timeout * 1000:.0f}ms")

    async def _step(self, request: dict[str, Any]) -> dict[str, Any]:
        reply = await self._worker.request(request, answer_within=self._limits.cpu + STEP_GRACE)
        if reply.get("op") != "step":
            raise WorkerLost(f"unexpected reply from the sandbox worker: {reply.get('op')!r}")
        return reply

    def _schedule(self, nursery: trio.Nursery, outbox: Any) -> None:
        limits = self._limits
        # New calls, new timers and clears of reported timers: no honest outbox holds more.
        if not isinstance(outbox, list) or len(outbox) > limits.max_tool_calls + 2 * limits.max_timers:
            raise _broken("malformed outbox")
        for item in outbox:
            if not isinstance(item, dict) or not _is_id(item_id := item.get("id")):
                raise _broken("malformed outbox item")
            kind = item.get("kind")
            if kind == "call":
                path = item.get("path")
                if not isinstance(path, str) or not path:
                    raise _broken("a tool call without a path")
                if self._in_flight >= limits.max_tool_calls:
                    raise _Stopped(
                        f"Execution exceeded its limit of {limits.max_tool_calls} tool calls in flight "
                        "(--execution-max-tool-calls)"
                    )
                self._in_flight += 1
                nursery.start_soon(self._call, item_id, path, item.get("args"))
            elif kind == "timer":
                ms = item.get("ms")
                if isinstance(ms, bool) or not isinstance(ms, int | float):
                    raise _broken("a timer without a delay")
                if item_id not in self._timers and len(self._timers) >= limits.max_timers:
                    raise _Stopped(
                        f"Execution exceeded its limit of {limits.max_timers} pending timers (--execution-max-timers)"
                    )
                self._add_timer(item_id, float(min(max(ms, 0), MAX_DELAY_MS)) / 1000)
            elif kind == "clear":
                self._timers.pop(item_id, None)
            else:
                raise _broken(f"unknown outbox item {str(kind)[:40]!r}")

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

    async def _call(self, call_id: int, path: str, args: Any) -> None:
        try:
            value = await self._invoke(path, args)
            settle = _Settle(call_id, True, json.dumps(value, ensure_ascii=False))
        except ToolThrow as exc:
            settle = _Settle(call_id, False, str(exc) or f"tools.{path} failed without a message")
        except Exception:
            settle = _Settle(call_id, False, internal_error(f"tool call {path} failed"))
        self._send.send_nowait(settle)


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < _MAX_ID


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
