"""The way back from sandboxed code to the catalog: one run's `tools.<path>(args)` calls, gated and audited.

The engine hands each call the sandbox makes to `SandboxCalls.invoke`. The call passes its policy in the catalog,
whose approval gate is the run's: a pause (model and browser mode, and a 2026 workspace) or a question asked
inline (native mode on a 2025 session). Every call is audited, whatever became of it: its outcome, its policy's
decision and how its approval went (`tools/approval.py`), never its arguments or result.
"""

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio
from opentelemetry.trace import Span

from executor_mcp import traces
from executor_mcp.audit.model import CUT_OFF, OK, AuditRecord
from executor_mcp.execution.engine import ToolCall
from executor_mcp.execution.runs import PendingApprovals, Run
from executor_mcp.policies.service import Policies
from executor_mcp.policies.toolkit_service import Toolkits
from executor_mcp.storage.records import Owner
from executor_mcp.tools.approval import Gate, InlineAsk, audit_record, thrown_outcome
from executor_mcp.tools.catalog import Catalog
from executor_mcp.tools.context import CallContext
from executor_mcp.tools.errors import ToolThrow

# Where a tool call's audit record goes (`AuditTrail.record`).
Audit = Callable[[AuditRecord], Awaitable[None]]


@attrs.frozen
class SandboxCalls:
    """The tool calls of one run of `owner`'s code in session `session_id`, made through the endpoint `resource`
    (a toolkit's scopes each call, as the toolkit is at that call). With `inline` the gate asks the client inline
    (native mode on a 2025 session); without, a gated call pauses the run for an answer. With `audit`, each call's
    record goes there."""

    run: Run
    catalog: Catalog
    policies: Policies
    approvals: PendingApprovals
    owner: Owner
    session_id: str
    inline: InlineAsk | None
    audit: Audit | None
    toolkits: Toolkits
    resource: str

    async def invoke(self, call: ToolCall, args: Any) -> Any:
        """Run `tools.<call.path>(args)` for the sandbox: a value, or a `ToolThrow` that throws there."""
        await self.run.refuse_if_declined_before(call)
        with traces.span("tool call") as span:
            scope = await self.toolkits.current(self.owner, self.resource)
            called = CallContext(principal=self.owner, policies=self.policies, gate=self.gate(call), scope=scope)
            outcome = CUT_OFF
            try:
                if self.audit is None:
                    result = await self.catalog.invoke(call.path, args, called)
                else:
                    result = await self._audited(call, args, called, self.audit)
                outcome = outcome_of(result)
                return result
            except ToolThrow:
                outcome = thrown_outcome(called.note)
                raise
            finally:
                note_tool(span, call.path, outcome)

    def gate(self, call: ToolCall) -> Gate:
        """Where `call` waits for a human, should its policy ask one."""
        if self.inline is not None:
            return functools.partial(self.run.ask_inline, ask=self.inline)
        return functools.partial(self.run.gate, call)

    async def _audited(self, call: ToolCall, args: Any, called: CallContext, audit: Audit) -> Any:
        began, clock = time.time(), trio.current_time()
        outcome = CUT_OFF
        try:
            result = await self.catalog.invoke(call.path, args, called)
            outcome = outcome_of(result)
            return result
        except ToolThrow:
            outcome = thrown_outcome(called.note)
            raise
        finally:
            # A call cut off by the server's restart runs again in the next process, which records it.
            if outcome != CUT_OFF or not self.approvals.restarting:
                await audit(audit_record(began, self.owner, self.session_id, call.path, called.note, outcome, clock))


def outcome_of(result: Any) -> str:
    """How a call ended, as the audit says it: `ok`, or its failure's code (`tool_blocked`, an upstream's)."""
    if isinstance(result, dict) and result.get("ok") is False:
        error = result.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        return code[:64] if isinstance(code, str) and code else "failed"
    return OK


def note_tool(span: Span | None, path: str, outcome: str) -> None:
    """What a tool call's span says of it: its outcome, and its path and integration when the path named a tool
    (a path that names none is text the sandboxed code chose, and may hold anything)."""
    if span is None:
        return
    span.set_attribute("executor.tool.outcome", outcome)
    if outcome != "tool_not_found":
        span.update_name(f"tool {path}")
        span.set_attribute("executor.tool.path", path)
        span.set_attribute("executor.integration", path.split(".", 1)[0])
