"""Sharing the worker pool between accounts when there are more executions than workers.

A plain FIFO limiter lets whoever queues most hold most workers: an account that starts many
executions at once would be served before someone who asks for one. Here, when a worker frees up, it
goes to the waiting execution whose account holds the fewest workers (first come first served among
equals). And the last `reserve` free workers go only to accounts that hold none: however many accounts
fill the pool with paused or runaway executions (whose workers stay taken for minutes), an account that
arrives later is served at once while the reserve lasts, and no account ever holds the whole pool. A
key is whatever identifies an account (the session's owner); `None` is a key like any other.

`SlotQueue` is the decision, without I/O; `FairSlots` is its trio face.
"""

import itertools
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

import trio


def reserve_for(capacity: int) -> int:
    """An eighth of the pool, and at least one worker once there are two."""
    return max(capacity // 8, 1) if capacity > 1 else 0


class SlotQueue:
    def __init__(self, capacity: int, reserve: int) -> None:
        self.capacity = capacity
        self.reserve = reserve
        self._held: dict[Hashable, int] = {}
        self._waiting: dict[int, Hashable] = {}  # ticket -> key, in arrival order
        self._tickets = itertools.count()

    @property
    def in_use(self) -> int:
        return sum(self._held.values())

    def held(self, key: Hashable) -> int:
        return self._held.get(key, 0)

    def request(self, key: Hashable) -> tuple[int, list[int]]:
        """Queue a request; returns its ticket and the tickets granted by it (possibly its own)."""
        ticket = next(self._tickets)
        self._waiting[ticket] = key
        return ticket, self._grant()

    def withdraw(self, ticket: int) -> None:
        """A waiter gave up before it was granted."""
        self._waiting.pop(ticket, None)

    def release(self, key: Hashable) -> list[int]:
        """A granted slot came back; returns the tickets granted in its place."""
        left = self._held.get(key, 0) - 1
        if left > 0:
            self._held[key] = left
        else:
            self._held.pop(key, None)
        return self._grant()

    def _grant(self) -> list[int]:
        granted = []
        while self.in_use < self.capacity:
            free = self.capacity - self.in_use
            eligible = [
                (self.held(key), ticket, key)
                for ticket, key in self._waiting.items()
                if not self.held(key) or free > self.reserve
            ]
            if not eligible:
                break
            _, ticket, key = min(eligible, key=lambda entry: entry[:2])
            del self._waiting[ticket]
            self._held[key] = self.held(key) + 1
            granted.append(ticket)
        return granted


class FairSlots:
    def __init__(self, capacity: int) -> None:
        self._queue = SlotQueue(capacity, reserve_for(capacity))
        self._wakeups: dict[int, trio.Event] = {}

    @property
    def most_one_account_holds(self) -> int:
        return max(1, self._queue.capacity - self._queue.reserve)

    @property
    def queue(self) -> SlotQueue:
        return self._queue

    @asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        await trio.lowlevel.checkpoint_if_cancelled()
        ticket, granted = self._queue.request(key)
        self._wake(ticket, granted)
        if ticket not in granted:
            granted_event = self._wakeups[ticket] = trio.Event()
            try:
                await granted_event.wait()
            except BaseException:
                self._wakeups.pop(ticket, None)
                if granted_event.is_set():
                    self._wake(None, self._queue.release(key))  # granted as we were cancelled: hand it on
                else:
                    self._queue.withdraw(ticket)
                raise
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
        try:
            yield
        finally:
            self._wake(None, self._queue.release(key))

    def _wake(self, own: int | None, granted: list[int]) -> None:
        for ticket in granted:
            if ticket != own:
                self._wakeups.pop(ticket).set()
