"""`benchmarks.sandbox_parts` measures what it says: every part of an execution, the execution itself succeeding."""

from benchmarks.sandbox_parts import parts


def test_each_part_of_an_execution_is_timed_and_the_execution_succeeds():
    measured = parts(3)
    assert list(measured) == ["context", "prelude", "prepare", "run"]
    assert all(ms > 0 for ms in measured.values())
