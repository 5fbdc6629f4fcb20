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
            assert set(worker.parts) == {"renewal", "charging"}
            assert isinstance(worker.limiter, LocalGcraLimiter)
            assert worker.limiter_name == "in-process GCRA (no BILLING_REDIS_URL)"
            # The gateway call's timeout stays well inside the lease: a third of it here.
            assert worker.gateway.timeout == 20
            assert worker.charger.concurrency == 7 and worker.charger.poll_seconds == 0.05
            stop = asyncio.Event()
            tasks = worker.start(stop)
            assert set(tasks) == {"renewal", "charging"}
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
