"""The journal of an execution, with no I/O: what it records, what it says is pending, how it numbers what
is to be written, its bound, and how a replayed outbox is compared with a recorded one."""

import attrs
import pytest

from executor_mcp.config import Settings
from executor_mcp.execution.journal import (
    GATE,
    PASS,
    BadJournal,
    Head,
    Journal,
    JournalFull,
    Mark,
    Step,
    decode_entry,
    decode_head,
    encode_entry,
    encode_head,
    mismatch,
    summary,
)
from executor_mcp.execution.limits import Limits

HEAD = Head(
    code="return 1",
    limits=attrs.evolve(Limits.of(Settings()), journal=4096),
    seed=(1, 2, 3, 4),
    epoch=1.7e12,
    mode="model",
)


def step(op: str, outbox: list, *, at: float = 100.0, **fields) -> Step:
    return Step(at=at, input={"op": op, **fields}, clock=[["date", 5, 2]], outbox=outbox, cpu=0.25)


def call(call_id: int, path: str = "a.b", args: object = None) -> dict:
    return {"kind": "call", "id": call_id, "path": path, "args": args}


def test_calls_and_timers_pending_at_the_end_and_what_a_gate_mark_says() -> None:
    journal = Journal("k", HEAD)
    journal.record(step("start", summary([call(1), call(2, "c.d"), {"kind": "timer", "id": 3, "ms": 1500.0}])))
    journal.record(Mark(GATE, 2))
    journal.record(step("settle", summary([{"kind": "timer", "id": 4, "ms": 10.0}]), at=101.0, id=1, ok=True))
    journal.record(step("fire", summary([{"kind": "clear", "id": 4}]), at=102.0, id=3))
    pending = journal.pending()
    assert list(pending.calls) == [2]
    assert pending.calls[2].path == "c.d"
    assert pending.calls[2].askable  # waiting at its gate: its tool has not run
    assert pending.timers == {}
    assert pending.cpu == 0.25
    journal.record(Mark(PASS, 2))
    assert not journal.pending().calls[2].askable  # let through: its tool may have run


def test_a_timer_is_due_its_delay_after_the_step_that_set_it() -> None:
    journal = Journal("k", HEAD)
    journal.record(step("start", summary([{"kind": "timer", "id": 1, "ms": 2500.0}]), at=200.0))
    assert journal.pending().timers == {1: 202.5}


def test_records_are_numbered_head_first_and_written_once() -> None:
    journal = Journal("k", HEAD)
    journal.record(step("start", []))
    first = journal.unwritten()
    assert [number for number, _ in first] == [0, 1]
    assert first[0][1] == encode_head(HEAD)
    journal.written(len(first))
    assert journal.unwritten() == []
    journal.record(Mark(GATE, 1))
    assert [number for number, _ in journal.unwritten()] == [2]


def test_a_journal_read_back_is_durable_and_continues_its_numbering() -> None:
    entries = [step("start", summary([call(1)])), Mark(GATE, 1)]
    journal = Journal("k", decode_head(encode_head(HEAD)), [decode_entry(encode_entry(e)) for e in entries])
    assert journal.durable
    assert journal.head == HEAD
    assert journal.entries == entries
    assert journal.unwritten() == []
    journal.record(Mark(PASS, 1))
    assert [number for number, _ in journal.unwritten()] == [3]


def test_a_step_past_the_bound_is_refused_with_the_option_named() -> None:
    journal = Journal("k", HEAD)
    with pytest.raises(JournalFull, match="--execution-journal-limit"):
        journal.record(step("settle", [], id=1, ok=True, payload="x" * 5000))
    assert journal.entries == []
    journal.record(Mark(GATE, 1))  # a mark is never refused


GOOD = Step(at=1.5, input={"op": "start"}, clock=[["date", 5, 2]], outbox=[["clear", 3]], cpu=0.1)


def damaged(**fields: object) -> bytes:
    return encode_entry(attrs.evolve(GOOD, **fields))


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"[]",
        b'{"mark": "other", "id": 1}',
        b'{"at": 1}',
        b"\xff",
        damaged(outbox=[5]),
        damaged(outbox=[["call", 1, "a.b"]]),
        damaged(outbox=[["call", 1, 7, "digest"]]),
        damaged(outbox=[["timer", 1, "soon"]]),
        damaged(outbox=[["timer", True, 5]]),
        damaged(outbox=[["spawn", 1]]),
        damaged(outbox=[[]]),
        damaged(at="noon"),
        damaged(cpu=None),
        damaged(input={"op": "settle"}),
        damaged(input={"op": "fire", "id": "1"}),
        damaged(input={"op": "settle", "id": 1, "ok": True, "payload": 5}),
        damaged(input={"op": "other"}),
        damaged(clock=[["date", "noon", 1]]),
    ],
)
def test_an_entry_that_does_not_decode_is_a_bad_journal(raw: bytes) -> None:
    with pytest.raises(BadJournal):
        decode_entry(raw)


def test_a_step_as_the_engine_writes_it_decodes() -> None:
    assert decode_entry(encode_entry(GOOD)) == GOOD
    settled = step("settle", summary([call(2), {"kind": "timer", "id": 3, "ms": 1.0}]), id=1, ok=False, payload="no")
    assert decode_entry(encode_entry(settled)) == settled


def test_the_same_arguments_give_the_same_digest_whatever_their_key_order() -> None:
    assert summary([call(1, args={"a": 1, "b": [2]})]) == summary([call(1, args={"b": [2], "a": 1})])
    assert summary([call(1, args={"a": 1})]) != summary([call(1, args={"a": 2})])


def test_mismatches_are_worded() -> None:
    recorded = summary([call(1, "ledger.write", {"n": 1})])
    assert mismatch(recorded, summary([call(1, "ledger.write", {"n": 1})])) is None
    assert mismatch(recorded, summary([call(1, "ledger.read", {"n": 1})])) == (
        "called tools.ledger.read where it had called tools.ledger.write"
    )
    assert mismatch(recorded, summary([call(1, "ledger.write", {"n": 2})])) == (
        "called tools.ledger.write with different arguments"
    )
    assert mismatch(recorded, []) == "did not ask for a call of tools.ledger.write, which it had"
    timer = summary([{"kind": "timer", "id": 2, "ms": 5.0}])
    assert mismatch([], timer) == "asked for a timer of 5 ms, which it had not"
    assert mismatch(recorded, timer) == "asked for a timer of 5 ms where it had asked for a call of tools.ledger.write"


def test_a_call_path_counts_against_the_bound() -> None:
    """The code names its tools' paths, of any length: each is journaled whole with its call."""
    journal = Journal("k", HEAD)
    with pytest.raises(JournalFull):
        journal.record(step("start", summary([call(1, "x" * 5000)])))
