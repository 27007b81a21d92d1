"""Background work that survives: a failure is logged and tried again later, never the end of its owner.

A background task (the retention sweeper, the admin-request poller, a stream keeper, the pool's spare
starter) runs in a nursery whose other tasks serve everyone. If one of them raised, the nursery would
cancel all of them: one unreadable record, a full map or a process out of descriptors would take down
a session or the whole server. So each attempt's failure is a log line and a wait that grows with each
failure in a row, and cancellation (the owner ending) is the only way out. Failing records are skipped
where they are read (the storage layer); what reaches here is a step that could not be done right now.
"""

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import NoReturn, TypeVar

import attrs
import trio

log = logging.getLogger(__name__)

T = TypeVar("T")


@attrs.frozen
class Backoff:
    """Waits between failed attempts: `first`, growing by `factor` per failure in a row, up to `ceiling`."""

    first: float = 0.1
    factor: float = 2.0
    ceiling: float = 30.0

    def delays(self) -> Iterator[float]:
        delay = self.first
        while True:
            yield delay
            delay = min(delay * self.factor, self.ceiling)


BACKOFF = Backoff()


def _log_failure(what: str, exc: Exception, retry_in: float | None) -> None:
    later = f"; retrying in {retry_in:.1f} s" if retry_in is not None else ""
    if isinstance(exc, OSError):
        # Resource trouble (descriptors, disk): the message says it all; a traceback per retry would not.
        log.warning("%s failed: %s%s", what, exc, later)
    else:
        log.error("%s failed%s", what, later, exc_info=exc)


async def retrying(what: str, attempt: Callable[[], Awaitable[T]], backoff: Backoff = BACKOFF) -> T:
    """`attempt()` until it succeeds; only cancellation ends it otherwise."""
    delays = backoff.delays()
    while True:
        try:
            return await attempt()
        except Exception as exc:
            delay = next(delays)
            _log_failure(what, exc, delay)
        await trio.sleep(delay)


async def once(what: str, attempt: Callable[[], Awaitable[object]]) -> bool:
    """One attempt whose failure is logged and left for a later occasion to repair; False if it failed."""
    try:
        await attempt()
    except Exception as exc:
        _log_failure(what, exc, None)
        return False
    return True


async def forever(
    what: str, step: Callable[[], Awaitable[object]], every: float, backoff: Backoff = BACKOFF
) -> NoReturn:
    """`step()` every `every` seconds, for as long as the owner lives; a failing step is retried with backoff."""
    while True:
        await retrying(what, step, backoff)
        await trio.sleep(every)
