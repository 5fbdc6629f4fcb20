"""UNKNOWN is bounded by the key's lifetime (docs/gateway.md, "Idempotency keys"): through the real
charger, the SQL API and the gateway simulator's `GET /v1/charges?idempotencyKey=`.

Near the end of a key's lifetime the claim says `lookup`: the charger asks the gateway instead of
sending the key again. Found: the result is recorded, with no second charging call. Not found:
nothing was charged, a new key is used. The gateway cannot say: the invoice goes to REVIEW once
the key has expired, and is never charged with it again.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from billing.clock import SimulatedClock
from billing.db import async_pool
from billing.gateway.client import GatewayClient, LookupFailed
from billing.gateway.decisions import DecisionModel
from billing.gateway.simulator import GatewaySimulator
from billing.limiter import LocalGcraLimiter

from .test_charging import T0, charger_for, events, invoices, query, seed_subscriptions

pytestmark = pytest.mark.timeout(90)

LOOKUP_WINDOW = T0 + timedelta(hours=22)  # key_lifetime 23 h - lookup_margin 1 h (billing.installation)


class FirstKeyNeverArrives(DecisionModel):
    """Every call with a try-0 key answers 500 without charging; the lookup may fail too."""

    def __init__(self, *, lookups_fail: bool = False) -> None:
        super().__init__()
        self.lookups_fail = lookups_fail

    def fails(self, key: str, calls: int) -> bool:
        return key.endswith("-try-0")

    def lookup_fails(self, key: str, lookups: int) -> bool:
        return self.lookups_fail


def attempts(db_url: str) -> dict[str, dict]:
    """Payment attempts by try number (the n of <namespace>-inv-<id>-try-<n>)."""
    return {str(r["attempt_number"]): r for r in query(db_url, "SELECT * FROM billing.payment_attempt ORDER BY id")}


def test_the_simulator_answers_a_key_lookup():
    async def scenario():
        async with GatewaySimulator(rate=0, decisions=FirstKeyNeverArrives()) as sim:
            async with GatewayClient(sim.url, timeout=2) as client:
                charged = await client.charge("ns-inv-1-try-1", 7, 990, "EUR")
                found = await client.lookup("ns-inv-1-try-1")
                missing = await client.lookup("ns-inv-2-try-1")
            failing = GatewaySimulator(rate=0, decisions=FirstKeyNeverArrives(lookups_fail=True))
            async with failing, GatewayClient(failing.url, timeout=2) as client:
                with pytest.raises(LookupFailed):
                    await client.lookup("ns-inv-1-try-0")
            return charged, found, missing, sim.stats()

    charged, found, missing, stats = asyncio.run(scenario())
    assert (found.outcome, found.reference) == (charged.outcome, charged.reference) and found.outcome == "SUCCEEDED"
    assert (found.amount, found.currency) == (990, "EUR")  # what the key charged: the charger compares it (key conflicts)
    assert missing is None
    assert stats["lookups"] == 2 and stats["accepted"] == 1


def test_a_charged_key_near_its_expiry_is_looked_up_not_sent_again(db_url):
    seed_subscriptions(db_url, 2, T0)
    clock = SimulatedClock(T0)

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        async with GatewaySimulator(rate=0, timeout_rate=1.0, timeout_hold_seconds=1.0, latency_ms=(1, 5)) as sim:
            charger = charger_for(pool, sim.url, LocalGcraLimiter(50), clock=clock, timeout=0.3)
            await charger.charge_due()  # charged, the answer lost: UNKNOWN
            clock.set(LOOKUP_WINDOW)
            looked_up = await charger.charge_due()
            await charger.gateway.close()
            stats = sim.stats()
        await pool.close()
        return looked_up, stats

    looked_up, stats = asyncio.run(scenario())
    assert looked_up == 2
    assert all(inv["status"] == "PAID" for inv in invoices(db_url).values())
    assert stats["accepted"] == 2 and stats["lookups"] == 2 and stats["replays"] == 0, stats
    assert events(db_url)["InvoicePaid"] == 2


def test_a_key_the_gateway_never_saw_is_replaced_by_a_new_one(db_url):
    seed_subscriptions(db_url, 1, T0)
    clock = SimulatedClock(T0)

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        async with GatewaySimulator(rate=0, decisions=FirstKeyNeverArrives()) as sim:
            charger = charger_for(pool, sim.url, LocalGcraLimiter(50), clock=clock)
            await charger.charge_due()  # 500: UNKNOWN
            clock.set(LOOKUP_WINDOW)
            await charger.charge_due()  # lookup: NOT_FOUND, then try-1 at once
            await charger.gateway.close()
            ledger = sim.ledger()
        await pool.close()
        return ledger

    ledger = asyncio.run(scenario())
    (inv,) = invoices(db_url).values()
    assert inv["status"] == "PAID" and inv["try_count"] == 1 and inv["attempt_count"] == 0
    got = attempts(db_url)
    assert got["0"]["outcome"] == "NOT_FOUND" and got["1"]["outcome"] == "SUCCEEDED"
    assert [c["idempotencyKey"].rsplit("-", 1)[1] for c in ledger["charges"]] == ["1"]


def test_a_key_nobody_can_vouch_for_goes_to_review_when_it_expires(db_url):
    seed_subscriptions(db_url, 1, T0)
    clock = SimulatedClock(T0)

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        async with GatewaySimulator(rate=0, decisions=FirstKeyNeverArrives(lookups_fail=True)) as sim:
            charger = charger_for(pool, sim.url, LocalGcraLimiter(50), clock=clock)
            await charger.charge_due()
            clock.set(LOOKUP_WINDOW)
            await charger.charge_due()  # the lookup fails: UNKNOWN, asked again a minute later
            clock.set(T0 + timedelta(hours=23, minutes=1))
            after_expiry = await charger.charge_due()
            await charger.gateway.close()
            ledger, stats = sim.ledger(), sim.stats()
        await pool.close()
        return after_expiry, ledger, stats

    after_expiry, ledger, stats = asyncio.run(scenario())
    (inv,) = invoices(db_url).values()
    assert after_expiry == 0 and inv["status"] == "REVIEW" and inv["review_reason"] == "KEY_EXPIRED"
    assert events(db_url)["InvoicePaymentReview"] == 1
    assert ledger["charges"] == [] and stats["lookups"] == 1
