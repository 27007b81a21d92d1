"""The per-account execution budget and the fair sharing of sandbox workers, without a server."""

import pytest
import trio
import trio.testing

from executor_mcp.execution.admission import LOST_SETTLES_SECONDS, Refusal, Slot, refusal_result
from executor_mcp.execution.runs import REMEMBERED, REPLAYS, Pause, PendingApprovals
from executor_mcp.ratelimits.in_flight import Ceiling, Full
from executor_mcp.sandbox.slots import FairSlots, SlotQueue
from executor_mcp.storage.lmdb.in_flight import MemoryInFlight
from executor_mcp.storage.records import Owner
from executor_mcp.tools.approval import ApprovalAnswer, Interaction
from tests.admissions import admission, admitted

ALICE = Owner("alice", "acme")
NAMESAKE = Owner("alice", "evil")
BOB = Owner("bob", "acme")


async def test_the_budget_is_per_account_and_org() -> None:
    budget = admission(2)
    first, second = await admitted(budget, ALICE), await admitted(budget, ALICE)
    assert isinstance(await budget.admit(ALICE), Refusal)
    await admitted(budget, NAMESAKE)  # the same account name in another org is someone else
    await admitted(budget, BOB)
    await first.release()
    await first.release()  # idempotent: a second release frees nothing more
    third = await admitted(budget, ALICE)
    assert isinstance(await budget.admit(ALICE), Refusal)
    await second.release()
    await third.release()
    assert budget.in_progress(ALICE) == 0


async def test_an_orgs_budget_is_its_accounts_together_and_names_no_pause() -> None:
    budget = admission(2, per_org=3)
    alices = [await admitted(budget, ALICE), await admitted(budget, ALICE)]
    bobs = await admitted(budget, BOB)
    async with alices[0].pausing("exec_1"):
        refusal = await budget.admit(Owner("carol", "acme"))
        assert refusal == Refusal(limit=3, running=2, paused=1, pause_ids=(), scope="org")
        assert isinstance(await budget.admit(NAMESAKE), Slot)  # another org's budget is its own
    text = refusal_result(refusal)["content"][0]["text"]
    assert text.startswith("Execution refused: this organization already has 3 executions in progress (2 running, ")
    assert "the most one organization may have at once (3)" in text
    assert "resume tool" not in text
    assert "your client" not in text
    assert refusal_result(refusal)["structuredContent"]["scope"] == "org"
    await bobs.release()
    assert isinstance(await budget.admit(Owner("carol", "acme")), Slot)


async def test_a_revived_execution_keeps_its_place_over_the_limit() -> None:
    budget = admission(1)
    await admitted(budget, ALICE)
    revived = await budget.readmit(ALICE)
    assert budget.in_progress(ALICE) == 2
    await revived.release()
    assert isinstance(await budget.admit(ALICE), Refusal)


async def test_a_refusal_counts_pauses_and_names_them() -> None:
    budget = admission(3)
    slots = [await admitted(budget, ALICE) for _ in range(3)]
    async with slots[0].pausing("exec_1"), slots[1].pausing(None):
        refusal = await budget.admit(ALICE)
        assert refusal == Refusal(limit=3, running=1, paused=2, pause_ids=("exec_1",))
    assert await budget.admit(ALICE) == Refusal(limit=3, running=3, paused=0, pause_ids=())

    result = refusal_result(Refusal(limit=3, running=1, paused=2, pause_ids=("exec_1",)))
    text = result["content"][0]["text"]
    assert result["isError"] is True
    assert text.startswith("Execution refused: this account already has 3 executions in progress (1 running, 2 paused")
    assert 'resume tool (action "accept" to let one go on, "decline" or "cancel" to end it): exec_1.' in text
    assert result["structuredContent"]["pausedExecutionIds"] == ["exec_1"]


def test_a_refusal_lists_a_bounded_number_of_pauses() -> None:
    ids = tuple(f"exec_{n}" for n in range(25))
    text = refusal_result(Refusal(limit=25, running=0, paused=25, pause_ids=ids))["content"][0]["text"]
    assert "exec_9 and 15 more." in text
    assert "exec_10" not in text
    assert "Running executions" not in text


def test_only_native_waits_point_at_the_client() -> None:
    text = refusal_result(Refusal(limit=1, running=0, paused=1, pause_ids=()))["content"][0]["text"]
    assert "answer or dismiss the approval requests your client is showing" in text
    assert "resume tool" not in text


def test_a_freed_slot_goes_to_the_account_holding_fewest() -> None:
    queue = SlotQueue(capacity=3, reserve=0)
    for _ in range(3):
        _, granted = queue.request("a")
        assert len(granted) == 1
    waiting_a, granted = queue.request("a")
    assert granted == []
    waiting_b, granted = queue.request("b")  # later, but b holds nothing
    assert granted == []
    assert queue.release("a") == [waiting_b]
    assert queue.release("a") == [waiting_a]
    assert (queue.held("a"), queue.held("b")) == (2, 1)


def test_equals_are_served_in_arrival_order_and_withdrawn_waiters_skipped() -> None:
    queue = SlotQueue(capacity=1, reserve=0)
    queue.request("x")
    first, _ = queue.request("a")
    second, _ = queue.request("b")
    third, _ = queue.request("c")
    queue.withdraw(first)
    assert queue.release("x") == [second]
    assert queue.release("b") == [third]


def test_no_account_takes_the_last_slot() -> None:
    queue = SlotQueue(capacity=3, reserve=1)
    assert [len(queue.request("a")[1]) for _ in range(3)] == [1, 1, 0]
    assert queue.in_use == 2
    ticket, granted = queue.request("b")
    assert granted == [ticket]


@pytest.mark.parametrize(("capacity", "most"), [(1, 1), (2, 1), (8, 7), (64, 56)])
def test_the_default_reserve_keeps_workers_for_the_others(capacity: int, most: int) -> None:
    assert FairSlots(capacity).most_one_account_holds == most


def test_the_reserve_serves_accounts_that_arrive_after_others_filled_the_pool() -> None:
    """Two accounts ask for everything; four more arrive: each newcomer gets a worker at once while
    the reserve lasts, and a freed worker goes to whoever holds fewest."""
    queue = SlotQueue(capacity=16, reserve=2)
    for account in ("a", "b"):
        for _ in range(16):
            queue.request(account)
    assert (queue.held("a"), queue.held("b")) == (14, 1)  # b got one of the reserve, a none of it
    assert len(queue.request("c")[1]) == 1
    assert (queue.held("c"), queue.in_use) == (1, 16)
    waiting_d, granted = queue.request("d")
    assert granted == []
    assert queue.release("a") == [waiting_d]


async def test_fair_slots_wake_waiters_and_survive_cancellation() -> None:
    slots = FairSlots(1)
    order: list[str] = []
    release_first = trio.Event()

    async def hold(key: str, until: trio.Event | None = None) -> None:
        async with slots.hold(key):
            order.append(key)
            if until is not None:
                await until.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold, "a", release_first)
        await trio.testing.wait_all_tasks_blocked()
        with trio.CancelScope() as cancelled:
            cancelled.cancel()
            await hold("gone")  # cancelled while it would wait: leaves no trace
        nursery.start_soon(hold, "b")
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["a"]
        release_first.set()
    assert order == ["a", "b"]
    assert slots.queue.in_use == 0


async def test_a_waiter_cancelled_as_it_is_granted_hands_the_slot_on() -> None:
    slots = FairSlots(1)
    done: list[str] = []

    async def waiter(key: str, scope: trio.CancelScope) -> None:
        with scope:
            async with slots.hold(key):
                done.append(key)

    held = slots.hold("a")
    await held.__aenter__()
    async with trio.open_nursery() as nursery:
        doomed, kept = trio.CancelScope(), trio.CancelScope()
        nursery.start_soon(waiter, "b", doomed)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(waiter, "c", kept)
        await trio.testing.wait_all_tasks_blocked()
        doomed.cancel()  # "b" is cancelled ...
        await held.__aexit__(None, None, None)  # ... and granted before it runs again
    assert done == ["c"]
    assert slots.queue.in_use == 0


async def test_one_owner_ending_many_pauses_keeps_anothers_replay() -> None:
    book = PendingApprovals(approval_window=60)
    alice, mallory = Owner("alice", "acme"), Owner("mallory", "evil")
    kept = Pause(id="exec_alice", owner=alice, interaction=Interaction("a.b", "Approve?", {}), expires_at=0, ttl=60)
    book.open(kept)
    book.resolve(kept, {"content": [], "structuredContent": {"status": "completed", "result": 1}})
    for index in range(REMEMBERED + REPLAYS):
        churn = Pause(id=f"exec_{index}", owner=mallory, interaction=kept.interaction, expires_at=0, ttl=60)
        book.open(churn)
        book.resolve(churn, {"content": []})
    replay = await book.resume("exec_alice", alice, ApprovalAnswer("accept"))
    assert replay["structuredContent"]["result"] == 1
    stranger = await book.resume("exec_alice", mallory, ApprovalAnswer("accept"))
    assert stranger["structuredContent"]["status"] == "execution_not_found"


class CountingStore(MemoryInFlight):
    """The embedded backend's store, counting the places asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = 0

    async def enter(self, instance: str, holder: str, ceilings: list[Ceiling], *, beyond: bool = False) -> Full | None:
        self.entered += 1
        return await super().enter(instance, holder, ceilings, beyond=beyond)


async def test_the_store_counts_only_configured_limits_and_shares_them_between_processes() -> None:
    store = CountingStore()
    unconfigured = admission(2, store=store, instance="a")
    await (await admitted(unconfigured, ALICE)).release()
    assert store.entered == 0  # the guard alone is counted in the process: no store round trip

    on_a = admission(5, per_account=1, store=store, instance="a")
    on_b = admission(5, per_account=1, store=store, instance="b")
    first = await admitted(on_a, ALICE)
    assert store.entered == 1
    refusal = await on_b.admit(ALICE)  # another process, the same store: the configured limit is shared
    assert refusal == Refusal(limit=1, running=1, paused=0, pause_ids=())
    await first.release()
    await admitted(on_b, ALICE)
    assert on_a.in_progress(ALICE) == 0


class FlakyStore(MemoryInFlight):
    """The embedded backend's store, whose `leave` fails while `down` (as a database away) and whose `mark`
    reaches a checkpoint (as a database round trip does)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    async def leave(self, holder: str) -> None:
        if self.down:
            raise ConnectionError("the database is unavailable")
        await super().leave(holder)

    async def mark(self, holder: str, waits: int, pause_ids: tuple[str, ...], version: int) -> None:
        await trio.lowlevel.checkpoint()
        await super().mark(holder, waits, pause_ids, version)


async def test_a_place_a_failed_leave_kept_is_given_back_by_mend(autojump_clock: object) -> None:
    store = FlakyStore()
    on_a = admission(5, per_account=1, store=store, instance="a")
    on_b = admission(5, per_account=1, store=store, instance="b")
    slot = await admitted(on_a, ALICE)
    store.down = True
    await slot.release()  # the execution ends all the same
    assert on_a.in_progress(ALICE) == 0
    assert isinstance(await on_b.admit(ALICE), Refusal)  # the store still holds its place
    await on_a.mend()  # too soon: the lost statement might still be running
    assert isinstance(await on_b.admit(ALICE), Refusal)
    await trio.sleep(LOST_SETTLES_SECONDS)  # the test's clock is autojumped
    with pytest.raises(ConnectionError):
        await on_a.mend()  # still down: kept for the next time
    store.down = False
    await on_a.mend()
    await admitted(on_b, ALICE)


async def test_a_pause_whose_deadline_has_passed_leaves_its_slot_running() -> None:
    slot = await admitted(admission(5, per_account=2, store=FlakyStore()), ALICE)
    with trio.move_on_at(trio.current_time() - 1):
        async with slot.pausing("exec_1"):
            await trio.sleep_forever()
    assert not slot.paused
