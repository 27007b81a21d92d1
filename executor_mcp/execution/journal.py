"""An execution's journal: what it ran and everything it observed from outside, so it can be run again.

A sandbox is deterministic given its inputs, and the host feeds it every input there is: the start (the
code, its limits, the seed of `Math.random` and the time origin), each tool call's answer, each timer's
firing, and the clock readings the code made during each step. The journal records those inputs in order,
one entry per worker step, together with what each step asked for (its outbox: calls, with a digest of
their arguments, and timers). Replaying it in a fresh worker rebuilds the execution's state exactly, and
comparing each replayed step's outbox with the recorded one tells a faithful replay from one that
diverged, before anything is called again.

Two marks around approval gates make a replay safe after a crash: `gate` (the call is waiting for a human;
the tool has not run) and `pass` (the gate let it through: from here on the tool may have run). A call
still in flight at the journal's end whose last mark is `gate` can be asked again; any other such call
has an unknown outcome, and the execution cannot go on without risking a second run of its tool.

Kept in memory while nothing depends on it; `durable` from the first pause on, when every entry recorded
is written before the host acts on it. No I/O here: the owner writes `unwritten()` where it keeps it.
"""

import math
from collections.abc import Iterable
from typing import Any, TypeGuard

import attrs

from executor_mcp.codec import converter, dumps, json_digest, loads
from executor_mcp.execution.limits import Limits
from executor_mcp.sandbox.prelude import MAX_CLOCK_ENTRIES

START = "start"
SETTLE = "settle"
FIRE = "fire"
GATE = "gate"
PASS = "pass"
# The gate was answered with anything but accept: its tool never runs, and nothing may ask for it again (a
# resume elsewhere must not adopt a call whose answer was a decline, before its settle step is written).
REFUSED = "refused"


class JournalFull(Exception):
    """The execution observed more than its journal keeps."""


class BadJournal(Exception):
    """A stored journal that does not decode (damaged or written by an incompatible version)."""


@attrs.frozen
class Head:
    """What the execution started from."""

    code: str
    limits: Limits
    seed: tuple[int, int, int, int]
    epoch: float  # the time origin, ms since the Unix epoch
    mode: str  # the session's elicitation mode: how its pauses are worded


@attrs.frozen
class Step:
    """One worker step: the input it was given, the clock readings it made, what it asked for, and the
    execution's CPU seconds so far (every worker it has run in, replays included)."""

    at: float  # epoch seconds, when the step ended: the base of its timers' delays
    input: dict[str, Any]
    clock: list[Any]
    outbox: list[Any]
    cpu: float


@attrs.frozen
class Mark:
    kind: str  # GATE | PASS | REFUSED
    call_id: int


Entry = Step | Mark


@attrs.frozen
class InFlight:
    """A call the journal shows started and not answered."""

    path: str
    last_mark: str | None

    @property
    def askable(self) -> bool:
        """Whether it may be invoked again: it was waiting at its gate, so its tool has not run."""
        return self.last_mark == GATE


@attrs.frozen
class Pending:
    """What the execution waits on at the journal's end."""

    calls: dict[int, InFlight]
    timers: dict[int, float]  # timer id -> when it is due, epoch seconds
    cpu: float

    def unknown(self) -> InFlight | None:
        """A call that may or may not have run (it was not waiting at a gate): the execution cannot go on."""
        return next((call for call in self.calls.values() if not call.askable), None)


_MAX_DATE_MS = 8.64e15  # the furthest a JavaScript Date reaches either side of the Unix epoch
_MAX_COUNT = 2**53
_MAX_ID = 2**53


def valid_clock(clock: Any) -> TypeGuard[list[Any]]:
    """Whether a step's clock readings are of the shape and number the prelude reports: `[kind, value, count]`,
    at most `MAX_CLOCK_ENTRIES` of them. They are journaled and fed back as they are, and charged to the journal
    by their number, so nothing else (a long string, a deep list, a 4,000-digit integer) may pass for one."""
    if not isinstance(clock, list) or len(clock) > MAX_CLOCK_ENTRIES:
        return False
    for entry in clock:
        if not isinstance(entry, list) or len(entry) != 3:
            return False
        kind, value, count = entry
        if type(count) is not int or not 0 < count < _MAX_COUNT:
            return False
        if kind == "date":
            if type(value) is not int or abs(value) > _MAX_DATE_MS:
                return False
        elif kind != "perf" or type(value) not in (int, float) or not math.isfinite(value):
            return False
    return True


def summary(outbox: list[Any]) -> list[Any]:
    """An outbox as the journal keeps it: calls with a digest of their arguments instead of the arguments."""
    summarized: list[Any] = []
    for item in outbox:
        kind = item.get("kind")
        if kind == "call":
            summarized.append(["call", item["id"], item["path"], _digest(item.get("args"))])
        elif kind == "timer":
            summarized.append(["timer", item["id"], item["ms"]])
        else:
            summarized.append([kind, item["id"]])
    return summarized


def _digest(args: Any) -> str:
    return json_digest(args)[:32]


def mismatch(recorded: list[Any], replayed: list[Any]) -> str | None:
    """How a replayed step's outbox differs from the recorded one, in words; None when it does not."""
    for old, new in zip(recorded, replayed, strict=False):
        if old == new:
            continue
        if old[0] == "call" and new[0] == "call":
            if old[2] != new[2]:
                return f"called tools.{_short(new[2])} where it had called tools.{_short(old[2])}"
            if old[3] != new[3]:
                return f"called tools.{_short(new[2])} with different arguments"
        return f"asked for {_what(new)} where it had asked for {_what(old)}"
    if len(replayed) > len(recorded):
        return f"asked for {_what(replayed[len(recorded)])}, which it had not"
    if len(recorded) > len(replayed):
        return f"did not ask for {_what(recorded[len(replayed)])}, which it had"
    return None


def _short(path: str) -> str:
    return path if len(path) <= 120 else path[:117] + "..."


def _what(item: list[Any]) -> str:
    match item[0]:
        case "call":
            return f"a call of tools.{_short(item[2])}"
        case "timer":
            return f"a timer of {item[2]:g} ms"
        case _:
            return "a timer to be cleared"


class Journal:
    """The records are numbered: the head is 0, entry i is i + 1. They are encoded only when written, so an
    execution that never pauses pays for keeping its entries in memory and nothing more."""

    def __init__(self, key: str, head: Head, entries: Iterable[Entry] | None = None) -> None:
        """`key` names it in the session file. With `entries` it is one read back from where it is kept (head
        and entries as they are stored there), else a new one."""
        self.key = key
        self.head = head
        self.limit = head.limits.journal
        self.entries: list[Entry] = list(entries or ())
        self.durable = entries is not None
        self.size = len(head.code) + sum(_size(entry) for entry in self.entries)
        self._kept = len(self.entries) + 1 if self.durable else 0  # records written where the journal is kept

    @property
    def steps(self) -> list[Step]:
        return [entry for entry in self.entries if isinstance(entry, Step)]

    def record(self, entry: Entry) -> None:
        """Add an entry; a step past the limit raises `JournalFull` (marks are a few bytes, one or two per
        gated call, so they never do)."""
        size = _size(entry)
        if isinstance(entry, Step) and self.size + size > self.limit:
            raise JournalFull(
                f"Execution stopped: it observed more than {self.limit // (1024 * 1024)} MiB from outside (tool "
                "results, timers and clock readings), more than its journal keeps (--execution-journal-limit). "
                "Read less in one execution (page through results, or pass fewer fields), then run execute again."
            )
        self.size += size
        self.entries.append(entry)

    def unwritten(self) -> list[tuple[int, bytes]]:
        """Records not written yet, numbered, encoded: the head first for a new journal, then entries in order."""
        records = [(0, encode_head(self.head))] if self._kept == 0 else []
        first = max(self._kept, 1)
        records += [(number, encode_entry(self.entries[number - 1])) for number in range(first, len(self.entries) + 1)]
        return records

    def written(self, count: int) -> None:
        """The first `count` records of `unwritten()` are kept now."""
        self._kept += count

    def pending(self) -> Pending:
        """Calls and timers the execution waits on after its last recorded step."""
        calls: dict[int, InFlight] = {}
        timers: dict[int, float] = {}
        cpu = 0.0
        for entry in self.entries:
            if isinstance(entry, Mark):
                if entry.call_id in calls:
                    calls[entry.call_id] = attrs.evolve(calls[entry.call_id], last_mark=entry.kind)
                continue
            cpu = entry.cpu
            if entry.input.get("op") == SETTLE:
                calls.pop(entry.input["id"], None)
            elif entry.input.get("op") == FIRE:
                timers.pop(entry.input["id"], None)
            for item in entry.outbox:
                if item[0] == "call":
                    calls[item[1]] = InFlight(path=item[2], last_mark=None)
                elif item[0] == "timer":
                    timers[item[1]] = entry.at + item[2] / 1000
                else:
                    timers.pop(item[1], None)
        return Pending(calls=calls, timers=timers, cpu=cpu)


def _size(entry: Entry) -> int:
    """About the bytes an entry takes: what it holds of any size is a settled call's payload, the paths of the
    calls it started, and its readings and outbox, whose items are otherwise a few dozen bytes each."""
    if isinstance(entry, Mark):
        return 32
    payload = entry.input.get("payload")
    paths = sum(len(item[2]) for item in entry.outbox if item[0] == "call")
    return (
        96 + (len(payload) if isinstance(payload, str) else 0) + paths + 32 * (len(entry.clock) + 2 * len(entry.outbox))
    )


def encode_head(head: Head) -> bytes:
    return dumps(converter.unstructure(head))


def decode_head(raw: bytes) -> Head:
    try:
        return converter.structure(loads(raw), Head)
    except Exception as exc:
        raise BadJournal(f"unreadable journal head ({type(exc).__name__})") from None


def encode_entry(entry: Entry) -> bytes:
    if isinstance(entry, Mark):
        return dumps({"mark": entry.kind, "id": entry.call_id})
    return dumps({"at": entry.at, "in": entry.input, "clock": entry.clock, "out": entry.outbox, "cpu": entry.cpu})


def decode_entry(raw: bytes) -> Entry:
    try:
        value = loads(raw)
        if "mark" in value:
            if value["mark"] not in (GATE, PASS, REFUSED) or not isinstance(value["id"], int):
                raise ValueError("unknown mark")
            return Mark(value["mark"], value["id"])
        step = Step(at=value["at"], input=value["in"], clock=value["clock"], outbox=value["out"], cpu=value["cpu"])
        if not (
            finite(step.at)
            and finite(step.cpu)
            and _valid_input(step.input)
            and valid_clock(step.clock)
            and isinstance(step.outbox, list)
            and all(_valid_item(item) for item in step.outbox)
        ):
            raise ValueError("malformed step")
        return step
    except Exception as exc:
        raise BadJournal(f"unreadable journal entry ({type(exc).__name__})") from None


# What a stored step holds is checked as far as the engine reads it (`pending`, `mismatch`, a replay's requests),
# so a damaged one is a `BadJournal`, which costs its own execution, not an error wherever it is read.


def finite(value: Any) -> TypeGuard[int | float]:
    """A finite JSON number (a boolean is not one)."""
    return type(value) in (int, float) and math.isfinite(value)


def is_id(value: Any) -> bool:
    """An id the prelude gives a call or a timer: a positive integer JavaScript counts exactly."""
    return type(value) is int and 0 < value < _MAX_ID


def _valid_input(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    match value.get("op"):
        case "start":
            return True
        case "fire":
            return is_id(value.get("id"))
        case "settle":
            payload = value.get("payload")
            return (
                is_id(value.get("id"))
                and type(value.get("ok")) is bool
                and (payload is None or isinstance(payload, str))
            )
        case _:
            return False


def _valid_item(item: Any) -> bool:
    if not isinstance(item, list) or len(item) < 2 or not is_id(item[1]):
        return False
    match item[0]:
        case "call":
            return len(item) == 4 and isinstance(item[2], str) and isinstance(item[3], str)
        case "timer":
            return len(item) == 3 and finite(item[2])
        case "clear":
            return len(item) == 2
        case _:
            return False
