"""The product's MCP tools: `execute`, `skills` and (in model and browser mode) `resume`; in passthrough mode
`search` and `invoke` (`passthrough_tools.py`) instead of `execute` and `skills`.

An execution runs as a task in the session's nursery, so it can pause for approval and be resumed by a
later request, from this session or another of the same account and org, in this process or (its pause
being durable: `execution/runs.py`) the next one, which revives it when the session's runtime comes up; with
several instances on one database, from a session on any instance, which adopts it (`adopt`).
In `native` elicitation mode
on a 2025 session there is no `resume`: a gated call asks the client inline with `elicitation/create`, and
waits for the answer no longer than the approval window (a 2026 workspace pauses as model mode does, and its
pause is asked as `input_required`: `stateless.py`). In `browser` mode a pause sends the user to the console's
approval page, and `resume` takes only the executionId: it waits for the person's decision there.

Argument problems are tool results with `isError`, in the MCP SDK's wording, not JSON-RPC errors: a
model reads them and corrects its call.
"""

import functools
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import trio

from executor_mcp import traces
from executor_mcp.background import once
from executor_mcp.codec import JsonObject
from executor_mcp.execution.admission import Admission, Refusal, Slot, refusal_result
from executor_mcp.execution.engine import Engine, Outcome, internal_error, unknown_outcome
from executor_mcp.execution.journal import Head, Journal
from executor_mcp.execution.results import (
    approval_url,
    expired_result,
    forbidden_result,
    render,
    render_browser_paused,
    settled_result,
    worded_for_invoke,
)
from executor_mcp.execution.runs import (
    FORBIDDEN,
    LAPSED,
    SETTLED,
    AdoptionJudge,
    Pause,
    PendingApprovals,
    Run,
    is_pause_id,
    kept_executions,
)
from executor_mcp.execution.texts import (
    BROWSER_RESUME_DESCRIPTION,
    EXECUTE_DESCRIPTION,
    RESUME_DESCRIPTION,
    SKILLS,
    SKILLS_DESCRIPTION,
    SKILLS_INDEX,
    inventory_block,
)
from executor_mcp.logs import note
from executor_mcp.policies.service import Policies
from executor_mcp.policies.toolkit_service import Toolkits
from executor_mcp.protocol.mcp import Tool
from executor_mcp.protocol.results import text_result
from executor_mcp.protocol.stateless import STATELESS_VERSIONS
from executor_mcp.storage.interfaces import SharedExecutions
from executor_mcp.storage.records import (
    BROWSER_ELICITATION,
    MODEL_ELICITATION,
    NATIVE_ELICITATION,
    PASSTHROUGH_MODE,
    SessionMeta,
)
from executor_mcp.tools.approval import ACTIONS, ApprovalAnswer, InlineAsk, unanswered_record
from executor_mcp.tools.catalog import Catalog
from executor_mcp.toolserver.arguments import invalid, type_issue, zod_type
from executor_mcp.toolserver.passthrough_tools import BROWSER_RESUME_DESCRIPTION as PASSTHROUGH_BROWSER_DESCRIPTION
from executor_mcp.toolserver.passthrough_tools import RESUME_DESCRIPTION as PASSTHROUGH_RESUME_DESCRIPTION
from executor_mcp.toolserver.passthrough_tools import PassthroughTools
from executor_mcp.toolserver.registry import RegisteredTool, ToolContext, ToolRegistry
from executor_mcp.toolserver.sandbox_calls import Audit, SandboxCalls

log = logging.getLogger(__name__)

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


@attrs.define(eq=False)
class ExecutorTools:
    """The product's tools as one object: the factory (`__call__`) that gives each session its registry, by its
    mode and elicitation mode, and the handlers those registries hold.

    `public_url` is where the console is reached (`--public-url`, else the bound address), asked at each
    browser-mode pause: the address is known only once the server listens. `audit` is given the record of
    every tool call the sandboxed code makes (None: no audit, as in tests that bring their own tools)."""

    engine: Engine
    catalog: Catalog
    policies: Policies
    approvals: PendingApprovals
    admission: Admission
    public_url: Callable[[], str]
    audit: Audit | None
    toolkits: Toolkits
    executions: SharedExecutions | None = None  # with several instances: where a pause kept elsewhere is adopted
    _adopting: dict[str, trio.Event] = attrs.field(init=False, factory=dict)
    _registries: dict[tuple[bool, str], ToolRegistry] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        native = ToolRegistry(
            [
                RegisteredTool(EXECUTE, self.execute, listing=self.execute_listing),
                RegisteredTool(SKILLS_TOOL, self.skills),
            ]
        )
        passthrough = ToolRegistry(
            list(PassthroughTools(self.run_code, self.catalog, self.policies, self.toolkits).registered())
        )
        passthrough_resume = attrs.evolve(RESUME, description=PASSTHROUGH_RESUME_DESCRIPTION)
        passthrough_browser_resume = attrs.evolve(BROWSER_RESUME, description=PASSTHROUGH_BROWSER_DESCRIPTION)
        self._registries = {
            (False, NATIVE_ELICITATION): native,
            (False, MODEL_ELICITATION): ToolRegistry(
                [*native, RegisteredTool(RESUME, self.resume)], revive=self.revive
            ),
            (False, BROWSER_ELICITATION): ToolRegistry(
                [*native, RegisteredTool(BROWSER_RESUME, self.wait_for_the_browser)], revive=self.revive
            ),
            (True, NATIVE_ELICITATION): passthrough,
            (True, MODEL_ELICITATION): ToolRegistry(
                [*passthrough, RegisteredTool(passthrough_resume, self.resume_an_invoke)], revive=self.revive
            ),
            (True, BROWSER_ELICITATION): ToolRegistry(
                [*passthrough, RegisteredTool(passthrough_browser_resume, self.wait_for_an_invoke)], revive=self.revive
            ),
        }

    def __call__(self, meta: SessionMeta) -> ToolRegistry:
        """The registry of a session: its tools by its mode, and how it asks for approvals."""
        passthrough = meta.mode == PASSTHROUGH_MODE
        if asks_inline(meta):
            return self._registries[passthrough, NATIVE_ELICITATION]
        if meta.elicitation_mode == BROWSER_ELICITATION:
            return self._registries[passthrough, BROWSER_ELICITATION]
        return self._registries[passthrough, MODEL_ELICITATION]

    # -- execute ------------------------------------------------------------------------------------------

    async def execute(self, arguments: JsonObject, context: ToolContext) -> JsonObject:
        code = arguments.get("code")
        issues = _code_issues(code)
        if issues:
            return invalid("execute", issues)
        assert isinstance(code, str)
        return await self.run_code(code.strip(), context)

    async def run_code(self, code: str, context: ToolContext) -> JsonObject:
        """One execution of `code` in the session, rendered: what `execute` and passthrough `invoke` answer."""
        slot = await self.admission.admit(context.session.owner)
        if isinstance(slot, Refusal):
            return refusal_result(slot)
        head = self.engine.head(code, context.session.elicitation_mode)
        # Asking inline happens within the request: nothing of it outlives the request, so nothing is kept.
        journal = None if asks_inline(context.session) else Journal(uuid.uuid4().hex, head)
        run = self.new_run(slot, context, journal)
        first = run.next
        with traces.span(
            "execution", attributes={"executor.elicitation_mode": context.session.elicitation_mode}
        ) as span:
            try:
                self.start(run, head, context)  # its tool calls' spans are this one's children
            except BaseException:
                await slot.release()  # the run never started (the session is closing): its place is free again
                raise
            try:
                answered = await first.wait()
                status = answered.get("structuredContent", {}).get("status") if isinstance(answered, dict) else None
                traces.note(span, "executor.status", status if isinstance(status, str) else "answered")
                return answered
            finally:
                if not first.done:
                    run.scope.cancel()  # the caller left before any result: nobody could ever resume it

    def new_run(self, slot: Slot, context: ToolContext, journal: Journal | None) -> Run:
        """A run of the session's code holding `slot`, durable when it has a `journal`."""
        mode = context.session.elicitation_mode
        return Run(
            self.approvals,
            slot,
            context.pause_lease,
            mode=mode,
            worded=self.browser_worded if mode == BROWSER_ELICITATION else None,
            journal=journal,
            store=context.store if journal is not None else None,
            pause_kept=context.pause_kept,
        )

    def browser_worded(self, pause: Pause) -> JsonObject:
        """A pause as browser mode words it: the console's page where a person answers it."""
        return render_browser_paused(pause.id, approval_url(self.public_url(), pause.id))

    def sandbox_calls(self, run: Run, context: ToolContext) -> SandboxCalls:
        """How `run`'s tool calls reach the catalog, gated as its session asks for approvals."""
        session = context.session
        inline = InlineAsk(session.client_capabilities, context.ask) if asks_inline(session) else None
        return SandboxCalls(
            run,
            self.catalog,
            self.policies,
            self.approvals,
            session.owner,
            session.session_id,
            inline,
            self.audit,
            self.toolkits,
            session.resource,
        )

    def start(self, run: Run, head: Head, context: ToolContext) -> None:
        """Drive `run` in the session's nursery: from its start, or (revived) from its journal."""
        calls = self.sandbox_calls(run, context)
        keeper = None if calls.inline is not None else run
        context.nursery.start_soon(run.drive, functools.partial(self._execute, head, calls, keeper), _defect)

    async def _execute(self, head: Head, calls: SandboxCalls, keeper: Run | None) -> JsonObject:
        return render(await self.engine.execute(head, calls.invoke, account=calls.owner, keeper=keeper))

    async def revive(self, context: ToolContext) -> float:
        """The session's durable executions, each back as a run waiting for its pause's answer; those whose
        window closed while the server was down are expired (a late resume hears so) and forgotten."""
        return await self._bring_back(context)

    async def _bring_back(self, context: ToolContext, only: str | None = None, admitted: Slot | None = None) -> float:
        """Revive the session's kept executions (only execution `only`, one just adopted, if given, in its
        `admitted` place); until when the latest revived pause waits (0 when none)."""
        store = context.store
        kept, dead = await kept_executions(store, only)
        now, latest = time.time(), 0.0
        for execution in kept:
            pause = execution.pause
            forget = (execution.journal.key, [*execution.stale, pause.id])
            if pause.expires_at <= now or not context.session.owner.may_act_on(pause.owner):
                expired = pause.pause()
                self.approvals.expire_kept(expired)
                dead.append(forget)
                if self.audit is not None:  # its call was cut off by the restart, and nothing will run it again
                    await self.audit(
                        unanswered_record(
                            expired.interaction,
                            expired.owner,
                            context.session.session_id,
                            expired.id,
                            expired.created_at,
                            now,
                        )
                    )
                continue
            unknown = execution.pending.unknown()
            if unknown is not None:  # it can only fail: say so to its resume instead of asking anyone first
                failed = render(Outcome(ok=False, error=unknown_outcome(unknown.path)))
                self.approvals.settle_kept(pause.pause(), failed)
                dead.append(forget)
                continue
            slot, admitted = admitted or await self.admission.readmit(context.session.owner), None
            run = self.new_run(slot, context, execution.journal)
            run.revived(execution)
            self.start(run, execution.journal.head, context)
            latest = max(latest, pause.expires_at)
        for key, pause_ids in dead:
            await once(
                "forgetting a paused execution that ended", functools.partial(store.forget_execution, key, pause_ids)
            )
        return latest

    async def adopt(self, execution_id: str, context: ToolContext) -> JsonObject | None:
        """A resume of a pause this process does not hold: with a shared store, the execution moves to this
        session if it may (`AdoptionJudge`) and is revived here, so the resume goes on as for a local pause
        (None); else why it cannot be resumed. None too where there is nothing to adopt: the resume then hears
        what this process knows (not found). Concurrent resumes of one id here adopt once; the others wait."""
        owner = context.session.owner
        if self.executions is None or self.approvals.lookup(execution_id, owner) is not None:
            return None
        if not is_pause_id(execution_id):
            return None
        adopting = self._adopting.get(execution_id)
        if adopting is not None:
            await adopting.wait()
            return None
        done = self._adopting[execution_id] = trio.Event()  # before any checkpoint: the others wait on this one
        slot: Slot | Refusal | None = None
        revived = False
        try:
            slot = await self.admission.admit(owner)  # it runs here from now on: it takes one of the owner's places
            if isinstance(slot, Refusal):
                return refusal_result(slot)
            # Shielded: once the execution has moved, this session must revive it and say it keeps a pause, or
            # nobody would (its old session no longer holds it). Each step is bounded by the store's timeout.
            with trio.CancelScope(shield=True):
                refused, revived = await self._adopted(execution_id, context, slot)
            return refused
        finally:
            if isinstance(slot, Slot) and not revived:  # else the revived run holds it, and gives it back at its end
                await slot.release()
            del self._adopting[execution_id]
            done.set()

    async def _adopted(self, execution_id: str, context: ToolContext, slot: Slot) -> tuple[JsonObject | None, bool]:
        """Why the pause cannot be adopted, or None; and whether a run revived here took `slot`."""
        assert self.executions is not None
        owner, session_id = context.session.owner, context.session.session_id
        verdict = await self.executions.adopt(execution_id, session_id, AdoptionJudge(owner, time.time()))
        if verdict is None:
            return None, False
        if verdict.outcome == FORBIDDEN:
            return forbidden_result(execution_id), False
        if verdict.outcome == LAPSED:
            return expired_result(execution_id, self.approvals.approval_window), False
        if verdict.outcome == SETTLED:
            return settled_result(execution_id), False
        note(execution_id=execution_id)
        log.info("paused execution %s adopted by session %s", execution_id, session_id[:12])
        until = await self._bring_back(context, only=verdict.execution, admitted=slot)
        if until:  # a run was revived (its pause waits until then), in `slot`
            await once("noting an adopted pause", functools.partial(context.pause_kept, until))
        return None, bool(until)

    # -- resume -------------------------------------------------------------------------------------------

    async def resume(self, arguments: JsonObject, context: ToolContext) -> JsonObject:
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
        answer = ApprovalAnswer(action=action, content=_content(arguments.get("content")))
        refused = await self.adopt(execution_id, context)
        return refused or await self.approvals.resume(execution_id, context.session.owner, answer)

    async def wait_for_the_browser(self, arguments: JsonObject, context: ToolContext) -> JsonObject:
        """Browser mode's `resume`: no answer of its own, it waits for the person's (or replays it)."""
        execution_id = arguments.get("executionId")
        if not isinstance(execution_id, str):
            return invalid("resume", [type_issue("executionId", execution_id)])
        refused = await self.adopt(execution_id, context)
        return refused or await self.approvals.resume(execution_id, context.session.owner, None)

    async def resume_an_invoke(self, arguments: JsonObject, context: ToolContext) -> JsonObject:
        return worded_for_invoke(await self.resume(arguments, context))

    async def wait_for_an_invoke(self, arguments: JsonObject, context: ToolContext) -> JsonObject:
        return worded_for_invoke(await self.wait_for_the_browser(arguments, context))

    # -- skills, and what execute lists -------------------------------------------------------------------

    async def skills(self, arguments: JsonObject, context: ToolContext) -> JsonObject:
        name = arguments.get("name")
        if name is not None and not isinstance(name, str):
            issue = {"code": "invalid_type", "expected": "string", "received": zod_type(name), "path": ["name"]}
            return invalid("skills", [{**issue, "message": f"Expected string, received {issue['received']}"}])
        if not name:
            return text_result(SKILLS_INDEX)
        skill = SKILLS.get(name)
        if skill is None:
            return text_result(f'No skill named "{name}".\n\n{SKILLS_INDEX}', error=True)
        text = skill[1]
        if name == "execute":
            block = inventory_block(await self.connected_slugs(context.session))
            text = text if block is None else f"{text}\n{block}"
        return text_result(text)

    async def connected_slugs(self, meta: SessionMeta) -> list[str]:
        """What the session's endpoint shows it is connected to (a toolkit's: what the toolkit shows)."""
        return await self.catalog.connected_slugs(meta.owner, await self.toolkits.current(meta.owner, meta.resource))

    async def execute_listing(self, meta: SessionMeta) -> Tool:
        block = inventory_block(await self.connected_slugs(meta))
        return EXECUTE if block is None else attrs.evolve(EXECUTE, description=f"{EXECUTE_DESCRIPTION}\n\n{block}")


def _defect() -> JsonObject:
    return render(Outcome(ok=False, error=internal_error("execution failed"), defect=True))


def asks_inline(meta: SessionMeta) -> bool:
    """Whether a gated call asks the client inline (`elicitation/create` on the request's stream): native mode
    on a 2025 session. A 2026 request's stream carries no server requests, so a workspace's native-mode pause
    is kept as model mode keeps it (with `resume` listed), and asked as `input_required` (`stateless.py`)."""
    return meta.elicitation_mode == NATIVE_ELICITATION and meta.protocol_version not in STATELESS_VERSIONS


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
