"""The gateway rate limiter: GCRA strictness over a sliding second, shared by processes, fail-closed."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time

import pytest
import redis
from prometheus_client import REGISTRY

from billing.limiter import LocalGcraLimiter, RedisGcraLimiter, pace_interval_us, window_us

from . import private_redis as _private_redis_module

private_redis = _private_redis_module.private_redis  # the fixture, by its name

pytestmark = pytest.mark.timeout(90)


def max_in_sliding_second(stamps: list[float]) -> int:
    """The most instants in any half-open window (t - 1 s, t]."""
    stamps = sorted(stamps)
    best = lo = 0
    for hi, t in enumerate(stamps):
        while stamps[lo] <= t - 1.0:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def test_max_in_sliding_second():
    assert max_in_sliding_second([0.0, 0.5, 0.99, 1.0, 1.2]) == 4
    assert max_in_sliding_second([0.0, 1.0, 2.0]) == 1


def test_window_and_pace():
    assert window_us(0.010) == 1_010_000
    assert pace_interval_us(200, 0.0, 0.0) == 5000
    assert pace_interval_us(200, 0.010, 0.10) == int(1_010_000 / (200 * 1.10))  # paced faster than the log
    with pytest.raises(ValueError):
        pace_interval_us(0, 0.01)
    with pytest.raises(ValueError):
        LocalGcraLimiter(10, guard_seconds=0.01, max_late_seconds=0.02)  # late calls could break the window


def test_local_gcra_is_strict_and_keeps_up():
    rate, seconds = 25, 2.5

    async def scenario():
        limiter = LocalGcraLimiter(rate)
        stamps: list[float] = []
        end = time.monotonic() + seconds

        async def caller():
            while True:
                await limiter.acquire()
                now = time.monotonic()
                if now >= end:
                    return
                stamps.append(now)

        await asyncio.gather(*(caller() for _ in range(20)))
        await limiter.close()
        return stamps

    stamps = asyncio.run(scenario())
    assert max_in_sliding_second(stamps) <= rate
    assert len(stamps) >= 0.7 * rate * seconds  # late wake-ups drop slots on a busy host


_ACQUIRER = textwrap.dedent("""
    import asyncio, json, sys, time
    from billing.limiter import RedisGcraLimiter

    async def main(url, rate, tasks, start, seconds):
        limiter = RedisGcraLimiter(url, rate, key="test:gcra")
        stamps = []
        await asyncio.sleep(max(0.0, start - time.time()))
        end = time.monotonic() + seconds
        async def caller():
            while True:
                await limiter.acquire()
                now = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process on the host
                if now >= end:
                    return
                stamps.append(now)
        await asyncio.gather(*(caller() for _ in range(tasks)))
        await limiter.close()
        print(json.dumps(stamps))

    url, rate, tasks, start, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    asyncio.run(main(url, rate, tasks, start, seconds))
""")


def test_redis_gcra_is_strict_across_processes(redis_url):
    rate, seconds, processes = 30, 3.0, 3
    start = time.time() + 1.5  # every process starts asking at the same instant
    procs = [subprocess.Popen([sys.executable, "-c", _ACQUIRER, redis_url, str(rate), "6", str(start), str(seconds)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(processes)]
    per_process = []
    for proc in procs:
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err.decode()
        per_process.append(json.loads(out))
    stamps = [t for p in per_process for t in p]
    assert max_in_sliding_second(stamps) <= rate
    assert len(stamps) >= 0.7 * rate * seconds  # late wake-ups drop slots on a busy host
    assert all(len(p) >= 0.15 * len(stamps) for p in per_process)  # every process got a share


def test_redis_state_keeps_microseconds(redis_url):
    async def scenario():
        limiter = RedisGcraLimiter(redis_url, 1000, key="test:precision")
        for _ in range(3):
            await limiter.acquire()
        await limiter.close()

    asyncio.run(scenario())
    client = redis.Redis.from_url(redis_url)
    tat = client.get("{test:precision}:pace").decode()
    assert tat.isdigit() and len(tat) >= 16  # microseconds since 1970, not 1.7e+15
    logged = client.zrange("{test:precision}:log", 0, -1, withscores=True)
    assert len(logged) == 3 and all(score == int(score) and score > 1.7e15 for _, score in logged)


def test_the_log_refuses_past_the_rate_whatever_the_pacing(redis_url):
    """The use step alone is the limit: callers that skip pacing are still refused past `rate`."""
    rate = 5

    async def scenario():
        limiter = RedisGcraLimiter(redis_url, rate, key="test:log")
        results = [await limiter.admit(f"t{i}", None, 10_000) for i in range(8)]
        await limiter.close()
        return results

    results = asyncio.run(scenario())
    assert [granted for granted, _, _ in results] == [True] * rate + [False] * 3
    assert all(0 < retry <= 1_010_000 for _, retry, _ in results[rate:])


def test_a_full_log_grants_the_instant_it_has_room_within_the_horizon(redis_url):
    """No slot lost to pacing's granularity: a caller finding the log full is granted at the
    instant the log has room (a second after the entry that leaves), if that is within the
    horizon; further ahead it is refused."""
    rate = 5

    async def scenario():
        limiter = RedisGcraLimiter(redis_url, rate, key="test:ahead")
        firsts = [await limiter.admit(f"t{i}", None, 10_000) for i in range(rate)]
        too_early = await limiter.admit("early", None, 10_000)
        await asyncio.sleep(1.010 - limiter.horizon_us / 1_000_000 / 2)  # the first entry leaves within the horizon
        ahead = await limiter.admit("ahead", None, 10_000)
        behind = await limiter.admit("behind", None, 10_000)
        await limiter.close()
        return limiter.horizon_us, firsts, too_early, ahead, behind

    horizon_us, firsts, too_early, ahead, behind = asyncio.run(scenario())
    client = redis.Redis.from_url(redis_url)
    assert all(granted for granted, _, _ in firsts)
    assert too_early[0] is False and 0 < too_early[1] <= 1_010_000 - horizon_us  # a second away: refused
    granted, at, now = ahead
    first_entry = int(client.zscore("{test:ahead}:log", "t0"))
    assert granted and at == first_entry + 1_000_000 and 0 < at - now <= horizon_us
    assert int(client.zscore("{test:ahead}:log", "ahead")) == at + 10_000  # logged from its grant instant
    granted, at2, _ = behind
    assert granted and at2 == int(client.zscore("{test:ahead}:log", "t1")) + 1_000_000  # the next one leaves next


def test_a_full_log_hands_each_instant_it_frees_to_a_caller_ahead(redis_url):
    """At 200/s a caller finding the log full is granted the instant the log frees up to a quarter
    of a second ahead (HORIZON_SECONDS, issue 32): capacity freed in a bunch (calls granted together
    a second earlier) goes to callers already waiting for it, one instant each, instead of being
    refused because the next one is more than two pacing intervals (9 ms) away."""
    rate = 200

    async def scenario():
        limiter = RedisGcraLimiter(redis_url, rate, key="test:bunch")
        firsts = [await limiter.admit(f"t{i}", None, 10_000) for i in range(rate)]  # one bunch
        client = redis.Redis.from_url(redis_url)
        entries = sorted(int(score) for _, score in client.zrange("{test:bunch}:log", 0, -1, withscores=True))
        # Ask 0.2 s before the first entry leaves (on Redis's clock): past the old horizon (9 ms),
        # within the new one; the asks follow one another (one round trip each).
        await asyncio.sleep(max(0.0, (entries[0] + 1_000_000 - 200_000 - firsts[-1][2]) / 1_000_000))
        ahead = [await limiter.admit(f"a{i}", None, 10_000) for i in range(3)]
        await limiter.close()
        return limiter.horizon_us, firsts, entries, ahead

    horizon_us, firsts, entries, ahead = asyncio.run(scenario())
    assert horizon_us == 250_000
    assert all(granted for granted, _, _ in firsts)
    for i, (granted, at, now) in enumerate(ahead):
        assert granted, f"ask {i}: granted ahead, not refused"
        if at > now:  # (a process descheduled past the instant is granted at once: nothing to check)
            assert at == entries[i] + 1_000_000, f"ask {i}: the {i}-th instant the log frees"
    granted, at, now = ahead[0]
    assert 9_200 < at - now <= horizon_us, "the first ask: further ahead than two pacing intervals"


def test_calls_made_shorten_their_entries_never_lengthen(redis_url):
    """A caller that checked its promise sends, with its next go-ahead, the bound its call arrives
    by: the entry is lowered to it (the log then frees sooner), never raised, never re-added."""
    async def scenario():
        limiter = RedisGcraLimiter(redis_url, 10, key="test:bounds")
        _, at_a, _ = await limiter.admit("a", None, 50_000)
        _, at_b, _ = await limiter.admit("b", None, 50_000)
        await limiter.admit("c", None, 50_000, [("a", at_a + 7_000), ("b", at_b + 90_000), ("gone", 1)])
        # A grant told that its call was sent keeps that bound and sends it with the next go-ahead.
        grant = await limiter.use()
        assert grant and not limiter._bounds
        grant.sent()
        (token, bound), = list(limiter._bounds)
        assert token == grant.token
        await limiter.use()
        await limiter.close()
        return at_a, at_b, token, bound

    at_a, at_b, token, bound = asyncio.run(scenario())
    client = redis.Redis.from_url(redis_url)
    assert int(client.zscore("{test:bounds}:log", "a")) == at_a + 7_000, "lowered to the bound"
    assert int(client.zscore("{test:bounds}:log", "b")) == at_b + 50_000, "a higher bound changes nothing"
    assert client.zscore("{test:bounds}:log", "gone") is None, "a bound never adds an entry"
    assert int(client.zscore("{test:bounds}:log", token)) == bound, "use() sent its call's bound"


def _bench_fixed_window():
    """The seed's counter lives with the charge benchmark, outside the package: load it by path."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "charge" / "fixed_window.py"
    spec = importlib.util.spec_from_file_location("bench_fixed_window", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FixedWindowLimiter


def test_the_fixed_window_is_not_in_the_package():
    import billing.limiter

    assert not hasattr(billing.limiter, "FixedWindowLimiter")


def test_fixed_window_lets_two_limits_through_across_a_boundary(redis_url):
    """The seed's counter: `rate` at the end of one second and `rate` at the start of the next."""
    FixedWindowLimiter = _bench_fixed_window()
    rate = 10

    async def scenario():
        limiter = FixedWindowLimiter(redis_url, rate, key="test:fixed")
        now = time.time()
        await asyncio.sleep((int(now) + 1.7) - now if now % 1 > 0.4 else int(now) + 0.7 - now)
        stamps = []
        for _ in range(rate):
            await limiter.acquire()
            stamps.append(time.monotonic())
        await asyncio.sleep(max(0.0, int(time.time()) + 1.05 - time.time()))
        for _ in range(rate):
            await limiter.acquire()
            stamps.append(time.monotonic())
        await limiter.close()
        return stamps

    stamps = asyncio.run(scenario())
    assert max_in_sliding_second(stamps) == 2 * rate


def _sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_redis_down_pauses_then_resumes_by_itself(private_redis, caplog):
    rate = 40

    async def scenario():
        limiter = RedisGcraLimiter(private_redis.url, rate, key="test:pause", max_backoff_seconds=0.5)
        stamps: list[float] = []
        done = asyncio.Event()

        async def caller():
            while not done.is_set():
                await limiter.acquire()
                stamps.append(time.monotonic())

        pauses_before = _sample("billing_limiter_pauses_total")
        callers = [asyncio.create_task(caller()) for _ in range(5)]
        await asyncio.sleep(1.0)
        assert stamps, "no slot granted while Redis was up"

        private_redis.stop()
        stopped_at = time.monotonic()
        await asyncio.sleep(2.0)
        during = [t for t in stamps if t > stopped_at + 0.3]  # slots reserved before the stop may land
        paused_gauge = _sample("billing_limiter_paused")
        paused_flag = limiter.paused

        await asyncio.to_thread(private_redis.start)
        restarted_at = time.monotonic()
        while not [t for t in stamps if t > restarted_at] and time.monotonic() < restarted_at + 5:
            await asyncio.sleep(0.05)
        resumed_after = min((t for t in stamps if t > restarted_at), default=None)
        await asyncio.sleep(0.5)
        done.set()
        await asyncio.gather(*callers)
        await limiter.close()
        return (during, paused_gauge, paused_flag, _sample("billing_limiter_pauses_total") - pauses_before,
                resumed_after and resumed_after - restarted_at, _sample("billing_limiter_paused"), limiter.paused)

    with caplog.at_level("WARNING", logger="billing.limiter"):
        during, paused_gauge, paused_flag, pauses, resumed_in, gauge_after, flag_after = asyncio.run(scenario())
    assert during == []  # fail closed: no call passes while the limit cannot be checked
    assert paused_gauge == 1 and paused_flag
    assert pauses == 1  # one pause, however many callers noticed it
    assert resumed_in is not None and resumed_in < 3
    assert gauge_after == 0 and not flag_after
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("charging paused" in m for m in warnings) == 1
    assert sum("charging resumed" in m for m in warnings) == 1


def test_a_gated_request_shortens_its_entry_once_its_bytes_are_sent(redis_url):
    """Through a real HTTP call (GatewayClient against the simulator): the request tells its grant
    when its bytes went out, and the next go-ahead lowers the first call's entry from grant +
    budget to that instant + post, never below the grant."""
    from billing.gateway.client import GatewayClient
    from billing.gateway.simulator import GatewaySimulator

    async def scenario():
        limiter = RedisGcraLimiter(redis_url, 50, key="test:sent")
        grants = []

        async def gate():
            grant = await limiter.use()
            grants.append(grant)
            return grant

        async with GatewaySimulator(rate=50) as sim:
            client = GatewayClient(sim.url, timeout=5)
            first = await client.charge("k-sent-1", 1, 100, "USD", gate=gate)
            second = await client.charge("k-sent-2", 1, 100, "USD", gate=gate)
            await client.close()
        await limiter.close()
        return limiter, grants, first, second

    limiter, grants, first, second = asyncio.run(scenario())
    assert first.outcome == "SUCCEEDED" and second.outcome == "SUCCEEDED"
    client = redis.Redis.from_url(redis_url)
    entry = int(client.zscore("{test:sent}:log", grants[0].token))
    logged = grants[0]._logged_us  # grant + budget + the send margin, what it held before
    post_us = int(limiter.lateness.post * 1_000_000)
    assert logged - grants[0].at_us >= 100_000, "logged with the send margin until told"
    assert entry < grants[0].at_us + 50_000, "the first call's entry was not shortened"
    assert entry >= grants[0].at_us + post_us, "below grant + post"
    assert int(client.zscore("{test:sent}:log", grants[1].token)) == grants[1]._logged_us, "not yet told"
