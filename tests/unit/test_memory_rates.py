"""The embedded backend's rate store keeps its memory bounded: expired keys go first, then those nearest expiry."""

from executor_mcp.ratelimits.model import Limit
from executor_mcp.storage.lmdb.rates import MemoryRates


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_past_its_cap_the_store_forgets_the_keys_nearest_expiry() -> None:
    clock = Clock()
    rates = MemoryRates(clock, max_keys=100)
    slow = Limit("org", "org\x1fslow", 1)  # one call a minute: its TAT stays far ahead
    assert await rates.take([slow]) is None
    for index in range(300):
        assert await rates.take([Limit("account", f"account\x1facme\x1f{index}", 60)]) is None
        clock.now += 0.001
    assert len(rates) <= 100
    assert await rates.take([slow]) is not None  # the key that mattered was kept
    kept = len(rates)
    clock.now += 61
    assert await rates.forget_expired() == kept
    assert len(rates) == 0
