"""What models read: the `execute` description and the skills behind the `skills` tool.

The always-loaded `execute` description stays tiny; the how-to lives behind `skills`, fetched on
demand, as upstream does to keep every conversation's context small.
"""

EXECUTE_DESCRIPTION = "\n".join(
    [
        "Execute TypeScript in a sandboxed runtime.",
        "",
        'Before writing code, call `skills({ name: "execute" })` for the workflow on how to use this tool.',
    ]
)

# The execute description lists at most this many integrations; the rest are counted.
MAX_INVENTORY = 50


def inventory_block(slugs: list[str]) -> str | None:
    """The `## Available integrations` block of the execute description and skill (upstream §3.2): the
    slugs of the integrations the caller has connected, or None when there are none."""
    if not slugs:
        return None
    ordered = sorted(set(slugs))
    lines = [f"- `{slug}`" for slug in ordered[:MAX_INVENTORY]]
    if len(ordered) > MAX_INVENTORY:
        lines.append(f"- ... {len(ordered) - MAX_INVENTORY} more")
    return "\n".join(
        [
            "## Available integrations",
            "",
            "Integrations you have connected. Their tools live under `tools.<integration>.…`.",
            *lines,
        ]
    )


SKILLS_DESCRIPTION = "\n".join(
    [
        "Fetch a named how-to skill. Skills hold the long-form guidance that would otherwise bloat another "
        "tool's always-loaded description.",
        'Call `skills({ name: "execute" })` for the full guide to writing code for the `execute` tool (search the '
        "catalog, call tools, emit results, resume paused runs).",
        "Call with no name to list the available skills.",
    ]
)

RESUME_DESCRIPTION = (
    "Resume a paused execution using the executionId returned by execute.\n"
    "This connection explicitly allows model-side resume via elicitation_mode=model."
)
BROWSER_RESUME_DESCRIPTION = (
    "Request user approval to resume a paused execution.\n"
    "Call this with the executionId returned by execute. If the user has not approved in the browser yet, tell "
    "them to open the returned approval URL. If they have approved, this returns the resumed execution result.\n"
    "This connection does not allow the model to choose accept, decline, cancel, or content."
)

EXECUTE_SKILL = """# execute

Run JavaScript or TypeScript in a sandbox. Your code is the body of an async function: use top-level
`await`, and `return` the value you want back.

## Workflow

1. Find tools: `await tools.search({ query: "create issue" })` returns `{ items: [{ path, name, description,
   integration, score }], total, hasMore, nextOffset }`. List one integration's tools with
   `tools.search({ namespace: "<integration>", query: "" })`; list integrations with
   `tools.executor.integrations.list({})`.
2. Read a tool's shape: `await tools.describe.tool({ path })` gives its TypeScript input and output types.
3. Call it: `const result = await tools.<path>(args)`. Only the first argument is sent.
4. Check the result: tools answer `{ ok: true, data }` or `{ ok: false, error: { code, message } }`.
5. Return what the user needs, or emit it.
6. If the run pauses for approval, the result says `Execution paused` with an `executionId`: ask the user,
   then call `resume` with that id.

## Rules

- Use `emit(value)` to append user-visible output, shown in order. Once anything is emitted, the text
  result is the emitted items (then an error or the logs) and not the return value, which is kept only in
  the structured result: emit everything that must be read, or emit nothing and return it.
- `console.log`, `info`, `warn`, `error` and `debug` are captured and shown after `Logs:`.
- Do not use `fetch`: the sandbox has no network, files, environment or processes. Reach the outside
  world only through `tools`.
- `tools` is a lazy proxy: it cannot be enumerated (`Object.keys(tools)` throws); search instead.
- `setTimeout` and `clearTimeout` work; there is a CPU budget, a memory cap and a wall-clock budget that
  does not run while a tool call is in flight, and a bound on pending timers and on tool calls in flight
  (past it, `setTimeout` throws and a tool call rejects, naming the bound).
- TypeScript types are stripped, not checked. Decorators and `enum` are not supported.
- Results must be JSON-serializable; large results are truncated in the text shown to you.
"""

SKILLS = {
    "execute": (
        "How to call integrations from the execute sandbox: search the catalog, read a tool's shape, call it, "
        "emit results, and resume paused runs.",
        EXECUTE_SKILL,
    )
}

SKILLS_INDEX = 'Available skills. Fetch one with `skills({ name: "<name>" })`.\n\n' + "\n".join(
    f"- `{name}` — {summary}" for name, (summary, _) in SKILLS.items()
)
