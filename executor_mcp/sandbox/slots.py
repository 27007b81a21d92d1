"""Sharing the worker pool between accounts when there are more executions than workers.

A plain FIFO limiter lets whoever queues most hold most workers: an account that starts many
executions at once would be served before someone who asks for one. Here, when a worker frees up, it
goes to the waiting execution whose account holds the fewest workers (first come first served among
equals), and no account ever holds more than `per_key` workers, so however an account queues, the
rest of the pool keeps turning over for the others. A key is whatever identifies an account (the
session's owner); `None` is a key like any other.

`SlotQueue` is the decision, without I/O; `FairSlots` is its trio face.
"""

import itertools
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

import trio


class SlotQueue:
    def __init__(self, capacity: int, per_key: int) -> None:
        self.capacity = capacity
        self.per_key = per_key
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
            eligible = [
                (self.held(key), ticket, key) for ticket, key in self._waiting.items() if self.held(key) < self.per_key
            ]
            if not eligible:
                break
            _, ticket, key = min(eligible, key=lambda entry: entry[:2])
            del self._waiting[ticket]
            self._held[key] = self.held(key) + 1
            granted.append(ticket)
        return granted


class FairSlots:
    def __init__(self, capacity: int, per_key: int | None = None) -> None:
        """`per_key` defaults to all but one slot: one account can never hold the whole pool."""
        self._queue = SlotQueue(capacity, per_key or max(1, capacity - 1))
        self._wakeups: dict[int, trio.Event] = {}

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
