"""A rebuilt execution's replay runs under the execution's limits, in a real worker: a limit it reaches
during the replay ends it with that limit's message, not as a replay that diverged."""

from typing import Any

import attrs
import trio

from executor_mcp.config import Settings
from executor_mcp.execution.engine import Engine
from executor_mcp.execution.journal import Head, Journal, Step, summary
from executor_mcp.execution.limits import Limits
from executor_mcp.sandbox.pool import WorkerPool

BUDGET = 1.0
# Burns far more than what is left of the budget before its first await, then waits on a call.
BURN = "let x = 0; for (let i = 0; i < 30000000; i++) x += i; await tools.a.b({}); return x;"


@attrs.define
class KeptInMemory:
    """A durable journal's keeper that holds what it is given in memory (the engine's side of `Run`)."""

    journal: Journal
    written: list[tuple[int, bytes]] = attrs.Factory(list)

    async def keep(self) -> None:
        records = self.journal.unwritten()
        self.written += records
        self.journal.written(len(records))


async def test_a_replay_past_the_cpu_budget_ends_with_the_cpu_limit() -> None:
    head = Head(
        code=BURN, limits=attrs.evolve(Limits.of(Settings()), cpu=BUDGET), seed=(1, 2, 3, 4), epoch=1.7e12, mode="model"
    )
    outbox = summary([{"kind": "call", "id": 1, "path": "a.b", "args": {}}])
    started = Step(at=1.7e9, input={"op": "start"}, clock=[], outbox=outbox, cpu=BUDGET - 0.001)
    keeper = KeptInMemory(Journal("k", head, [started]))
    called: list[str] = []

    async def invoke(call: Any, args: Any) -> Any:
        called.append(call.path)

    pool = WorkerPool(max_workers=Settings().sandbox_workers, spares=0)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(pool.run)
            outcome = await Engine(pool, head.limits).execute(head, invoke, keeper=keeper)
            nursery.cancel_scope.cancel()
    assert outcome.error == f"Execution exceeded its CPU time limit of {BUDGET:g}s"
    assert called == []
