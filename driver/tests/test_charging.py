"""Charging end to end against real PostgreSQL, Redis and the gateway simulator (no mocks).

In-process tests drive the SQL API's clock with a SimulatedClock; the crash tests run real
`billing worker` processes on the wall clock with a short lease.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg.rows import dict_row

from billing.clock import SimulatedClock
from billing.db import async_pool
from billing.gateway.client import GatewayClient
from billing.gateway.decisions import DecisionModel
from billing.gateway.simulator import GatewaySimulator
from billing.limiter import LocalGcraLimiter, RedisGcraLimiter
from billing.worker.charging import Charger

from . import private_redis as _private_redis_module

private_redis = _private_redis_module.private_redis  # the fixture, by its name

pytestmark = pytest.mark.timeout(90)

T0 = datetime(2026, 10, 1, 12, 0, tzinfo=timezone.utc)


# -- helpers ------------------------------------------------------------------------------------


def namespace(db_url: str) -> str:
    """This installation's idempotency-key namespace (keys are <namespace>-inv-<id>-try-<n>)."""
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT key_namespace FROM billing.installation").fetchone()[0]


def seed_subscriptions(db_url: str, count: int, now: datetime, *, price: int = 2990) -> None:
    """`count` new subscriptions through the SQL API, each with an OPEN INITIAL invoice due at `now`."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO_MONTHLY', %s, 'BRL', 'MONTH', 1)", (price,))
        conn.execute("SELECT billing.create_subscription('sub-' || g, g, 'PRO_MONTHLY', %s) "
                     "FROM generate_series(1, %s) g", (now, count))


def query(db_url: str, sql: str, *args) -> list[dict]:
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(sql, args).fetchall()


def invoices(db_url: str) -> dict[int, dict]:
    return {r["id"]: r for r in query(db_url, "SELECT * FROM billing.invoice ORDER BY id")}


def events(db_url: str) -> Counter:
    return Counter(r["event_type"] for r in query(db_url, "SELECT event_type FROM billing.outbox_event"))


def signed_up(n: int) -> Counter:
    """The events of `n` signups: each subscription and its INITIAL invoice announced."""
    return Counter({"SubscriptionCreated": n, "InvoiceCreated": n})


def assert_never_charged_twice(ledger: dict) -> None:
    """The gateway's own ledger: each key once, and no invoice with two successful charges."""
    keys = [c["idempotencyKey"] for c in ledger["charges"]]
    assert len(keys) == len(set(keys))
    paid = Counter(k.split("-try-")[0] for k, c in zip(keys, ledger["charges"]) if c["status"] == "succeeded")
    assert not [k for k, n in paid.items() if n > 1]


def charger_for(pool, sim_url: str, limiter, *, clock=None, timeout: float = 5.0, lease: float = 60.0,
                rate: float = 100, **kwargs) -> Charger:
    return Charger(pool, GatewayClient(sim_url, timeout=timeout), limiter, rate=rate, clock=clock,
                   lease_seconds=lease, worker_id="test", **kwargs)


# -- in process, simulated clock ----------------------------------------------------------------

def test_every_due_invoice_is_charged_once_by_two_chargers(db_url, redis_url):
    seed_subscriptions(db_url, 60, T0)
    clock = SimulatedClock(T0)
    waits_before = _sample("billing_limiter_wait_seconds_count")

    async def scenario():
        # Every connection open before the chargers start: with one, the second charger's first claim
        # waited for a new connection while the first claimed all 60 (a loaded run in the lead's make test).
        pool = await async_pool(db_url, min_size=6, max_size=6)
        async with GatewaySimulator(rate=80, decline_rate=0.25, latency_ms=(5, 40), seed=2) as sim:
            chargers = [charger_for(pool, sim.url, RedisGcraLimiter(redis_url, 80, key="test:two"), clock=clock,
                                    concurrency=8, claim_batch=10) for _ in range(2)]
            stop = asyncio.Event()
            runs = [asyncio.create_task(c.run(stop)) for c in chargers]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if sum(c.counts["recorded"] for c in chargers) >= 60:
                    break
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.gather(*runs)
            for c in chargers:
                await c.gateway.close()
                await c.limiter.close()
            ledger, stats = sim.ledger(), sim.stats()
        await pool.close()
        return [c.counts for c in chargers], ledger, stats

    counts, ledger, stats = asyncio.run(scenario())
    assert sum(c["claimed"] for c in counts) == 60 and all(c["claimed"] > 0 for c in counts)
    assert_never_charged_twice(ledger)
    assert len(ledger["charges"]) == 60 and stats["replays"] == 0 and stats["rateLimited"] == 0
    by_key = {c["idempotencyKey"]: c for c in ledger["charges"]}
    for inv in invoices(db_url).values():
        charge = by_key[f"{namespace(db_url)}-inv-{inv['id']}-try-0"]
        if charge["status"] == "succeeded":
            assert inv["status"] == "PAID" and inv["gateway_reference"] == charge["id"]
        else:
            assert inv["status"] == "OPEN" and inv["attempt_count"] == 1
            assert T0 + timedelta(days=1) <= inv["next_attempt_at"] < T0 + timedelta(days=1, hours=2)
    paid = sum(c["status"] == "succeeded" for c in ledger["charges"])
    assert events(db_url) == signed_up(60) + Counter({"InvoicePaid": paid, "InvoicePaymentFailed": 60 - paid,
                                                       "SubscriptionUpdated": 60 - paid, "SubscriptionPastDue": 60 - paid})
    assert _sample("billing_limiter_wait_seconds_count") - waits_before == 60  # one wait per call, in /metrics


def test_declines_walk_the_dunning_schedule_and_end_in_cancellation(db_url):
    seed_subscriptions(db_url, 1, T0)
    clock = SimulatedClock(T0)

    async def scenario():
        pool = await async_pool(db_url, max_size=2)
        steps = []
        async with GatewaySimulator(rate=0, decline_rate=1.0) as sim:
            charger = charger_for(pool, sim.url, LocalGcraLimiter(50), clock=clock)
            steps.append(await charger.charge_due())
            for _ in range(3):
                (inv,) = invoices(db_url).values()
                clock.set(inv["next_attempt_at"] - timedelta(seconds=1))
                early = await charger.charge_due()  # not due yet: nothing claimed
                clock.set(inv["next_attempt_at"])
                steps.append((early, await charger.charge_due(), inv["attempt_count"], inv["next_attempt_at"]))
            await charger.gateway.close()
            ledger = sim.ledger()
        await pool.close()
        return steps, ledger

    steps, ledger = asyncio.run(scenario())
    assert steps[0] == 1
    previous = T0
    for n, (early, charged, failed_before, next_at) in enumerate(steps[1:], start=1):
        gap = {1: 1, 2: 3, 3: 5}[n]
        assert early == 0 and charged == 1 and failed_before == n
        assert previous + timedelta(days=gap) <= next_at < previous + timedelta(days=gap, hours=2)
        previous = next_at
    (inv,) = invoices(db_url).values()
    assert inv["status"] == "FAILED" and inv["attempt_count"] == 4 and inv["next_attempt_at"] is None
    (sub,) = query(db_url, "SELECT status, cancel_reason FROM billing.subscription")
    assert sub["status"] == "CANCELED"
    assert sorted(c["idempotencyKey"] for c in ledger["charges"]) == \
        [f"{namespace(db_url)}-inv-{inv['id']}-try-{i}" for i in range(4)]
    assert {c["status"] for c in ledger["charges"]} == {"declined"}
    assert events(db_url) == signed_up(1) + Counter({"InvoicePaymentFailed": 4, "SubscriptionUpdated": 1,
                                                      "SubscriptionPastDue": 1, "InvoiceFailed": 1,
                                                      "SubscriptionCanceled": 1})


def test_a_timeout_after_the_charge_ends_paid_without_a_second_charge(db_url):
    seed_subscriptions(db_url, 3, T0)
    clock = SimulatedClock(T0)

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        async with GatewaySimulator(rate=0, timeout_rate=1.0, timeout_hold_seconds=1.0, latency_ms=(1, 5)) as sim:
            charger = charger_for(pool, sim.url, LocalGcraLimiter(50), clock=clock, timeout=0.3)
            first = await charger.charge_due()
            after_timeout = invoices(db_url)
            clock.advance(timedelta(minutes=15) - timedelta(seconds=1))
            too_early = await charger.charge_due()
            clock.advance(timedelta(seconds=1))
            second = await charger.charge_due()
            await charger.gateway.close()
            ledger, stats = sim.ledger(), sim.stats()
        await pool.close()
        return first, after_timeout, too_early, second, ledger, stats

    first, after_timeout, too_early, second, ledger, stats = asyncio.run(scenario())
    assert first == 3 and too_early == 0 and second == 3
    for inv in after_timeout.values():  # UNKNOWN: same try, back in 15 minutes
        assert inv["status"] == "OPEN" and inv["attempt_count"] == 0
        assert inv["next_attempt_at"] == T0 + timedelta(minutes=15)
    assert all(inv["status"] == "PAID" and inv["attempt_count"] == 0 for inv in invoices(db_url).values())
    assert_never_charged_twice(ledger)
    assert len(ledger["charges"]) == 3 and stats["timeouts"] == 3 and stats["replays"] == 3
    assert events(db_url) == signed_up(3) + Counter({"InvoicePaid": 3})


def test_a_429_is_neither_a_decline_nor_an_attempt(db_url):
    seed_subscriptions(db_url, 12, T0)
    clock = SimulatedClock(T0)

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        # The gateway allows 4/s; this limiter is (mis)configured for 40/s, so 429s are certain.
        async with GatewaySimulator(rate=4, latency_ms=(1, 5)) as sim:
            charger = charger_for(pool, sim.url, LocalGcraLimiter(40), clock=clock, concurrency=12)
            charged = await charger.charge_due()
            await charger.gateway.close()
            ledger = sim.ledger()
        await pool.close()
        return charged, charger.counts, ledger

    charged, counts, ledger = asyncio.run(scenario())
    assert charged == 12 and counts["rate_limited"] > 0 and ledger["rateLimited"] == counts["rate_limited"]
    assert all(inv["status"] == "PAID" and inv["attempt_count"] == 0 for inv in invoices(db_url).values())
    attempts = query(db_url, "SELECT attempt_number, claim_count, outcome FROM billing.payment_attempt")
    assert len(attempts) == 12
    assert all(a["attempt_number"] == 0 and a["claim_count"] == 1 and a["outcome"] == "SUCCEEDED" for a in attempts)
    assert len(ledger["charges"]) == 12


class _DeclinesSevens(DecisionModel):
    """Declines every charge of 7 (the stray charge of the test below); the others succeed."""

    def decline_code(self, key: str, customer_id: int, amount: int, currency: str) -> str | None:
        return "card_declined" if amount == 7 else None


def test_a_key_the_gateway_holds_for_other_parameters_is_looked_up_never_resent(db_url):
    """After a failover that lost the primary's last writes (or a restore), an invoice's key may name
    a charge of other parameters at the gateway (chaos/test_failover's asynchronous run found one:
    a cancellation cut the invoice to 92, the charge of 92 went out, the standby never had either,
    and the key was refused 409 once a second until the run ended). Each case ends at once:
    a success of other parameters -> REVIEW (KEY_CONFLICT); the same amount and currency for another
    customer id -> the charge is this invoice's, PAID; a decline of other parameters -> a new key."""
    seed_subscriptions(db_url, 3, T0)
    clock = SimulatedClock(T0)
    ns = namespace(db_url)
    ids = sorted(invoices(db_url))

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        async with GatewaySimulator(rate=50, latency_ms=(1, 5), decisions=_DeclinesSevens()) as sim:
            stray = GatewayClient(sim.url, timeout=5)
            before = [await stray.charge(f"{ns}-inv-{ids[0]}-try-0", 1, 92, "BRL"),
                      await stray.charge(f"{ns}-inv-{ids[1]}-try-0", 999, 2990, "BRL"),
                      await stray.charge(f"{ns}-inv-{ids[2]}-try-0", 3, 7, "BRL")]
            await stray.close()
            charger = charger_for(pool, sim.url, LocalGcraLimiter(50), clock=clock)
            first = await charger.charge_due()  # the declined stray's invoice again at once, on a new key
            second = await charger.charge_due()
            await charger.gateway.close()
            ledger, stats = sim.ledger(), sim.stats()
        await pool.close()
        return before, first, second, ledger, stats

    before, first, second, ledger, stats = asyncio.run(scenario())
    assert [r.outcome for r in before] == ["SUCCEEDED", "SUCCEEDED", "DECLINED"]
    assert first == 4 and second == 0
    assert stats["conflicts"] == 3  # each key refused once, never sent again
    review, paid, declined = (invoices(db_url)[i] for i in ids)
    assert review["status"] == "REVIEW" and review["review_reason"] == "KEY_CONFLICT"
    assert paid["status"] == "PAID" and paid["gateway_reference"] == before[1].reference
    assert declined["status"] == "PAID" and declined["try_count"] == 1 and declined["attempt_count"] == 0
    keys = [c["idempotencyKey"] for c in ledger["charges"]]
    assert keys.count(f"{ns}-inv-{ids[2]}-try-1") == 1 and len(ledger["charges"]) == 4
    attempts = {(a["invoice_id"], a["attempt_number"]): a for a in query(
        db_url, "SELECT invoice_id, attempt_number, outcome, failure_reason FROM billing.payment_attempt")}
    assert attempts[(ids[0], 0)]["outcome"] == "UNKNOWN" and "92 BRL" in attempts[(ids[0], 0)]["failure_reason"]
    assert attempts[(ids[1], 0)]["outcome"] == "SUCCEEDED"
    assert attempts[(ids[2], 0)]["outcome"] == "NOT_FOUND" and attempts[(ids[2], 1)]["outcome"] == "SUCCEEDED"
    review_events = query(db_url, "SELECT payload FROM billing.outbox_event WHERE event_type = 'InvoicePaymentReview'")
    assert [e["payload"]["data"]["reason"] for e in review_events] == ["KEY_CONFLICT"]


def _sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_charging_pauses_while_redis_is_down_and_resumes(db_url, private_redis):
    seed_subscriptions(db_url, 40, T0)
    clock = SimulatedClock(T0)

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        async with GatewaySimulator(rate=20, latency_ms=(1, 10)) as sim:
            limiter = RedisGcraLimiter(private_redis.url, 20, key="test:pause", max_backoff_seconds=0.5)
            charger = charger_for(pool, sim.url, limiter, clock=clock, rate=20, concurrency=10, claim_batch=10)
            stop = asyncio.Event()
            run = asyncio.create_task(charger.run(stop))
            while sim.stats()["accepted"] < 8:
                await asyncio.sleep(0.02)
            private_redis.stop()
            await asyncio.sleep(0.8)  # slots reserved before the stop (10 callers x 50 ms) are used up
            during_start = sim.stats()["accepted"]
            await asyncio.sleep(1.5)
            during_end = sim.stats()["accepted"]
            paused = _sample("billing_limiter_paused")
            await asyncio.to_thread(private_redis.start)
            deadline = time.monotonic() + 20
            while charger.counts["recorded"] < 40 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            stop.set()
            await run
            await charger.gateway.close()
            await limiter.close()
            ledger, stats = sim.ledger(), sim.stats()
        await pool.close()
        return during_start, during_end, paused, ledger, stats

    during_start, during_end, paused, ledger, stats = asyncio.run(scenario())
    assert during_end == during_start  # nothing reached the gateway while the limit could not be checked
    assert paused == 1 and _sample("billing_limiter_paused") == 0
    assert len(ledger["charges"]) == 40 and stats["rateLimited"] == 0 and stats["maxWindow"] <= 20
    assert all(inv["status"] == "PAID" for inv in invoices(db_url).values())


# -- real worker processes, wall clock ----------------------------------------------------------

class SimulatorThread:
    """The simulator in a thread of its own, so worker subprocesses can call it during a test."""

    def __init__(self, **options) -> None:
        self.options = options
        self.url: str | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> "SimulatorThread":
        self._thread.start()
        self.sim = GatewaySimulator(**self.options)
        self.url = asyncio.run_coroutine_threadsafe(self.sim.start(), self._loop).result(10)
        return self

    def get(self, path: str) -> dict:
        return json.load(urllib.request.urlopen(f"{self.url}{path}", timeout=10))

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.sim.close(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def start_worker(db_url: str, redis_url: str, gateway_url: str, *, rate: int, lease: float,
                 timeout: float) -> subprocess.Popen:
    env = {**os.environ, "BILLING_DATABASE_URL": db_url, "BILLING_REDIS_URL": redis_url,
           "BILLING_GATEWAY_URL": gateway_url, "BILLING_GATEWAY_RATE": str(rate),
           "BILLING_CHARGE_LEASE_SECONDS": str(lease), "BILLING_GATEWAY_TIMEOUT_SECONDS": str(timeout),
           "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "billing.cli", "--log-level", "INFO", "worker", "--no-renew",
                             "--no-relay"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_sigkill_mid_charge_charges_nothing_twice_and_claims_come_back(db_url, redis_url):
    count, lease = 40, 5.0
    seed_subscriptions(db_url, count, datetime.now(timezone.utc) - timedelta(seconds=1))
    with SimulatorThread(rate=100, latency_ms=(400, 900), seed=7) as sim:
        first = start_worker(db_url, redis_url, sim.url, rate=100, lease=lease, timeout=2.0)
        try:
            wait_for(lambda: sim.get("/v1/stats")["accepted"] >= 15, 30, "the first worker's calls")
            first.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            first.wait(10)
        finally:
            if first.poll() is None:
                first.kill()
        charged_at_kill = sim.get("/v1/stats")["charged"]
        # A statement the worker sent just before it died still runs, and commits, in its
        # backend: what it recorded counts as recorded before the kill.
        dbname = psycopg.conninfo.conninfo_to_dict(db_url)["dbname"]
        wait_for(lambda: not query(db_url, "SELECT 1 FROM pg_stat_activity WHERE datname = %s AND state = 'active' "
                                           "AND pid <> pg_backend_pid() AND query LIKE '%%billing.%%'", dbname),
                 30, "the dead worker's statements to end")
        paid_at_kill = sum(inv["status"] == "PAID" for inv in invoices(db_url).values())
        assert paid_at_kill < charged_at_kill  # calls were in flight when it died

        second = start_worker(db_url, redis_url, sim.url, rate=100, lease=lease, timeout=2.0)
        try:
            wait_for(lambda: all(i["status"] == "PAID" for i in invoices(db_url).values()), 30, "every invoice PAID")
            recovered_in = time.monotonic() - killed_at
            second.send_signal(signal.SIGTERM)
            assert second.wait(20) == 0
        finally:
            if second.poll() is None:
                second.kill()
        ledger, stats = sim.get("/v1/ledger"), sim.get("/v1/stats")

    assert_never_charged_twice(ledger)
    assert len(ledger["charges"]) == count  # one key per invoice: try-0, charged once
    assert stats["replays"] >= charged_at_kill - paid_at_kill  # the second worker asked again with the same keys
    attempts = query(db_url, "SELECT claim_count, first_claimed_at, last_claimed_at, outcome FROM billing.payment_attempt")
    reclaimed = [a for a in attempts if a["claim_count"] > 1]
    assert len(attempts) == count and all(a["outcome"] == "SUCCEEDED" for a in attempts)
    assert len(reclaimed) == count - paid_at_kill
    assert all(a["last_claimed_at"] - a["first_claimed_at"] >= timedelta(seconds=lease) for a in reclaimed)
    assert recovered_in < lease + 15
    assert events(db_url) == signed_up(count) + Counter({"InvoicePaid": count})


def test_sigterm_finishes_what_is_in_flight_and_exits_0(db_url, redis_url):
    count = 40
    seed_subscriptions(db_url, count, datetime.now(timezone.utc) - timedelta(seconds=1))
    with SimulatorThread(rate=100, latency_ms=(300, 700), seed=8) as sim:
        worker = start_worker(db_url, redis_url, sim.url, rate=100, lease=20.0, timeout=3.0)
        try:
            wait_for(lambda: sim.get("/v1/stats")["accepted"] >= 10, 30, "the worker's first calls")
            worker.send_signal(signal.SIGTERM)
            started = time.monotonic()
            assert worker.wait(20) == 0
            took = time.monotonic() - started
        finally:
            if worker.poll() is None:
                worker.kill()
        output = worker.stdout.read().decode()
        ledger = sim.get("/v1/ledger")
    by_id = invoices(db_url)
    # Everything the gateway charged was recorded before the exit: nothing left for a lease to fix.
    for charge in ledger["charges"]:
        assert by_id[int(charge["idempotencyKey"].split("-")[2])]["status"] == "PAID"
    assert len(ledger["charges"]) == count  # what was claimed was finished, not abandoned
    assert took < 10
    assert "finishing what is in flight" in output


def test_the_worker_renews_and_charges_on_a_simulated_clock(db_url):
    """run_worker's parts together: INITIAL invoices charged, a month later renewed and charged again."""
    from billing.config import Settings
    from billing.worker import worker_main

    seed_subscriptions(db_url, 20, T0)
    clock = SimulatedClock(T0)

    async def scenario():
        async with GatewaySimulator(rate=0, latency_ms=(1, 5)) as sim:
            settings = Settings(database_url=db_url, gateway_url=sim.url, gateway_rate=100,
                                charge_lease_seconds=60, gateway_timeout_seconds=5)
            stop = asyncio.Event()
            run = asyncio.create_task(worker_main(settings, relay=False, clock=clock, limiter=LocalGcraLimiter(100),
                                                  stop=stop))

            async def paid(n: int) -> None:
                while sum(i["status"] == "PAID" for i in invoices(db_url).values()) < n:
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(paid(20), 20)
            clock.set(datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc))  # the next period is due
            await asyncio.wait_for(paid(40), 20)
            stop.set()
            code = await asyncio.wait_for(run, 20)
            return code, sim.ledger()

    code, ledger = asyncio.run(scenario())
    assert code == 0
    kinds = Counter(i["kind"] for i in invoices(db_url).values())
    assert kinds == Counter({"INITIAL": 20, "RENEWAL": 20})
    assert len(ledger["charges"]) == 40
    assert_never_charged_twice(ledger)
    subs = query(db_url, "SELECT current_period_start FROM billing.subscription")
    assert {s["current_period_start"] for s in subs} == {datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)}
