"""What a tool call carries besides its arguments: who is calling, their policies, and the approval gate."""

import json
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from executor_mcp.codec import JsonObject
from executor_mcp.policies.service import Policies
from executor_mcp.storage.records import Owner as Principal
from executor_mcp.tools.errors import ToolThrow

MAX_ARGUMENTS_PREVIEW = 4000
EMPTY_SCHEMA: JsonObject = {"type": "object", "properties": {}}


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
    rule: "AskedBy | None" = None
    approval: Approval | None = None


def refuse_unless_accepted(interaction: Interaction, action: str) -> None:
    """A gate's outcome: return on `accept`; otherwise the gated call throws inside the sandbox."""
    if action != "accept":
        verb = "cancelled" if action == "cancel" else "declined"
        raise ToolThrow(f'Tool "{interaction.address}" requires approval but the request was {verb} by the user.')


@attrs.frozen
class CallContext:
    principal: Principal
    policies: Policies
    gate: Gate
    note: CallNote = attrs.Factory(CallNote)


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
