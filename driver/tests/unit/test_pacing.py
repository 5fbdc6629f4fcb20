"""The limiter's arithmetic, without Redis: windows, pacing, the clock offset, the lateness budget."""

from __future__ import annotations

import pytest

from billing.limiter.two_step import ClockOffset, Lateness, pace_interval_us, window_us
from billing.worker.charging import default_concurrency


def test_window_is_one_second_plus_the_guard():
    assert window_us(0) == 1_000_000
    assert window_us(0.05) == 1_050_000
    with pytest.raises(ValueError):
        window_us(-0.001)


def test_pacing_is_a_little_faster_than_the_window_allows():
    # 200/s over a 1 s window, 10% oversubscribed: one caller every 1e6 / 220 us.
    assert pace_interval_us(200, 0, 0.10) == int(1_000_000 / 220)
    assert pace_interval_us(200, 0, 0.0) == 5_000
    assert pace_interval_us(1e9, 0, 0.0) == 1  # never zero
    with pytest.raises(ValueError):
        pace_interval_us(0, 0)


def test_clock_offset_brackets_the_remote_clock():
    off = ClockOffset()
    # Local asks at 10.0, answers at 10.2; remote said 110.1: offset in [99.9, 100.1].
    lo, hi = off.add(10.0, 10.2, 110.1)
    assert (lo, hi) == pytest.approx((99.9, 100.1))
    # A tighter round trip narrows the interval (the intersection of both brackets).
    lo, hi = off.add(10.5, 10.52, 110.51)
    assert lo == pytest.approx(99.99) and hi == pytest.approx(100.01)
    assert lo <= hi


def test_clock_offset_forgets_old_samples_and_survives_a_step():
    off = ClockOffset()
    off.add(0.0, 0.01, 100.0)
    # 3 s later the first sample is past the horizon: only the new bracket counts.
    lo, hi = off.add(3.0, 3.2, 103.1)
    assert (lo, hi) == pytest.approx((99.9, 100.1))
    # The remote clock steps by 50 s: the brackets no longer meet, trust only the last trip.
    lo, hi = off.add(3.3, 3.31, 153.3)
    assert (lo, hi) == pytest.approx((150.0 - 0.01, 150.0))


def test_lateness_budget_grows_with_what_is_seen_and_stays_capped():
    late = Lateness(floor=0.005, post=0.001, ceiling=0.25)
    assert late.budget == pytest.approx(0.006)
    late.add(0.05)  # later than the budget allows: it adapts at once
    assert late.budget == pytest.approx(0.001 + 0.05 * 1.25)
    late.add(10.0)
    assert late.budget == pytest.approx(0.001 + 0.25)  # capped
    for _ in range(300):  # a long calm: the budget comes back down to the floor
        late.add(0.0)
    assert late.budget == pytest.approx(0.006)


@pytest.mark.parametrize("rate,expected", [(1, 4), (200, 300), (1_000_000, 5000)])
def test_default_concurrency(rate, expected):
    assert default_concurrency(rate) == expected


# -- the one GCRA pace step (billing.limiter.gcra), shared by the gateway's in-process store and
# the HTTP API's per-key limit (billing.limiter.keyed)


def test_pace_grants_up_to_the_burst_then_says_how_long_to_wait():
    from billing.limiter.gcra import pace

    interval, max_wait = 1_000, 2_000  # a burst of 3
    tat, now, granted_at = 0, 10_000, []
    for _ in range(3):
        granted, wait, tat = pace(tat, now, interval, max_wait)
        assert granted == 1
        granted_at.append(wait)
    assert granted_at == [0, 1_000, 2_000]
    assert pace(tat, now, interval, max_wait) == (0, 1_000, tat)  # refused: the state is unchanged
    assert pace(tat, now + 1_000, interval, max_wait)[0] == 1  # one interval later: room again
    assert pace(0, now, interval, max_wait, wanted=5)[:2] == (3, 0)  # a batch gets what fits


def test_the_per_key_limit_in_process_paces_each_key_alone():
    import asyncio

    from billing.limiter import KeyRateLimiter

    limiter = KeyRateLimiter(rate=1.0, burst=2)  # no Redis: this process

    async def run():
        first = [await limiter.check("bk_a") for _ in range(3)]
        other = await limiter.check("bk_b")
        return first, other

    (a1, a2, a3), b1 = asyncio.run(run())
    assert a1 == 0 and a2 == 0 and 0 < a3 <= 1.0
    assert b1 == 0
    with pytest.raises(ValueError):
        KeyRateLimiter(rate=0, burst=1)
