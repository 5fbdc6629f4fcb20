"""billing.worker.shards without a database: the node URL, the setting, the groups a worker claims in."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from billing.clock import SimulatedClock
from billing.config import Settings
from billing.worker.shards import Lease, ShardLeases, node_url

T0 = datetime(2027, 1, 1, tzinfo=timezone.utc)


def test_node_url_keeps_user_password_database_and_options():
    url = "postgresql://billing:s3cret@coordinator.internal:5432/billing?sslmode=require&application_name=w"
    info = psycopg.conninfo.conninfo_to_dict(node_url(url, "10.0.0.7", 6432))
    assert info == {"user": "billing", "password": "s3cret", "host": "10.0.0.7", "port": "6432", "dbname": "billing",
                    "sslmode": "require", "application_name": "w"}
    assert node_url(url, None, None) == url  # a single PostgreSQL: the configured database itself


def test_the_setting_is_auto_on_or_off(monkeypatch):
    assert Settings().shard_claims == "auto"
    monkeypatch.setenv("BILLING_SHARD_CLAIMS", " ON ")
    monkeypatch.setenv("BILLING_SHARD_LEASE_SECONDS", "12")
    monkeypatch.setenv("BILLING_SHARD_MAX_GROUPS", "4")
    settings = Settings.from_env()
    assert (settings.shard_claims, settings.shard_lease_seconds, settings.shard_max_groups) == ("on", 12.0, 4)
    monkeypatch.setenv("BILLING_SHARD_CLAIMS", "sometimes")
    with pytest.raises(ValueError, match="BILLING_SHARD_CLAIMS"):
        Settings.from_env()


def test_held_groups_rotate_and_a_lease_over_on_the_worker_s_clock_is_not_claimed_in():
    clock = SimulatedClock(T0)
    shards = ShardLeases(None, "postgresql://x@h/db", "w", clock=clock, lease_seconds=30)
    shards.leases = {g: Lease(g, T0 + timedelta(seconds=30 if g != 3 else 5), ("n", 1)) for g in (1, 2, 3)}
    first, second = shards.held(), shards.held()
    assert sorted(first) == sorted(second) == [1, 2, 3] and first != second
    clock.advance(timedelta(seconds=10))
    assert sorted(shards.held()) == [1, 2]
