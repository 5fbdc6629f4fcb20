"""build_worker: the one composition of the worker's parts (billing.worker.process)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest

from billing.clock import SimulatedClock
from billing.config import Settings
from billing.limiter import LocalGcraLimiter, RedisGcraLimiter
from billing.worker.process import build_worker

T0 = datetime(2026, 10, 1, 12, 0, tzinfo=timezone.utc)


def test_the_parts_follow_the_switches_and_close(db_url):
    settings = Settings(database_url=db_url, gateway_rate=50, charge_lease_seconds=60, gateway_timeout_seconds=30)

    async def scenario():
        worker = await build_worker(settings, clock=SimulatedClock(T0), relay=False, local_limiter="quiet",
                                    concurrency=7, charge_poll_seconds=0.05)
        try:
            assert set(worker.parts) == {"renewal", "charging", "refunds"}
            assert isinstance(worker.limiter, LocalGcraLimiter)
            assert worker.limiter_name == "in-process GCRA (no BILLING_REDIS_URL)"
            # The gateway call's timeout stays well inside the lease: a third of it here.
            assert worker.gateway.timeout == 20
            assert worker.charger.concurrency == 7 and worker.charger.poll_seconds == 0.05
            stop = asyncio.Event()
            tasks = worker.start(stop)
            assert set(tasks) == {"renewal", "charging", "refunds"}
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks.values()), 10)
        finally:
            await worker.close()
        assert worker.pool.closed

        nothing = await build_worker(settings, clock=SimulatedClock(T0), renew=False, charge=False, relay=False)
        assert nothing.parts == {} and nothing.pool is None
        assert await nothing.run(asyncio.Event()) == 0

    asyncio.run(scenario())


def test_the_limiter_is_chosen_from_the_settings(db_url, redis_url):
    async def scenario():
        shared = await build_worker(Settings(database_url=db_url, redis_url=redis_url), clock=SimulatedClock(T0),
                                    renew=False, relay=False, limiter_key="test:process")
        try:
            assert isinstance(shared.limiter, RedisGcraLimiter)
            assert shared.limiter.key == "test:process"
            assert shared.limiter_name.startswith("Redis GCRA")
        finally:
            await shared.close()
        with pytest.raises(ValueError, match="needs Redis"):
            await build_worker(Settings(database_url=db_url), clock=SimulatedClock(T0), renew=False, relay=False,
                               local_limiter="refuse")
        given = LocalGcraLimiter(10)
        worker = await build_worker(Settings(database_url=db_url, redis_url=redis_url), clock=SimulatedClock(T0),
                                    renew=False, relay=False, limiter=given)
        try:
            assert worker.limiter is given  # a limiter passed in is used as it is, and left open
        finally:
            await worker.close()

    asyncio.run(scenario())


def test_the_limiter_takes_its_tuning_from_the_settings(monkeypatch):
    from billing.limiter import limiter_from_settings, pace_interval_us

    default = limiter_from_settings(Settings(), local="quiet")
    assert (default.guard_seconds, default.max_late_seconds) == (0.010, 0.004)
    assert default.interval_us == pace_interval_us(200, 0.010, 0.10)

    monkeypatch.setenv("BILLING_LIMITER_GUARD_MS", "20")
    monkeypatch.setenv("BILLING_LIMITER_MAX_LATE_MS", "5")
    monkeypatch.setenv("BILLING_LIMITER_PACE_OVERSUBSCRIPTION", "0.2")
    monkeypatch.setenv("BILLING_GATEWAY_RATE", "300")
    monkeypatch.setenv("BILLING_WORKER_METRICS_PORT", "9100")
    monkeypatch.setenv("BILLING_LOG_JSON", "yes")
    settings = Settings.from_env()
    assert (settings.worker_metrics_port, settings.log_json) == (9100, True)
    tuned = limiter_from_settings(settings, local="quiet")
    assert (tuned.rate, tuned.guard_seconds, tuned.max_late_seconds) == (300, 0.020, 0.005)
    assert tuned.interval_us == pace_interval_us(300, 0.020, 0.2)

    monkeypatch.setenv("BILLING_LOG_JSON", "maybe")
    with pytest.raises(ValueError, match="BILLING_LOG_JSON"):
        Settings.from_env()
