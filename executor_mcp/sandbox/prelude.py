"""The JavaScript every execution starts with: the sandbox globals and the outbox the host drains.

JavaScript never calls into Python. Everything the code asks of the host (a tool call, a timer) is
pushed onto an in-JS outbox that the worker reads after each step; the host answers by evaluating
`__executor.settle(...)` or `__executor.fire(...)`. That keeps the engine free of re-entrancy and lets
the CPU budget be enforced on plain evaluation calls.

The code itself is wrapped so its own line numbers are kept: the wrapper opens on the line before the
code (`CODE_LINE_OFFSET`), and no wrapper text shares a line with it. The prelude is evaluated as one
line, so a stack frame inside it (line 1) can never be mistaken for a line of the agent's code.
"""

_PRELUDE_SOURCE = r"""
"use strict";
(() => {
  const outbox = [];
  const logs = [];
  const emitted = [];
  const pending = new Map();
  const timers = new Map();
  let nextId = 1;
  let finished = null;
  const MAX_LOG_LINES = __MAX_LOG_LINES__;
  const MAX_LOG_LINE = __MAX_LOG_LINE__;
  const MAX_EMITTED = __MAX_EMITTED__;

  const show = (value) => {
    if (typeof value === "string") return value;
    try {
      const text = JSON.stringify(value);
      return text === undefined ? String(value) : text;
    } catch {
      return String(value);
    }
  };
  let droppedLogs = 0;
  const logAt = (level) => (...args) => {
    if (logs.length >= MAX_LOG_LINES) { droppedLogs++; return; }
    const line = `[${level}] ${args.map(show).join(" ")}`;
    const over = line.length - MAX_LOG_LINE;
    logs.push(over > 0 ? `${line.slice(0, MAX_LOG_LINE)}... [truncated ${over} chars]` : line);
  };
  const console = Object.freeze({
    log: logAt("log"), info: logAt("info"), warn: logAt("warn"), error: logAt("error"), debug: logAt("debug"),
  });

  const hint = (path) =>
    `${path ? "tools." + path : "tools"} is a lazy proxy and cannot be enumerated. ` +
    'Use tools.search({ query: "..." }) to find tools, ' +
    'tools.search({ namespace: "<integration>", query: "" }) to list every tool in an integration, ' +
    "or tools.executor.coreTools.connections.list({}) to list saved connections.";

  const toolsAt = (path) => new Proxy(function () {}, {
    get(_target, prop) {
      if (typeof prop === "symbol" || prop === "then") return undefined;
      return toolsAt(path ? `${path}.${prop}` : String(prop));
    },
    apply(_target, _this, args) {
      if (!path) throw new Error("Tool path missing in invocation");
      let payload;
      try {
        payload = args[0] === undefined ? undefined : JSON.parse(JSON.stringify(args[0]));
      } catch (error) {
        return Promise.reject(new TypeError(`Arguments to tools.${path} must be JSON-serializable: ${error.message}`));
      }
      const id = nextId++;
      outbox.push({ kind: "call", id, path, args: payload });
      return new Promise((resolve, reject) => { pending.set(id, { resolve, reject }); });
    },
    ownKeys() { throw new TypeError(hint(path)); },
    getOwnPropertyDescriptor() { throw new TypeError(hint(path)); },
    has() { return true; },
    set() { throw new TypeError(`tools.${path || ""} is read-only`); },
    defineProperty() { throw new TypeError("tools is read-only"); },
  });

  const errorText = (error) => {
    if (error instanceof Error) {
      const head = error.name && error.name !== "Error" ? `${error.name}: ${error.message}` : error.message;
      return { message: head, stack: typeof error.stack === "string" ? error.stack : "" };
    }
    return { message: show(error), stack: "" };
  };

  const host = Object.freeze({
    drain() { return JSON.stringify(outbox.splice(0)); },
    settle(id, ok, payload) {
      const waiting = pending.get(id);
      if (!waiting) return;
      pending.delete(id);
      if (ok) waiting.resolve(payload === undefined ? undefined : JSON.parse(payload));
      else waiting.reject(new Error(payload));
    },
    fire(id) {
      const timer = timers.get(id);
      if (!timer) return;
      timers.delete(id);
      if (typeof timer.callback === "function") timer.callback(...timer.args);
    },
    start(promise) {
      promise.then(
        (value) => {
          let text;
          try {
            const json = JSON.stringify(value === undefined ? null : value);
            text = value === undefined || value === null ? null
              : typeof value === "string" ? value : JSON.stringify(value, null, 2);
            finished = { ok: true, result: json, text };
          } catch (error) {
            const reason = errorText(error).message;
            finished = { ok: false, message: `The result could not be serialized to JSON: ${reason}`, stack: "" };
          }
        },
        (error) => { finished = { ok: false, ...errorText(error) }; },
      );
    },
    state() {
      if (finished === null) return null;
      const shown = droppedLogs ? [...logs, `[executor] ${droppedLogs} more log lines were dropped`] : logs;
      return JSON.stringify({ ...finished, logs: shown, emitted });
    },
  });

  Object.defineProperty(globalThis, "__executor", { value: host, enumerable: false });
  Object.defineProperty(globalThis, "tools", { value: toolsAt(""), enumerable: false });
  globalThis.console = console;
  globalThis.emit = (value) => {
    if (emitted.length >= MAX_EMITTED) throw new Error(`emit() takes at most ${MAX_EMITTED} items per execution`);
    emitted.push(JSON.parse(JSON.stringify(value === undefined ? null : value)));
  };
  globalThis.fetch = () => { throw new Error("fetch is disabled in the executor sandbox"); };
  globalThis.setTimeout = (callback, ms, ...args) => {
    const id = nextId++;
    timers.set(id, { callback, args });
    outbox.push({ kind: "timer", id, ms: Math.max(0, Number(ms) || 0) });
    return id;
  };
  globalThis.clearTimeout = (id) => {
    if (timers.delete(id)) outbox.push({ kind: "clear", id });
  };
})();
"""

MAX_LOG_LINES = 1000
MAX_LOG_LINE = 10_000
MAX_EMITTED = 1000

# Every statement above ends in a semicolon or brace, so joining the lines cannot change its meaning.
PRELUDE = (
    " ".join(line.strip() for line in _PRELUDE_SOURCE.splitlines() if line.strip())
    .replace("__MAX_LOG_LINES__", str(MAX_LOG_LINES))
    .replace("__MAX_LOG_LINE__", str(MAX_LOG_LINE))
    .replace("__MAX_EMITTED__", str(MAX_EMITTED))
)

CODE_PREFIX = '"use strict";\n__executor.start((async () => {\n'
CODE_SUFFIX = "\n})());\n"
CODE_LINE_OFFSET = CODE_PREFIX.count("\n")
