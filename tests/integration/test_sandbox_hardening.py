"""Hostile sandbox code and hostile workers: bounded fan-out, strings UTF-8 cannot hold, values the host
does not expect, and errors with no message. Each ends with a text a model can act on, never
`Internal tool error`, and the server keeps serving."""

import json
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from mcp import Client

from executor_mcp.codec import dumps
from executor_mcp.config import Settings
from executor_mcp.execution.engine import Engine, Outcome
from executor_mcp.execution.journal import Journal
from executor_mcp.execution.limits import Limits
from executor_mcp.execution.results import render
from executor_mcp.sandbox.pool import WorkerPool
from executor_mcp.sandbox.prelude import MAX_CLOCK_ENTRIES
from tests.conftest import ServerUnderTest, start_server
from tests.sdk import connect, text_of
from tests.sdk import execute as run

HOSTILE_WORKER = Path(__file__).with_name("hostile_worker.py")


@pytest.fixture
async def executor(nursery: trio.Nursery, data_dir: Path) -> ServerUnderTest:
    return await start_server(nursery, data_dir, execution_cpu_limit=10.0, execution_timeout=10.0)


async def still_serving(client: Client) -> None:
    assert text_of(await run(client, "return 'still serving'")) == "still serving"


# -- lone surrogates ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "shown"),
    [
        (r"return '\ud800'", "\ufffd"),
        (r"return 'a' + '\udc00' + 'b'", "a\ufffdb"),
        (r"console.log('a\udc00b'); return 1", "1\n\nLogs:\n[log] a\ufffdb"),
        (r"emit('x\ud800'); return 1", "x\ufffd"),
        (r"throw new Error('bad \udfff')", "Error: bad \ufffd (1:"),
        (r"return { '\ud800': 1 }", '{\n  "\\ud800": 1\n}'),
    ],
)
async def test_lone_surrogates_are_replaced_not_fatal(client: Client, code: str, shown: str) -> None:
    result = await run(client, code)
    assert text_of(result).startswith(shown), text_of(result)
    await still_serving(client)


# -- values the host does not expect --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "shown"),
    [
        ("return Symbol()", "Error: The result, of type symbol, has no JSON form;"),
        ("return () => 1", "Error: The result, of type function, has no JSON form;"),
        ("Object.prototype.toJSON = () => 'p'; return { a: 1 }", '"p"'),
        ("Object.prototype.toJSON = () => 'p'; console.log({ b: 1 }); emit(2); return 3", '2\nLogs:\n[log] "p"'),
        ("Math.max = () => -5; await new Promise((r) => setTimeout(r, 1)); return 2", "2"),
        ("Math.max = () => NaN; setTimeout(() => {}, -1e308); return 2", "2"),
        ("await new Promise((r) => setTimeout(r, -100)); return 'negative delay'", "negative delay"),
        ("JSON.stringify = () => 'garbage'; setTimeout(() => {}, 1); return 3", "3"),
        ('JSON.stringify = () => \'[{"kind":"call","id":true}]\'; return 4', "4"),
        ("JSON.parse = () => { throw 1 }; await tools.nothing.here({}).catch(() => 0); return 5", "5"),
        ("Array.prototype.push = null; Array.prototype.join = null; console.log('a', 1); return 6", "6"),
        ("Object.defineProperty(Array.prototype, '0', { set() { throw 1 } }); emit(1); return 7", "1"),
        ("Promise.prototype.then = function () { throw 7 }; return 8", "8"),
        ("Object.defineProperty(Promise.prototype, 'constructor', { get() { throw 1 } }); return 9", "9"),
        ("String.prototype.slice = () => ''; Reflect.apply = null; console.log('y'); return 10", "10"),
    ],
)
async def test_values_the_host_does_not_expect(client: Client, code: str, shown: str) -> None:
    text = text_of(await run(client, code))
    assert text.startswith(shown), text
    assert "Internal tool error" not in text
    await still_serving(client)


# -- errors with no message ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "shown"),
    [
        ("throw null", "Error: Uncaught null: the code threw or rejected with null instead of an Error"),
        ("throw undefined", "Error: Uncaught undefined: the code threw or rejected with undefined"),
        ("await Promise.reject()", "Error: Uncaught undefined: the code threw or rejected with undefined"),
        ("throw ''", "Error: Uncaught an empty string: the code threw or rejected with an empty string"),
        ("throw new Error()", "Error: Error thrown without a message (1:"),
        ("throw new TypeError('')", "Error: TypeError thrown without a message (1:"),
        ("class E extends Error { get message() { throw 1 } }; throw new E()", "Error: Error thrown without"),
        ("throw new Proxy({}, { get() { throw 3 }, ownKeys() { throw 4 } })", "Error: [object that cannot be shown]"),
        ("setTimeout(() => { throw null }, 1); await new Promise((r) => setTimeout(r, 50))", "Error: Uncaught null"),
    ],
)
async def test_every_failure_has_a_message(client: Client, code: str, shown: str) -> None:
    text = text_of(await run(client, code))
    assert text.startswith(shown), text
    assert text.strip() not in {"Error:", "Error: null", "Error: undefined"}
    await still_serving(client)


async def test_a_heap_too_full_for_an_error_reads_as_the_memory_limit(nursery, data_dir: Path) -> None:
    """QuickJS throws a bare `null` when it cannot even allocate the error: that is the memory limit."""
    server = await start_server(nursery, data_dir, execution_memory_limit=16, execution_max_timers=1_000_000)
    async with connect(server.url, mode="legacy") as (client, _):
        code = "for (let i = 0; i < 1000000; i++) setTimeout(() => {}, 60000); return 1"
        assert text_of(await run(client, code)) == "Error: Execution exceeded its memory limit of 16 MiB"
        await still_serving(client)


async def test_output_too_large_to_send_says_so(nursery, data_dir: Path) -> None:
    server = await start_server(nursery, data_dir, execution_memory_limit=512)
    async with connect(server.url, mode="legacy") as (client, _):
        text = text_of(await run(client, "return 'x'.repeat(50 * 1024 * 1024)"))
        assert text.startswith("Error: The execution's output (100 MiB with its logs"), text
        assert "exceeds the 96 MiB a sandbox can send" in text
        await still_serving(client)


# -- syntax errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "shown"),
    [
        ("const = 5; return 1;", "Error: SyntaxError: Unexpected token '=', variable name expected (1:7)"),
        ("return 1 +", "Error: SyntaxError: Unexpected end of input (1:11)"),
        ("const n: number = 1;\nreturn n +", "Error: SyntaxError: Unexpected end of input (2:11)"),
        ("Here:\n```ts\nconst n: number = 1;\nreturn n;\n}\n```", "Error: SyntaxError: Unexpected token '}' (5:1)"),
    ],
)
async def test_syntax_errors_name_the_problem_at_the_agents_position(client: Client, code: str, shown: str) -> None:
    result = await run(client, code)
    assert result.is_error
    assert text_of(result) == shown


# -- fan-out --------------------------------------------------------------------------------------------

TIMER_FLOOD = """
let refused = null;
try { for (let i = 0; i < 200000; i++) setTimeout(() => {}, 60000); } catch (error) { refused = error.message; }
return refused;
"""
CALL_FLOOD = """
const calls = Array.from({ length: 20000 }, () => tools.nothing.here({}));
const settled = await Promise.allSettled(calls);
const refused = settled.filter((s) => s.status === "rejected" && s.reason instanceof RangeError);
return { refused: refused.length, message: refused[0].reason.message };
"""


async def test_pending_timers_are_bounded_with_a_descriptive_error(client: Client) -> None:
    message = (await run(client, TIMER_FLOOD)).structured_content["result"]
    assert message == (
        "setTimeout refused: at most 10000 timers may be pending in one execution "
        "(the server's --execution-max-timers); clear or await timers before starting more"
    )
    uncaught = text_of(await run(client, "for (let i = 0; i < 200000; i++) setTimeout(() => {}, 60000);"))
    assert uncaught.startswith("Error: RangeError: setTimeout refused: at most 10000 timers"), uncaught


async def test_tool_calls_in_flight_are_bounded_with_a_descriptive_error(client: Client) -> None:
    result = (await run(client, CALL_FLOOD)).structured_content["result"]
    assert result["refused"] == 19000
    assert result["message"] == (
        "tools.nothing.here was not called: at most 1000 tool calls may be in flight in one execution "
        "(the server's --execution-max-tool-calls); await some before starting more"
    )


async def test_the_bounds_are_configurable(nursery, data_dir: Path) -> None:
    server = await start_server(nursery, data_dir, execution_max_timers=3, execution_max_tool_calls=2)
    async with connect(server.url, mode="legacy") as (client, _):
        timers = "const ids = [1, 2, 3].map(() => setTimeout(() => {}, 10)); clearTimeout(ids[0]);"
        result = await run(client, timers + "setTimeout(() => {}, 10); setTimeout(() => {}, 10); return 1")
        assert "at most 3 timers" in text_of(result)
        calls = "const a = [1, 2, 3].map(() => tools.nothing.here({}).catch((e) => e.message));"
        result = await run(client, calls + "return (await Promise.all(a))[2]")
        assert "at most 2 tool calls" in text_of(result)


async def test_replacing_a_timer_at_the_bound_is_not_counted_twice(nursery, data_dir: Path) -> None:
    """The clear of a reported timer and a new timer in one step: the host must see the clear first."""
    server = await start_server(nursery, data_dir, execution_max_timers=2)
    async with connect(server.url, mode="legacy") as (client, _):
        code = (
            "let t = setTimeout(() => {}, 5000); await tools.search({ query: 'x' }); clearTimeout(t);"
            "t = setTimeout(() => {}, 10); await new Promise((r) => setTimeout(r, 20)); return 'replaced'"
        )
        assert text_of(await run(client, code)) == "replaced"


@pytest.mark.parametrize(
    ("depth", "how", "shown"),
    [
        (150, "return a", "Error: The execution's result is nested more than 100 levels deep"),
        (3000, "return a", "Error: The execution's result is nested more than 100 levels deep"),
        (150, "emit(a); return 1", "Invalid execution output item omitted."),
        (3000, "emit(a); return 1", "Error: The execution's output (a tool call's arguments, an emitted value"),
        (3000, "await tools.search(a); return 1", "Error: The execution's output (a tool call's arguments"),
    ],
)
async def test_deeply_nested_values_get_a_readable_answer(client: Client, depth: int, how: str, shown: str) -> None:
    """JavaScript nests deeper than MCP clients' parsers (about 200 levels) and Python's (about 1,000) read."""
    result = await run(client, f"let a = 1; for (let i = 0; i < {depth}; i++) a = [a]; {how}")
    assert text_of(result).startswith(shown), text_of(result)
    await still_serving(client)


@pytest.mark.slow
async def test_a_flood_elsewhere_keeps_a_neighbours_return_fast(executor: ServerUnderTest) -> None:
    latencies: list[float] = []
    floods: list[Any] = []

    async def flood(code: str) -> None:
        async with connect(executor.url, mode="legacy") as (client, _):
            for _ in range(3):
                floods.append((await run(client, code)).structured_content["result"])

    async def neighbour() -> None:
        async with connect(executor.url, mode="legacy") as (client, _):
            for _ in range(10):
                started = trio.current_time()
                assert text_of(await run(client, "return 1")) == "1"
                latencies.append(trio.current_time() - started)
                await trio.sleep(0.05)

    with trio.fail_after(120):
        async with trio.open_nursery() as all_of_them:
            all_of_them.start_soon(flood, TIMER_FLOOD)
            all_of_them.start_soon(flood, CALL_FLOOD)
            all_of_them.start_soon(neighbour)
    assert len(floods) == 6
    assert max(latencies) < 2.0, latencies


# -- a worker that does not follow the protocol ----------------------------------------------------------


def step(outbox: Any = (), done: Any = None) -> str:
    return json.dumps({"op": "step", "outbox": list(outbox), "done": done, "retire": False})


DONE = {"ok": True, "result": "1", "text": "1", "logs": [], "emitted": []}


HOSTILE_LIMITS = attrs.evolve(Limits.of(Settings()), max_timers=5, max_tool_calls=3)


async def run_hostile(replies: list[str], limits: Limits = HOSTILE_LIMITS) -> Outcome:
    calls: list[str] = []

    async def invoke(path: str, args: Any) -> Any:
        calls.append(path)
        await trio.sleep_forever()

    pool = WorkerPool(
        max_workers=Settings().sandbox_workers,
        spares=0,
        command=[sys.executable, str(HOSTILE_WORKER), json.dumps(replies)],
    )
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(pool.run)
            outcome = await Engine(pool, limits).run("return 1", invoke)
            nursery.cancel_scope.cancel()
    assert len(calls) <= limits.max_tool_calls
    return outcome


def timers(count: int, ms: Any = 60000) -> list[dict[str, Any]]:
    return [{"kind": "timer", "id": index + 1, "ms": ms} for index in range(count)]


async def test_a_worker_past_the_timer_bound_is_stopped_with_that_bound() -> None:
    outcome = await run_hostile([step(timers(6))])
    assert outcome == Outcome(
        ok=False, error="Execution exceeded its limit of 5 pending timers (--execution-max-timers)"
    )


async def test_a_worker_past_the_call_bound_is_stopped_with_that_bound() -> None:
    outbox = [{"kind": "call", "id": index + 1, "path": "a.b", "args": {}} for index in range(4)]
    outcome = await run_hostile([step(outbox)])
    assert outcome.error == "Execution exceeded its limit of 3 tool calls in flight (--execution-max-tool-calls)"
    assert not outcome.defect


@pytest.mark.parametrize("ms", [-5, -1e308, 10**400, 1e308])
async def test_a_worker_delay_is_clamped(ms: Any) -> None:
    fired = [{"kind": "timer", "id": 1, "ms": ms}]
    if ms > 0:  # a clamped long delay is pending: clear it and let a short one finish the run
        fired += [{"kind": "clear", "id": 1}, {"kind": "timer", "id": 2, "ms": 1}]
    outcome = await run_hostile([step(fired), step(done=DONE)])
    assert outcome == Outcome(ok=True, result=1, text="1")


@pytest.mark.parametrize(
    "reply",
    [
        step("not a list"),
        step([{"kind": "timer", "id": True, "ms": 1}]),
        step([{"kind": "timer", "id": 1, "ms": "soon"}]),
        step([{"kind": "call", "id": 1, "path": 7}]),
        step([{"kind": "spawn", "id": 1}]),
        step(timers(1) * 40),
        step(done={"ok": True, "result": "NaN", "text": "x", "logs": [], "emitted": []}),
        step(done={"ok": True, "result": "1", "text": "1", "logs": [1], "emitted": []}),
        step(done="finished"),
        '{"op": "step", "outbox": [{"kind": "timer", "id": 1, "ms": NaN}], "done": null}',
        '["not", "an", "object"]',
    ],
)
async def test_a_malformed_reply_stops_the_run_with_a_message(reply: str) -> None:
    outcome = await run_hostile([reply])
    assert not outcome.defect
    assert outcome.error is not None
    assert outcome.error.startswith("The sandbox broke the execution protocol ("), outcome.error
    assert outcome.error.endswith("), so the execution was stopped")


async def test_a_lone_surrogate_escape_from_a_worker_never_reaches_the_wire() -> None:
    done = {"ok": True, "result": '"\\ud800"', "text": "\ud800", "logs": ["\udc00"], "emitted": []}
    outcome = await run_hostile([step(done=done)])
    assert outcome == Outcome(ok=True, result="\ud800", text="\ud800", logs=["\udc00"])
    wire = json.loads(dumps(render(outcome)).decode())
    assert wire["content"][0]["text"] == "\ufffd\n\nLogs:\n\ufffd"
    assert wire["structuredContent"]["result"] == "\ufffd"


# -- a worker that lies about its clock readings --------------------------------------------------------


@attrs.define
class Unpaused:
    """Where the engine journals an execution that has not paused yet: in memory only, nothing to write."""

    journal: Journal

    async def keep(self) -> None:
        assert not self.journal.durable


def stepped(outbox: Any = (), done: Any = None, clock: Any = ()) -> str:
    return json.dumps(
        {"op": "step", "outbox": list(outbox), "done": done, "retire": False, "clock": clock, "cpu": 0.01}
    )


async def run_journaled(replies: list[str], scratch: Path) -> tuple[Outcome, Journal]:
    (scratch / "replies.json").write_text(json.dumps(replies))
    pool = WorkerPool(
        max_workers=Settings().sandbox_workers,
        spares=0,
        command=[sys.executable, str(HOSTILE_WORKER), f"@{scratch / 'replies.json'}"],
    )
    engine = Engine(pool, HOSTILE_LIMITS)
    keeper = Unpaused(Journal("k", engine.head("return 1")))

    async def invoke(call: Any, args: Any) -> Any:
        return None

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(pool.run)
            outcome = await engine.execute(keeper.journal.head, invoke, keeper=keeper)
            nursery.cancel_scope.cancel()
    return outcome, keeper.journal


@pytest.mark.parametrize(
    "clock",
    [
        [["date", "x" * 1_000_000, 1]],  # 1 MB journaled for every step, charged 32 bytes
        [["date", 1, 1]] * (MAX_CLOCK_ENTRIES + 1),
        [["perf", [1] * 100_000, 1]],
        [["date", 10**300, 1]],
        [["date", 1.5, 1]],
        [["perf", 1.5, 0]],
        [["perf", 1.5, 2**60]],
        [["sundial", 1, 1]],
        [["date", 1]],
        "not a list",
    ],
    ids=[
        "huge-value",
        "too-many",
        "nested",
        "huge-int",
        "fractional-date",
        "no-count",
        "huge-count",
        "kind",
        "short",
        "str",
    ],
)
async def test_clock_readings_the_prelude_never_sends_stop_the_run_and_are_not_journaled(
    clock: Any, tmp_path: Path
) -> None:
    """The readings are journaled and fed back as they come, charged to the journal by their count only, so
    only readings of the prelude's shape and number may reach it."""
    timer = [{"kind": "timer", "id": 1, "ms": 0}]
    outcome, journal = await run_journaled([stepped(timer, clock=clock), stepped(done=DONE)], tmp_path)
    assert not outcome.defect
    assert (
        outcome.error
        == "The sandbox broke the execution protocol (malformed clock readings), so the execution was stopped"
    )
    assert journal.steps == []


async def test_honest_clock_readings_are_journaled_as_sent(tmp_path: Path) -> None:
    clock = [["date", 1_700_000_000_000, 3], ["perf", 12.5, 1], ["perf", 13, 2]]
    timer = [{"kind": "timer", "id": 1, "ms": 0}]
    outcome, journal = await run_journaled([stepped(timer, clock=clock), stepped(done=DONE)], tmp_path)
    assert outcome == Outcome(ok=True, result=1, text="1")
    assert [step.clock for step in journal.steps] == [clock]
