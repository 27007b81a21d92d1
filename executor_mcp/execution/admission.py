"""How many executions one account may have at once, and the words that refuse one more.

A paused execution keeps its sandbox worker until it is answered or expires, and a runaway one keeps it
until its CPU budget ends; unbounded, one account could hold every worker and leave everyone else's
`execute` waiting. So each owner (account *and* org: `alice` of `acme` and `alice` of `evil` are
strangers) may have at most `limit` executions in progress, running and paused together; one more is
refused at once with a text that says how many are in progress and how to free a place.

No I/O: a run holds its `Slot` from `admit` until its task ends, and marks the slot paused while it
waits on a human, so the refusal can name the pauses to answer.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import attrs

from executor_mcp.codec import JsonObject
from executor_mcp.protocol.results import text_result
from executor_mcp.storage.records import Owner

LISTED_PAUSES = 10  # a refusal names at most this many paused executions


@attrs.define(eq=False)
class Slot:
    """One admitted execution's place in its owner's budget."""

    owner: Owner
    _admission: "Admission"
    _waits: int = 0  # gated calls of this execution waiting on a human right now
    _pause_ids: list[str] = attrs.Factory(list)
    released: bool = False

    @property
    def paused(self) -> bool:
        return self._waits > 0

    @property
    def pause_ids(self) -> list[str]:
        return list(self._pause_ids)

    @contextmanager
    def pausing(self, pause_id: str | None) -> Iterator[None]:
        """Held while the execution waits on a human; `pause_id` is what `resume` takes (none in native mode)."""
        self._waits += 1
        if pause_id is not None:
            self._pause_ids.append(pause_id)
        try:
            yield
        finally:
            self._waits -= 1
            if pause_id is not None:
                self._pause_ids.remove(pause_id)

    def release(self) -> None:
        """The execution ended; idempotent, so every exit path may call it."""
        if not self.released:
            self.released = True
            self._admission.forget(self)


@attrs.frozen
class Refusal:
    """Why one more execution was not started: the owner's budget is full."""

    limit: int
    running: int
    paused: int
    pause_ids: tuple[str, ...]


class Admission:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._active: dict[Owner, list[Slot]] = {}

    def admit(self, owner: Owner) -> Slot | Refusal:
        slots = self._active.setdefault(owner, [])
        if len(slots) >= self.limit:
            paused = [slot for slot in slots if slot.paused]
            return Refusal(
                limit=self.limit,
                running=len(slots) - len(paused),
                paused=len(paused),
                pause_ids=tuple(pause_id for slot in paused for pause_id in slot.pause_ids),
            )
        slot = Slot(owner, self)
        slots.append(slot)
        return slot

    def readmit(self, owner: Owner) -> Slot:
        """A place for an execution admitted before a restart and revived now: it keeps its place even over the
        limit (which may have been lowered meanwhile), as it would have without the restart."""
        slot = Slot(owner, self)
        self._active.setdefault(owner, []).append(slot)
        return slot

    def in_progress(self, owner: Owner) -> int:
        return len(self._active.get(owner, ()))

    def forget(self, slot: Slot) -> None:
        slots = self._active.get(slot.owner, [])
        if slot in slots:
            slots.remove(slot)
        if not slots:
            self._active.pop(slot.owner, None)


def refusal_result(refusal: Refusal) -> JsonObject:
    """The `execute` error result a model reads: how many are in progress, and what frees a place."""
    total = refusal.running + refusal.paused
    sentences = [
        f"Execution refused: this account already has {total} execution{'s' if total != 1 else ''} in progress "
        f"({refusal.running} running, {refusal.paused} paused waiting for approval), the most one account may "
        f"have at once ({refusal.limit}). Nothing was run."
    ]
    if refusal.pause_ids:
        listed = ", ".join(refusal.pause_ids[:LISTED_PAUSES])
        more = len(refusal.pause_ids) - LISTED_PAUSES
        sentences.append(
            'To free a place, answer paused executions with the resume tool (action "accept" to let one go on, '
            f'"decline" or "cancel" to end it): {listed}' + (f" and {more} more." if more > 0 else ".")
        )
    elif refusal.paused:
        sentences.append("To free a place, answer or dismiss the approval requests your client is showing.")
    if refusal.running:
        sentences.append("Running executions free their place when they finish.")
    sentences.append("Then run execute again; retrying at once without doing either is refused the same way.")
    structured = {
        "status": "execution_limit_reached",
        "limit": refusal.limit,
        "running": refusal.running,
        "paused": refusal.paused,
        "pausedExecutionIds": list(refusal.pause_ids),
    }
    text = " ".join(sentences)
    return text_result(text, structured, error=True)
