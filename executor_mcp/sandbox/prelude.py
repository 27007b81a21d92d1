"""The JavaScript every execution starts with: the sandbox globals and the outbox the host drains.

JavaScript never calls into Python. Everything the code asks of the host (a tool call, a timer) is
pushed onto an in-JS outbox that the worker reads after each step; the host answers by evaluating
`__executor.settle(...)` or `__executor.fire(...)`. That keeps the engine free of re-entrancy and lets
the CPU budget be enforced on plain evaluation calls.

The agent's code may rewrite any global or prototype (`JSON.stringify`, `Math.max`,
`Object.prototype.toJSON`, `Array.prototype.push`, `Promise.prototype.then`...). So the prelude takes
private references to every intrinsic it uses before that code runs, keeps its own records in
null-prototype objects, and writes what the host reads (the outbox, the final state) as JSON text it
assembles itself from primitives and from text the captured `JSON.stringify` produced. Whatever the code
does, the host gets well-formed frames. (Text built by concatenation is a rope string, which the Python
binding cannot read, so what the host reads is first copied flat with `slice`.)

Every execution gets a fresh context, and QuickJS compiles a script whole before running any of it, at
about 1 ms per 13 KB on this stack's machines: parsing the prelude was most of a worker's CPU per
execution. So only what every execution uses is compiled up front (the host's interface, the result's
JSON, the globals' shells); the parts an execution may never touch (the clock and `Math.random`, timers,
console, `emit`, tool calls, describing a failure) are *modules*: one-line sources carried as string
literals (cheap to parse) and compiled on first use by the captured `eval`, called indirectly so they see
no scope but their parameters. A module may name no global: it gets the captured intrinsics (`I`, frozen,
null-prototype), the execution's state (`S`, null-prototype, reachable from no global) and `need`, the
loader; and it uses no syntax that consults a prototype the code can rewrite (no spread call, iteration,
array destructuring or template). A module's source is one line, so its stack frames (line 1, as the
prelude's) are never mistaken for the agent's code.

Fan-out is bounded here first, with errors the code can read: at most `max_timers` pending timers and
`max_tool_calls` tool calls in flight per execution (the host enforces the same bounds, since it trusts
no worker). A timer's delay is clamped to [0, 2^31 - 1] ms, as JavaScript engines do. The outbox lists
clears before new timers, because the host counts pending timers item by item: replacing a timer at the
bound must not count the new one before the old one is gone. Timers cleared before they were reported
are dropped from the list of new ones once they outnumber the live ones, so a set-and-clear loop cannot
grow what `drain` walks (outside the CPU budget) beyond a bound.

Durable paused executions rebuild an execution by running its code again in a fresh worker with the
same inputs, so the prelude makes what the code observes of the world reproducible. `Math.random` is
xoshiro128** (32-bit words, `Math.imul`, no BigInt), seeded by the host; a double takes 53 bits from
two outputs. Every clock reading (`Date.now()`, `new Date()` and `Date()` without arguments, also
through `Date.prototype.constructor`, and `performance.now()`) goes through one reader that records it,
run-length encoded, for the step's reply, or in a replay step takes the journaled value instead and
notes the first mismatch. `Date` with arguments, `Date.UTC`, `Date.parse` and `Date.prototype` are the
originals. `performance.now()` counts from the execution's epoch, never goes back, and is coarsened
(`PERF_STEPS_PER_MS`) so that a timing loop repeats values. The host drives this through the function the
prelude evaluates to, which no global holds: the code can neither read nor reset the records.

The code itself is wrapped so its own line numbers are kept: the wrapper opens on the line before the
code (`CODE_LINE_OFFSET`), and no wrapper text shares a line with it. The prelude is evaluated as one
line, so a stack frame inside it (line 1) can never be mistaken for a line of the agent's code.
"""

import functools

import attrs

_ERRORS = r"""
"use strict";
(function (I, S) {
  const { stringify, apply, toText, isPrototypeOf, errorPrototype } = I;
  const show = (value) => {
    if (typeof value === "string") return value;
    try {
      const text = stringify(value);
      if (typeof text === "string") return text;
    } catch {}
    try {
      return toText(value);
    } catch {}
    return "[" + typeof value + " that cannot be shown]";
  };
  const isError = (value) => {
    try {
      return apply(isPrototypeOf, errorPrototype, [value]);
    } catch {
      return false;
    }
  };
  const readText = (object, key) => {
    try {
      const value = object[key];
      return value === undefined || value === null ? "" : toText(value);
    } catch {
      return "";
    }
  };
  const failure = (message, stack, noMessage) => ({ __proto__: null, ok: false, message, stack, noMessage });
  const thrown = (error) => {
    if (isError(error)) {
      const name = readText(error, "name");
      const message = readText(error, "message");
      let stack = "";
      try {
        const value = error.stack;
        if (typeof value === "string") stack = value;
      } catch {}
      if (!message) return failure((name || "Error") + " thrown without a message", stack, false);
      return failure(name && name !== "Error" ? name + ": " + message : message, stack, false);
    }
    if (error === null || error === undefined || error === "") {
      const what = error === "" ? "an empty string" : toText(error);
      return failure(
        "Uncaught " + what + ": the code threw or rejected with " + what +
        " instead of an Error, so there is no message. Throw new Error(\"...\") saying what went wrong.",
        "", error !== "",
      );
    }
    return failure(show(error), "", false);
  };
  return {
    __proto__: null,
    show,
    thrown,
    noJson(value) {
      return failure(
        "The result, of type " + typeof value + ", has no JSON form; " +
        "return plain data (objects, arrays, strings, numbers, booleans or null)",
        "", false,
      );
    },
    unserializable(error) {
      return failure("The result could not be serialized to JSON: " + thrown(error).message, "", false);
    },
  };
})
"""

_LOG = r"""
"use strict";
(function (I, S, need) {
  const { apply, slice, append, quote } = I;
  const show = need("errors").show;
  const logs = [];
  let dropped = 0;
  return {
    __proto__: null,
    write(level, args) {
      if (logs.length >= __MAX_LOG_LINES__) { dropped++; return; }
      let line = "[" + level + "]";
      for (let index = 0; index < args.length; index++) line += " " + show(args[index]);
      const over = line.length - __MAX_LOG_LINE__;
      append(logs, over > 0 ? apply(slice, line, [0, __MAX_LOG_LINE__]) + "... [truncated " + over + " chars]" : line);
    },
    text() {
      let text = "";
      for (let index = 0; index < logs.length; index++) text += (index ? "," : "") + quote(logs[index]);
      if (dropped) text += (text ? "," : "") + quote("[executor] " + dropped + " more log lines were dropped");
      return text;
    },
  };
})
"""

_TOOLS = r"""
"use strict";
(function (I, S, need) {
  const { stringify, parse, append, quote, PromiseConstructor, ErrorConstructor, TypeErrorConstructor } = I;
  const { RangeErrorConstructor } = I;
  const rejected = (error) => new PromiseConstructor((_resolve, reject) => reject(error));
  S.pending = { __proto__: null };
  S.pendingCount = 0;
  const hint = (path) =>
    (path ? "tools." + path : "tools") + " is a lazy proxy and cannot be enumerated. " +
    'Use tools.search({ query: "..." }) to find tools, ' +
    'tools.search({ namespace: "<integration>", query: "" }) to list every tool in an integration, ' +
    "or tools.executor.coreTools.connections.list({}) to list saved connections.";
  return {
    __proto__: null,
    call(path, args) {
      if (!path) throw new ErrorConstructor("Tool path missing in invocation");
      if (S.pendingCount >= __MAX_TOOL_CALLS__) {
        return rejected(new RangeErrorConstructor(
          "tools." + path + " was not called: at most __MAX_TOOL_CALLS__ tool calls may be in flight in one " +
          "execution (the server's --execution-max-tool-calls); await some before starting more",
        ));
      }
      const argument = args[0];
      let payload;
      let problem = null;
      try {
        payload = argument === undefined ? undefined : stringify(argument);
        if (argument !== undefined && typeof payload !== "string") {
          problem = "a " + typeof argument + " has no JSON form";
        }
      } catch (error) {
        problem = need("errors").thrown(error).message;
      }
      if (problem !== null) {
        const message = "Arguments to tools." + path + " must be JSON-serializable: " + problem;
        return rejected(new TypeErrorConstructor(message));
      }
      const id = S.nextId++;
      append(S.calls, '{"kind":"call","id":' + id + ',"path":' + quote(path) +
        (payload === undefined ? "" : ',"args":' + payload) + "}");
      S.pendingCount++;
      return new PromiseConstructor((resolve, reject) => {
        S.pending[id] = { __proto__: null, resolve, reject };
      });
    },
    refuse(path) {
      throw new TypeErrorConstructor(hint(path));
    },
    settle(id, ok, payload) {
      const waiting = S.pending[id];
      if (waiting === undefined) return;
      delete S.pending[id];
      S.pendingCount--;
      if (!ok) {
        const message = typeof payload === "string" && payload ? payload : "The tool call failed without a message";
        waiting.reject(new ErrorConstructor(message));
        return;
      }
      let value;
      try {
        value = typeof payload === "string" ? parse(payload) : undefined;
      } catch {
        waiting.reject(new TypeErrorConstructor("The tool's answer was not JSON"));
        return;
      }
      waiting.resolve(value);
    },
  };
})
"""

_TIMERS = r"""
"use strict";
(function (I, S, need) {
  const { apply, append, toNumber, RangeErrorConstructor } = I;
  S.timers = { __proto__: null };
  S.newTimers = [];
  S.cleared = [];
  S.timerCount = 0;
  return {
    __proto__: null,
    drain(calls) {
      let text = calls;
      const cleared = S.cleared;
      for (let index = 0; index < cleared.length; index++) {
        text += (text ? "," : "") + '{"kind":"clear","id":' + cleared[index] + "}";
      }
      const newTimers = S.newTimers;
      for (let index = 0; index < newTimers.length; index++) {
        const id = newTimers[index];
        const timer = S.timers[id];
        if (timer === undefined) continue;
        timer.reported = true;
        text += (text ? "," : "") + '{"kind":"timer","id":' + id + ',"ms":' + timer.delay + "}";
      }
      S.newTimers = [];
      S.cleared = [];
      return text;
    },
    set(callback, ms, args) {
      if (S.timerCount >= __MAX_TIMERS__) {
        throw new RangeErrorConstructor(
          "setTimeout refused: at most __MAX_TIMERS__ timers may be pending in one execution " +
          "(the server's --execution-max-timers); clear or await timers before starting more",
        );
      }
      let delay = 0;
      try {
        delay = toNumber(ms);
      } catch {}
      if (!(delay >= 0)) delay = 0;
      if (delay > __MAX_DELAY__) delay = __MAX_DELAY__;
      const id = S.nextId++;
      S.timers[id] = { __proto__: null, callback, args, delay, reported: false };
      append(S.newTimers, id);
      S.timerCount++;
      if (S.newTimers.length > 2 * S.timerCount + 64) {
        const live = [];
        for (let index = 0; index < S.newTimers.length; index++) {
          if (S.timers[S.newTimers[index]] !== undefined) append(live, S.newTimers[index]);
        }
        S.newTimers = live;
      }
      return id;
    },
    clear(id) {
      const timer = typeof id === "number" ? S.timers[id] : undefined;
      if (timer === undefined) return;
      delete S.timers[id];
      S.timerCount--;
      if (timer.reported) append(S.cleared, id);
    },
    fire(id) {
      const timer = S.timers[id];
      if (timer === undefined) return;
      delete S.timers[id];
      S.timerCount--;
      if (typeof timer.callback !== "function") return;
      try {
        apply(timer.callback, undefined, timer.args);
      } catch (error) {
        if (S.finished === null) S.finished = need("errors").thrown(error);
      }
    },
  };
})
"""

_EMIT = r"""
"use strict";
(function (I, S) {
  const { stringify, append, ErrorConstructor, TypeErrorConstructor } = I;
  return (value) => {
    if (S.emitted.length >= __MAX_EMITTED__) {
      throw new ErrorConstructor("emit() takes at most __MAX_EMITTED__ items per execution");
    }
    const text = stringify(value === undefined ? null : value);
    if (typeof text !== "string") {
      throw new TypeErrorConstructor("emit() needs JSON data; a " + typeof value + " has none");
    }
    append(S.emitted, text);
  };
})
"""

_CLOCK = r"""
"use strict";
(function (I, S) {
  const { apply, imul, floor, dateNow, livePerformance, performanceNow, toText, append, quote, flat } = I;
  const { RangeErrorConstructor } = I;
  const nextWord = () => {
    const scrambled = imul(S.s1, 5);
    const result = imul((scrambled << 7) | (scrambled >>> 25), 9) >>> 0;
    const shifted = S.s1 << 9;
    S.s2 ^= S.s0;
    S.s3 ^= S.s1;
    S.s1 ^= S.s2;
    S.s0 ^= S.s3;
    S.s2 ^= shifted;
    S.s3 = (S.s3 << 11) | (S.s3 >>> 21);
    return result;
  };
  const CLOCK_NAMES = { __proto__: null, date: "Date", perf: "performance.now()" };
  const LIVE = {
    __proto__: null,
    date: () => dateNow(),
    perf: () => {
      const since = S.wallAnchor - S.epoch + (apply(performanceNow, livePerformance, []) - S.monotonicAnchor);
      return floor(since * __PERF_STEPS_PER_MS__) / __PERF_STEPS_PER_MS__;
    },
  };
  const clock = {
    __proto__: null,
    random() {
      return ((nextWord() >>> 5) * 67108864 + (nextWord() >>> 6)) / 9007199254740992;
    },
    read(kind) {
      let entry = null;
      let mismatch = null;
      const replay = S.replay;
      if (replay !== null && S.diverged === null && S.extraReadings === 0 && S.replayIndex < replay.length) {
        entry = replay[S.replayIndex];
        if (entry[0] !== kind) {
          mismatch = "the code read the clock (" + CLOCK_NAMES[kind] + ") where the journal has " +
            CLOCK_NAMES[entry[0]];
          entry = null;
        }
      }
      let value = entry !== null ? entry[1] : LIVE[kind]();
      if (kind === "perf" && !(value >= S.lastPerf)) value = S.lastPerf;
      const last = S.readKinds.length - 1;
      const repeated = last >= 0 && S.readKinds[last] === kind && S.readValues[last] === value;
      if (!repeated && S.readKinds.length >= __MAX_CLOCK_ENTRIES__) {
        throw new RangeErrorConstructor(
          "The clock (" + CLOCK_NAMES[kind] + ") was not read: the code read __MAX_CLOCK_ENTRIES__ different " +
          "clock values since it last waited on a tool call or timer, the most it may. Every reading is kept so " +
          "that a paused execution can be rebuilt; read the clock less often (once before a loop, say, rather " +
          "than in every iteration)",
        );
      }
      if (mismatch !== null) S.diverged = mismatch;
      else if (entry !== null) {
        S.replayUsed++;
        if (S.replayUsed >= entry[2]) { S.replayIndex++; S.replayUsed = 0; }
      } else if (replay !== null && S.diverged === null) S.extraReadings++;
      if (kind === "perf") S.lastPerf = value;
      if (repeated) S.readCounts[last]++;
      else {
        append(S.readKinds, kind);
        append(S.readValues, value);
        append(S.readCounts, 1);
      }
      return value;
    },
    step(replay) {
      S.readKinds = [];
      S.readValues = [];
      S.readCounts = [];
      S.replay = replay;
      S.replayIndex = 0;
      S.replayUsed = 0;
      S.extraReadings = 0;
      S.diverged = null;
    },
    close() {
      const replay = S.replay;
      if (replay !== null && S.diverged === null) {
        let left = -S.replayUsed;
        for (let index = S.replayIndex; index < replay.length; index++) left += replay[index][2];
        const excess = S.extraReadings > 0 ? S.extraReadings + " more" : left > 0 ? left + " fewer" : null;
        const count = S.extraReadings > 0 ? S.extraReadings : left;
        if (excess !== null) {
          S.diverged = "the code read the clock " + excess + (count === 1 ? " time" : " times") +
            " than the journal has";
        }
      }
      let text = "";
      for (let index = 0; index < S.readKinds.length; index++) {
        text += (index ? ',["' : '["') + S.readKinds[index] + '",' + toText(S.readValues[index]) + "," +
          S.readCounts[index] + "]";
      }
      S.replay = null;
      return flat('{"clock":[' + text + '],"diverged":' + (S.diverged === null ? "null" : quote(S.diverged)) + "}");
    },
  };
  S.lastPerf = 0;
  clock.step(null);
  return clock;
})
"""

_CORE = r"""
"use strict";
(() => {
  const apply = Reflect.apply;
  const defineProperty = Object.defineProperty;
  const freeze = Object.freeze;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const slice = String.prototype.slice;
  const construct = Reflect.construct;
  const compile = eval;
  const PromiseConstructor = Promise;
  const ProxyConstructor = Proxy;
  const ErrorConstructor = Error;
  const TypeErrorConstructor = TypeError;
  const OriginalDate = Date;
  const datePrototype = Date.prototype;
  const dateNow = Date.now;
  const dateToString = Date.prototype.toString;
  const livePerformance = performance;
  const performanceNow = performance.now;

  const append = (list, value) => {
    defineProperty(list, list.length, { __proto__: null, value, writable: true, enumerable: true, configurable: true });
  };
  const joined = (list) => {
    let text = "";
    for (let index = 0; index < list.length; index++) text += (index ? "," : "") + list[index];
    return text;
  };
  const quote = (text) => stringify(text);
  const flat = (text) => apply(slice, text, [0]);

  const I = freeze({
    __proto__: null,
    apply, stringify, parse, slice, append, quote, flat, dateNow, livePerformance, performanceNow,
    PromiseConstructor, ErrorConstructor, TypeErrorConstructor, RangeErrorConstructor: RangeError,
    toText: String, toNumber: Number, isPrototypeOf: Object.prototype.isPrototypeOf, errorPrototype: Error.prototype,
    imul: Math.imul, floor: Math.floor,
  });
  const S = {
    __proto__: null, calls: [], emitted: [], nextId: 1, started: false, finished: null,
    s0: 0, s1: 0, s2: 0, s3: 0, epoch: 0, wallAnchor: 0, monotonicAnchor: 0,
  };
  const sources = { __proto__: null };
  const modules = { __proto__: null };
  const need = (name) => {
    let module = modules[name];
    if (module === undefined) {
      module = apply(apply(compile, undefined, [sources[name]]), undefined, [I, S, need]);
      modules[name] = module;
    }
    return module;
  };
  const failed = (error) => {
    try {
      return need("errors").thrown(error);
    } catch {
      const message = "The code failed and its error could not be read";
      return { __proto__: null, ok: false, message, stack: "", noMessage: true };
    }
  };

  const completed = (value) => {
    let json;
    let text = null;
    try {
      json = value === undefined ? "null" : stringify(value);
      if (typeof json !== "string") return need("errors").noJson(value);
      if (typeof value === "string") text = value;
      else if (value !== undefined && value !== null) {
        const pretty = stringify(value, null, 2);
        if (typeof pretty === "string") text = pretty;
      }
    } catch (error) {
      return need("errors").unserializable(error);
    }
    return { __proto__: null, ok: true, result: json, text };
  };
  const settleWith = async (promise) => {
    let value;
    try {
      value = await promise;
    } catch (error) {
      S.finished = failed(error);
      return;
    }
    S.finished = completed(value);
  };

  const host = freeze({
    __proto__: null,
    drain() {
      const text = joined(S.calls);
      S.calls = [];
      const timers = modules.timers;
      return flat("[" + (timers === undefined ? text : timers.drain(text)) + "]");
    },
    settle(id, ok, payload) {
      need("tools").settle(id, ok, payload);
    },
    fire(id) {
      need("timers").fire(id);
    },
    start(promise) {
      if (S.started) return;
      S.started = true;
      try {
        defineProperty(promise, "constructor", { __proto__: null, value: PromiseConstructor });
      } catch {}
      settleWith(promise);
    },
    state() {
      const finished = S.finished;
      if (finished === null) return null;
      const head = finished.ok
        ? '"ok":true,"result":' + quote(finished.result) + ',"text":' +
          (finished.text === null ? "null" : quote(finished.text))
        : '"ok":false,"message":' + quote(finished.message) + ',"stack":' + quote(finished.stack) +
          ',"noMessage":' + (finished.noMessage ? "true" : "false");
      const log = modules.log;
      const logs = log === undefined ? "" : log.text();
      return flat("{" + head + ',"logs":[' + logs + '],"emitted":[' + joined(S.emitted) + "]}");
    },
  });

  const control = {
    __proto__: null,
    module(name, source) {
      sources[name] = source;
    },
    open(text) {
      const opening = parse(text);
      S.s0 = opening[0] | 0;
      S.s1 = opening[1] | 0;
      S.s2 = opening[2] | 0;
      S.s3 = opening[3] | 0;
      S.epoch = opening[4];
      S.wallAnchor = dateNow();
      S.monotonicAnchor = apply(performanceNow, livePerformance, []);
    },
    step(text) {
      const replay = parse(text);
      if (replay !== null || modules.clock !== undefined) need("clock").step(replay);
    },
    close() {
      return modules.clock === undefined ? '{"clock":[],"diverged":null}' : need("clock").close();
    },
  };

  const readDate = () => need("clock").read("date");
  const ClockedDate = function Date(...args) {
    if (new.target === undefined) return apply(dateToString, construct(OriginalDate, [readDate()]), []);
    return construct(OriginalDate, args.length === 0 ? [readDate()] : args, new.target);
  };
  const defineBuiltin = (object, key, value) =>
    defineProperty(object, key, { __proto__: null, value, writable: true, enumerable: false, configurable: true });
  defineProperty(ClockedDate, "length", {
    __proto__: null, value: 7, writable: false, enumerable: false, configurable: true,
  });
  defineProperty(ClockedDate, "prototype", {
    __proto__: null, value: datePrototype, writable: false, enumerable: false, configurable: false,
  });
  defineBuiltin(ClockedDate, "now", { now() { return readDate(); } }.now);
  defineBuiltin(ClockedDate, "parse", OriginalDate.parse);
  defineBuiltin(ClockedDate, "UTC", OriginalDate.UTC);
  defineBuiltin(datePrototype, "constructor", ClockedDate);
  defineBuiltin(globalThis, "Date", ClockedDate);
  defineBuiltin(Math, "random", { random() { return need("clock").random(); } }.random);
  const clockedPerformance = {
    now() { return need("clock").read("perf"); },
    get timeOrigin() { return S.epoch; },
  };
  defineProperty(clockedPerformance, "now", { __proto__: null, writable: false, configurable: false });
  defineProperty(clockedPerformance, "timeOrigin", { __proto__: null, configurable: false });
  defineProperty(globalThis, "performance", {
    __proto__: null, value: clockedPerformance, writable: true, enumerable: true, configurable: true,
  });

  const toolsAt = (path) => new ProxyConstructor(function () {}, {
    __proto__: null,
    get(_target, prop) {
      if (typeof prop === "symbol" || prop === "then") return undefined;
      return toolsAt(path ? path + "." + prop : prop);
    },
    apply(_target, _this, args) { return need("tools").call(path, args); },
    ownKeys() { return need("tools").refuse(path); },
    getOwnPropertyDescriptor() { return need("tools").refuse(path); },
    has() { return true; },
    set() { throw new TypeErrorConstructor("tools." + path + " is read-only"); },
    defineProperty() { throw new TypeErrorConstructor("tools is read-only"); },
  });
  const logAt = (level) => (...args) => { need("log").write(level, args); };

  defineProperty(globalThis, "__executor", { __proto__: null, value: host, enumerable: false });
  defineProperty(globalThis, "tools", { __proto__: null, value: toolsAt(""), enumerable: false });
  globalThis.console = freeze({
    log: logAt("log"), info: logAt("info"), warn: logAt("warn"), error: logAt("error"), debug: logAt("debug"),
  });
  globalThis.emit = (value) => { need("emit")(value); };
  globalThis.fetch = () => { throw new ErrorConstructor("fetch is disabled in the executor sandbox"); };
  globalThis.setTimeout = (callback, ms, ...args) => need("timers").set(callback, ms, args);
  globalThis.clearTimeout = (id) => { need("timers").clear(id); };
  return (op, text, more) => control[op](text, more);
})();
"""

MAX_LOG_LINES = 1000
MAX_LOG_LINE = 10_000
MAX_EMITTED = 1000
MAX_DELAY_MS = 2**31 - 1
"""The longest timer delay, as JavaScript engines clamp it; the host clamps to it too."""
MAX_CLOCK_ENTRIES = 100_000
"""Distinct clock readings (run-length entries) one step may make; each is journaled and sent to the host."""
PERF_STEPS_PER_MS = 10
"""`performance.now()` is coarsened to 0.1 ms (as browsers coarsen it), so a timing loop repeats readings
that the run-length encoding folds, instead of journaling a new value on every iteration."""


def _one_line(source: str) -> str:
    """Every statement in these sources ends in a semicolon or brace, so joining the lines keeps its meaning."""
    return (
        " ".join(line.strip() for line in source.splitlines() if line.strip())
        .replace("__MAX_LOG_LINES__", str(MAX_LOG_LINES))
        .replace("__MAX_LOG_LINE__", str(MAX_LOG_LINE))
        .replace("__MAX_EMITTED__", str(MAX_EMITTED))
        .replace("__MAX_DELAY__", str(MAX_DELAY_MS))
        .replace("__MAX_CLOCK_ENTRIES__", str(MAX_CLOCK_ENTRIES))
        .replace("__PERF_STEPS_PER_MS__", str(PERF_STEPS_PER_MS))
    )


_CORE_LINE = _one_line(_CORE)
_MODULE_LINES = {
    name: _one_line(source)
    for name, source in (
        ("errors", _ERRORS),
        ("log", _LOG),
        ("tools", _TOOLS),
        ("timers", _TIMERS),
        ("emit", _EMIT),
        ("clock", _CLOCK),
    )
}


@attrs.frozen
class Prelude:
    """What a context evaluates before the agent's code (`core`, which evaluates to the host's control
    function) and the modules the host hands that function (`control("module", name, source)`), which the
    core compiles on first use."""

    core: str
    modules: tuple[tuple[str, str], ...]


@functools.lru_cache(maxsize=8)
def prelude(*, max_timers: int, max_tool_calls: int) -> Prelude:
    """The prelude for one execution, with its fan-out bounds; made once per pair of bounds (a server sends
    the same ones to every execution), not again for every fresh context."""

    def bounded(line: str) -> str:
        return line.replace("__MAX_TIMERS__", str(int(max_timers))).replace(
            "__MAX_TOOL_CALLS__", str(int(max_tool_calls))
        )

    return Prelude(bounded(_CORE_LINE), tuple((name, bounded(line)) for name, line in _MODULE_LINES.items()))


CODE_PREFIX = '"use strict";\n__executor.start((async () => {\n'
CODE_SUFFIX = "\n})());\n"
CODE_LINE_OFFSET = CODE_PREFIX.count("\n")
