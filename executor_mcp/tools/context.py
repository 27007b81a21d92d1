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
class Interaction:
    """A question for a human before a gated tool runs."""

    address: str
    message: str
    args: Any
    requested_schema: JsonObject = attrs.Factory(lambda: dict(EMPTY_SCHEMA))


Gate = Callable[[Interaction], Awaitable[None]]


def refuse_unless_accepted(interaction: Interaction, action: str) -> None:
    """A gate's outcome: return on `accept`; otherwise the gated call throws inside the sandbox."""
    if action != "accept":
        verb = "cancelled" if action == "cancel" else "declined"
        raise ToolThrow(f'Tool "{interaction.address}" requires approval but the request was {verb} by the user.')


@attrs.frozen
class CallContext:
    principal: Principal
    policies: Policies
    gate: Gate  # returns once approved; throws (ToolThrow) in the sandbox when declined or cancelled


def approval_message(address: str, args: Any, matched_pattern: str | None, description: str | None = None) -> str:
    """What a human reads: the tool's own approval text (`POST /orders`) when it has one, else the question."""
    head = description or f"Approve {address}?" + (f" (matched policy: {matched_pattern})" if matched_pattern else "")
    preview = json.dumps(args if args is not None else {}, indent=2, ensure_ascii=False)
    if len(preview) > MAX_ARGUMENTS_PREVIEW:
        preview = preview[:MAX_ARGUMENTS_PREVIEW] + "..."
    return f"{head}\n\nArguments:\n{preview}"
