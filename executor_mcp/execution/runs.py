"""Executions that outlive the request that started them: pause for approval, resume, settle once.

A `Run` is one `execute`, from its code to its outcome. It lives as a task in its session's nursery
(ending the session ends it), so a pause can wait for a human while the MCP request that reported it
is long answered. Whoever waits for the run's next result holds `run.next`: first the `execute` call,
then, after each pause, the `resume` that answered it. While paused, the sandbox is simply waiting on
a tool call (its wall clock is stopped, no thread is held).

The `Book` is process-wide: it finds a pause by id for any session of the same account and org, makes
resumes exactly-once (a duplicate that arrives while the first runs joins it; one that arrives after
replays the same result), and remembers ids that expired or settled so a late resume gets guidance
instead of a shrug.
"""

import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Generic, TypeVar

import attrs
import trio

from executor_mcp.codec import JsonObject
from executor_mcp.execution.admission import Slot
from executor_mcp.execution.results import (
    expired_result,
    forbidden_result,
    not_found_result,
    render_paused,
    settled_result,
    ttl_words,
)
from executor_mcp.storage.records import Owner
from executor_mcp.tools.context import Interaction, refuse_unless_accepted

T = TypeVar("T")

# Per owner, so one account ending many pauses never pushes another's out of memory; and owners
# themselves are remembered least recently used first.
REPLAYS = 64
REMEMBERED = 1024
OWNERS_REMEMBERED = 4096


class Deferred(Generic[T]):
    """A value that arrives once; any number of tasks can wait for it."""

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: T | None = None

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def set(self, value: T) -> None:
        if not self._event.is_set():
            self._value = value
            self._event.set()

    async def wait(self) -> T:
        await self._event.wait()
        return self._value  # type: ignore[return-value]


@attrs.frozen
class Answer:
    action: str  # accept | decline | cancel
    content: JsonObject | None = None


@attrs.define(eq=False)
class Pause:
    id: str
    owner: Owner
    interaction: Interaction
    expires_at: float  # epoch seconds
    ttl: float
    answer: Deferred[Answer] = attrs.Factory(Deferred)
    resolution: Deferred[JsonObject] = attrs.Factory(Deferred)


@attrs.frozen
class Ended:
    """A pause that is no longer live, remembered so a late resume hears what became of it."""

    owner: Owner
    expired: bool  # else settled


class _Memory:
    """One owner's ended pauses: what became of each, and the results kept for replays."""

    def __init__(self) -> None:
        self.ended: OrderedDict[str, Ended] = OrderedDict()
        self.replays: OrderedDict[str, JsonObject] = OrderedDict()


class Book:
    """Every live pause, and a bounded memory, per owner, of the ones that ended.

    The owner is checked before anything else: a stranger (another account, or the same account name in
    another org) hears `execution_forbidden` for a live pause and `execution_not_found` for one that ended
    (it is looked for only in the caller's own memory), and never its result.
    """

    def __init__(self, approval_window: float) -> None:
        self.approval_window = approval_window
        self._live: dict[str, Pause] = {}
        self._memories: OrderedDict[Owner, _Memory] = OrderedDict()

    def open(self, pause: Pause) -> None:
        self._live[pause.id] = pause

    def resolve(self, pause: Pause, result: JsonObject) -> None:
        """What resuming `pause` led to (a completion, an error or the next pause), kept for replays."""
        self._live.pop(pause.id, None)
        pause.resolution.set(result)
        memory = self._memory_of(pause.owner)
        _remember(memory.replays, pause.id, result, REPLAYS)
        _remember(memory.ended, pause.id, Ended(pause.owner, expired=False), REMEMBERED)

    def expire(self, pause: Pause) -> None:
        if self._live.pop(pause.id, None) is not None:
            _remember(self._memory_of(pause.owner).ended, pause.id, Ended(pause.owner, expired=True), REMEMBERED)
            pause.resolution.set(expired_result(pause.id, self.approval_window))

    async def resume(self, execution_id: str, owner: Owner, answer: Answer) -> JsonObject:
        pause = self._live.get(execution_id)
        if pause is not None:
            if not owner.may_act_on(pause.owner):
                return forbidden_result(execution_id)
            pause.answer.set(answer)  # a concurrent duplicate finds it already set and just joins below
            return await pause.resolution.wait()
        memory = self._memories.get(owner)
        ended = memory.ended.get(execution_id) if memory is not None else None
        if memory is None or ended is None:
            return not_found_result(execution_id)
        if not owner.may_act_on(ended.owner):
            return forbidden_result(execution_id)
        replay = memory.replays.get(execution_id)
        if replay is not None:
            return replay
        return expired_result(execution_id, self.approval_window) if ended.expired else settled_result(execution_id)

    def _memory_of(self, owner: Owner) -> _Memory:
        memory = self._memories.get(owner) or _Memory()
        _remember(self._memories, owner, memory, OWNERS_REMEMBERED)
        return memory


def _remember(memory: OrderedDict[Any, Any], key: Any, value: Any, limit: int) -> None:
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > limit:
        memory.popitem(last=False)


class Run:
    """One execution; `drive` runs it, `gate` and `ask_inline` are the approval gates its tool calls pass.

    It holds its owner's admission `slot` from creation until `drive` ends, and marks it paused (with
    the session's pause lease) whenever it waits on a human, in either elicitation mode.
    """

    def __init__(self, book: Book, slot: Slot, lease: Callable[[], AbstractContextManager[None]] = nullcontext) -> None:
        self._book = book
        self._slot = slot
        self._lease = lease
        self._gate_lock = trio.Lock()
        self._resolving: Pause | None = None  # the pause whose resume waits on `next`
        self.scope = trio.CancelScope()
        self.next: Deferred[JsonObject] = Deferred()

    @property
    def owner(self) -> Owner:
        return self._slot.owner

    async def drive(self, run: Callable[[], Awaitable[JsonObject]], defect: Callable[[], JsonObject]) -> None:
        """Run the execution and deliver its rendered result; never raises into the session's nursery."""
        try:
            with self.scope:
                self._deliver(await run())
        except Exception:
            self._deliver(defect())
        finally:
            self._slot.release()
            if self._resolving is not None and not self._resolving.resolution.done:
                self._book.expire(self._resolving)  # the run ended under a pending resume: tell it

    async def gate(self, interaction: Interaction) -> None:
        """Pause until a human answers; concurrent gated calls of one execution queue here."""
        async with self._gate_lock:
            window = self._book.approval_window
            pause = Pause(
                id=f"exec_{uuid.uuid4()}",
                owner=self.owner,
                interaction=interaction,
                expires_at=time.time() + window,
                ttl=window,
            )
            self._book.open(pause)
            self._deliver(
                render_paused(
                    pause.id,
                    interaction.message,
                    interaction.address,
                    interaction.args,
                    interaction.requested_schema,
                    pause.expires_at,
                    window,
                )
            )
            self._resolving, self.next = pause, pause.resolution
            answer = None
            with self._lease(), self._slot.pausing(pause.id), trio.move_on_after(window):
                answer = await pause.answer.wait()
            if answer is None:
                # Nobody answered in time: the execution ends, and a late resume hears it expired.
                self._book.expire(pause)
                self.scope.cancel()
                await trio.lowlevel.checkpoint()
            assert answer is not None
            refuse_unless_accepted(interaction, answer.action)

    async def ask_inline(self, interaction: Interaction, ask: Callable[[Interaction], Awaitable[str]]) -> None:
        """Native elicitation: `ask` puts the question to the client and returns its action.

        The wait follows the approval window like a pause: unanswered in time, the execution ends and
        the `execute` call gets a result that says so, and the worker goes back to the pool.
        """
        window = self._book.approval_window
        action = None
        with self._lease(), self._slot.pausing(None), trio.move_on_after(window):
            action = await ask(interaction)
        if action is None:
            self._deliver(unanswered_result(interaction.address, window))
            self.scope.cancel()
            await trio.lowlevel.checkpoint()
        assert action is not None
        refuse_unless_accepted(interaction, action)

    def _deliver(self, result: JsonObject) -> None:
        if self._resolving is not None:
            self._book.resolve(self._resolving, result)
        else:
            self.next.set(result)


def unanswered_result(address: str, window: float) -> JsonObject:
    """How an execution ends when its inline approval request went unanswered for the whole window."""
    error = (
        f'Execution ended: the approval request for tool "{address}" was not answered within the '
        f"{ttl_words(window)} approval window, so the tool did not run. Ask the user, then run execute again "
        "to ask once more."
    )
    return {
        "content": [{"type": "text", "text": f"Error: {error}"}],
        "structuredContent": {"status": "error", "error": error, "reason": "approval_expired"},
        "isError": True,
    }
