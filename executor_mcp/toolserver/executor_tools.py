"""The product's MCP tools: `execute`, `skills` and (in model and browser mode) `resume`; in passthrough mode
`search` and `invoke` (`passthrough_tools.py`) instead of `execute` and `skills`.

An execution runs as a task in the session's nursery, so it can pause for approval and be resumed by a
later request, from this session or another of the same account and org, in this process or (its pause
being durable: `execution/runs.py`) the next one, which revives it when the session's runtime comes up.
In `native` elicitation mode
on a 2025 session there is no `resume`: a gated call asks the client inline with `elicitation/create`, and
waits for the answer no longer than the approval window (a 2026 workspace pauses as model mode does, and its
pause is asked as `input_required`: `modern.py`). In `browser` mode a pause sends the user to the console's
approval page, and `resume` takes only the executionId: it waits for the person's decision there.

Argument problems are tool results with `isError`, in the MCP SDK's wording, not JSON-RPC errors: a
model reads them and corrects its call.
"""

import functools
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from executor_mcp.audit.model import (
    APPROVAL_OUTCOMES,
    CUT_OFF,
    MAX_TOOL_PATH,
    OK,
    REQUIRE_APPROVAL,
    THREW,
    UNANSWERED,
    AuditRecord,
)
from executor_mcp.background import once
from executor_mcp.codec import JsonObject
from executor_mcp.execution.admission import Admission, Refusal, Slot, refusal_result
from executor_mcp.execution.engine import Engine, Outcome, ToolCall, internal_error, unknown_outcome
from executor_mcp.execution.journal import Head, Journal
from executor_mcp.execution.results import approval_url, render, render_browser_paused, worded_for_invoke
from executor_mcp.execution.runs import Answer, Book, Pause, Run, kept_executions
from executor_mcp.execution.texts import (
    BROWSER_RESUME_DESCRIPTION,
    EXECUTE_DESCRIPTION,
    RESUME_DESCRIPTION,
    SKILLS,
    SKILLS_DESCRIPTION,
    SKILLS_INDEX,
    inventory_block,
)
from executor_mcp.policies.service import Policies
from executor_mcp.protocol.mcp import Tool
from executor_mcp.protocol.modern import MODERN_VERSIONS
from executor_mcp.storage.records import (
    BROWSER_ELICITATION,
    NATIVE_ELICITATION,
    PASSTHROUGH_MODE,
    Owner,
    SessionMeta,
)
from executor_mcp.tools.catalog import Catalog
from executor_mcp.tools.context import CallContext, CallNote, Gate, Interaction
from executor_mcp.tools.errors import ToolThrow
from executor_mcp.toolserver.arguments import invalid, type_issue, zod_type
from executor_mcp.toolserver.passthrough_tools import BROWSER_RESUME_DESCRIPTION as PASSTHROUGH_BROWSER_DESCRIPTION
from executor_mcp.toolserver.passthrough_tools import RESUME_DESCRIPTION as PASSTHROUGH_RESUME_DESCRIPTION
from executor_mcp.toolserver.passthrough_tools import passthrough_tools
from executor_mcp.toolserver.registry import RegisteredTool, ToolContext, ToolFactory, ToolRegistry

SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"

EXECUTE = Tool(
    name="execute",
    description=EXECUTE_DESCRIPTION,
    input_schema={
        "type": "object",
        "properties": {"code": {"type": "string", "minLength": 1}},
        "required": ["code"],
        "$schema": SCHEMA_DIALECT,
    },
)
SKILLS_TOOL = Tool(
    name="skills",
    description=SKILLS_DESCRIPTION,
    input_schema={
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "description": 'The skill to fetch, e.g. "execute". Omit to list available skills.',
            }
        },
        "$schema": SCHEMA_DIALECT,
    },
)

# Where a tool call's audit record goes (`AuditTrail.record`).
Audit = Callable[[AuditRecord], Awaitable[None]]


RESUME = Tool(
    name="resume",
    description=RESUME_DESCRIPTION,
    input_schema={
        "type": "object",
        "properties": {
            "executionId": {"type": "string", "description": "The execution ID from the paused result"},
            "action": {
                "type": "string",
                "enum": ["accept", "decline", "cancel"],
                "description": "How to respond to the interaction",
            },
            "content": {
                "default": "{}",
                "type": "string",
                "description": "Optional JSON-encoded response content for form elicitations",
            },
        },
        "required": ["executionId", "action"],
        "$schema": SCHEMA_DIALECT,
    },
)
# Browser mode: the person decides on the approval page, so the model gives only the id (upstream §3.4).
BROWSER_RESUME = Tool(
    name="resume",
    description=BROWSER_RESUME_DESCRIPTION,
    input_schema={
        "type": "object",
        "properties": {
            "executionId": {"type": "string", "description": "The execution ID from the paused result"},
        },
        "required": ["executionId"],
        "$schema": SCHEMA_DIALECT,
    },
)
ACTIONS = ("accept", "decline", "cancel")


def executor_tools(
    engine: Engine,
    catalog: Catalog,
    policies: Policies,
    book: Book,
    admission: Admission,
    public_url: Callable[[], str],
    audit: Audit | None = None,
) -> ToolFactory:
    """`public_url` is where the console is reached (`--public-url`, else the bound address), asked at each
    browser-mode pause: the address is known only once the server listens. `audit` is given the record of
    every tool call the sandboxed code makes."""

    def browser_worded(pause: Pause) -> JsonObject:
        return render_browser_paused(pause.id, approval_url(public_url(), pause.id))

    async def execute(arguments: JsonObject, context: ToolContext) -> JsonObject:
        code = arguments.get("code")
        issues = _code_issues(code)
        if issues:
            return invalid("execute", issues)
        assert isinstance(code, str)
        return await run_code(code.strip(), context)

    async def run_code(code: str, context: ToolContext) -> JsonObject:
        """One execution of `code` in the session, rendered: what `execute` and passthrough `invoke` answer."""
        slot = admission.admit(context.session.owner)
        if isinstance(slot, Refusal):
            return refusal_result(slot)
        head = engine.head(code, context.session.elicitation_mode)
        # Asking inline happens within the request: nothing of it outlives the request, so nothing is kept.
        journal = None if asks_inline(context.session) else Journal(uuid.uuid4().hex, head)
        run = new_run(slot, context, journal)
        first = run.next
        try:
            start(run, head, context)
        except BaseException:
            slot.release()  # the run never started (the session is closing): its place is free again
            raise
        try:
            return await first.wait()
        finally:
            if not first.done:
                run.scope.cancel()  # the caller left before any result: nobody could ever resume it

    def new_run(slot: Slot, context: ToolContext, journal: Journal | None) -> Run:
        mode = context.session.elicitation_mode
        return Run(
            book,
            slot,
            context.pause_lease,
            mode=mode,
            worded=browser_worded if mode == BROWSER_ELICITATION else None,
            journal=journal,
            store=context.store if journal is not None else None,
            pause_kept=context.pause_kept,
        )

    def start(run: Run, head: Head, context: ToolContext) -> None:
        """Drive `run` in the session's nursery: from its start, or (revived) from its journal."""
        owner = context.session.owner
        native = asks_inline(context.session)
        ask = functools.partial(run.ask_inline, ask=_ask_client(context))

        async def invoke(call: ToolCall, args: Any) -> Any:
            run.refuse_if_declined_before(call)
            gate: Gate = ask if native else functools.partial(run.gate, call)
            called = CallContext(principal=owner, policies=policies, gate=gate)
            if audit is None:
                return await catalog.invoke(call.path, args, called)
            began, clock = time.time(), trio.current_time()
            outcome = CUT_OFF
            try:
                result = await catalog.invoke(call.path, args, called)
                outcome = outcome_of(result)
                return result
            except ToolThrow:
                outcome = thrown_outcome(called.note)
                raise
            finally:
                # A call cut off by the server's restart runs again in the next process, which records it.
                if outcome != CUT_OFF or not book.restarting:
                    record = audit_record(
                        began, owner, context.session.session_id, call.path, called.note, outcome, clock
                    )
                    await audit(record)

        async def body() -> JsonObject:
            keeper = None if native else run
            return render(await engine.execute(head, invoke, account=owner, keeper=keeper))

        def defect() -> JsonObject:
            return render(Outcome(ok=False, error=internal_error("execution failed"), defect=True))

        context.nursery.start_soon(run.drive, body, defect)

    async def revive(context: ToolContext) -> float:
        """The session's durable executions, each back as a run waiting for its pause's answer; those whose
        window closed while the server was down are expired (a late resume hears so) and forgotten."""
        store = context.store
        kept, dead = await kept_executions(store)
        now, latest = time.time(), 0.0
        for execution in kept:
            pause = execution.pause
            forget = (execution.journal.key, [*execution.stale, pause.id])
            if pause.expires_at <= now or not context.session.owner.may_act_on(pause.owner):
                expired = pause.pause()
                book.expire_kept(expired)
                dead.append(forget)
                if audit is not None:  # its call was cut off by the restart, and nothing will run it again
                    await audit(unanswered_record(expired, context.session.session_id, now))
                continue
            unknown = execution.pending.unknown()
            if unknown is not None:  # it can only fail: say so to its resume instead of asking anyone first
                book.settle_kept(pause.pause(), render(Outcome(ok=False, error=unknown_outcome(unknown.path))))
                dead.append(forget)
                continue
            run = new_run(admission.readmit(context.session.owner), context, execution.journal)
            run.revived(execution)
            start(run, execution.journal.head, context)
            latest = max(latest, pause.expires_at)
        for key, pause_ids in dead:
            await once(
                "forgetting a paused execution that ended", functools.partial(store.forget_execution, key, pause_ids)
            )
        return latest

    async def resume(arguments: JsonObject, context: ToolContext) -> JsonObject:
        execution_id, action = arguments.get("executionId"), arguments.get("action")
        issues = []
        if not isinstance(execution_id, str):
            issues.append(type_issue("executionId", execution_id))
        if action not in ACTIONS:
            issues.append(
                {
                    "received": action,
                    "code": "invalid_enum_value",
                    "options": list(ACTIONS),
                    "path": ["action"],
                    "message": "Invalid enum value. Expected 'accept' | 'decline' | 'cancel'",
                }
            )
        if issues:
            return invalid("resume", issues)
        assert isinstance(execution_id, str)
        assert isinstance(action, str)
        answer = Answer(action=action, content=_content(arguments.get("content")))
        return await book.resume(execution_id, context.session.owner, answer)

    async def wait_for_the_browser(arguments: JsonObject, context: ToolContext) -> JsonObject:
        """Browser mode's `resume`: no answer of its own, it waits for the person's (or replays it)."""
        execution_id = arguments.get("executionId")
        if not isinstance(execution_id, str):
            return invalid("resume", [type_issue("executionId", execution_id)])
        return await book.resume(execution_id, context.session.owner, None)

    async def skills(arguments: JsonObject, context: ToolContext) -> JsonObject:
        name = arguments.get("name")
        if name is not None and not isinstance(name, str):
            issue = {"code": "invalid_type", "expected": "string", "received": zod_type(name), "path": ["name"]}
            return invalid("skills", [{**issue, "message": f"Expected string, received {issue['received']}"}])
        if not name:
            return {"content": [{"type": "text", "text": SKILLS_INDEX}]}
        skill = SKILLS.get(name)
        if skill is None:
            return {
                "content": [{"type": "text", "text": f'No skill named "{name}".\n\n{SKILLS_INDEX}'}],
                "isError": True,
            }
        text = skill[1]
        if name == "execute":
            block = inventory_block(await catalog.connected_slugs(context.session.owner))
            text = text if block is None else f"{text}\n{block}"
        return {"content": [{"type": "text", "text": text}]}

    async def execute_listing(meta: SessionMeta) -> Tool:
        block = inventory_block(await catalog.connected_slugs(meta.owner))
        return EXECUTE if block is None else attrs.evolve(EXECUTE, description=f"{EXECUTE_DESCRIPTION}\n\n{block}")

    native = ToolRegistry(
        [RegisteredTool(EXECUTE, execute, listing=execute_listing), RegisteredTool(SKILLS_TOOL, skills)]
    )
    model = ToolRegistry([*native, RegisteredTool(RESUME, resume)], revive=revive)
    browser = ToolRegistry([*native, RegisteredTool(BROWSER_RESUME, wait_for_the_browser)], revive=revive)
    passthrough_native = ToolRegistry(list(passthrough_tools(run_code, catalog, policies)))
    passthrough_resume = attrs.evolve(RESUME, description=PASSTHROUGH_RESUME_DESCRIPTION)
    passthrough_browser_resume = attrs.evolve(BROWSER_RESUME, description=PASSTHROUGH_BROWSER_DESCRIPTION)

    async def resume_an_invoke(arguments: JsonObject, context: ToolContext) -> JsonObject:
        return worded_for_invoke(await resume(arguments, context))

    async def wait_for_an_invoke(arguments: JsonObject, context: ToolContext) -> JsonObject:
        return worded_for_invoke(await wait_for_the_browser(arguments, context))

    passthrough_model = ToolRegistry(
        [*passthrough_native, RegisteredTool(passthrough_resume, resume_an_invoke)], revive=revive
    )
    passthrough_browser = ToolRegistry(
        [*passthrough_native, RegisteredTool(passthrough_browser_resume, wait_for_an_invoke)], revive=revive
    )

    def factory(meta: SessionMeta) -> ToolRegistry:
        passthrough = meta.mode == PASSTHROUGH_MODE
        if asks_inline(meta):
            return passthrough_native if passthrough else native
        if meta.elicitation_mode == BROWSER_ELICITATION:
            return passthrough_browser if passthrough else browser
        return passthrough_model if passthrough else model

    return factory


def asks_inline(meta: SessionMeta) -> bool:
    """Whether a gated call asks the client inline (`elicitation/create` on the request's stream): native mode
    on a 2025 session. A 2026 request's stream carries no server requests, so a workspace's native-mode pause
    is kept as model mode keeps it (with `resume` listed), and asked as `input_required` (`modern.py`)."""
    return meta.elicitation_mode == NATIVE_ELICITATION and meta.protocol_version not in MODERN_VERSIONS


def outcome_of(result: Any) -> str:
    """How a call ended, as the audit says it: `ok`, or its failure's code (`tool_blocked`, an upstream's)."""
    if isinstance(result, dict) and result.get("ok") is False:
        error = result.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        return code[:64] if isinstance(code, str) and code else "failed"
    return OK


def thrown_outcome(note: CallNote) -> str:
    """How a call that threw in the sandbox ended, as the audit says it: `declined` or `cancelled` when its approval
    was refused (the gate throws), `threw` otherwise."""
    approval = note.approval
    if approval is not None and approval.action != "accept":
        return APPROVAL_OUTCOMES.get(approval.action, THREW)
    return THREW


def audit_record(
    began: float, owner: Owner, session_id: str, tool: str, note: CallNote, outcome: str, started: float
) -> AuditRecord:
    """A call's audit record: who, where, what the policies decided and how an approval went; never its
    arguments or result."""
    rule, approval = note.rule, note.approval
    by_rule = rule is not None and rule.by_rule
    return AuditRecord(
        at=began,
        account=owner.account_id,
        org=owner.org_id,
        session_id=session_id,
        tool=tool[:MAX_TOOL_PATH],
        decision=note.decision,
        outcome=outcome,
        duration_ms=(trio.current_time() - started) * 1000,
        rule_id=rule.rule_id if by_rule else None,
        rule_owner=rule.owner if by_rule else None,
        rule_pattern=rule.pattern if by_rule else None,
        approval=_approval_outcome(note, outcome),
        answered_by=None if approval is None else approval.by,
        execution_id=None if approval is None else approval.execution_id,
    )


def unanswered_record(pause: Pause, session_id: str, now: float) -> AuditRecord:
    """The record of a gated call whose approval window closed while the server was down."""
    asked_by = pause.interaction.asked_by
    return AuditRecord(
        at=pause.created_at,
        account=pause.owner.account_id,
        org=pause.owner.org_id,
        session_id=session_id,
        tool=pause.interaction.address[:MAX_TOOL_PATH],
        decision=REQUIRE_APPROVAL,
        outcome=CUT_OFF,
        duration_ms=max(0.0, now - pause.created_at) * 1000,
        rule_id=asked_by.rule_id,
        rule_owner=asked_by.owner,
        rule_pattern=asked_by.pattern,
        approval=UNANSWERED,
        execution_id=pause.id,
    )


def _approval_outcome(note: CallNote, outcome: str) -> str | None:
    if note.approval is not None:
        return APPROVAL_OUTCOMES.get(note.approval.action, note.approval.action)
    waiting = note.decision == REQUIRE_APPROVAL and outcome == CUT_OFF
    return UNANSWERED if waiting else None  # cut off while it waited for a human


def _ask_client(context: ToolContext) -> Callable[[Interaction], Awaitable[str]]:
    """Ask the client inline (`elicitation/create`); any failure, or no such capability, is a cancel."""

    async def ask(interaction: Interaction) -> str:
        if "elicitation" not in context.session.client_capabilities:
            return "cancel"
        params = {"message": interaction.message, "requestedSchema": interaction.requested_schema}
        try:
            answer = await context.ask("elicitation/create", params)
        except Exception:
            return "cancel"
        action = answer.get("action") if isinstance(answer, dict) else None
        return action if isinstance(action, str) and action in ACTIONS else "cancel"

    return ask


def _content(raw: Any) -> JsonObject | None:
    """`content` is a JSON object in a string; anything else means no content, never an error."""
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) and value else None


def _code_issues(code: Any) -> list[JsonObject]:
    if not isinstance(code, str):
        return [type_issue("code", code)]
    if not code.strip():
        return [
            {
                "code": "too_small",
                "minimum": 1,
                "type": "string",
                "inclusive": True,
                "exact": False,
                "message": "String must contain at least 1 character(s)",
                "path": ["code"],
            }
        ]
    return []
