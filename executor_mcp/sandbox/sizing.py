"""How many sandbox workers to keep warm: as many as the recent peak of executions at once needed.

Each execution holds a worker of its own, so a burst of N concurrent executions needs N workers. A pool
that keeps only a fixed handful warm makes every execution beyond them pay a whole worker start; one
that keeps everything it ever started makes an idle server heavy (each worker is ~18 MiB resident). So
the pool remembers the highest number of workers in use at once over the last `window` seconds (the
peak) and wants `max(floor, peak)` workers, busy and idle together (never more than `ceiling`):

- it starts spares ahead of demand until it has them: a burst that came recently is expected again;
- a worker whose execution ended goes back idle while it has no more than that; a steady load thus
  reuses its workers, never killing one and starting another per execution;
- idle workers past that are let go (`surplus`), which happens once the peak that kept them has been
  out of the window (`next_change` says when to look again).

No spare is kept beyond the peak: with the zygote a start costs a few milliseconds, paid once per
window by the execution that goes past the peak, while each spare would cost its memory all the time.

Plain state and arithmetic with the time passed in: no clock, no I/O. `pool.py` is its trio face.
"""

from collections import deque

import attrs

# Agents work in turns: a model thinks for seconds to tens of seconds between tool calls, so a team of
# agents that needed N workers at once will likely need them again within a minute. Past that, giving
# the memory back is worth more than a start, which the zygote makes cheap.
WARM_WINDOW = 60.0


@attrs.define
class WarmPoolSizing:
    floor: int
    ceiling: int
    window: float = WARM_WINDOW
    in_use: int = 0
    # (when, level): levels that were reached, each until `when`; strictly decreasing in level from the
    # front, increasing in time, so the front is the peak and expires first (a sliding-window maximum).
    _levels: deque[tuple[float, int]] = attrs.field(factory=deque)

    def acquired(self, now: float) -> None:
        self.in_use += 1
        self._note(now, self.in_use)

    def released(self, now: float) -> None:
        self._note(now, self.in_use)  # the level held until now: remembered from now on, not from its start
        self.in_use -= 1

    def peak(self, now: float) -> int:
        while self._levels and self._levels[0][0] + self.window <= now:  # as `next_change` computes it
            self._levels.popleft()
        return max(self.in_use, self._levels[0][1] if self._levels else 0)

    def wanted(self, now: float) -> int:
        """How many workers to have, busy and idle together."""
        return min(self.ceiling, max(self.floor, self.peak(now)))

    def spares_missing(self, now: float, idle: int) -> int:
        """How many more to start now, `idle` counting those already idle or being started."""
        return max(0, self.wanted(now) - self.in_use - idle)

    def keeps(self, now: float, idle: int) -> bool:
        """Whether one more idle worker (one whose execution ended, or a spare that just started) stays."""
        return self.in_use + idle < self.wanted(now)

    def surplus(self, now: float, idle: int) -> int:
        """How many of the `idle` workers to let go now."""
        return max(0, self.in_use + idle - self.wanted(now))

    def next_change(self) -> float | None:
        """When the peak next drops (and workers may become surplus); None while nothing is remembered."""
        return self._levels[0][0] + self.window if self._levels else None

    def _note(self, now: float, level: int) -> None:
        while self._levels and self._levels[-1][1] <= level:
            self._levels.pop()
        self._levels.append((now, level))
