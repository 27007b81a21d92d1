"""Approval, in one place: whether a tool call waits for a human's yes, how the question reads, how it is asked
inline, what an answer means, and how it is audited.

A call passes its policy first (`pass_policy`): `block` is refused, `require_approval` (or the tool's own
`requiresApproval` annotation, unless a rule approves) goes to the call's `Gate`. Which gate depends on how the
session asks, and lives above this layer: a pause the model (`resume`), a person on the console, or a 2026
client's `input_required` retry answers (`execution/runs.py`), or a question asked inline with
`elicitation/create` (`InlineAsk`). Whoever answers, the answer means the same: the call runs on `accept` and
throws in the sandbox otherwise (`refuse_unless_accepted`), and the audit says which (`audit_record`).

The tools layer is the lowest that knows a tool call (its `ToolThrow`) and may still read policies and the audit
model, so everything above it (the execution's pauses, the tool server, the console) imports approval from here.
"""

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from executor_mcp.audit.model import (
    APPROVAL_OUTCOMES,
    CUT_OFF,
    MAX_TOOL_PATH,
    REQUIRE_APPROVAL,
    THREW,
    UNANSWERED,
    AuditRecord,
)
from executor_mcp.codec import JsonObject
from executor_mcp.policies.model import Action
from executor_mcp.storage.records import Owner
from executor_mcp.tools.errors import ToolThrow

if TYPE_CHECKING:
    from executor_mcp.tools.context import CallContext

MAX_ARGUMENTS_PREVIEW = 4000
EMPTY_SCHEMA: JsonObject = {"type": "object", "properties": {}}

# The answers a human may give (an MCP `ElicitResult`'s actions); anything else counts as `cancel`.
ACCEPT, DECLINE, CANCEL = "accept", "decline", "cancel"
ACTIONS = (ACCEPT, DECLINE, CANCEL)
# What each answer is called where a person reads it (the console, the approvals API).
OUTCOMES = {ACCEPT: "approved", DECLINE: "declined", CANCEL: "cancelled"}

# Who answered.
AGENT = "agent"  # the model, with `resume`
CLIENT = "client"  # the client's user, asked inline (native elicitation)
CONSOLE = "console"  # a person, on the approvals page


@attrs.frozen
class AskedBy:
    """The policy that asked for an approval, so the person answering sees why they are asked: a rule (its
    id, owner `org` or `user`, and pattern), or, with every field None, the tool's own default (its
    `requiresApproval` annotation, which no rule overrode)."""

    rule_id: str | None = None
    owner: str | None = None
    pattern: str | None = None

    @property
    def by_rule(self) -> bool:
        return self.rule_id is not None

    def as_json(self) -> JsonObject:
        if not self.by_rule:
            return {"source": "annotation"}
        return {"source": "policy", "id": self.rule_id, "owner": self.owner, "pattern": self.pattern}

    def words(self) -> str:
        if not self.by_rule:
            return "the tool's own default: it is marked as requiring approval"
        return f"{self.owner} policy {self.pattern} ({self.rule_id})"

    def reason(self, address: str) -> str:
        """Why the call of `address` waits for a yes or no, as a model reads it beside the question."""
        if not self.by_rule:
            return f'Why: tool "{address}" is annotated as requiring approval by default, and no policy overrides that.'
        return f'Why: the {self.owner} policy "{self.pattern}" ({self.rule_id}) requires approval for tool "{address}".'


TOOL_DEFAULT = AskedBy()


@attrs.frozen
class Interaction:
    """A question for a human before a gated tool runs."""

    address: str
    message: str
    args: Any
    requested_schema: JsonObject = attrs.Factory(lambda: dict(EMPTY_SCHEMA))
    asked_by: AskedBy = TOOL_DEFAULT
    question: str | None = None  # the message's first line, for a page that shows the arguments apart


@attrs.frozen
class ApprovalAnswer:
    """A human's answer to a pause, as given: the action, a form's content (if any), and who gave it."""

    action: str  # accept | decline | cancel
    content: JsonObject | None = None
    by: str = AGENT


@attrs.frozen
class Approval:
    """How a gate's question was answered: the action (`accept`, `decline`, `cancel`), who gave it, and the id the
    execution's pause had (None for a question asked inline)."""

    action: str
    by: str
    execution_id: str | None = None


# Returns the answer; the gated call throws in the sandbox unless it is `accept` (`refuse_unless_accepted`).
Gate = Callable[[Interaction], Awaitable[Approval]]


@attrs.define
class CallNote:
    """What a call's passage through its policy decided, for its audit record (filled in as it goes)."""

    decision: str | None = None
    rule: AskedBy | None = None
    approval: Approval | None = None


def refuse_unless_accepted(interaction: Interaction, action: str) -> None:
    """A gate's outcome: return on `accept`; otherwise the gated call throws inside the sandbox."""
    if action != ACCEPT:
        verb = "cancelled" if action == CANCEL else "declined"
        raise ToolThrow(f'Tool "{interaction.address}" requires approval but the request was {verb} by the user.')


# -- whether a call waits for a human ---------------------------------------------------------------------


async def pass_policy(
    context: "CallContext", tool_id: str, requires_approval: bool, description: str | None, args: Any
) -> bool:
    """Whether the call may run: False when its policy blocks it; True once approved, by a rule or by a human
    asked at its gate. A refused approval throws in the sandbox (`refuse_unless_accepted`). The decision, the
    rule that made it, and the answer are noted for the call's audit record."""
    decision = await context.policies.decide(context.principal, tool_id, requires_approval, context.scope)
    rule = decision.rule
    asked_by = TOOL_DEFAULT if rule is None else AskedBy(rule.id, rule.owner.value, rule.pattern)
    context.note.decision, context.note.rule = decision.action.value, asked_by
    if decision.action is Action.BLOCK:
        return False
    if decision.action is Action.REQUIRE_APPROVAL:
        interaction = question_for(tool_id, args, asked_by, description)
        context.note.approval = await context.gate(interaction)
        refuse_unless_accepted(interaction, context.note.approval.action)
    return True


def question_for(tool_id: str, args: Any, asked_by: AskedBy, description: str | None = None) -> Interaction:
    """The question a gated call of `tool_id` with `args` puts to a human."""
    message = approval_message(tool_id, args, asked_by.pattern, description)
    question = approval_question(tool_id, asked_by.pattern, description)
    return Interaction(tool_id, message, args, asked_by=asked_by, question=question)


def approval_question(address: str, matched_pattern: str | None, description: str | None = None) -> str:
    """What a human is asked: the tool's own approval text (`POST /orders`) when it has one, else the question."""
    return description or f"Approve {address}?" + (f" (matched policy: {matched_pattern})" if matched_pattern else "")


def arguments_preview(args: Any) -> tuple[str, bool]:
    """The arguments as indented JSON, cut at `MAX_ARGUMENTS_PREVIEW` (and whether they were cut)."""
    preview = json.dumps(args if args is not None else {}, indent=2, ensure_ascii=False)
    if len(preview) > MAX_ARGUMENTS_PREVIEW:
        return preview[:MAX_ARGUMENTS_PREVIEW] + "...", True
    return preview, False


def approval_message(address: str, args: Any, matched_pattern: str | None, description: str | None = None) -> str:
    """What a human reads: the question, then the arguments."""
    return f"{approval_question(address, matched_pattern, description)}\n\nArguments:\n{arguments_preview(args)[0]}"


# -- how it is asked inline, and what an answer says ---------------------------------------------------------


def elicited(response: Any) -> tuple[str | None, JsonObject | None]:
    """An `ElicitResult`'s action and content; (None, None) when it is not one."""
    if not isinstance(response, dict) or response.get("action") not in ACTIONS:
        return None, None
    content = response.get("content")
    return response["action"], content if isinstance(content, dict) else None


# Puts a server request (method, params) to the client on the call's own stream, and returns its result.
AskClient = Callable[[str, JsonObject], Awaitable[JsonObject]]


@attrs.frozen
class InlineAsk:
    """Asks the client's user inline with `elicitation/create` (native elicitation on a 2025 session); any
    failure, or a client that declared no elicitation capability, is a cancel."""

    capabilities: JsonObject
    ask: AskClient

    async def __call__(self, interaction: Interaction) -> str:
        if "elicitation" not in self.capabilities:
            return CANCEL
        params = {"message": interaction.message, "requestedSchema": interaction.requested_schema}
        try:
            answer = await self.ask("elicitation/create", params)
        except Exception:
            return CANCEL
        action, _ = elicited(answer)
        return action or CANCEL


# -- how it is audited ---------------------------------------------------------------------------------------


def thrown_outcome(note: CallNote) -> str:
    """How a call that threw in the sandbox ended, as the audit says it: `declined` or `cancelled` when its
    approval was refused (the gate throws), `threw` otherwise."""
    approval = note.approval
    if approval is not None and approval.action != ACCEPT:
        return APPROVAL_OUTCOMES.get(approval.action, THREW)
    return THREW


def approval_outcome(note: CallNote, outcome: str) -> str | None:
    """How a call's approval went, as its audit record says it; None for a call that asked nobody."""
    if note.approval is not None:
        return APPROVAL_OUTCOMES.get(note.approval.action, note.approval.action)
    waiting = note.decision == REQUIRE_APPROVAL and outcome == CUT_OFF
    return UNANSWERED if waiting else None  # cut off while it waited for a human


def audit_record(
    began: float, owner: Owner, session_id: str, tool: str, note: CallNote, outcome: str, started: float
) -> AuditRecord:
    """A call's audit record: who, where, what the policies decided and how an approval went; never its
    arguments or result. `started` is trio's clock when the call began, for its duration."""
    rule, approval = note.rule, note.approval
    by_rule = rule is not None and rule.by_rule
    return AuditRecord(
        at=began,
        account=owner.account_id,
        org=owner.org_id or "",  # a session's owner always has one (a principal without is refused)
        session_id=session_id,
        tool=tool[:MAX_TOOL_PATH],
        decision=note.decision,
        outcome=outcome,
        duration_ms=(trio.current_time() - started) * 1000,
        rule_id=rule.rule_id if rule is not None and by_rule else None,
        rule_owner=rule.owner if rule is not None and by_rule else None,
        rule_pattern=rule.pattern if rule is not None and by_rule else None,
        approval=approval_outcome(note, outcome),
        answered_by=None if approval is None else approval.by,
        execution_id=None if approval is None else approval.execution_id,
    )


def unanswered_record(
    interaction: Interaction, owner: Owner, session_id: str, execution_id: str, asked_at: float, now: float
) -> AuditRecord:
    """The record of a gated call whose approval window closed while the server was down."""
    asked_by = interaction.asked_by
    return AuditRecord(
        at=asked_at,
        account=owner.account_id,
        org=owner.org_id or "",
        session_id=session_id,
        tool=interaction.address[:MAX_TOOL_PATH],
        decision=REQUIRE_APPROVAL,
        outcome=CUT_OFF,
        duration_ms=max(0.0, now - asked_at) * 1000,
        rule_id=asked_by.rule_id,
        rule_owner=asked_by.owner,
        rule_pattern=asked_by.pattern,
        approval=UNANSWERED,
        execution_id=execution_id,
    )
