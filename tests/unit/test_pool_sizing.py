"""The warm pool's size: the recent peak of executions at once (at least a floor), let go a window later."""

from executor_mcp.sandbox.sizing import WarmPoolSizing


def sizing(floor: int = 1, ceiling: int = 64, window: float = 60.0) -> WarmPoolSizing:
    return WarmPoolSizing(floor=floor, ceiling=ceiling, window=window)


def test_an_idle_pool_keeps_the_floor() -> None:
    pool = sizing(floor=2)
    assert pool.peak(0.0) == 0
    assert pool.spares_missing(0.0, idle=0) == 2
    assert pool.spares_missing(0.0, idle=2) == 0
    assert pool.keeps(0.0, idle=1)
    assert not pool.keeps(0.0, idle=2)
    assert pool.next_change() is None


def test_a_steady_single_session_reuses_one_worker() -> None:
    """One execution at a time: nothing is started beside it, and its worker goes back warm."""
    pool = sizing(floor=1)
    for second in range(5):
        now = float(second)
        pool.acquired(now)
        assert pool.spares_missing(now, idle=0) == 0
        pool.released(now + 0.01)
        assert pool.keeps(now + 0.01, idle=0)
        assert not pool.keeps(now + 0.01, idle=1)


def test_a_burst_is_kept_warm_for_the_window_then_let_go() -> None:
    pool = sizing(floor=1, window=60.0)
    for _ in range(8):
        pool.acquired(10.0)
    assert pool.peak(10.0) == 8
    assert pool.spares_missing(10.0, idle=0) == 0  # all eight busy: nothing more is asked for yet
    for _ in range(8):
        pool.released(12.0)
    assert pool.in_use == 0
    assert pool.peak(12.0) == 8
    assert pool.spares_missing(12.0, idle=3) == 5  # five of the eight were not reusable: the burst comes again
    assert pool.keeps(12.0, idle=7)
    assert not pool.keeps(12.0, idle=8)
    assert pool.surplus(71.9, idle=8) == 0  # the peak was last held at 12.0: kept for a window from then
    assert pool.next_change() == 72.0
    assert pool.surplus(72.1, idle=8) == 7
    assert pool.peak(72.1) == 0
    assert pool.next_change() is None


def test_going_past_the_peak_raises_it() -> None:
    pool = sizing(floor=1)
    pool.acquired(0.0)
    pool.acquired(0.0)
    assert pool.wanted(0.0) == 2
    pool.acquired(1.0)
    assert pool.wanted(1.0) == 3
    for _ in range(3):
        pool.released(2.0)
    assert pool.wanted(2.0) == 3


def test_the_peak_steps_down_as_older_levels_expire() -> None:
    pool = sizing(floor=0, window=10.0)
    for _ in range(5):
        pool.acquired(0.0)
    for _ in range(3):
        pool.released(1.0)  # five until 1.0, then two
    pool.acquired(5.0)  # three at 5.0
    pool.released(6.0)
    pool.released(6.0)  # three until 6.0, one until now
    assert pool.peak(10.9) == 5
    assert pool.peak(11.1) == 3
    assert pool.peak(16.1) == 1  # the one still in use
    pool.released(20.0)
    assert pool.peak(29.9) == 1
    assert pool.peak(30.1) == 0


def test_the_pool_never_grows_past_its_ceiling() -> None:
    pool = sizing(floor=2, ceiling=4)
    for _ in range(4):
        pool.acquired(0.0)
    assert pool.spares_missing(0.0, idle=0) == 0
    assert not pool.keeps(0.0, idle=0)
    for _ in range(4):
        pool.released(1.0)
    assert pool.spares_missing(1.0, idle=0) == 4
    assert pool.keeps(1.0, idle=3)
    assert not pool.keeps(1.0, idle=4)
    assert pool.surplus(1.0, idle=6) == 2


def test_no_floor_means_no_spares_at_rest() -> None:
    pool = sizing(floor=0, window=5.0)
    assert pool.spares_missing(0.0, idle=0) == 0
    pool.acquired(0.0)
    pool.released(1.0)
    assert pool.spares_missing(1.0, idle=0) == 1
    assert pool.spares_missing(6.1, idle=0) == 0
    assert pool.surplus(6.1, idle=1) == 1


def test_a_peak_is_gone_at_the_very_moment_next_change_names() -> None:
    """The trim sleeps until `next_change`; at that instant the peak must have dropped, or it would spin."""
    pool = sizing(floor=1)
    for _ in range(3):
        pool.acquired(0.1)
    for _ in range(3):
        pool.released(0.3)
    change = pool.next_change()
    assert change is not None
    assert pool.surplus(change, idle=3) == 2
