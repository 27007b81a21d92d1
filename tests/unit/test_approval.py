"""Approval as one concept (`tools/approval.py`), piece by piece: whether a call waits for a human, how the question
reads, how it is asked inline, what an answer means, and how the audit says it."""

from typing import Any

import pytest
import trio

from executor_mcp.audit.model import CUT_OFF, OK, REQUIRE_APPROVAL, THREW, UNANSWERED
from executor_mcp.codec import JsonObject
from executor_mcp.policies.model import Action, Decision, Rule, RuleOwner
from executor_mcp.storage.records import Owner
from executor_mcp.tools.approval import (
    ACTIONS,
    CANCEL,
    CLIENT,
    TOOL_DEFAULT,
    Approval,
    AskedBy,
    CallNote,
    InlineAsk,
    Interaction,
    approval_outcome,
    audit_record,
    elicited,
    pass_policy,
    question_for,
    thrown_outcome,
    unanswered_record,
)
from executor_mcp.tools.context import CallContext
from executor_mcp.tools.errors import ToolThrow

ALICE = Owner("alice", "acme")
RULE = Rule("pol_1", RuleOwner.ORG, "github.*", Action.REQUIRE_APPROVAL, "a0")


class FixedPolicies:
    """Policies that decide every call the same way."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.asked: list[tuple[str, bool]] = []

    async def decide(self, principal: Owner, tool_id: str, requires_approval: bool, scope: object = None) -> Decision:
        self.asked.append((tool_id, requires_approval))
        return self.decision


def _context(decision: Decision, answer: str | None = None) -> tuple[CallContext, list[Interaction]]:
    asked: list[Interaction] = []

    async def gate(interaction: Interaction) -> Approval:
        asked.append(interaction)
        assert answer is not None, "the gate was not to be reached"
        return Approval(answer, CLIENT)

    policies: Any = FixedPolicies(decision)
    return CallContext(principal=ALICE, policies=policies, gate=gate), asked


async def test_an_approved_call_runs_without_asking_anyone() -> None:
    context, asked = _context(Decision(Action.APPROVE, None))
    assert await pass_policy(context, "github.issues.create", False, None, {})
    assert asked == []
    assert (context.note.decision, context.note.rule, context.note.approval) == ("approve", TOOL_DEFAULT, None)


async def test_a_blocked_call_does_not_run_and_asks_nobody() -> None:
    context, asked = _context(Decision(Action.BLOCK, RULE))
    assert not await pass_policy(context, "github.issues.create", False, None, {})
    assert asked == []
    assert context.note.decision == "block"
    assert context.note.rule == AskedBy("pol_1", "org", "github.*")


async def test_a_gated_call_asks_its_question_and_runs_once_accepted() -> None:
    context, asked = _context(Decision(Action.REQUIRE_APPROVAL, RULE), answer="accept")
    assert await pass_policy(context, "github.issues.create", True, "Open an issue", {"title": "x"})
    [interaction] = asked
    assert interaction.address == "github.issues.create"
    assert interaction.question == "Open an issue"
    assert interaction.message.startswith("Open an issue\n\nArguments:\n")
    assert interaction.asked_by == AskedBy("pol_1", "org", "github.*")
    assert context.note.approval == Approval("accept", CLIENT)


@pytest.mark.parametrize(("answer", "verb"), [("decline", "declined"), ("cancel", "cancelled")])
async def test_a_refused_approval_throws_in_the_sandbox(answer: str, verb: str) -> None:
    context, _ = _context(Decision(Action.REQUIRE_APPROVAL, None), answer=answer)
    with pytest.raises(ToolThrow, match=f"requires approval but the request was {verb} by the user"):
        await pass_policy(context, "github.issues.create", True, None, {})
    assert context.note.approval == Approval(answer, CLIENT)
    assert thrown_outcome(context.note) == verb


def test_the_question_names_the_matched_policy_without_an_approval_text() -> None:
    interaction = question_for("github.issues.create", {"a": 1}, AskedBy("pol_1", "org", "github.*"))
    assert interaction.question == "Approve github.issues.create? (matched policy: github.*)"
    assert interaction.message.endswith('Arguments:\n{\n  "a": 1\n}')


@pytest.mark.parametrize(
    ("response", "read"),
    [
        ({"action": "accept", "content": {"ok": True}}, ("accept", {"ok": True})),
        ({"action": "decline"}, ("decline", None)),
        ({"action": "cancel", "content": "not an object"}, ("cancel", None)),
        ({"action": "maybe"}, (None, None)),
        ("accept", (None, None)),
        (None, (None, None)),
    ],
)
def test_what_an_elicit_result_says(response: Any, read: tuple[str | None, JsonObject | None]) -> None:
    assert elicited(response) == read


async def test_asking_inline_puts_the_question_and_reads_the_action() -> None:
    sent: list[tuple[str, JsonObject]] = []

    async def ask(method: str, params: JsonObject) -> JsonObject:
        sent.append((method, params))
        return {"action": "decline"}

    interaction = Interaction("a.b", "Approve a.b?", {})
    assert await InlineAsk({"elicitation": {}}, ask)(interaction) == "decline"
    assert sent == [
        ("elicitation/create", {"message": "Approve a.b?", "requestedSchema": interaction.requested_schema})
    ]


async def test_asking_inline_is_a_cancel_when_it_cannot_be_answered() -> None:
    async def fails(method: str, params: JsonObject) -> JsonObject:
        raise RuntimeError("the stream is gone")

    async def nonsense(method: str, params: JsonObject) -> JsonObject:
        return {"action": "sure"}

    interaction = Interaction("a.b", "Approve a.b?", {})
    assert await InlineAsk({}, nonsense)(interaction) == CANCEL  # no elicitation capability: never asked
    assert await InlineAsk({"elicitation": {}}, fails)(interaction) == CANCEL
    assert await InlineAsk({"elicitation": {}}, nonsense)(interaction) == CANCEL
    assert CANCEL in ACTIONS


def test_how_the_audit_says_an_approval_went() -> None:
    assert approval_outcome(CallNote(decision="approve"), OK) is None
    assert approval_outcome(CallNote(decision=REQUIRE_APPROVAL, approval=Approval("accept", CLIENT)), OK) == "accepted"
    assert approval_outcome(CallNote(decision=REQUIRE_APPROVAL), CUT_OFF) == UNANSWERED  # cut off while it waited
    assert thrown_outcome(CallNote()) == THREW
    assert thrown_outcome(CallNote(approval=Approval("accept", CLIENT))) == THREW  # accepted, then the tool threw


async def test_a_calls_audit_record_names_the_rule_and_the_answer_never_the_arguments() -> None:
    note = CallNote(REQUIRE_APPROVAL, AskedBy("pol_1", "org", "github.*"), Approval("accept", "console", "exec_1"))
    record = audit_record(10.0, ALICE, "s1", "github.issues.create", note, OK, trio.current_time())
    assert (record.account, record.org, record.session_id, record.tool) == (
        "alice",
        "acme",
        "s1",
        "github.issues.create",
    )
    assert (record.rule_id, record.rule_owner, record.rule_pattern) == ("pol_1", "org", "github.*")
    assert (record.approval, record.answered_by, record.execution_id) == ("accepted", "console", "exec_1")
    by_default = audit_record(10.0, ALICE, "s1", "t", CallNote(REQUIRE_APPROVAL, TOOL_DEFAULT), CUT_OFF, 0.0)
    assert (by_default.rule_id, by_default.approval) == (None, UNANSWERED)


def test_an_unanswered_pause_is_recorded_as_cut_off() -> None:
    interaction = Interaction("a.b", "Approve a.b?", {}, asked_by=AskedBy("pol_1", "user", "a.*"))
    record = unanswered_record(interaction, ALICE, "s1", "exec_1", asked_at=100.0, now=160.0)
    assert (record.outcome, record.approval, record.decision) == (CUT_OFF, UNANSWERED, REQUIRE_APPROVAL)
    assert (record.at, record.duration_ms, record.execution_id) == (100.0, 60_000.0, "exec_1")
    assert (record.rule_id, record.rule_owner, record.rule_pattern) == ("pol_1", "user", "a.*")
