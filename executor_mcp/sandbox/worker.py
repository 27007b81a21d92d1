"""The sandbox worker process: runs one execution at a time in QuickJS-NG, driven by frames on stdio.

The server starts this process with an empty environment and no descriptors but stdin, stdout and
stderr; after its imports it drops what it could still use (file writes, descriptors, core dumps).

The JavaScript context has plain ECMAScript intrinsics and the prelude's globals, nothing else: no
module loader, no `std`/`os`, no Python callables. A crash here costs this process, never the server.

It dies with the server. Only the server holds the write end of its stdin, so when the server is gone
(even SIGKILLed, with no chance to kill its workers) stdin hangs up; a daemon thread waits for that and
exits the process, also while the main thread is deep in a JavaScript loop (QuickJS releases the GIL).
`PR_SET_PDEATHSIG` would not do: it fires when the forking *thread* exits, and trio forks workers from
cached threads that exit after idling, which would kill healthy workers.

Requests and replies (one reply per request):

    {"op": "start", "code", "memory", "stack", "cpu", "max_timers", "max_tool_calls", "seed"?, "epoch"?,
     "clock"?, "cpu_spent"?}                              -> step
    {"op": "settle", "id", "ok", "payload", "clock"?}     -> step   (a tool call's answer)
    {"op": "fire", "id", "clock"?}                        -> step   (a timer is due)
    {"op": "drop"}                                        -> {"op": "dropped"}
    step = {"op": "step", "outbox": [...], "done": null | {...}, "retire": bool, "clock": [...],
            "diverged": null | str, "cpu": float}

`outbox` lists what the code now waits on (`call`, `timer`, `clear`); `done` is the outcome once the
code's promise settled, after which the context is dropped. `retire` asks the server not to reuse this
process (after a limit breach the engine's state is not worth trusting). `drop` lets go of the current
execution (a paused one giving its worker back), if any, and the worker stays reusable.

Durable executions: everything the code can observe from outside is an input the host can journal and
feed again, so a paused execution can be rebuilt in a fresh worker by re-running its code. Tool answers
and timer firings are requests already; the rest is here:

- `seed` (4 integers in [0, 2^32), not all zero) seeds `Math.random` (xoshiro128**), and `epoch` (ms
  since the Unix epoch) is the execution's time origin (`performance.timeOrigin`, and what
  `performance.now()` counts from). Without them the worker picks a random seed and the current time.
- A step's reply lists in `clock` every clock reading the code made during it, in order, run-length
  encoded: `[kind, value, count]`, kind `"date"` (integer ms, as `Date.now()`, `new Date()` and `Date()`
  read it) or `"perf"` (float ms since `epoch`, as `performance.now()`), `count` identical readings in a
  row. A request's `clock` (such a list; null or absent for a live step) makes it a replay step: each
  reading takes the next journaled value instead. The first way the code's readings did not match it
  (another kind, more readings, fewer) is the reply's `diverged`, an English sentence; from there the
  step reads the live clock. A step makes at most `MAX_CLOCK_ENTRIES` entries; past that a reading
  throws a RangeError the code can catch.
- `cpu` is the CPU time (seconds) the execution has used so far, in every worker it ran in: a rebuilt
  execution starts with the `cpu_spent` its host carried over, so its budget (`cpu`, the whole of it)
  counts the replay too, and a limit's message names the whole budget.

A malformed seed, epoch or clock is refused with `{"op": "error"}`, leaving the current execution as it was.

Every execution gets a context of its own, never used before. Building one and evaluating the prelude
in it is most of what starting an execution costs, so once a reply is written the worker builds the
next execution's context while it waits (a `Realm`), with the limits the last `start` asked for.
"""

import json
import math
import os
import re
import resource
import select
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO

import attrs
import quickjs

from executor_mcp.sandbox.prelude import MAX_CLOCK_ENTRIES, prelude
from executor_mcp.sandbox.protocol import MAX_FRAME, FrameDecoder, frame
from executor_mcp.sandbox.source import Prepared, prepare

_POSITION = re.compile(r"<input>:(\d+):(\d+)")
_NO_LIMIT = -1
ADDRESS_SPACE_LIMIT = 1 << 30
_OUT_OF_MEMORY = "InternalError: out of memory"
_SYNTAX = "SyntaxError: "
_BARE = frozenset({"null", "undefined"})
_NEARLY_FULL = 0.9
_ORPHANED = 3
Seed = tuple[int, int, int, int]
ClockEntry = tuple[str, int | float, int]
Clock = list[ClockEntry]
TOO_DEEP = (
    "The execution's output (a tool call's arguments, an emitted value or its logs) is nested too deeply to pass "
    "on (about 1,000 levels at most); flatten it"
)


@attrs.frozen
class RealmLimits:
    """What a context is built with: the same for every execution of one server."""

    memory: int
    stack: int
    max_timers: int
    max_tool_calls: int

    @classmethod
    def of(cls, start: dict[str, Any]) -> "RealmLimits":
        return cls(start["memory"], start["stack"], start["max_timers"], start["max_tool_calls"])


class Realm:
    """A fresh QuickJS context for one execution, with its prelude loaded or still to load.

    Loading the prelude yields its control function (seeds `Math.random`, opens and closes a step's clock
    readings, takes the modules compiled on first use): the worker holds it, and no global does, so the
    agent's code cannot reach it.
    """

    def __init__(self, limits: RealmLimits) -> None:
        self.limits = limits
        self.context = quickjs.Context()
        self.context.set_memory_limit(limits.memory)
        self.context.set_max_stack_size(limits.stack)
        self._control: Any = None

    def load(self) -> None:
        if self._control is None:
            loaded = prelude(max_timers=self.limits.max_timers, max_tool_calls=self.limits.max_tool_calls)
            control = self.context.eval(loaded.core)
            for name, source in loaded.modules:
                control("module", name, source)
            self._control = control

    def clock(self, op: str, text: str = "") -> Any:
        self.load()
        return self._control(op, text)

    @classmethod
    def ready(cls, limits: RealmLimits) -> "Realm | None":
        """A realm with its prelude loaded, or None if it cannot be built now (it is then built at start,
        where a failure becomes the execution's outcome)."""
        realm = cls(limits)
        try:
            realm.load()
        except quickjs.JSException:
            return None
        return realm


class Execution:
    """One execution in its own realm. Its seed and epoch are fixed for its life, so a replay of it in
    another worker (given the same seed, epoch and each step's `clock`) observes what it observed."""

    def __init__(
        self,
        code: str,
        cpu: float,
        realm: Realm,
        *,
        seed: Seed | None = None,
        epoch: float | None = None,
        spent: float = 0.0,
    ) -> None:
        """`cpu` is the execution's whole CPU budget, `spent` what it used in workers before this one."""
        self.cpu_budget = cpu
        self.cpu_used = spent
        self.memory = realm.limits.memory
        self.prepared: Prepared | None = None
        self.context = realm.context
        self.seed = fresh_seed() if seed is None else seed
        self.epoch = time.time() * 1000 if epoch is None else epoch
        self._realm = realm
        self._code = code
        self._opened = False
        self._loading = False  # while the agent's program is parsed (and runs up to its first await)

    def start(self, clock: Clock | None = None) -> dict[str, Any]:
        def run() -> None:
            self.prepared = prepare(self._code)
            self._loading = True
            self.context.eval(self.prepared.program)
            self._loading = False

        return self._step(run, clock)

    def settle(self, call_id: int, ok: bool, payload: str | None, clock: Clock | None = None) -> dict[str, Any]:
        arguments = f"{int(call_id)}, {json.dumps(bool(ok))}, {json.dumps(payload)}"
        return self._step(lambda: self.context.eval(f"__executor.settle({arguments})"), clock)

    def fire(self, timer_id: int, clock: Clock | None = None) -> dict[str, Any]:
        return self._step(lambda: self.context.eval(f"__executor.fire({int(timer_id)})"), clock)

    def _begin(self, clock: Clock | None) -> None:
        if not self._opened:
            self._realm.clock("open", json.dumps([*self.seed, self.epoch]))
            self._opened = True
        self._realm.clock("step", json.dumps(clock))

    def _step(self, action: Callable[[], object], clock: Clock | None) -> dict[str, Any]:
        def begun() -> None:
            self._begin(clock)
            action()

        try:
            self._metered(begun)
            while self._metered(self.context.execute_pending_job):
                pass
            outbox = json.loads(self.context.eval("__executor.drain()"))
            readings = json.loads(self._realm.clock("close"))
            state = self.context.eval("__executor.state()")
            finished = None if state is None else json.loads(state)
        except quickjs.JSException as exc:
            return self._failed(str(exc))
        except RecursionError:
            # JavaScript nests deeper than Python's parser goes: tool arguments, emitted values or logs.
            return _ended(TOO_DEEP, retire=False, cpu=self.cpu_used)
        done = None if finished is None else self._finish(finished)
        return {
            "op": "step",
            "outbox": outbox,
            "done": done,
            "retire": False,
            "clock": readings["clock"],
            "diverged": readings["diverged"],
            "cpu": self.cpu_used,
        }

    def _metered(self, call):
        remaining = self.cpu_budget - self.cpu_used
        if remaining <= 0:
            raise quickjs.JSException("InternalError: interrupted")
        self.context.set_time_limit(remaining)
        started = time.process_time()
        try:
            return call()
        finally:
            self.cpu_used += time.process_time() - started
            self.context.set_time_limit(_NO_LIMIT)

    def _finish(self, state: dict[str, Any]) -> dict[str, Any]:
        logs, emitted = state.get("logs", []), state.get("emitted", [])
        if state.get("ok"):
            return {"ok": True, "result": state["result"], "text": state["text"], "logs": logs, "emitted": emitted}
        message = state["message"]
        if message.startswith(_OUT_OF_MEMORY) or (state.get("noMessage") and self._heap_nearly_full()):
            error = self._memory_exceeded()
        else:
            error = self._describe(message, state.get("stack", ""))
        return {"ok": False, "error": error, "logs": logs, "emitted": emitted}

    def _memory_exceeded(self) -> str:
        return f"Execution exceeded its memory limit of {self.memory // (1024 * 1024)} MiB"

    def _heap_nearly_full(self) -> bool:
        """When the heap is too full to build an error object, QuickJS throws a bare `null` instead."""
        return self.context.memory().get("malloc_size", 0) >= self.memory * _NEARLY_FULL

    def _failed(self, raw: str) -> dict[str, Any]:
        """An error that escaped the engine itself: a limit, or an error while loading the code."""
        head, _, rest = raw.partition("\n")
        retire = False
        if head == "InternalError: interrupted":
            message, retire = f"Execution exceeded its CPU time limit of {self.cpu_budget:g}s", True
        elif head.startswith(_OUT_OF_MEMORY) or (head in _BARE and self._heap_nearly_full()):
            message, retire = self._memory_exceeded(), True
        elif head in _BARE or not head:
            message, retire = f"The sandbox stopped with an exception that has no message ({head or 'empty'})", True
        elif head.startswith(_SYNTAX) and self._loading and self.prepared is not None:
            position = _POSITION.search(rest)
            line, column = (int(position[1]), int(position[2])) if position else (None, None)
            message = self.prepared.syntax_error(head.removeprefix(_SYNTAX), line, column)
        else:
            message = self._describe(head, rest)
        return _ended(message, retire=retire, cpu=self.cpu_used)

    def _describe(self, message: str, stack: str) -> str:
        """The message, with the first position that lies in the agent's code, as (line:column)."""
        if self.prepared is not None:
            for line, column in _POSITION.findall(stack):
                agent_line = self.prepared.agent_line(int(line))
                if agent_line is not None:
                    return f"{message} ({agent_line}:{self.prepared.agent_column(int(line), int(column))})"
        return message


def _too_large(size: int, cpu: float) -> dict[str, Any]:
    error = (
        f"The execution's output ({size // (1024 * 1024)} MiB with its logs and tool call arguments) exceeds the "
        f"{MAX_FRAME // (1024 * 1024)} MiB a sandbox can send; return or pass less data"
    )
    return _ended(error, retire=True, cpu=cpu)


def _ended(error: str, *, retire: bool, cpu: float) -> dict[str, Any]:
    done = {"ok": False, "error": error, "logs": [], "emitted": []}
    return {"op": "step", "outbox": [], "done": done, "retire": retire, "clock": [], "diverged": None, "cpu": cpu}


def fresh_seed() -> Seed:
    """Four random 32-bit words, not all zero (xoshiro128** would then draw only zeros)."""
    while True:
        seed: Seed = struct.unpack(">4I", os.urandom(16))
        if any(seed):
            return seed


def seed_of(value: object) -> Seed | None:
    """A start request's seed, checked: the host is trusted, but a bad seed must fail loudly, not draw zeros."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 4
        or not all(type(word) is int and 0 <= word < 1 << 32 for word in value)
        or not any(value)
    ):
        raise ValueError("seed must be 4 integers in [0, 2^32), not all zero")
    return (value[0], value[1], value[2], value[3])


def _number(value: object) -> float | None:
    """A finite JSON number as a float, or None (booleans are not numbers here)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def epoch_of(value: object) -> float | None:
    if value is None:
        return None
    if (epoch := _number(value)) is None:
        raise ValueError("epoch must be a finite number of milliseconds")
    return epoch


def spent_of(value: object) -> float:
    if value is None:
        return 0.0
    if (spent := _number(value)) is None or spent < 0:
        raise ValueError("cpu_spent must be a finite number of seconds, at least 0")
    return spent


def clock_of(value: object) -> Clock | None:
    """A replay step's clock readings, checked, as the step replies listed them."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_CLOCK_ENTRIES:
        raise ValueError(f"clock must be a list of at most {MAX_CLOCK_ENTRIES} readings")
    entries: list[ClockEntry] = []
    for entry in value:
        if not isinstance(entry, list) or len(entry) != 3:
            raise ValueError("a clock reading is [kind, value, count]")
        kind, reading, count = entry
        is_date = kind == "date" and type(reading) is int
        if not is_date and (kind != "perf" or _number(reading) is None):
            raise ValueError(f"a clock reading is date (integer ms) or perf (finite ms), not {str(kind)[:20]!r}")
        if type(count) is not int or count < 1:
            raise ValueError("a clock reading's count is a positive integer")
        entries.append((kind, reading, count))
    return entries


def _confine() -> None:
    """Give up what JavaScript in this process must never need, now that imports are done."""
    for limit, value in (
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_FSIZE, 0),
        (resource.RLIMIT_NOFILE, 16),
        # A backstop under the engine's own heap limit, should native code ever allocate past it.
        (resource.RLIMIT_AS, ADDRESS_SPACE_LIMIT),
    ):
        resource.setrlimit(limit, (value, value))


def _die_with_the_server(stdin: int) -> None:
    def watch() -> None:
        poller = select.poll()
        poller.register(stdin, 0)  # no data events: only a hang-up or an error wakes this thread
        while True:
            if any(events & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, events in poller.poll()):
                os._exit(_ORPHANED)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()


def _read(stream: BinaryIO, decoder: FrameDecoder) -> dict[str, Any] | None:
    while (message := decoder.next()) is None:
        chunk = os.read(stream.fileno(), 1 << 16)
        if not chunk:
            return None
        decoder.feed(chunk)
    return message


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    decoder = FrameDecoder()
    execution: Execution | None = None
    limits: RealmLimits | None = None
    spare: Realm | None = None
    while (message := _read(stdin, decoder)) is not None:
        op = message.get("op")
        try:
            if op == "start":
                seed, epoch, clock, spent = (
                    seed_of(message.get("seed")),
                    epoch_of(message.get("epoch")),
                    clock_of(message.get("clock")),
                    spent_of(message.get("cpu_spent")),
                )
                limits = RealmLimits.of(message)
                realm = spare if spare is not None and spare.limits == limits else Realm(limits)
                spare = None
                execution = Execution(message["code"], message["cpu"], realm, seed=seed, epoch=epoch, spent=spent)
                reply = execution.start(clock)
            elif execution is not None and op == "settle":
                clock = clock_of(message.get("clock"))
                reply = execution.settle(message["id"], message["ok"], message.get("payload"), clock)
            elif execution is not None and op == "fire":
                reply = execution.fire(message["id"], clock_of(message.get("clock")))
            elif op == "drop":
                execution, reply = None, {"op": "dropped"}
            else:
                reply = {"op": "error", "error": f"unexpected request {op!r}"}
        except ValueError as exc:
            reply = {"op": "error", "error": f"malformed {op!r} request: {exc}"}
        if reply.get("done") is not None:
            execution = None  # the context goes with it
        framed = frame(reply)
        if len(framed) > MAX_FRAME:
            framed, execution = frame(_too_large(len(framed), reply["cpu"])), None
        stdout.write(framed)
        stdout.flush()
        if execution is None and spare is None and limits is not None and not reply.get("retire"):
            spare = Realm.ready(limits)  # a retiring worker is about to be killed: no point


def main() -> int:
    _die_with_the_server(sys.stdin.fileno())
    _confine()
    serve(sys.stdin.buffer, sys.stdout.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
