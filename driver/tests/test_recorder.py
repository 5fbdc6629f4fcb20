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


def test_results_linger_into_one_call_and_close_cuts_the_wait_short(db_url):
    """At a low rate results arrive one by one: with `linger` they share a call (one transaction,
    one audit row); without it each goes alone. close() records what waits at once."""
    keys = claimed_keys(db_url, 16)

    async def staggered(recorder: ResultRecorder, batch: list[str]) -> list[bool]:
        async def one(n: int, key: str) -> bool:
            await asyncio.sleep(0.02 * n)
            return await recorder.record(key, ChargeResult("SUCCEEDED", f"ch_{key}"))
        return await asyncio.gather(*(one(n, k) for n, k in enumerate(batch)))

    async def main() -> tuple[int, int, list[bool], list[bool], float]:
        pool = await async_pool(db_url, min_size=1, max_size=2)
        try:
            clock = SimulatedClock(T0 + timedelta(seconds=1))
            lingering = ResultRecorder(pool, clock, linger=0.5)
            together = await staggered(lingering, keys[:6])  # 6 results over 0.1 s
            alone = ResultRecorder(pool, clock)
            apart = await staggered(alone, keys[6:12])
            closing = ResultRecorder(pool, clock, linger=30.0)
            waiting = [asyncio.ensure_future(closing.record(k, ChargeResult("SUCCEEDED", "ch"))) for k in keys[12:]]
            await asyncio.sleep(0.05)
            started = asyncio.get_running_loop().time()
            await closing.close()
            closed_in = asyncio.get_running_loop().time() - started
            assert all(await asyncio.gather(*waiting))
            return lingering.calls, alone.calls, together, apart, closed_in
        finally:
            await pool.close()

    lingering_calls, alone_calls, together, apart, closed_in = asyncio.run(main())
    assert together == [True] * 6 and apart == [True] * 6
    assert lingering_calls == 1, f"{lingering_calls} calls for 6 results within the linger"
    assert alone_calls >= 4, f"without linger results 20 ms apart went in {alone_calls} calls"
    assert closed_in < 5, f"close() waited {closed_in:.1f} s for a 30 s linger"
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM billing.invoice WHERE status = 'PAID'").fetchone()[0] == 16
        audit = conn.execute("SELECT count(*) FROM billing.audit_log WHERE function LIKE 'record_payment_result%'"
                             ).fetchone()[0]
    assert audit == lingering_calls + alone_calls + 1, "one audit row per call, none per result"


def test_a_negative_linger_is_refused():
    with pytest.raises(ValueError):
        ResultRecorder(None, linger=-1)
