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

_PRELUDE_SOURCE = r"""
"use strict";
(() => {
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const apply = Reflect.apply;
  const defineProperty = Object.defineProperty;
  const freeze = Object.freeze;
  const toText = String;
  const toNumber = Number;
  const PromiseConstructor = Promise;
  const ProxyConstructor = Proxy;
  const ErrorConstructor = Error;
  const TypeErrorConstructor = TypeError;
  const RangeErrorConstructor = RangeError;
  const isPrototypeOf = Object.prototype.isPrototypeOf;
  const errorPrototype = Error.prototype;
  const slice = String.prototype.slice;
  const construct = Reflect.construct;
  const imul = Math.imul;
  const floor = Math.floor;
  const OriginalDate = Date;
  const datePrototype = Date.prototype;
  const dateNow = Date.now;
  const dateToString = Date.prototype.toString;
  const livePerformance = performance;
  const performanceNow = performance.now;
  const MAX_CLOCK_ENTRIES = __MAX_CLOCK_ENTRIES__;
  const PERF_STEPS_PER_MS = __PERF_STEPS_PER_MS__;
  const MAX_LOG_LINES = __MAX_LOG_LINES__;
  const MAX_LOG_LINE = __MAX_LOG_LINE__;
  const MAX_EMITTED = __MAX_EMITTED__;
  const MAX_DELAY = __MAX_DELAY__;
  const MAX_TIMERS = __MAX_TIMERS__;
  const MAX_TOOL_CALLS = __MAX_TOOL_CALLS__;

  const append = (list, value) => {
    defineProperty(list, list.length, { value, writable: true, enumerable: true, configurable: true });
  };
  const joined = (list) => {
    let text = "";
    for (let index = 0; index < list.length; index++) text += (index ? "," : "") + list[index];
    return text;
  };
  const quote = (text) => stringify(text);
  const flat = (text) => apply(slice, text, [0]);

  let calls = [];
  let newTimers = [];
  let cleared = [];
  const logs = [];
  const emitted = [];
  const pending = { __proto__: null };
  const timers = { __proto__: null };
  let pendingCount = 0;
  let timerCount = 0;
  let nextId = 1;
  let started = false;
  let finished = null;
  let droppedLogs = 0;

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
  const completed = (value) => {
    let json;
    let text = null;
    try {
      json = value === undefined ? "null" : stringify(value);
      if (typeof json !== "string") {
        return failure(
          "The result, of type " + typeof value + ", has no JSON form; " +
          "return plain data (objects, arrays, strings, numbers, booleans or null)",
          "", false,
        );
      }
      if (typeof value === "string") text = value;
      else if (value !== undefined && value !== null) {
        const pretty = stringify(value, null, 2);
        if (typeof pretty === "string") text = pretty;
      }
    } catch (error) {
      return failure("The result could not be serialized to JSON: " + thrown(error).message, "", false);
    }
    return { __proto__: null, ok: true, result: json, text };
  };
  const rejected = (error) => new PromiseConstructor((_resolve, reject) => reject(error));

  const logAt = (level) => (...args) => {
    if (logs.length >= MAX_LOG_LINES) { droppedLogs++; return; }
    let line = "[" + level + "]";
    for (let index = 0; index < args.length; index++) line += " " + show(args[index]);
    const over = line.length - MAX_LOG_LINE;
    append(logs, over > 0 ? apply(slice, line, [0, MAX_LOG_LINE]) + "... [truncated " + over + " chars]" : line);
  };
  const console = freeze({
    log: logAt("log"), info: logAt("info"), warn: logAt("warn"), error: logAt("error"), debug: logAt("debug"),
  });

  const hint = (path) =>
    (path ? "tools." + path : "tools") + " is a lazy proxy and cannot be enumerated. " +
    'Use tools.search({ query: "..." }) to find tools, ' +
    'tools.search({ namespace: "<integration>", query: "" }) to list every tool in an integration, ' +
    "or tools.executor.coreTools.connections.list({}) to list saved connections.";

  const call = (path, args) => {
    if (!path) throw new ErrorConstructor("Tool path missing in invocation");
    if (pendingCount >= MAX_TOOL_CALLS) {
      return rejected(new RangeErrorConstructor(
        "tools." + path + " was not called: at most " + MAX_TOOL_CALLS + " tool calls may be in flight in one " +
        "execution (the server's --execution-max-tool-calls); await some before starting more",
      ));
    }
    const argument = args[0];
    let payload;
    let problem = null;
    try {
      payload = argument === undefined ? undefined : stringify(argument);
      if (argument !== undefined && typeof payload !== "string") problem = "a " + typeof argument + " has no JSON form";
    } catch (error) {
      problem = thrown(error).message;
    }
    if (problem !== null) {
      const message = "Arguments to tools." + path + " must be JSON-serializable: " + problem;
      return rejected(new TypeErrorConstructor(message));
    }
    const id = nextId++;
    append(calls, '{"kind":"call","id":' + id + ',"path":' + quote(path) +
      (payload === undefined ? "" : ',"args":' + payload) + "}");
    pendingCount++;
    return new PromiseConstructor((resolve, reject) => {
      pending[id] = { __proto__: null, resolve, reject };
    });
  };
  const toolsAt = (path) => new ProxyConstructor(function () {}, {
    __proto__: null,
    get(_target, prop) {
      if (typeof prop === "symbol" || prop === "then") return undefined;
      return toolsAt(path ? path + "." + prop : prop);
    },
    apply(_target, _this, args) { return call(path, args); },
    ownKeys() { throw new TypeErrorConstructor(hint(path)); },
    getOwnPropertyDescriptor() { throw new TypeErrorConstructor(hint(path)); },
    has() { return true; },
    set() { throw new TypeErrorConstructor("tools." + path + " is read-only"); },
    defineProperty() { throw new TypeErrorConstructor("tools is read-only"); },
  });

  const settleWith = async (promise) => {
    let value;
    try {
      value = await promise;
    } catch (error) {
      finished = thrown(error);
      return;
    }
    finished = completed(value);
  };

  const host = freeze({
    __proto__: null,
    drain() {
      let text = joined(calls);
      for (let index = 0; index < cleared.length; index++) {
        text += (text ? "," : "") + '{"kind":"clear","id":' + cleared[index] + "}";
      }
      for (let index = 0; index < newTimers.length; index++) {
        const id = newTimers[index];
        const timer = timers[id];
        if (timer === undefined) continue;
        timer.reported = true;
        text += (text ? "," : "") + '{"kind":"timer","id":' + id + ',"ms":' + timer.delay + "}";
      }
      calls = [];
      newTimers = [];
      cleared = [];
      return flat("[" + text + "]");
    },
    settle(id, ok, payload) {
      const waiting = pending[id];
      if (waiting === undefined) return;
      delete pending[id];
      pendingCount--;
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
    fire(id) {
      const timer = timers[id];
      if (timer === undefined) return;
      delete timers[id];
      timerCount--;
      if (typeof timer.callback !== "function") return;
      try {
        apply(timer.callback, undefined, timer.args);
      } catch (error) {
        if (finished === null) finished = thrown(error);
      }
    },
    start(promise) {
      if (started) return;
      started = true;
      try {
        defineProperty(promise, "constructor", { value: PromiseConstructor });
      } catch {}
      settleWith(promise);
    },
    state() {
      if (finished === null) return null;
      let logText = "";
      for (let index = 0; index < logs.length; index++) logText += (index ? "," : "") + quote(logs[index]);
      if (droppedLogs) {
        logText += (logText ? "," : "") + quote("[executor] " + droppedLogs + " more log lines were dropped");
      }
      const head = finished.ok
        ? '"ok":true,"result":' + quote(finished.result) + ',"text":' +
          (finished.text === null ? "null" : quote(finished.text))
        : '"ok":false,"message":' + quote(finished.message) + ',"stack":' + quote(finished.stack) +
          ',"noMessage":' + (finished.noMessage ? "true" : "false");
      return flat("{" + head + ',"logs":[' + logText + '],"emitted":[' + joined(emitted) + "]}");
    },
  });

  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  const nextWord = () => {
    const scrambled = imul(s1, 5);
    const result = imul((scrambled << 7) | (scrambled >>> 25), 9) >>> 0;
    const shifted = s1 << 9;
    s2 ^= s0;
    s3 ^= s1;
    s1 ^= s2;
    s0 ^= s3;
    s2 ^= shifted;
    s3 = (s3 << 11) | (s3 >>> 21);
    return result;
  };
  const random = {
    random() { return ((nextWord() >>> 5) * 67108864 + (nextWord() >>> 6)) / 9007199254740992; },
  }.random;

  let epoch = 0;
  let wallAnchor = 0;
  let monotonicAnchor = 0;
  let lastPerf = 0;
  let readKinds = [];
  let readValues = [];
  let readCounts = [];
  let replay = null;
  let replayIndex = 0;
  let replayUsed = 0;
  let extraReadings = 0;
  let diverged = null;
  const CLOCK_NAMES = { __proto__: null, date: "Date", perf: "performance.now()" };
  const liveDate = () => dateNow();
  const livePerf = () => {
    const since = wallAnchor - epoch + (apply(performanceNow, livePerformance, []) - monotonicAnchor);
    return floor(since * PERF_STEPS_PER_MS) / PERF_STEPS_PER_MS;
  };
  const read = (kind, live) => {
    let entry = null;
    let mismatch = null;
    if (replay !== null && diverged === null && extraReadings === 0 && replayIndex < replay.length) {
      entry = replay[replayIndex];
      if (entry[0] !== kind) {
        mismatch = "the code read the clock (" + CLOCK_NAMES[kind] + ") where the journal has " + CLOCK_NAMES[entry[0]];
        entry = null;
      }
    }
    let value = entry !== null ? entry[1] : live();
    if (kind === "perf" && !(value >= lastPerf)) value = lastPerf;
    const last = readKinds.length - 1;
    const repeated = last >= 0 && readKinds[last] === kind && readValues[last] === value;
    if (!repeated && readKinds.length >= MAX_CLOCK_ENTRIES) {
      throw new RangeErrorConstructor(
        "The clock (" + CLOCK_NAMES[kind] + ") was not read: the code read " + MAX_CLOCK_ENTRIES + " different " +
        "clock values since it last waited on a tool call or timer, the most it may. Every reading is kept so " +
        "that a paused execution can be rebuilt; read the clock less often (once before a loop, say, rather " +
        "than in every iteration)",
      );
    }
    if (mismatch !== null) diverged = mismatch;
    else if (entry !== null) {
      replayUsed++;
      if (replayUsed >= entry[2]) { replayIndex++; replayUsed = 0; }
    } else if (replay !== null && diverged === null) extraReadings++;
    if (kind === "perf") lastPerf = value;
    if (repeated) readCounts[last]++;
    else {
      append(readKinds, kind);
      append(readValues, value);
      append(readCounts, 1);
    }
    return value;
  };
  const readDate = () => read("date", liveDate);
  const clock = {
    __proto__: null,
    open(text) {
      const opening = parse(text);
      s0 = opening[0] | 0;
      s1 = opening[1] | 0;
      s2 = opening[2] | 0;
      s3 = opening[3] | 0;
      epoch = opening[4];
      wallAnchor = dateNow();
      monotonicAnchor = apply(performanceNow, livePerformance, []);
    },
    step(text) {
      readKinds = [];
      readValues = [];
      readCounts = [];
      replay = parse(text);
      replayIndex = 0;
      replayUsed = 0;
      extraReadings = 0;
      diverged = null;
    },
    close() {
      if (replay !== null && diverged === null) {
        let left = -replayUsed;
        for (let index = replayIndex; index < replay.length; index++) left += replay[index][2];
        const excess = extraReadings > 0 ? extraReadings + " more" : left > 0 ? left + " fewer" : null;
        const count = extraReadings > 0 ? extraReadings : left;
        if (excess !== null) {
          diverged = "the code read the clock " + excess + (count === 1 ? " time" : " times") + " than the journal has";
        }
      }
      let text = "";
      for (let index = 0; index < readKinds.length; index++) {
        text += (index ? ',["' : '["') + readKinds[index] + '",' + toText(readValues[index]) + "," +
          readCounts[index] + "]";
      }
      replay = null;
      return flat('{"clock":[' + text + '],"diverged":' + (diverged === null ? "null" : quote(diverged)) + "}");
    },
  };

  const ClockedDate = function Date(...args) {
    if (new.target === undefined) return apply(dateToString, construct(OriginalDate, [readDate()]), []);
    return construct(OriginalDate, args.length === 0 ? [readDate()] : args, new.target);
  };
  const defineBuiltin = (object, key, value) =>
    defineProperty(object, key, { value, writable: true, enumerable: false, configurable: true });
  defineProperty(ClockedDate, "length", { value: 7, writable: false, enumerable: false, configurable: true });
  defineProperty(ClockedDate, "prototype", {
    value: datePrototype, writable: false, enumerable: false, configurable: false,
  });
  defineBuiltin(ClockedDate, "now", { now() { return readDate(); } }.now);
  defineBuiltin(ClockedDate, "parse", OriginalDate.parse);
  defineBuiltin(ClockedDate, "UTC", OriginalDate.UTC);
  defineBuiltin(datePrototype, "constructor", ClockedDate);
  defineBuiltin(globalThis, "Date", ClockedDate);
  defineBuiltin(Math, "random", random);
  const clockedPerformance = {
    now() { return read("perf", livePerf); },
    get timeOrigin() { return epoch; },
  };
  defineProperty(clockedPerformance, "now", { writable: false, configurable: false });
  defineProperty(clockedPerformance, "timeOrigin", { configurable: false });
  defineProperty(globalThis, "performance", {
    value: clockedPerformance, writable: true, enumerable: true, configurable: true,
  });

  defineProperty(globalThis, "__executor", { value: host, enumerable: false });
  defineProperty(globalThis, "tools", { value: toolsAt(""), enumerable: false });
  globalThis.console = console;
  globalThis.emit = (value) => {
    if (emitted.length >= MAX_EMITTED) {
      throw new ErrorConstructor("emit() takes at most " + MAX_EMITTED + " items per execution");
    }
    const text = stringify(value === undefined ? null : value);
    if (typeof text !== "string") {
      throw new TypeErrorConstructor("emit() needs JSON data; a " + typeof value + " has none");
    }
    append(emitted, text);
  };
  globalThis.fetch = () => { throw new ErrorConstructor("fetch is disabled in the executor sandbox"); };
  globalThis.setTimeout = (callback, ms, ...args) => {
    if (timerCount >= MAX_TIMERS) {
      throw new RangeErrorConstructor(
        "setTimeout refused: at most " + MAX_TIMERS + " timers may be pending in one execution " +
        "(the server's --execution-max-timers); clear or await timers before starting more",
      );
    }
    let delay = 0;
    try {
      delay = toNumber(ms);
    } catch {}
    if (!(delay >= 0)) delay = 0;
    if (delay > MAX_DELAY) delay = MAX_DELAY;
    const id = nextId++;
    timers[id] = { __proto__: null, callback, args, delay, reported: false };
    append(newTimers, id);
    timerCount++;
    if (newTimers.length > 2 * timerCount + 64) {
      const live = [];
      for (let index = 0; index < newTimers.length; index++) {
        if (timers[newTimers[index]] !== undefined) append(live, newTimers[index]);
      }
      newTimers = live;
    }
    return id;
  };
  globalThis.clearTimeout = (id) => {
    const timer = typeof id === "number" ? timers[id] : undefined;
    if (timer === undefined) return;
    delete timers[id];
    timerCount--;
    if (timer.reported) append(cleared, id);
  };
  return (op, text) => clock[op](text);
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

# Every statement above ends in a semicolon or brace, so joining the lines cannot change its meaning.
_PRELUDE = (
    " ".join(line.strip() for line in _PRELUDE_SOURCE.splitlines() if line.strip())
    .replace("__MAX_LOG_LINES__", str(MAX_LOG_LINES))
    .replace("__MAX_LOG_LINE__", str(MAX_LOG_LINE))
    .replace("__MAX_EMITTED__", str(MAX_EMITTED))
    .replace("__MAX_DELAY__", str(MAX_DELAY_MS))
    .replace("__MAX_CLOCK_ENTRIES__", str(MAX_CLOCK_ENTRIES))
    .replace("__PERF_STEPS_PER_MS__", str(PERF_STEPS_PER_MS))
)


def prelude(*, max_timers: int, max_tool_calls: int) -> str:
    """The prelude for one execution, with its fan-out bounds."""
    return _PRELUDE.replace("__MAX_TIMERS__", str(int(max_timers))).replace(
        "__MAX_TOOL_CALLS__", str(int(max_tool_calls))
    )


CODE_PREFIX = '"use strict";\n__executor.start((async () => {\n'
CODE_SUFFIX = "\n})());\n"
CODE_LINE_OFFSET = CODE_PREFIX.count("\n")
