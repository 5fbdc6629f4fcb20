"""Payment results recorded in batches (billing.worker.recorder) against real PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from billing.clock import SimulatedClock
from billing.db import async_pool
from billing.gateway.client import ChargeResult
from billing.worker.recorder import ResultRecorder

pytestmark = pytest.mark.timeout(60)

T0 = datetime(2026, 10, 1, 12, 0, tzinfo=timezone.utc)


def claimed_keys(db_url: str, count: int) -> list[str]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO_MONTHLY', 2990, 'BRL', 'MONTH', 1)")
        conn.execute("SELECT billing.create_subscription('rec-' || g, g, 'PRO_MONTHLY', %s) "
                     "FROM generate_series(1, %s) g", (T0, count))
        return [r[0] for r in conn.execute(
            "SELECT idempotency_key FROM billing.claim_charges('w', %s, interval '5 minutes', %s)", (count, T0))]


def test_concurrent_results_share_calls_and_a_refused_one_stops_no_other(db_url):
    keys = claimed_keys(db_url, 60)

    async def main() -> tuple[list[bool], int]:
        pool = await async_pool(db_url, min_size=1, max_size=2)
        try:
            recorder = ResultRecorder(pool, SimulatedClock(T0 + timedelta(seconds=1)))
            results = [ChargeResult("SUCCEEDED", f"ch_{n}") if n % 3 else ChargeResult("DECLINED", None, "card_declined")
                       for n in range(len(keys))]
            outcome = await asyncio.gather(*(recorder.record(k, r) for k, r in zip(keys, results)),
                                           recorder.record("inv-0-try-0", ChargeResult("SUCCEEDED", "ch_x")))
            await recorder.close()
            return outcome, recorder.calls
        finally:
            await pool.close()

    outcome, calls = asyncio.run(main())
    assert outcome == [True] * len(keys) + [False], "the unknown key is refused, every other result recorded"
    assert calls < len(keys) / 4, f"{calls} calls for {len(keys) + 1} results: not batched"
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = dict(conn.execute("SELECT status, count(*) FROM billing.invoice GROUP BY status").fetchall())
        paid_events = conn.execute("SELECT count(*) FROM billing.outbox_event WHERE event_type = 'InvoicePaid'").fetchone()[0]
    assert rows == {"PAID": 40, "OPEN": 20}, rows  # the declines wait for their next dunning try
    assert paid_events == 40


def test_a_lost_connection_is_retried_whole(db_url, caplog):
    """The first call fails (its connection is killed mid-flight); the retry records everything once."""
    keys = claimed_keys(db_url, 5)

    async def main() -> list[bool]:
        pool = await async_pool(db_url, min_size=1, max_size=1)
        try:
            async with pool.connection() as conn:
                pid = conn.info.backend_pid
            with psycopg.connect(db_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            recorder = ResultRecorder(pool, SimulatedClock(T0 + timedelta(seconds=1)))
            return await asyncio.gather(*(recorder.record(k, ChargeResult("SUCCEEDED", "ch")) for k in keys))
        finally:
            await pool.close()

    assert asyncio.run(main()) == [True] * 5
    assert any("retrying" in r.getMessage() for r in caplog.records), "the first call did not fail"
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM billing.invoice WHERE status = 'PAID'").fetchone()[0] == 5
        assert conn.execute("SELECT count(*) FROM billing.outbox_event WHERE event_type = 'InvoicePaid'").fetchone()[0] == 5
