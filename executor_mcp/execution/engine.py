"""Running one execution: drive a leased sandbox worker step by step, serving its tool calls and timers.

The worker computes; this side waits. Tool calls and timers are tasks in the execution's own nursery,
which lives inside whatever task runs the execution (a session's request), so cancelling the session
cancels its executions. Budgets:

- CPU: enforced inside the worker on every evaluation call; exceeding it ends the execution.
- Wall clock: counted only while no tool call is in flight (a slow tool or a human approval does not
  use it up), and restarted from the last tool return, as upstream. Waiting on a timer counts.
- A step that does not come back within the CPU budget plus a grace period means the worker is stuck:
  it is killed and the execution ends with an internal error.
"""

import json
import logging
import math
import secrets
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import attrs
import trio

from executor_mcp.sandbox.pool import Worker, WorkerLost, WorkerPool
from executor_mcp.tools.errors import ToolThrow

log = logging.getLogger(__name__)

STEP_GRACE = 5.0


@attrs.frozen
class Limits:
    timeout: float = 300.0
    cpu: float = 60.0
    memory: int = 64 * 1024 * 1024
    stack: int = 1024 * 1024


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


@attrs.define
class _Fire:
    timer_id: int


class _Run:
    def __init__(self, worker: Worker, invoke: Invoke, limits: Limits) -> None:
        self._worker = worker
        self._invoke = invoke
        self._limits = limits
        self._send, self._events = trio.open_memory_channel[_Settle | _Fire](math.inf)
        self._in_flight = 0
        self._timers: dict[int, trio.CancelScope] = {}

    async def drive(self, code: str) -> Outcome:
        async with trio.open_nursery() as nursery:
            try:
                return await self._loop(nursery, code)
            except WorkerLost:
                return Outcome(ok=False, error=internal_error("sandbox worker lost"), defect=True)
            finally:
                nursery.cancel_scope.cancel()

    async def _loop(self, nursery: trio.Nursery, code: str) -> Outcome:
        limits = self._limits
        deadline = trio.current_time() + limits.timeout
        start = {"op": "start", "code": code, "memory": limits.memory, "stack": limits.stack, "cpu": limits.cpu}
        reply = await self._step(start)
        while reply.get("done") is None:
            self._schedule(nursery, reply.get("outbox"))
            if not self._in_flight and not self._timers:
                return Outcome(ok=False, error="Execution is waiting on a promise that can never settle")
            event: _Settle | _Fire | None = None
            with trio.move_on_at(deadline if not self._in_flight else math.inf):
                event = await self._events.receive()
            if event is None:
                return self._timed_out()
            if isinstance(event, _Settle):
                self._in_flight -= 1
                if not self._in_flight:
                    deadline = trio.current_time() + limits.timeout
                reply = await self._step(
                    {"op": "settle", "id": event.call_id, "ok": event.ok, "payload": event.payload}
                )
            else:
                self._timers.pop(event.timer_id, None)
                reply = await self._step({"op": "fire", "id": event.timer_id})
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
        if not isinstance(outbox, list):
            raise WorkerLost("malformed outbox")
        for item in outbox:
            kind = item.get("kind") if isinstance(item, dict) else None
            item_id = item.get("id") if isinstance(item, dict) else None
            if not isinstance(item_id, int):
                raise WorkerLost("malformed outbox item")
            if kind == "call" and isinstance(item.get("path"), str):
                self._in_flight += 1
                nursery.start_soon(self._call, item_id, item["path"], item.get("args"))
            elif kind == "timer" and isinstance(item.get("ms"), int | float):
                scope = self._timers[item_id] = trio.CancelScope()
                nursery.start_soon(self._timer, item_id, float(item["ms"]) / 1000, scope)
            elif kind == "clear":
                scope = self._timers.pop(item_id, None)
                if scope is not None:
                    scope.cancel()
            else:
                raise WorkerLost(f"unknown outbox item {kind!r}")

    async def _call(self, call_id: int, path: str, args: Any) -> None:
        try:
            value = await self._invoke(path, args)
            settle = _Settle(call_id, True, json.dumps(value, ensure_ascii=False))
        except ToolThrow as exc:
            settle = _Settle(call_id, False, str(exc))
        except Exception:
            settle = _Settle(call_id, False, internal_error(f"tool call {path} failed"))
        self._send.send_nowait(settle)

    async def _timer(self, timer_id: int, seconds: float, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(seconds)
            self._send.send_nowait(_Fire(timer_id))


def _outcome(done: Any) -> Outcome:
    """The worker's report, checked: it comes from a process that runs untrusted code."""
    if not isinstance(done, dict):
        raise WorkerLost("malformed outcome")
    logs, emitted = done.get("logs"), done.get("emitted")
    if not isinstance(logs, list) or not all(isinstance(line, str) for line in logs) or not isinstance(emitted, list):
        raise WorkerLost("malformed outcome")
    if done.get("ok") is True and isinstance(done.get("result"), str):
        text = done.get("text")
        try:
            result = json.loads(done["result"])
        except ValueError:
            raise WorkerLost("malformed result") from None
        return Outcome(
            ok=True,
            result=result,
            text=text if isinstance(text, str) else None,
            logs=logs,
            emitted=emitted,
        )
    if done.get("ok") is False and isinstance(done.get("error"), str):
        return Outcome(ok=False, error=done["error"], logs=logs, emitted=emitted)
    raise WorkerLost("malformed outcome")
