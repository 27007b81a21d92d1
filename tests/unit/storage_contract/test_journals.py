"""The execution journals' contract (one session's durable executions), on every backend."""

from executor_mcp.storage.interfaces import ExecutionJournals


async def test_a_journal_reads_back_in_number_order(journals: ExecutionJournals) -> None:
    assert await journals.journal("e1") == []
    await journals.keep_execution("e1", [(0, b"head"), (2, b"two")])
    await journals.keep_execution("e1", [(1, b"one"), (10, b"ten"), (9, b"nine")], {"p1": b"pause one"})
    await journals.keep_execution("e10", [(0, b"other head")])
    assert await journals.journal("e1") == [b"head", b"one", b"two", b"nine", b"ten"]
    assert await journals.journal("e10") == [b"other head"]
    assert await journals.pauses() == [b"pause one"]


async def test_forgetting_an_execution_leaves_the_others(journals: ExecutionJournals) -> None:
    await journals.keep_execution("e1", [(0, b"head")], {"p1": b"first", "p2": b"second"})
    await journals.keep_execution("e2", [(0, b"head 2")], {"p3": b"third"})
    await journals.forget_execution("e1", ["p1"])
    assert await journals.journal("e1") == []
    assert sorted(await journals.pauses()) == [b"second", b"third"]  # only the named pauses go
    assert await journals.journal("e2") == [b"head 2"]
    await journals.forget_execution("never", ["never"])
    await journals.forget_executions()
    assert (await journals.journal("e2"), await journals.pauses()) == ([], [])
