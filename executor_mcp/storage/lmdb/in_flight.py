"""Executions in progress (`interfaces.InFlightStore`) for the embedded backend: in this process's memory.

One process serves a data dir, so what it runs is the whole count, and a restart (which ends every running
execution and revives the paused ones into places taken `beyond` the ceilings) starts from nothing. Memory is
bounded by the executions admitted, which the ceilings and the sandbox pool bound.
"""

import attrs

from executor_mcp.ratelimits.in_flight import Ceiling, Full, Held, first_full


@attrs.define
class _Place:
    keys: tuple[str, ...]
    waits: int = 0
    pause_ids: tuple[str, ...] = ()
    marked: int = 0


class MemoryInFlight:
    def __init__(self) -> None:
        self._places: dict[str, _Place] = {}
        self._by_key: dict[str, dict[str, None]] = {}  # each key's holders, in the order they came

    async def enter(self, instance: str, holder: str, ceilings: list[Ceiling], *, beyond: bool = False) -> Full | None:
        if holder in self._places:
            return None
        if not beyond:
            full = first_full(ceilings, {ceiling.key: self._held(ceiling.key) for ceiling in ceilings})
            if full is not None:
                return full
        self._places[holder] = _Place(tuple(ceiling.key for ceiling in ceilings))
        for ceiling in ceilings:
            self._by_key.setdefault(ceiling.key, {})[holder] = None
        return None

    async def mark(self, holder: str, waits: int, pause_ids: tuple[str, ...], version: int) -> None:
        place = self._places.get(holder)
        if place is not None and version > place.marked:
            place.waits, place.pause_ids, place.marked = waits, pause_ids, version

    async def leave(self, holder: str) -> None:
        place = self._places.pop(holder, None)
        for key in place.keys if place is not None else ():
            holders = self._by_key[key]
            holders.pop(holder, None)
            if not holders:
                del self._by_key[key]

    async def clear(self, instance: str) -> int:
        return 0  # a new process starts with nothing in memory

    async def sweep(self) -> int:
        return 0  # every place here was given back by `leave`, which cannot fail

    def _held(self, key: str) -> Held:
        places = [self._places[holder] for holder in self._by_key.get(key, ())]
        paused = [place for place in places if place.waits]
        return Held(
            running=len(places) - len(paused),
            paused=len(paused),
            pause_ids=tuple(pause_id for place in paused for pause_id in place.pause_ids),
        )
