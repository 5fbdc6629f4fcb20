"""Authentication required is not a decline (docs/customers.md): through the Stripe provider
(StripeFake in front of stripe-mock, which validates every request), a charge answered
`authentication_required` puts the invoice in ACTION_REQUIRED (OPEN, the card kept, dunning
waiting the action window, InvoiceActionRequired and its email); the portal's payment page confirms
the payment intent on session, the customer passes 3-D Secure on the provider's page, and the
success pays the invoice exactly once whichever of the portal and the webhook reports it first;
another customer's invoice is refused; left alone, dunning resumes after the window."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
import pytest

from billing.clock import SimulatedClock
from billing.db import async_pool
from billing.portal import payments

from .stripe_fake import StripeFake
from .test_stripe import T0, charger_for, events, invoice, provider_for, query, seed

pytestmark = pytest.mark.timeout(120)


def test_authentication_required_pays_once_through_the_portal_or_the_webhook(db_url, stripe_mock_url):
    inv = seed(db_url, {4: "pm_card_authenticationRequired", 5: "pm_card_authenticationRequired",
                        6: "pm_card_authenticationRequired"})
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.set_customer_details(4, 'Ana', 'ana@example.com', NULL, NULL, NULL, NULL, 'BR', NULL)")
    clock = SimulatedClock(T0)

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        async with StripeFake(stripe_mock_url) as fake:
            provider = provider_for(fake)
            assert await charger_for(pool, provider, clock).charge_due() == 3
            keys = {r["customer_id"]: r for r in query(db_url, "SELECT customer_id, idempotency_key, gateway_reference "
                                                                "FROM billing.payment_attempt")}
            out = {}
            async with pool.connection() as conn:
                # Customer 4 through the portal: confirm on session -> the provider's page -> back.
                clock.advance(timedelta(hours=1))
                action = await payments.start(conn, provider, 4, inv[4], return_url="https://b.example/portal/back",
                                              now=clock.now())
                out["start"] = (action.status, action.redirect_url, action.reference, action.amount, action.currency)
                out["before"] = await payments.finish(conn, provider, 4, inv[4], now=clock.now())  # not yet
                fake.authenticate(action.reference)
                out["portal"] = await payments.finish(conn, provider, 4, inv[4], now=clock.now())
                # ... then Stripe's webhook for the same payment: nothing more.
                cur = await conn.execute("SELECT billing.apply_gateway_webhook('evt_4', %s, 'SUCCEEDED', %s, %s::jsonb, %s)",
                                         (keys[4]["idempotency_key"], keys[4]["gateway_reference"],
                                          '{"amount": 2990, "currency": "BRL", "customerId": 4}', clock.now()))
                out["webhook_after"] = (await cur.fetchone())["apply_gateway_webhook"]
                # Customer 5: the webhook first, then the portal: paid once.
                fake.authenticate(keys[5]["gateway_reference"])
                cur = await conn.execute("SELECT billing.apply_gateway_webhook('evt_5', %s, 'SUCCEEDED', %s, %s::jsonb, %s)",
                                         (keys[5]["idempotency_key"], keys[5]["gateway_reference"],
                                          '{"amount": 2990, "currency": "BRL", "customerId": 5}', clock.now()))
                out["webhook_first"] = (await cur.fetchone())["apply_gateway_webhook"]
                try:
                    await payments.finish(conn, provider, 5, inv[5], now=clock.now())
                    out["portal_after"] = "answered"
                except psycopg.Error as exc:  # paid: nothing waits for authentication any more
                    out["portal_after"] = exc.sqlstate
                # Another customer's invoice: refused, nothing sent to the provider.
                confirms = fake.confirms
                try:
                    await payments.start(conn, provider, 4, inv[6], return_url="https://b.example/x", now=clock.now())
                    out["foreign"] = "answered"
                except psycopg.Error as exc:
                    out["foreign"] = exc.sqlstate
                out["foreign_confirms"] = fake.confirms - confirms
            # Customer 6 does nothing: after the window the off-session charge is tried again and,
            # asked again for authentication, counts as a decline in the dunning schedule.
            clock.set(T0 + timedelta(hours=72, minutes=1))
            out["retried"] = await charger_for(pool, provider, clock).charge_due()
            await provider.close()
            await pool.close()
            return fake, out

    fake, out = asyncio.run(scenario())
    assert fake.rejected == [], "stripe-mock rejected a request"
    status, redirect, reference, amount, currency = out["start"]
    assert status == "requires_action" and redirect == f"{fake.url}/3ds/{reference}" and reference.startswith("pi_")
    assert (amount, currency) == (2990, "BRL")
    assert out["before"] == "PENDING" and out["portal"] == "APPLIED"
    assert out["webhook_after"] == "APPLIED" and out["webhook_first"] == "APPLIED"  # stored; the attempt was paid once
    assert out["portal_after"] == "BL404" and out["foreign"] == "BL404" and out["foreign_confirms"] == 0
    for customer in (4, 5):
        paid = invoice(db_url, inv[customer])
        assert paid["status"] == "PAID" and paid["gateway_reference"].startswith("pi_")
    paid_events = [e["data"]["invoiceId"] for e in events(db_url, "InvoicePaid")]
    assert sorted(paid_events) == sorted([inv[4], inv[5]]), "each paid exactly once"
    assert events(db_url, "RefundDue") == [] and query(db_url, "SELECT * FROM billing.refund") == []
    asked = {e["data"]["invoiceId"] for e in events(db_url, "InvoiceActionRequired")}
    assert asked == {inv[4], inv[5], inv[6]}
    # The email asking customer 4 to act (the only one with an address).
    owed = query(db_url, "SELECT customer_id, kind FROM billing.notification")
    assert {(r["customer_id"], r["kind"]) for r in owed} >= {(4, "ACTION_REQUIRED"), (4, "PAYMENT_SUCCEEDED")}
    # Customer 6: the window passed; tried again off session, authentication asked again: a decline
    # in the schedule now (counted, the card kept), never a second window.
    assert out["retried"] == 1
    again = invoice(db_url, inv[6])
    assert (again["status"], again["attempt_count"], again["waiting_for"], again["last_failure_reason"]) == \
        ("OPEN", 1, None, "authentication_required")
    assert again["next_attempt_at"] > T0 + timedelta(hours=73)
    (method,) = query(db_url, "SELECT status FROM billing.payment_method WHERE customer_id = 6")
    assert method["status"] == "ACTIVE"
    assert [e["data"]["invoiceId"] for e in events(db_url, "InvoicePaymentFailed")] == [inv[6]]
