"""Refunds end to end with the gateway simulator: requested through the SQL API or by the engine's
own rules (RefundDue), executed by the worker's refund loop through the provider, rate limited,
never twice (a crash between the call and its record, a timeout), and the books balance:
collected minus refunded equals the cash of the PAID invoices."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg.rows import dict_row

from billing.checks import money_balances
from billing.clock import SimulatedClock
from billing.db import async_pool
from billing.gateway.client import GatewayClient
from billing.gateway.decisions import DecisionModel
from billing.gateway.simulator import GatewaySimulator
from billing.limiter import LocalGcraLimiter
from billing.providers import RefundRequest
from billing.providers.sim import SimProvider
from billing.worker.charging import Charger
from billing.worker.refunds import Refunder

pytestmark = pytest.mark.timeout(120)

T0 = datetime(2026, 10, 1, 12, 0, tzinfo=timezone.utc)


def query(db_url: str, sql: str, *args) -> list[dict]:
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(sql, args).fetchall()


def paid_cash(db_url: str) -> dict[str, int]:
    return {r["currency"].strip(): int(r["cash"]) for r in query(
        db_url, "SELECT currency, sum(amount - amount_refunded) AS cash FROM billing.invoice "
                "WHERE status = 'PAID' GROUP BY currency")}


class RefundTimesOut(DecisionModel):
    """Charges behave; the first refund call of each key holds its answer past the client's timeout
    (after refunding)."""

    def times_out(self, key: str, calls: int) -> bool:
        return "-ref-" in key and calls == 1


def test_refunds_with_the_simulator_never_twice_and_the_books_balance(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO', 5000, 'EUR', 'MONTH', 1)")
        for c in range(1, 5):
            conn.execute("SELECT billing.create_subscription(%s, %s, 'PRO', %s)", (f"s-{c}", c, T0))
    clock = SimulatedClock(T0)

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        async with GatewaySimulator(rate=0, decisions=RefundTimesOut(), timeout_hold_seconds=2.0) as sim:
            provider = SimProvider(GatewayClient(sim.url, timeout=1.0))
            charger = Charger(pool, provider, LocalGcraLimiter(50), rate=50, clock=clock, lease_seconds=60)
            # Customer 4's invoice: claimed and charged, then its subscription canceled before the
            # result is recorded: the success lands on a VOID invoice, the engine refunds it.
            with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
                (late,) = [c for c in conn.execute("SELECT * FROM billing.claim_charges('t', 10, '5 minutes', %s)",
                                                   (T0,)).fetchall() if c["customer_id"] == 4]
                conn.execute("UPDATE billing.invoice SET next_attempt_at = %s WHERE customer_id <> 4", (T0,))
            charged = await provider.charge(_request(late))
            with psycopg.connect(db_url, autocommit=True) as conn:
                conn.execute("SELECT billing.cancel_subscription(%s, false, %s)",
                             (query(db_url, "SELECT subscription_id FROM billing.invoice WHERE id = %s",
                                    late["invoice_id"])[0]["subscription_id"], T0))
                conn.execute("SELECT billing.record_payment_result(%s, 'SUCCEEDED', %s, NULL, %s)",
                             (late["idempotency_key"], charged.reference, T0))
            await charger.charge_due()  # customers 1 to 3 pay
            with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
                invoices = {r["customer_id"]: r["id"] for r in conn.execute("SELECT id, customer_id FROM billing.invoice")}
                conn.execute("SELECT billing.refund_invoice(%s, 1500, 'part', %s)", (invoices[1], T0))
                conn.execute("SELECT billing.refund_invoice(%s, 5000, 'all', %s)", (invoices[2], T0))
                with pytest.raises(psycopg.Error) as over:
                    conn.execute("SELECT billing.refund_invoice(%s, 3501, 'more', %s)", (invoices[1], T0))
                # A worker claims a refund, calls the gateway and dies before recording.
                (crashed,) = [r for r in conn.execute("SELECT * FROM billing.claim_refunds('dying', 1, '1 minute', %s)",
                                                      (T0,)).fetchall()]
            before_crash = await provider.refund(_refund(crashed))
            refunder = Refunder(pool, provider, LocalGcraLimiter(50), clock=clock, lease_seconds=60)
            first_pass = await refunder.refund_due()  # the two others; each first call times out: UNKNOWN
            states = {r["idempotency_key"]: (r["status"], r["outcome"]) for r in query(db_url, "SELECT * FROM billing.refund")}
            clock.advance(timedelta(minutes=16))  # the UNKNOWN retries and the dead worker's lease are due
            second_pass = await refunder.refund_due()
            third_pass = await refunder.refund_due()
            ledger, stats = sim.ledger(), sim.stats()
            await provider.close()
        await pool.close()
        return over.value.sqlstate, crashed, before_crash, first_pass, states, second_pass, third_pass, ledger, stats

    (over, crashed, before_crash, first_pass, states, second_pass, third_pass, ledger,
     stats) = asyncio.run(scenario())
    assert over == "BL422"  # 1500 + 3501 > 5000
    assert before_crash.outcome == "UNKNOWN"  # its first call timed out too (it refunded, though)
    assert first_pass == 2 and set(o for _, o in states.values()) == {None, "UNKNOWN"}
    assert second_pass == 3 and third_pass == 0
    rows = query(db_url, "SELECT * FROM billing.refund ORDER BY id")
    assert [(r["reason"], r["amount"], r["status"], r["claim_count"]) for r in rows] == [
        ("INVOICE_VOID", 5000, "SUCCEEDED", 2), ("REQUESTED", 1500, "SUCCEEDED", 2),
        ("REQUESTED", 5000, "SUCCEEDED", 2)]
    assert crashed["idempotency_key"] == rows[0]["idempotency_key"]
    # The gateway refunded each key once although each was sent twice (a timeout, a crash).
    assert len(ledger["refunds"]) == 3 and stats["replays"] >= 3
    assert sorted(r["amount"] for r in ledger["refunds"]) == [1500, 5000, 5000]
    refunded = {r["customer_id"]: r["amount_refunded"] for r in query(db_url, "SELECT * FROM billing.invoice")}
    assert refunded == {1: 1500, 2: 5000, 3: 0, 4: 0}  # the VOID invoice's charge was not its cash
    check = money_balances(ledger, paid_cash(db_url), query(db_url, "SELECT * FROM billing.refund"))
    assert check.ok, check.examples
    assert paid_cash(db_url) == {"EUR": 3500 + 0 + 5000}
    types = [r["event_type"] for r in query(db_url, "SELECT event_type FROM billing.outbox_event "
                                                    "WHERE event_type LIKE 'Refund%%' ORDER BY id")]
    assert types.count("RefundRequested") == 3 and types.count("RefundSucceeded") == 3 and "RefundDue" in types


class RefundsInDoubt(DecisionModel):
    """Charges behave. The first call of the first refund's key answers 500 without refunding; the
    first call of the second refund's key refunds and holds its answer past the client's timeout.
    A later key of a refund (-try-n) behaves."""

    def fails(self, key: str, calls: int) -> bool:
        return key.endswith(f"-ref-{self.first}") and calls == 1

    def times_out(self, key: str, calls: int) -> bool:
        return key.endswith(f"-ref-{self.first + 1}") and calls == 1


def test_refunds_in_doubt_are_looked_up_never_sent_twice(db_url):
    """Two refunds whose answers are lost (a 500 that refunded nothing, a timeout that refunded):
    retried with their keys they would be answered by the gateway's idempotency, but past the keys'
    lifetime nobody may send them again. The worker looks them up instead: the one the gateway never
    saw gets a new key and is refunded; the other is found refunded, and is not sent again."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO', 5000, 'EUR', 'MONTH', 1)")
        for c in (1, 2):
            conn.execute("SELECT billing.create_subscription(%s, %s, 'PRO', %s)", (f"s-{c}", c, T0))
        first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM billing.refund").fetchone()[0]
    clock = SimulatedClock(T0)
    decisions = RefundsInDoubt()
    decisions.first = first

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        async with GatewaySimulator(rate=0, decisions=decisions, timeout_hold_seconds=2.0) as sim:
            provider = SimProvider(GatewayClient(sim.url, timeout=1.0))
            await Charger(pool, provider, LocalGcraLimiter(50), rate=50, clock=clock, lease_seconds=60).charge_due()
            with psycopg.connect(db_url, autocommit=True) as conn:
                for customer in (1, 2):
                    conn.execute("SELECT billing.refund_invoice(i.id, 2000, NULL, %s) FROM billing.invoice i "
                                 "WHERE i.customer_id = %s", (T0, customer))
            refunder = Refunder(pool, provider, LocalGcraLimiter(50), clock=clock, lease_seconds=60)
            sent = await refunder.refund_due()  # both answers lost: UNKNOWN
            outcomes = [r["outcome"] for r in query(db_url, "SELECT outcome FROM billing.refund ORDER BY id")]
            clock.advance(timedelta(hours=23, minutes=1))  # past the keys' lifetime: look-ups only
            looked = await refunder.refund_due()  # two look-ups, then the new key of the one never seen
            after_lookup = query(db_url, "SELECT id, status, outcome, idempotency_key, try_count FROM billing.refund "
                                         "ORDER BY id")
            again = await refunder.refund_due()
            ledger, stats = sim.ledger(), sim.stats()
            await provider.close()
        await pool.close()
        return sent, outcomes, looked, after_lookup, again, ledger, stats, refunder.counts

    sent, outcomes, looked, after_lookup, again, ledger, stats, counts = asyncio.run(scenario())
    assert (sent, outcomes) == (2, ["UNKNOWN", "UNKNOWN"])
    assert (looked, counts["looked_up"], again) == (3, 2, 0)
    never_seen, found = after_lookup
    assert (never_seen["status"], never_seen["outcome"], never_seen["try_count"]) == ("SUCCEEDED", "SUCCEEDED", 1)
    assert never_seen["idempotency_key"].endswith(f"-ref-{first}-try-1")
    assert (found["status"], found["outcome"], found["try_count"]) == ("SUCCEEDED", "SUCCEEDED", 0)
    rows = query(db_url, "SELECT * FROM billing.refund ORDER BY id")
    assert [r["status"] for r in rows] == ["SUCCEEDED", "SUCCEEDED"]
    # Each refund was made once at the gateway: the timed-out key was never sent again.
    assert sorted(r["idempotencyKey"] for r in ledger["refunds"]) == sorted(r["idempotency_key"] for r in rows)
    assert stats["lookups"] >= 2
    check = money_balances(ledger, paid_cash(db_url), rows)
    assert check.ok, check.examples
    assert paid_cash(db_url) == {"EUR": 2 * 3000}
    assert len(query(db_url, "SELECT 1 FROM billing.outbox_event WHERE event_type = 'RefundReview'")) == 2


def test_the_money_check_catches_a_refund_twice_and_an_unbalanced_book():
    ledger = {"charges": [{"idempotencyKey": "ns-inv-1-try-0", "amount": 100, "currency": "USD", "status": "succeeded"}],
              "refunds": [{"idempotencyKey": "ns-ref-1", "chargeKey": "ns-inv-1-try-0", "amount": 60, "currency": "USD"},
                          {"idempotencyKey": "ns-ref-1", "chargeKey": "ns-inv-1-try-0", "amount": 60, "currency": "USD"}]}
    rows = [{"idempotency_key": "ns-ref-1", "status": "SUCCEEDED"}]
    check = money_balances(ledger, {"USD": 40}, rows)
    assert not check.ok and any("twice" in e for e in check.examples) and any("beyond" in e for e in check.examples)
    fine = {**ledger, "refunds": ledger["refunds"][:1]}
    assert money_balances(fine, {"USD": 40}, rows).ok
    assert not money_balances(fine, {"USD": 100}, rows).ok


def _request(claim: dict):
    from billing.providers import ChargeRequest

    return ChargeRequest(claim["idempotency_key"], claim["invoice_id"], claim["customer_id"], claim["amount"],
                         claim["currency"].strip())


def _refund(row: dict) -> RefundRequest:
    return RefundRequest(row["idempotency_key"], row["refund_id"], row["invoice_id"], row["customer_id"], row["amount"],
                         row["currency"].strip(), row["charge_reference"], row["charge_key"])
