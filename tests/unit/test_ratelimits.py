"""The rate limit's arithmetic without I/O: a burst of N, then one call every 60/N seconds; a refused call charges
no key; the longest wait is the one reported; a passed TAT is as good as forgotten."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executor_mcp.ratelimits.model import Limit, RateLimited, expired, limits_for, message, take

ORG = Limit("org", "org\x1facme", 3)
ACCOUNT = Limit("account", "account\x1facme\x1falice", 2)


def test_a_fresh_key_takes_a_burst_of_its_limit_then_one_call_per_interval() -> None:
    tats: dict[str, float] = {}
    for _ in range(3):
        taken = take(tats, [ORG], now=100.0)
        assert isinstance(taken, dict)
        tats.update(taken)
    refused = take(tats, [ORG], now=100.0)
    assert refused == RateLimited(ORG, 20.0)  # the next slot: one interval (60/3 s) later
    later = take(tats, [ORG], now=119.9)
    assert isinstance(later, RateLimited)
    assert later.retry_after == pytest.approx(0.1)
    assert isinstance(take(tats, [ORG], now=120.0), dict)


def test_a_refused_call_charges_no_key_and_names_the_longest_wait() -> None:
    tats = {ORG.key: 100.0 + 60.0, ACCOUNT.key: 100.0}  # the org is full, the account is not
    refused = take(tats, [ORG, ACCOUNT], now=100.0)
    assert refused == RateLimited(ORG, 20.0)
    assert tats == {ORG.key: 160.0, ACCOUNT.key: 100.0}
    both = {ORG.key: 160.0, ACCOUNT.key: 160.0}
    assert take(both, [ORG, ACCOUNT], now=100.0) == RateLimited(ACCOUNT, 30.0)


@given(st.lists(st.floats(min_value=0, max_value=600), min_size=1, max_size=60), st.integers(1, 30))
def test_no_minute_ever_admits_more_than_the_limit_plus_its_burst(offsets: list[float], per_minute: int) -> None:
    limit = Limit("account", "k", per_minute)
    tats: dict[str, float] = {}
    admitted = []
    for now in sorted(offsets):
        taken = take(tats, [limit], now)
        if isinstance(taken, dict):
            tats.update(taken)
            admitted.append(now)
    for start in admitted:
        assert sum(1 for at in admitted if start <= at < start + 60) <= 2 * per_minute


def test_a_passed_tat_is_as_good_as_forgotten() -> None:
    assert expired(99.0, now=100.0)
    assert take({ORG.key: 99.0}, [ORG], now=100.0) == take({}, [ORG], now=100.0)


def test_limits_of_none_or_zero_are_none_and_keys_never_collide_across_scopes() -> None:
    assert limits_for("acme", "alice", "orders\x1forg\x1f\x1fmain", org=None, account=0, per_connection=5) == [
        Limit("connection", "connection\x1facme\x1forders\x1forg\x1f\x1fmain", 5)
    ]
    every = limits_for("acme", "alice", "c", org=1, account=1, per_connection=1)
    assert len({limit.key for limit in every}) == 3
    assert "at most 3 tool calls a minute for this organization" in message(RateLimited(ORG, 1.5))
