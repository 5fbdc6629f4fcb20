"""The clock and the settings, without services."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from billing.clock import SimulatedClock, sleep_or_stop
from billing.config import Settings


def test_simulated_clock_moves_only_when_told():
    start = datetime(2026, 9, 1, tzinfo=timezone.utc)
    clock = SimulatedClock(start)
    assert clock.now() == start == clock.now()
    assert clock.advance(timedelta(hours=1)) == start + timedelta(hours=1)
    clock.set(datetime(2026, 9, 1, 12, tzinfo=timezone(timedelta(hours=3))))
    assert clock.now() == datetime(2026, 9, 1, 9, tzinfo=timezone.utc)
    assert clock.now().utcoffset() == timedelta(0)
    with pytest.raises(ValueError):
        SimulatedClock(datetime(2026, 9, 1))


def test_sleep_or_stop():
    async def scenario():
        stop = asyncio.Event()
        assert await sleep_or_stop(stop, 0.01) is False
        stop.set()
        assert await sleep_or_stop(stop, 10) is True

    asyncio.run(scenario())


def test_settings_read_the_environment(monkeypatch):
    for name in ("BILLING_GATEWAY_RATE", "BILLING_CHARGE_LEASE_SECONDS", "BILLING_REDIS_URL", "BILLING_LOG_JSON"):
        monkeypatch.delenv(name, raising=False)
    assert Settings.from_env().gateway_rate == Settings.gateway_rate
    monkeypatch.setenv("BILLING_GATEWAY_RATE", "1000")
    monkeypatch.setenv("BILLING_CHARGE_LEASE_SECONDS", "90.5")
    monkeypatch.setenv("BILLING_REDIS_URL", "")
    monkeypatch.setenv("BILLING_LOG_JSON", "yes")
    s = Settings.from_env()
    assert (s.gateway_rate, s.charge_lease_seconds, s.redis_url, s.log_json) == (1000, 90.5, None, True)


@pytest.mark.parametrize("name,value", [("BILLING_GATEWAY_RATE", "fast"), ("BILLING_CHARGE_LEASE_SECONDS", "1m"),
                                        ("BILLING_LOG_JSON", "maybe")])
def test_settings_refuse_bad_values_by_name(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        Settings.from_env()


def test_overrides_ignore_none():
    s = Settings().with_overrides(gateway_rate=None, kafka_topic="t")
    assert s.gateway_rate == Settings.gateway_rate and s.kafka_topic == "t"
