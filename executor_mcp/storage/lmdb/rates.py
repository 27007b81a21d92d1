"""Rate-limit state (`interfaces.RateStore`) for the embedded backend: in this process's memory.

One process serves a data dir (`ownership.py`), and admin commands make no tool calls, so memory is where the
count is whole; writing it to LMDB would cost a synced commit per tool call for nothing. Memory is bounded: a key
whose TAT has passed is forgotten (`ratelimits.model.expired`: a fresh key would be admitted exactly as it is),
and past `MAX_KEYS` keys the ones nearest to expiry are dropped first, which may let a few calls through early
but never holds up anyone else's. A restart forgets every count, which errs the same way.
"""

import time
from collections.abc import Callable

from executor_mcp.ratelimits.model import Limit, RateLimited, expired, take

MAX_KEYS = 100_000
# Evicting keeps this fraction of the cap, so a flood of new keys sorts the table once per many inserts.
_KEPT_AFTER_EVICTION = 0.9


class MemoryRates:
    def __init__(self, clock: Callable[[], float] = time.monotonic, max_keys: int = MAX_KEYS) -> None:
        self._clock = clock
        self._max_keys = max_keys
        self._tats: dict[str, float] = {}

    async def take(self, limits: list[Limit]) -> RateLimited | None:
        now = self._clock()
        taken = take(self._tats, limits, now)
        if isinstance(taken, RateLimited):
            return taken
        self._tats.update(taken)
        if len(self._tats) > self._max_keys:
            self._evict(now)
        return None

    async def forget_expired(self) -> int:
        now = self._clock()
        gone = [key for key, tat in self._tats.items() if expired(tat, now)]
        for key in gone:
            del self._tats[key]
        return len(gone)

    def __len__(self) -> int:
        return len(self._tats)

    def _evict(self, now: float) -> None:
        kept = {key: tat for key, tat in self._tats.items() if not expired(tat, now)}
        keep = int(self._max_keys * _KEPT_AFTER_EVICTION)
        if len(kept) > keep:
            kept = dict(sorted(kept.items(), key=lambda item: item[1])[len(kept) - keep :])
        self._tats = kept
