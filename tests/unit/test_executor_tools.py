"""The tool server's pieces without a server: which registry a session gets (`ExecutorTools`), the `skills` and
`resume` handlers, a sandboxed call's way back to the catalog (`SandboxCalls`), the catalog's own tools
(`ConnectedTools`), and the tool-result envelope (`protocol/results.py`)."""

import contextlib
import functools
from typing import Any, cast

import pytest
import trio

from executor_mcp.audit.model import CUT_OFF, OK, AuditRecord
from executor_mcp.codec import JsonObject
from executor_mcp.execution.engine import ToolCall
from executor_mcp.execution.runs import PendingApprovals, Run
from executor_mcp.policies.toolkit_service import Toolkits
from executor_mcp.protocol.results import text_block, text_result, tool_result
from executor_mcp.storage.records import (
    BROWSER_ELICITATION,
    MODEL_ELICITATION,
    NATIVE_ELICITATION,
    PASSTHROUGH_MODE,
    Owner,
    SessionMeta,
)
from executor_mcp.tools.approval import CLIENT, Approval, InlineAsk, Interaction
from executor_mcp.tools.catalog import Catalog
from executor_mcp.tools.connected import ConnectedTools
from executor_mcp.tools.context import CallContext
from executor_mcp.tools.errors import ToolThrow
from executor_mcp.toolserver.executor_tools import ExecutorTools
from executor_mcp.toolserver.registry import ToolContext
from executor_mcp.toolserver.sandbox_calls import SandboxCalls, outcome_of
from tests.admissions import admission, admitted

ALICE = Owner("alice", "acme")


def _meta(elicitation_mode: str = MODEL_ELICITATION, mode: str = "execute", version: str = "2025-06-18") -> SessionMeta:
    return SessionMeta("s1", ALICE, "/mcp", version, {}, {}, 0.0, elicitation_mode=elicitation_mode, mode=mode)


def _tools(approvals: PendingApprovals | None = None) -> ExecutorTools:
    approvals = approvals or PendingApprovals(approval_window=60)
    nothing: Any = None  # neither is reached by what these tests call
    return ExecutorTools(nothing, Catalog([]), nothing, approvals, admission(1), lambda: "http://x", None, nothing)


def _context(meta: SessionMeta) -> ToolContext:
    nothing: Any = None
    return ToolContext(meta, nothing, nothing, nothing, contextlib.nullcontext, nothing, nothing)


@pytest.mark.parametrize(
    ("elicitation_mode", "mode", "version", "names", "revives"),
    [
        (NATIVE_ELICITATION, "execute", "2025-06-18", ["execute", "skills"], False),
        (NATIVE_ELICITATION, "execute", "2026-07-28", ["execute", "skills", "resume"], True),  # pauses, asked later
        (MODEL_ELICITATION, "execute", "2025-06-18", ["execute", "skills", "resume"], True),
        (BROWSER_ELICITATION, "execute", "2025-06-18", ["execute", "skills", "resume"], True),
        (NATIVE_ELICITATION, PASSTHROUGH_MODE, "2025-06-18", ["search", "invoke"], False),
        (MODEL_ELICITATION, PASSTHROUGH_MODE, "2025-06-18", ["search", "invoke", "resume"], True),
        (BROWSER_ELICITATION, PASSTHROUGH_MODE, "2025-06-18", ["search", "invoke", "resume"], True),
    ],
)
def test_each_session_gets_the_registry_of_its_modes(
    elicitation_mode: str, mode: str, version: str, names: list[str], revives: bool
) -> None:
    registry = _tools()(_meta(elicitation_mode, mode, version))
    assert [entry.tool.name for entry in registry] == names
    assert (registry.revive is not None) is revives


def test_browser_mode_resume_takes_only_the_execution_id() -> None:
    tools = _tools()
    browser = tools(_meta(BROWSER_ELICITATION)).get("resume")
    model = tools(_meta(MODEL_ELICITATION)).get("resume")
    assert browser is not None
    assert model is not None
    assert browser.tool.input_schema["required"] == ["executionId"]
    assert model.tool.input_schema["required"] == ["executionId", "action"]


async def test_skills_lists_fetches_and_refuses() -> None:
    tools, context = _tools(), _context(_meta())
    index = await tools.skills({}, context)
    assert "isError" not in index
    unknown = await tools.skills({"name": "nope"}, context)
    assert unknown["isError"] is True
    assert unknown["content"][0]["text"].startswith('No skill named "nope".')
    wrong = await tools.skills({"name": 3}, context)
    assert wrong["isError"] is True
    assert "Expected string, received number" in wrong["content"][0]["text"]


async def test_resume_checks_its_arguments_before_the_pause_is_looked_for() -> None:
    tools, context = _tools(), _context(_meta())
    refused = await tools.resume({"executionId": 1, "action": "maybe"}, context)
    assert refused["isError"] is True
    text = refused["content"][0]["text"]
    assert "Invalid arguments for tool resume" in text
    assert "invalid_enum_value" in text
    unknown = await tools.resume({"executionId": "exec_nope", "action": "accept"}, context)
    assert unknown["structuredContent"]["status"] == "execution_not_found"


class FakeCatalog:
    """A catalog whose one call answers `answer`, or throws it."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.gates: list[Any] = []

    async def invoke(self, path: str, args: Any, context: CallContext) -> Any:
        self.gates.append(context.gate)
        context.note.decision = "approve"
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def _calls(
    catalog: FakeCatalog, audit: list[AuditRecord] | None, inline: InlineAsk | None = None
) -> SandboxCalls:
    approvals = PendingApprovals(approval_window=60)
    slot = await admitted(admission(1), ALICE)
    run = Run(approvals, slot, mode=MODEL_ELICITATION)

    async def record(entry: AuditRecord) -> None:
        assert audit is not None
        audit.append(entry)

    nothing: Any = None
    return SandboxCalls(
        run,
        cast(Any, catalog),
        nothing,
        approvals,
        ALICE,
        "s1",
        inline,
        record if audit is not None else None,
        Toolkits(nothing),
        "/mcp",
    )


async def test_a_sandboxed_call_is_audited_with_its_outcome() -> None:
    audit: list[AuditRecord] = []
    calls = await _calls(FakeCatalog({"ok": False, "error": {"code": "tool_blocked"}}), audit)
    result = await calls.invoke(ToolCall(1, "github.issues.create", lambda: None), {})
    assert result["ok"] is False
    [record] = audit
    assert (record.tool, record.outcome, record.decision, record.session_id) == (
        "github.issues.create",
        "tool_blocked",
        "approve",
        "s1",
    )


async def test_a_throwing_call_is_audited_as_thrown_and_still_throws() -> None:
    audit: list[AuditRecord] = []
    calls = await _calls(FakeCatalog(ToolThrow("no")), audit)
    with pytest.raises(ToolThrow):
        await calls.invoke(ToolCall(1, "search", lambda: None), {})
    assert [record.outcome for record in audit] == ["threw"]


async def test_a_call_cut_off_by_a_cancel_is_audited_as_cut_off() -> None:
    audit: list[AuditRecord] = []

    class Slow(FakeCatalog):
        async def invoke(self, path: str, args: Any, context: CallContext) -> Any:
            await trio.sleep_forever()

    calls = await _calls(Slow(None), audit)
    with trio.move_on_after(0.01):
        await calls.invoke(ToolCall(1, "a.b", lambda: None), {})
    assert [record.outcome for record in audit] == [CUT_OFF]


async def test_without_an_audit_a_call_only_runs() -> None:
    calls = await _calls(FakeCatalog("value"), None)
    assert await calls.invoke(ToolCall(1, "search", lambda: None), {}) == "value"


async def test_the_gate_asks_inline_only_when_the_session_does() -> None:
    async def ask(method: str, params: JsonObject) -> JsonObject:
        return {"action": "accept"}

    call = ToolCall(1, "a.b", lambda: None)
    paused = await _calls(FakeCatalog(None), None)
    gate = paused.gate(call)
    assert isinstance(gate, functools.partial)
    assert (gate.func, gate.args) == (paused.run.gate, (call,))  # it pauses the run
    inline = await _calls(FakeCatalog(None), None, InlineAsk({"elicitation": {}}, ask))
    approval = await inline.gate(call)(Interaction("a.b", "Approve a.b?", {}))
    assert approval == Approval("accept", CLIENT)


def test_how_a_calls_result_reads_in_the_audit() -> None:
    assert outcome_of({"ok": True, "data": 1}) == OK
    assert outcome_of({"ok": False, "error": {"code": "upstream_429"}}) == "upstream_429"
    assert outcome_of({"ok": False, "error": {}}) == "failed"
    assert outcome_of({"ok": False, "error": {"code": "x" * 100}}) == "x" * 64
    assert outcome_of("a raw value") == OK


class FakeIntegrations:
    """Only what the handlers under test reach."""

    def __init__(self) -> None:
        self.removed: list[tuple[Any, ...]] = []
        self.connections = self

    async def remove(self, principal: Owner, *key: str) -> None:
        self.removed.append(key)

    def kind_named(self, name: str) -> None:
        return None


@pytest.fixture
def connected() -> tuple[ConnectedTools, FakeIntegrations]:
    integrations = FakeIntegrations()
    nothing: Any = None
    return ConnectedTools(cast(Any, integrations), nothing), integrations


async def test_a_connection_key_is_checked_before_any_approval(
    connected: tuple[ConnectedTools, FakeIntegrations], context: CallContext
) -> None:
    tools, integrations = connected
    tools.check_key({"owner": "org", "integration": "github", "name": "main"}, context)
    with pytest.raises(Exception, match="Expected"):
        tools.check_key({"owner": "someone", "integration": "github", "name": "main"}, context)
    assert await tools.remove_connection({"owner": "user", "integration": "github", "name": "main"}, context) == {
        "removed": True
    }
    assert integrations.removed == [("user", "github", "main")]


def test_the_catalog_tools_are_listed_with_their_gates(connected: tuple[ConnectedTools, FakeIntegrations]) -> None:
    tools, _ = connected
    listed = {tool.id: tool for tool in tools.tools()}
    assert "executor.mcp.addServer" not in listed  # MCP servers are not enabled here
    assert listed["executor.coreTools.connections.remove"].requires_approval
    assert listed["executor.coreTools.connections.remove"].validate == tools.check_key
    assert not listed["executor.coreTools.connections.createHandoff"].requires_approval
    assert listed["executor.graphql.addIntegration"].approval_description == "Add a GraphQL integration"


def test_the_envelope_is_built_one_way() -> None:
    assert text_block("hi") == {"type": "text", "text": "hi"}
    assert text_result("hi") == {"content": [{"type": "text", "text": "hi"}]}
    assert list(text_result("no", {"status": "error"}, error=True)) == ["content", "structuredContent", "isError"]
    assert tool_result([], {}) == {"content": [], "structuredContent": {}}
