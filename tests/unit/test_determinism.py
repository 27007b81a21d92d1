"""What the code observes of the world is reproducible, so a paused execution can be rebuilt by running it
again: `Math.random` is seeded, every clock reading is journaled (run-length encoded) and a replay step
feeds the journaled values back, saying how the code strayed from them. Also the `drop` request, and the
`cpu` every step reports, over a real worker's pipes."""

import itertools
import json
import math
import os
import select
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import quickjs

from executor_mcp.sandbox.prelude import MAX_CLOCK_ENTRIES
from executor_mcp.sandbox.processes import worker_command
from executor_mcp.sandbox.protocol import FrameDecoder, frame
from executor_mcp.sandbox.worker import Execution, Realm, RealmLimits, Seed

LIMITS = RealmLimits(memory=64 << 20, stack=1 << 20, max_timers=100, max_tool_calls=100)
SEED: Seed = (0x9E3779B9, 0x243F6A88, 0xB7E15162, 0x12345678)
EPOCH = 1_700_000_000_000.0
HANG = 60  # seconds without a reply after which a worker is taken to be stuck (never reached when it works)


def execution(code: str, *, seed: Seed = SEED, epoch: float | None = EPOCH) -> Execution:
    return Execution(code, cpu=10.0, realm=Realm(LIMITS), seed=seed, epoch=epoch)


def result(step: dict[str, Any]) -> Any:
    done = step["done"]
    assert done is not None, f"still waiting on {step['outbox']}"
    assert done["ok"], done["error"]
    return json.loads(done["result"])


def run(code: str, **options: Any) -> Any:
    return result(execution(code, **options).start())


def readings(clock: list[list[Any]]) -> list[tuple[str, float]]:
    """The clock readings one by one, the run-length encoding undone."""
    return [(kind, value) for kind, value, count in clock for _ in range(count)]


def reference_draws(seed: Seed, count: int) -> list[float]:
    """xoshiro128** as its authors publish it, and 53-bit doubles from two outputs: what Math.random must be."""
    mask = 0xFFFFFFFF
    state = list(seed)

    def rotate(word: int, bits: int) -> int:
        return ((word << bits) | (word >> (32 - bits))) & mask

    def next_word() -> int:
        word = rotate(state[1] * 5 & mask, 7) * 9 & mask
        shifted = state[1] << 9 & mask
        state[2] ^= state[0]
        state[3] ^= state[1]
        state[1] ^= state[2]
        state[0] ^= state[3]
        state[2] ^= shifted
        state[3] = rotate(state[3], 11)
        return word

    return [((next_word() >> 5) * 2**26 + (next_word() >> 6)) / 2**53 for _ in range(count)]


# -- Math.random ---------------------------------------------------------------------------------------

DRAWS = "return Array.from({ length: 10000 }, () => Math.random());"


def test_the_same_seed_draws_the_same_sequence_in_any_realm_and_it_is_xoshiro128() -> None:
    first, second = run(DRAWS), run(DRAWS)
    assert first == second
    assert first == reference_draws(SEED, 10_000)


def test_different_seeds_draw_different_sequences() -> None:
    first = run(DRAWS)
    other = run(DRAWS, seed=(SEED[0] ^ 1, *SEED[1:]))
    assert all(a != b for a, b in zip(first[:100], other[:100], strict=True))


def test_draws_lie_in_the_unit_interval_with_a_sane_mean() -> None:
    draws = run(DRAWS, seed=(1, 2, 3, 0xFFFFFFFF))
    assert all(0 <= draw < 1 for draw in draws)
    assert abs(sum(draws) / len(draws) - 0.5) < 0.02
    assert len(set(draws)) == len(draws)


def test_without_a_seed_each_execution_draws_its_own() -> None:
    code = "return [Math.random(), Math.random()];"
    first = result(Execution(code, cpu=2.0, realm=Realm(LIMITS)).start())
    second = result(Execution(code, cpu=2.0, realm=Realm(LIMITS)).start())
    assert first != second


# -- The clock: live steps and their replay ------------------------------------------------------------

CLOCKED = """
const before = [Date.now(), new Date().getTime(), Date(), performance.now(), new (new Date(0).constructor)().getTime()];
const answer = await tools.pause.here({});
const after = [performance.now(), Date.now(), performance.now(), performance.timeOrigin];
return { before, answer, after };
"""


def test_a_replay_of_every_step_with_its_journaled_clock_observes_what_the_live_run_did() -> None:
    started = time.time() * 1000
    live = execution(CLOCKED)
    first = live.start()
    assert [item["path"] for item in first["outbox"]] == ["pause.here"]
    second = live.settle(1, True, '"answer"')
    ended = time.time() * 1000
    observed = result(second)

    assert [kind for kind, _ in readings(first["clock"])] == ["date", "date", "date", "perf", "date"]
    assert [kind for kind, _ in readings(second["clock"])] == ["perf", "date", "perf"]
    assert first["diverged"] is None
    assert second["diverged"] is None
    before_values = [value for _, value in readings(first["clock"])]
    assert observed["before"][0:2] == before_values[0:2]
    assert observed["before"][3:] == before_values[3:]
    after_values = [value for _, value in readings(second["clock"])]
    assert observed["after"][:3] == after_values
    assert observed["after"][3] == EPOCH  # performance.timeOrigin
    perf = [observed["before"][3], observed["after"][0], observed["after"][2]]
    assert perf == sorted(perf)
    assert started - EPOCH - 2 <= perf[0] <= perf[2] <= ended - EPOCH + 2  # ms since the epoch

    replay = execution(CLOCKED)
    replayed_first = replay.start(first["clock"])
    assert replayed_first["diverged"] is None
    assert replayed_first["outbox"] == first["outbox"]
    assert replayed_first["clock"] == first["clock"]
    replayed_second = replay.settle(1, True, '"answer"', second["clock"])
    assert replayed_second["diverged"] is None
    assert replayed_second["clock"] == second["clock"]
    assert result(replayed_second) == observed


def test_a_replay_step_reads_the_journal_not_the_live_clock() -> None:
    journal = [["date", 86_400_000, 3], ["perf", 12.5, 1], ["date", 86_400_007, 1]]
    step = execution(CLOCKED).start(journal)
    assert step["diverged"] is None
    assert step["clock"] == journal
    replay = execution(CLOCKED)
    replay.start(journal)
    second = replay.settle(1, True, "1", [["perf", 20.0, 1], ["date", 5, 1], ["perf", 20.0, 1]])
    assert second["diverged"] is None
    observed = result(second)
    before = observed["before"]
    assert [before[0], before[1], before[3], before[4]] == [86_400_000, 86_400_000, 12.5, 86_400_007]
    assert "1970" in before[2]  # Date() is the string of the journaled moment
    assert observed["after"][:3] == [20.0, 5, 20.0]


TWO_READINGS = "return [Date.now(), performance.now()];"


@pytest.mark.parametrize(
    ("code", "journal", "sentence"),
    [
        pytest.param(
            TWO_READINGS,
            [["perf", 1.5, 2]],
            "the code read the clock (Date) where the journal has performance.now()",
            id="Date where the journal has performance.now()",
        ),
        pytest.param(
            TWO_READINGS,
            [["date", 5, 2]],
            "the code read the clock (performance.now()) where the journal has Date",
            id="performance.now() where the journal has Date",
        ),
        pytest.param(
            TWO_READINGS,
            [["date", 5, 1], ["perf", 1.5, 4]],
            "the code read the clock 3 fewer times than the journal has",
            id="fewer",
        ),
        pytest.param(
            "return [Date.now(), performance.now(), performance.now(), Date.now()];",
            [["date", 5, 1]],
            "the code read the clock 3 more times than the journal has",
            id="more",
        ),
        pytest.param(
            TWO_READINGS, [["date", 5, 1]], "the code read the clock 1 more time than the journal has", id="one"
        ),
        pytest.param(
            "return 1;", [["date", 5, 1]], "the code read the clock 1 fewer time than the journal has", id="none"
        ),
        pytest.param(
            "return [Date.now(), Date.now(), performance.now()];",
            [["date", 5, 1], ["perf", 1.5, 1]],
            "the code read the clock (Date) where the journal has performance.now()",
            id="only the first mismatch",
        ),
    ],
)
def test_a_replay_that_does_not_match_its_journal_says_how(code: str, journal: list[Any], sentence: str) -> None:
    step = execution(code).start(journal)
    assert step["diverged"] == sentence
    assert step["done"]["ok"]


def test_after_a_mismatch_the_code_reads_the_live_clock() -> None:
    now = time.time() * 1000
    step = execution("return [Date.now(), performance.now()];").start([["perf", 1.5, 1], ["perf", 2.5, 1]])
    date, perf = result(step)
    assert date >= now - 1
    assert perf >= now - EPOCH - 1
    assert [kind for kind, _ in readings(step["clock"])] == ["date", "perf"]


def test_a_live_step_never_diverges_and_an_empty_journal_is_a_replay_of_no_readings() -> None:
    assert execution(TWO_READINGS).start()["diverged"] is None
    assert execution(TWO_READINGS).start([])["diverged"] == "the code read the clock 2 more times than the journal has"
    assert execution("return 1;").start([])["diverged"] is None


def test_a_busy_loop_of_readings_folds_into_one_entry_per_distinct_value() -> None:
    reads = 50_000
    for reader in ("Date.now()", "performance.now()"):
        step = execution(f"for (let i = 0; i < {reads}; i++) {reader}; return 1;").start()
        clock = step["clock"]
        assert sum(count for _, _, count in clock) == reads
        assert all(before[:2] != after[:2] for before, after in itertools.pairwise(clock))
        assert len(clock) < reads // 10, reader
        values = [value for _, value, _ in clock]
        assert values == sorted(values)


def test_performance_now_is_coarsened_to_a_tenth_of_a_millisecond_and_never_goes_back() -> None:
    step = execution("return Array.from({ length: 2000 }, () => performance.now());", epoch=None).start()
    values = result(step)
    assert values == sorted(values)
    assert all(math.isclose(value * 10, round(value * 10), abs_tol=1e-6) for value in values)
    future = execution("return performance.now();", epoch=time.time() * 1000 + 3_600_000).start()
    assert result(future) == 0  # an epoch ahead of the clock: ms since it cannot be negative


def test_without_an_epoch_the_time_origin_is_now() -> None:
    before = time.time() * 1000
    origin = run("return performance.timeOrigin;", epoch=None)
    assert before <= origin <= time.time() * 1000


BOUNDED = """
let reads = 0;
let caught = null;
try {
  for (;;) { Date.now(); reads++; performance.now(); reads++; }
} catch (error) {
  caught = error;
}
await tools.wait({});
return [reads, caught instanceof RangeError, caught.message, typeof Date.now()];
"""


def test_past_the_bound_a_reading_throws_a_range_error_the_code_can_catch() -> None:
    live = execution(BOUNDED)
    first = live.start()
    assert len(first["clock"]) == MAX_CLOCK_ENTRIES  # alternating kinds: no two readings fold
    reads, is_range_error, message, later = result(live.settle(1, True, "null"))
    assert (reads, is_range_error, later) == (MAX_CLOCK_ENTRIES, True, "number")  # the next step reads again
    assert "read the clock less often" in message
    assert "paused execution can be rebuilt" in message

    replay = execution(BOUNDED)
    assert replay.start(first["clock"])["diverged"] is None
    assert result(replay.settle(1, True, "null", None))[0] == MAX_CLOCK_ENTRIES


# -- Date is the original apart from reading the clock -------------------------------------------------

DATE_BEHAVIOUR = """((flags) => [
  new Date(0).toISOString(), new Date(2020, 1, 29, 12, 30).getTime(), Date.UTC(2000, 0, 1),
  Date.parse("2001-02-03T04:05:06Z"), new Date("not a date").getTime(), Date.length, Date.name,
  new Date(0) instanceof Date, Object.prototype.toString.call(new Date(0)), JSON.stringify(new Date(86400000)),
  typeof Date(), typeof Date(0), Date.prototype.constructor === Date,
  Object.getPrototypeOf(new Date(0)) === Date.prototype, new Date(new Date(5)).getTime(), new Date(0).toString(),
  String(new Date(1e12)), typeof Date.now(),
  (() => {
    class Later extends Date { plus() { return this.getTime() + 1; } }
    return [new Later(7).plus(), new Later() instanceof Date, Object.getPrototypeOf(Later) === Date];
  })(),
  Object.getOwnPropertyNames(Date).sort(), flags(Object.getOwnPropertyDescriptor(Date, "prototype")),
  flags(Object.getOwnPropertyDescriptor(globalThis, "Date")), Object.keys(performance).sort(),
  typeof performance.now(), Reflect.construct(Date, [3]).getTime(), Math.random.name, typeof Math.random(),
])((descriptor) => [descriptor.writable, descriptor.enumerable, descriptor.configurable])"""


def test_date_with_arguments_and_its_statics_behave_as_the_engines_own() -> None:
    bare = json.loads(quickjs.Context().eval(f"JSON.stringify({DATE_BEHAVIOUR})"))
    assert run(f"return {DATE_BEHAVIOUR};") == bare


def test_a_date_subclass_reads_the_journaled_clock() -> None:
    code = "class Later extends Date {}\nreturn new Later().getTime();"
    assert execution(code).start([["date", 42, 1]])["done"]["result"] == "42"


# -- Hostile code --------------------------------------------------------------------------------------

HOSTILE = """
const kept = { now: Date.now, perf: performance.now.bind(performance), DateClass: Date };
const globals = Object.getOwnPropertyNames(globalThis);
const host = Object.getOwnPropertyNames(__executor);
const define = Object.defineProperty;
const trap = { get() { return "poisoned"; }, set() { throw new Error("set"); }, configurable: true };
const poison = () => { for (const index of ["0", "1", "2", "3"]) define(Array.prototype, index, trap); };
const cure = () => { for (const index of ["0", "1", "2", "3"]) delete Array.prototype[index]; };
Date.prototype.constructor = function () { return { getTime: () => 0 }; };
Date.now = () => -1;
Date = function () { return "not a date"; };
Math.random = () => 7;
performance = { now: () => -2, timeOrigin: -3 };
define(Object.prototype, "2", trap);
String.prototype.slice = () => "[";
JSON.parse = () => { throw new Error("parse"); };
Number.prototype.toString = () => "NaN";
String = () => "}";
Reflect.apply = () => { throw new Error("apply"); };
Reflect.construct = () => { throw new Error("construct"); };
Object.defineProperty = () => { throw new Error("defineProperty"); };
Math.imul = () => 0;
Math.floor = () => 0;
poison();
const early = [kept.now(), new kept.DateClass().getTime(), kept.perf()];
cure();
await tools.wait({});
poison();
const late = [kept.now(), kept.perf()];
cure();
JSON.stringify = () => "{";
return { globals, host, early, late };
"""


def test_code_that_rewrites_the_clock_and_random_globals_cannot_break_the_frames_or_reach_the_journal() -> None:
    live = execution(HOSTILE)
    first = live.start()
    assert first["diverged"] is None
    assert first["outbox"] == [{"kind": "call", "id": 1, "path": "wait", "args": {}}]
    assert [kind for kind, _ in readings(first["clock"])] == ["date", "date", "perf"]
    second = live.settle(1, True, "null")
    assert [kind for kind, _ in readings(second["clock"])] == ["date", "perf"]
    observed = result(second)
    assert [value for _, value in readings(first["clock"])] == observed["early"]
    assert not {"clock", "open", "step", "close"} & set(observed["host"])
    assert not {name for name in observed["globals"] if "clock" in name.lower() or "journal" in name.lower()}

    replay = execution(HOSTILE)
    assert replay.start(first["clock"])["diverged"] is None
    replayed = replay.settle(1, True, "null", second["clock"])
    assert replayed["diverged"] is None
    assert result(replayed) == observed


def test_code_cannot_call_into_the_clock_through_the_host_object() -> None:
    code = "return ['open', 'step', 'close', 'clock'].map((name) => typeof __executor[name]);"
    assert run(code) == ["undefined"] * 4


# -- CPU ------------------------------------------------------------------------------------------------


def test_every_step_reports_the_cpu_used_so_far_and_it_grows() -> None:
    spin = "let n = 0; for (let i = 0; i < 300000; i++) n += i;"
    live = execution(f"{spin}\nawait tools.wait({{}});\n{spin}\nreturn n;")
    first = live.start()
    second = live.settle(1, True, "null")
    assert 0 < first["cpu"] < second["cpu"]
    assert second["cpu"] == live.cpu_used
    failed = execution("return undefinedName;").start()
    assert failed["done"]["ok"] is False
    assert failed["cpu"] > 0


def test_a_rebuilt_execution_counts_the_cpu_spent_before_against_its_whole_budget() -> None:
    rebuilt = Execution("while (true) {}", cpu=1.0, realm=Realm(LIMITS), seed=SEED, epoch=EPOCH, spent=0.95)
    step = rebuilt.start()
    assert step["done"]["error"] == "Execution exceeded its CPU time limit of 1s"
    assert step["cpu"] >= 1.0
    spent = Execution("return 1", cpu=1.0, realm=Realm(LIMITS), seed=SEED, epoch=EPOCH, spent=1.0).start()
    assert spent["done"]["error"] == "Execution exceeded its CPU time limit of 1s"


# -- Over a real worker's pipes ------------------------------------------------------------------------


class Worker:
    """A worker process spawned as the pool spawns one, spoken to frame by frame."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self._decoder = FrameDecoder()

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(frame(message))
        self.process.stdin.flush()
        while (reply := self._decoder.next()) is None:
            ready, _, _ = select.select([self.process.stdout], [], [], HANG)
            assert ready, f"no reply to {message['op']}"
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
            assert chunk, "the worker exited"
            self._decoder.feed(chunk)
        return reply

    def start(self, code: str, **fields: Any) -> dict[str, Any]:
        return self.ask(
            {"op": "start", "code": code, "memory": 64 << 20, "stack": 1 << 20, "cpu": 10.0}
            | {"max_timers": 100, "max_tool_calls": 100}
            | fields
        )


@pytest.fixture
def worker() -> Iterator[Worker]:
    process = subprocess.Popen(
        worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={}, cwd="/"
    )
    try:
        yield Worker(process)
    finally:
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


def step_fields(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply["op"] == "step"
    assert isinstance(reply["clock"], list)
    assert reply["diverged"] is None or isinstance(reply["diverged"], str)
    assert isinstance(reply["cpu"], float)
    return reply


def test_drop_releases_an_execution_mid_await_and_the_worker_runs_the_next(worker: Worker) -> None:
    waiting = step_fields(worker.start("const a = await tools.slow({});\nreturn a;"))
    assert waiting["done"] is None
    assert waiting["outbox"][0]["path"] == "slow"
    assert worker.ask({"op": "drop"}) == {"op": "dropped"}
    assert worker.ask({"op": "settle", "id": 1, "ok": True, "payload": "1"}) == {
        "op": "error",
        "error": "unexpected request 'settle'",
    }
    after = step_fields(worker.start("return [typeof Date.now(), 2];"))
    assert after["done"]["ok"]
    assert json.loads(after["done"]["result"]) == ["number", 2]
    assert worker.ask({"op": "drop"}) == {"op": "dropped"}  # nothing to drop: still an answer


def test_steps_over_the_wire_carry_clock_diverged_and_cpu(worker: Worker) -> None:
    code = "const t = Date.now();\nawait tools.wait({});\nreturn [t, Math.random()];"
    first = step_fields(worker.start(code, seed=list(SEED), epoch=EPOCH))
    assert [kind for kind, _ in readings(first["clock"])] == ["date"]
    second = step_fields(worker.ask({"op": "settle", "id": 1, "ok": True, "payload": "null", "clock": []}))
    assert second["diverged"] is None
    assert second["cpu"] >= first["cpu"]
    assert json.loads(second["done"]["result"]) == [first["clock"][0][1], reference_draws(SEED, 1)[0]]
    replayed = step_fields(worker.start(code, seed=list(SEED), epoch=EPOCH, clock=[["perf", 1.0, 1]]))
    assert replayed["diverged"] == "the code read the clock (Date) where the journal has performance.now()"


def test_ended_replies_carry_the_step_fields_too(worker: Worker) -> None:
    broken = step_fields(worker.start("return ("))
    assert broken["done"]["ok"] is False
    assert broken["clock"] == []
    assert broken["diverged"] is None
    spinning = step_fields(worker.start("for (;;) Date.now();", cpu=0.3))
    assert spinning["retire"]
    assert spinning["done"]["error"].startswith("Execution exceeded its CPU time limit")
    assert spinning["clock"] == []
    assert spinning["cpu"] >= 0.3


@pytest.mark.parametrize(
    "fields",
    [
        {"seed": [0, 0, 0, 0]},
        {"seed": [1, 2, 3]},
        {"seed": [1, 2, 3, 1 << 32]},
        {"epoch": "yesterday"},
        {"clock": [["hour", 1, 1]]},
        {"clock": [["date", 1.5, 1]]},
        {"clock": [["perf", 1.5, 0]]},
        {"clock": "date"},
    ],
)
def test_a_malformed_seed_epoch_or_clock_is_refused_and_the_worker_goes_on(
    worker: Worker, fields: dict[str, Any]
) -> None:
    refused = worker.start("return 1;", **fields)
    assert refused["op"] == "error"
    assert refused["error"].startswith("malformed 'start' request")
    waiting = worker.start("return await tools.wait({});")
    assert worker.ask({"op": "settle", "id": 1, "ok": True, "payload": "1", "clock": [["x", 1, 1]]})["op"] == "error"
    assert json.loads(worker.ask({"op": "settle", "id": 1, "ok": True, "payload": "3"})["done"]["result"]) == 3
    assert waiting["done"] is None
