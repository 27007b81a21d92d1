"""Adopting a pause kept by another session, with no I/O: what `AdoptionJudge` lets move (the owner's pause, in
its window, its call still waiting at its gate) and what it tells the resume otherwise."""

import attrs

from executor_mcp.codec import converter, dumps
from executor_mcp.config import Settings
from executor_mcp.execution.journal import GATE, PASS, REFUSED, Head, Journal, Mark, Step, summary
from executor_mcp.execution.limits import Limits
from executor_mcp.execution.runs import (
    ADOPTED,
    FORBIDDEN,
    LAPSED,
    SETTLED,
    AdoptionJudge,
    PauseRecord,
    is_pause_id,
)
from executor_mcp.storage.records import Owner
from executor_mcp.tools.approval import Interaction

OWNER = Owner("alice", "acme")
NOW = 1_000.0
HEAD = Head(code="return 1", limits=Limits.of(Settings()), seed=(1, 2, 3, 4), epoch=1.7e12, mode="model")


def pause(owner: Owner = OWNER, expires_at: float = NOW + 60, call_id: int = 1) -> bytes:
    record = PauseRecord(
        id="exec_00000000-0000-4000-8000-000000000000",
        execution="e1",
        call_id=call_id,
        owner=owner,
        interaction=Interaction(address="github.issues.create", message="Create an issue?", args={"title": "x"}),
        created_at=NOW - 1,
        expires_at=expires_at,
        ttl=61,
        mode="model",
    )
    return dumps(converter.unstructure(record))


def journal(*marks: Mark, calls: tuple[int, ...] = (1,)) -> list[bytes]:
    kept = Journal("e1", HEAD)
    outbox = [{"kind": "call", "id": n, "path": "github.issues.create", "args": {}} for n in calls]
    kept.record(Step(at=NOW - 2, input={"op": "start"}, clock=[], outbox=summary(outbox), cpu=0.01))
    for mark in marks:
        kept.record(mark)
    return [raw for _, raw in kept.unwritten()]


def judged(raw_pause: bytes, raw_journal: list[bytes], owner: Owner = OWNER) -> str:
    return AdoptionJudge(owner, NOW)(raw_pause, raw_journal).outcome


def test_the_owners_pause_waiting_at_its_gate_in_its_window_moves_with_its_journals_key() -> None:
    verdict = AdoptionJudge(OWNER, NOW)(pause(), journal(Mark(GATE, 1)))
    assert (verdict.outcome, verdict.execution, verdict.move) == (ADOPTED, "e1", True)


def test_another_owners_pause_is_forbidden_whoever_asks() -> None:
    assert judged(pause(), journal(Mark(GATE, 1)), Owner("mallory", "acme")) == FORBIDDEN
    assert judged(pause(), journal(Mark(GATE, 1)), Owner("alice", "other")) == FORBIDDEN
    # What an admin started, only as an admin: the same account without the role may not.
    assert judged(pause(attrs.evolve(OWNER, org_admin=True)), journal(Mark(GATE, 1))) == FORBIDDEN
    assert judged(b"not a pause record", journal(Mark(GATE, 1))) == FORBIDDEN


def test_a_pause_past_its_window_lapsed() -> None:
    assert judged(pause(expires_at=NOW), journal(Mark(GATE, 1))) == LAPSED


def test_a_call_let_through_or_an_execution_that_cannot_go_on_has_settled_and_does_not_move() -> None:
    assert judged(pause(), journal(Mark(GATE, 1), Mark(PASS, 1))) == SETTLED  # its tool may have run
    # Declined, and the execution goes on (or ended, its records not forgotten yet): nobody may accept it now.
    assert judged(pause(), journal(Mark(GATE, 1), Mark(REFUSED, 1))) == SETTLED
    assert judged(pause(), []) == SETTLED  # its journal was forgotten
    assert judged(pause(), [b"{not json"]) == SETTLED
    assert judged(pause(call_id=2), journal(Mark(GATE, 1))) == SETTLED  # not what it waits on
    # Another call in flight, not at a gate: it may have run where the execution was, so it cannot go on here.
    assert judged(pause(), journal(Mark(GATE, 1), calls=(1, 2))) == SETTLED


def test_only_text_of_a_pause_ids_shape_is_looked_for() -> None:
    assert is_pause_id("exec_00000000-0000-4000-8000-000000000000")
    assert not is_pause_id("exec_")
    assert not is_pause_id("exec_" + "0" * 400)
    assert not is_pause_id("session_00000000-0000-4000-8000-000000000000")
