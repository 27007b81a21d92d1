"""The rate store's contract, on every backend: a burst of the limit then a refusal with the wait, a refused call
charging no key, expired keys forgotten, and (on a shared backend) two instances that together admit no more than
the limit."""

import trio

from executor_mcp.ratelimits.model import Limit, RateLimited
from executor_mcp.storage.control import ControlPlane
from executor_mcp.storage.interfaces import RateStore


def account(name: str, per_minute: int) -> Limit:
    return Limit("account", f"account\x1facme\x1f{name}", per_minute)


ORG = Limit("org", "org\x1facme", 2)


async def test_a_burst_of_the_limit_then_a_refusal_with_its_wait(rates: RateStore) -> None:
    limit = account("alice", 2)
    assert await rates.take([limit]) is None
    assert await rates.take([limit]) is None
    refused = await rates.take([limit])
    assert isinstance(refused, RateLimited)
    assert refused.limit == limit
    assert 29.0 < refused.retry_after <= 30.0  # one interval, 60/2 s, less the moments since


async def test_a_refused_call_charges_none_of_its_keys(rates: RateStore) -> None:
    assert await rates.take([ORG, account("alice", 1)]) is None
    refused = await rates.take([ORG, account("alice", 1)])  # alice is full: the org is not charged
    assert isinstance(refused, RateLimited)
    assert refused.limit.scope == "account"
    assert await rates.take([ORG, account("bob", 1)]) is None  # the org's second call
    refused = await rates.take([ORG, account("carol", 1)])
    assert isinstance(refused, RateLimited)
    assert refused.limit == ORG


async def test_of_equal_waits_the_first_limit_is_named(rates: RateStore) -> None:
    limits = [Limit("org", "org\x1fties", 2), account("ties", 2)]
    assert await rates.take(limits) is None
    assert await rates.take(limits) is None
    refused = await rates.take(limits)
    assert isinstance(refused, RateLimited)
    assert refused.limit == limits[0]
    refused = await rates.take(list(reversed(limits)))
    assert isinstance(refused, RateLimited)
    assert refused.limit == limits[1]


async def test_expired_keys_are_forgotten(rates: RateStore) -> None:
    fast = account("alice", 60_000)  # one call a millisecond
    assert await rates.take([fast, ORG]) is None
    await trio.sleep(0.05)
    assert await rates.forget_expired() == 1  # the fast key's call is long past; the org's is not
    assert await rates.take([ORG]) is None  # the org's second call: its first was remembered
    assert isinstance(await rates.take([ORG]), RateLimited)
    assert await rates.take([]) is None


async def test_two_instances_together_admit_no_more_than_the_limit(planes: tuple[ControlPlane, ControlPlane]) -> None:
    limit = account("alice", 5)
    admitted: list[bool] = []

    async def call(plane: ControlPlane) -> None:
        admitted.append(await plane.rates.take([limit]) is None)

    async with trio.open_nursery() as nursery:
        for index in range(20):
            nursery.start_soon(call, planes[index % 2])
    assert admitted.count(True) == 5
