"""The one compiler every kind's CPU work takes turns at: compiling a source, building a registration from a
large schema, parsing a detected document. One at a time, so a flood of specs cannot take every core, and each
account waits for its own turn first, so one account's flood of previews delays others by one compile.
"""

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

import trio

from executor_mcp.storage.records import Owner as Principal
from executor_mcp.turns import Turns

T = TypeVar("T")


def caller_of(principal: Principal | None) -> tuple[str, str]:
    """Whose turn at the compiler: an account in its org, or the server itself rebuilding a catalog."""
    return (principal.org_id or "", principal.account_id) if principal is not None else ("", "")


class Compiler:
    def __init__(self) -> None:
        self._turns = Turns(trio.CapacityLimiter(1))

    def turn(self, caller: Principal | None) -> AbstractAsyncContextManager[None]:
        """The caller's turn, for work that leaves the event loop its own way (a child process)."""
        return self._turns.turn(caller_of(caller))

    async def run(self, caller: Principal | None, work: Callable[[], T]) -> T:
        """`work` in a worker thread, at the caller's turn."""
        async with self.turn(caller):
            return await trio.to_thread.run_sync(work)
