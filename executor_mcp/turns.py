"""Turns per caller in front of a shared, one-at-a-time resource (a worker thread, the compiler).

Each caller first waits for its own turn, then for the resource: a flood of requests from one caller
queues behind its own author, and another caller waits for at most the one running and one more of the
flood's. A caller's queue exists only while someone waits in it, so callers cost nothing once gone.
"""

from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

import attrs
import trio


@attrs.define
class _Queue:
    lock: trio.Lock = attrs.Factory(trio.Lock)
    waiting: int = 0


class Turns:
    def __init__(self, resource: trio.CapacityLimiter) -> None:
        self.resource = resource
        self._queues: dict[Hashable, _Queue] = {}

    @asynccontextmanager
    async def turn(self, caller: Hashable) -> AsyncIterator[None]:
        """Hold the caller's turn and the resource for the block."""
        queue = self._queues.setdefault(caller, _Queue())
        queue.waiting += 1
        try:
            async with queue.lock, self.resource:
                yield
        finally:
            queue.waiting -= 1
            if not queue.waiting:
                del self._queues[caller]
