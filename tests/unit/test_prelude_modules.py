"""The prelude's rarely used parts are compiled on first use (`executor_mcp.sandbox.prelude`), which may come
after the agent's code has rewritten every global those parts could have named: each part must behave then
exactly as in a clean realm, and a failure inside one must still be placed on the agent's own line."""

import json
from typing import Any

import pytest

from executor_mcp.sandbox.prelude import prelude
from executor_mcp.sandbox.worker import Execution, Realm, RealmLimits, Seed

LIMITS = RealmLimits(memory=64 << 20, stack=1 << 20, max_timers=100, max_tool_calls=100)
SEED: Seed = (1, 2, 3, 4)
EPOCH = 1_700_000_000_000.0

KEEP = "const P = Promise; const RE = RangeError;\n"
"""What the uses below need of the globals, taken before any are rewritten."""

# Everything a module could reach by name, through a property descriptor's prototype, a method of a
# prototype or an iterator, rewritten before any module is compiled (`eval` too, which compiles them).
# (`then`, `toJSON` and array indices are left alone: rewriting them changes what the code's own values mean,
# and the engine's own `JSON.stringify` reads indices through `Array.prototype`.)
POISON = """
const defineAny = Object.defineProperty;
const boom = (what) => () => { throw new Error("poisoned " + what); };
const inherited = ["get", "set", "value", "writable", "enumerable", "configurable"];
for (let i = 0; i < inherited.length; i++) {
  defineAny(Object.prototype, inherited[i], { __proto__: null, get: boom(inherited[i]), set() {}, configurable: true });
}
const methods = [[Function.prototype, "call"], [Function.prototype, "apply"], [Function.prototype, "bind"],
  [String.prototype, "slice"], [Array.prototype, "push"], [Array.prototype, "join"]];
for (let i = 0; i < methods.length; i++) {
  defineAny(methods[i][0], methods[i][1], { __proto__: null, value: boom(methods[i][1]), configurable: true });
}
defineAny(Array.prototype, Symbol.iterator, { __proto__: null, value: boom("iterator"), configurable: true });
const names = ["eval", "JSON", "Reflect", "String", "Number", "Error", "TypeError", "RangeError", "Proxy",
  "Promise", "Function", "Symbol", "Array", "Object"];
for (let i = 0; i < names.length; i++) globalThis[names[i]] = boom(names[i]);
Math.imul = Math.floor = boom("math");
"""

USES = {
    "errors": "throw new RE('boom')",
    "log": "console.log('a', { b: 1 }, [2]); console.warn(2); return 1",
    "emit": "emit('x'); emit(2); return 3",
    "tools": "return await tools.some.tool(5)",
    "timers": "let n = 0; setTimeout((a) => { n = a; }, 3, 7); clearTimeout(99); "
    "await new P((r) => setTimeout(r, 1)); return n",
    "clock": "return [typeof Date.now(), typeof new Date().getTime(), typeof Date(), Math.random(), "
    "performance.now() > 0]",
}


def outcome(code: str) -> dict[str, Any]:
    """Run to the end in a fresh realm, answering each tool call with its arguments and firing each timer,
    in the order they were asked for."""
    live = Execution(code, cpu=10.0, realm=Realm(LIMITS), seed=SEED, epoch=EPOCH)
    step = live.start()
    asked: list[dict[str, Any]] = []
    for _ in range(10):
        if step["done"] is not None:
            return step["done"]
        asked += step["outbox"]
        wanted = asked.pop(0)
        if wanted["kind"] == "call":
            step = live.settle(wanted["id"], True, json.dumps({"got": wanted.get("args")}))
        else:
            step = live.fire(wanted["id"])
    raise AssertionError(f"still running: {step}")


@pytest.mark.parametrize("module", sorted(USES))
def test_a_module_first_used_after_every_global_is_rewritten_behaves_as_in_a_clean_realm(module: str) -> None:
    clean = outcome(KEEP + USES[module])
    hostile = outcome(KEEP + POISON + USES[module])
    line = (KEEP + POISON).count("\n") + 1
    assert hostile == json.loads(json.dumps(clean).replace("(2:", f"({line}:"))
    assert "poisoned" not in json.dumps(hostile)


def test_what_each_module_gives_in_a_clean_realm() -> None:
    """The reference the hostile runs are compared with, pinned, so a module broken everywhere fails too."""
    failed = {"ok": False, "error": "RangeError: boom (2:11)", "logs": [], "emitted": []}
    assert outcome(KEEP + USES["errors"]) == failed
    assert outcome(USES["log"])["logs"] == ['[log] a {"b":1} [2]', "[warn] 2"]
    assert outcome(USES["emit"])["emitted"] == ["x", 2]
    assert json.loads(outcome(USES["tools"])["result"]) == {"got": 5}
    assert outcome(KEEP + USES["timers"])["result"] == "7"
    now, then, text, draw, later = json.loads(outcome(USES["clock"])["result"])
    assert (now, then, text, later) == ("number", "number", "string", True)
    assert 0 <= draw < 1


def test_a_modules_own_failure_is_placed_on_the_agents_line() -> None:
    """A module is one line of `<input>`, like the prelude, so its frames never read as the agent's code."""
    done = outcome("\n\nfor (let i = 0; i < 101; i++) setTimeout(() => {}, 10);")
    assert not done["ok"]
    assert done["error"].startswith("RangeError: setTimeout refused: at most 100 timers")
    assert done["error"].endswith("(3:31)")


def test_only_what_every_execution_uses_is_compiled_up_front() -> None:
    """QuickJS compiles a script whole, at about 1 ms per 13 KB here: the eager part must stay small."""
    loaded = prelude(max_timers=100, max_tool_calls=100)
    assert len(loaded.core) < 8 * 1024
    assert sum(len(source) for _, source in loaded.modules) > len(loaded.core)
    assert all("\n" not in source for _, source in loaded.modules)
