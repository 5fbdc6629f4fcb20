"""Charging, refunds and webhooks through the Stripe provider (docs/providers.md).

Every call the provider makes goes through `StripeFake` to stripe-mock, Stripe's own mock server,
which validates it against Stripe's OpenAPI description: each test ends by asserting that
stripe-mock rejected nothing. The fake decides the outcomes (succeeded, soft and hard declines,
authentication required, a timeout, 429s). Webhooks are signed by the official `stripe` library's
signing helper and verified by the API's /webhooks/stripe.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from datetime import datetime, timedelta, timezone

import httpx
import psycopg
import pytest
import stripe
from psycopg.rows import dict_row

from billing.api.app import create_app
from billing.clock import SimulatedClock
from billing.config import Settings
from billing.db import async_pool
from billing.limiter import LocalGcraLimiter
from billing.providers.stripe import StripeProvider
from billing.worker.charging import Charger
from billing.worker.refunds import Refunder

from .conftest import create_test_key
from .stripe_fake import StripeFake

pytestmark = pytest.mark.timeout(120)

T0 = datetime(2026, 10, 1, 12, 0, tzinfo=timezone.utc)
API_KEY = "sk_test_" + secrets.token_hex(16)
WEBHOOK_SECRET = "whsec_" + secrets.token_urlsafe(32)


def query(db_url: str, sql: str, *args) -> list[dict]:
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(sql, args).fetchall()


def seed(db_url: str, methods: dict[int, str | None], now: datetime = T0) -> dict[int, int]:
    """One subscription per customer (its INITIAL invoice due at `now`); each customer's Stripe card
    `methods[customer]` (None: no method). Returns customer -> invoice id."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO', 2990, 'BRL', 'MONTH', 1)")
        for customer, pm in methods.items():
            conn.execute("SELECT billing.upsert_customer(%s, 'UTC')", (customer,))
            if pm:
                conn.execute("SELECT billing.set_payment_method(%s, 'stripe', %s, %s, 'visa', '4242', 12, 2030, %s)",
                             (customer, f"cus_{customer}", pm, now))
            conn.execute("SELECT billing.create_subscription(%s, %s, 'PRO', %s)", (f"s-{customer}", customer, now))
    return {r["customer_id"]: r["id"] for r in query(db_url, "SELECT id, customer_id FROM billing.invoice")}


def invoice(db_url: str, invoice_id: int) -> dict:
    return query(db_url, "SELECT * FROM billing.invoice WHERE id = %s", invoice_id)[0]


def events(db_url: str, event_type: str) -> list[dict]:
    return [r["payload"] for r in query(db_url, "SELECT payload FROM billing.outbox_event WHERE event_type = %s "
                                                "ORDER BY id", event_type)]


def provider_for(fake: StripeFake, timeout: float = 1.0) -> StripeProvider:
    return StripeProvider(API_KEY, api_base=fake.url, timeout=timeout)


def charger_for(pool, provider, clock) -> Charger:
    return Charger(pool, provider, LocalGcraLimiter(50), rate=50, clock=clock, lease_seconds=60, worker_id="t")


def test_the_worker_charges_through_stripe_every_outcome(db_url, stripe_mock_url):
    inv = seed(db_url, {1: "pm_card_visa", 2: "pm_card_chargeDeclinedInsufficientFunds",
                        3: "pm_card_chargeDeclinedStolenCard", 4: "pm_card_authenticationRequired",
                        5: "pm_card_timeout"})
    clock = SimulatedClock(T0)

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        async with StripeFake(stripe_mock_url, hold_seconds=2.0) as fake:
            provider = provider_for(fake)
            charger = charger_for(pool, provider, clock)
            fake.rate_limit_next = 2  # the first two calls answer 429: neither a decline nor an attempt
            first = await charger.charge_due()
            # The timed-out key: its status is asked near the key's end instead of sending it again.
            key = query(db_url, "SELECT idempotency_key FROM billing.payment_attempt WHERE invoice_id = %s", inv[5])
            clock.set(T0 + timedelta(hours=22, minutes=30))
            looked = await charger.charge_due()
            await provider.close()
            await pool.close()
            return fake, charger.counts, first, looked, key[0]["idempotency_key"]

    fake, counts, first, looked, timeout_key = asyncio.run(scenario())
    assert fake.rejected == [], "stripe-mock rejected a request"
    assert (first, looked) == (5, 1) and counts["rate_limited"] == 2 and fake.rate_limited == 2

    # Each request carried what Stripe needs: off-session confirmation, lower-case currency, our keys.
    posts = [(form, key) for method, path, form, key in fake.requests if (method, path) == ("POST", "/v1/payment_intents")]
    form, key = posts[-1]
    assert form["off_session"] == "true" and form["confirm"] == "true" and form["currency"] == "brl"
    assert form["amount"] == "2990" and form["metadata[idempotency_key]"] == key
    assert {f["metadata[invoice_id]"] for f, _ in posts} == {str(i) for i in inv.values()}
    assert {f["customer"] for f, _ in posts} == {f"cus_{c}" for c in inv}

    paid = invoice(db_url, inv[1])
    assert paid["status"] == "PAID" and paid["gateway_reference"].startswith("pi_")
    soft = invoice(db_url, inv[2])
    assert (soft["status"], soft["attempt_count"], soft["waiting_for"], soft["last_failure_reason"]) == \
        ("OPEN", 1, None, "insufficient_funds")
    assert T0 + timedelta(days=1) <= soft["next_attempt_at"] < T0 + timedelta(days=1, hours=2)
    hard = invoice(db_url, inv[3])
    assert (hard["status"], hard["attempt_count"], hard["waiting_for"], hard["next_attempt_at"],
            hard["last_failure_reason"]) == ("OPEN", 1, "PAYMENT_METHOD", None, "stolen_card")
    (method,) = query(db_url, "SELECT * FROM billing.payment_method WHERE customer_id = %s", 3)
    assert (method["status"], method["is_default"], method["failure_reason"]) == ("DECLINED", False, "stolen_card")
    # Authentication required is not a decline (docs/customers.md): the card stays, the invoice is
    # ACTION_REQUIRED (OPEN, dunning waits the action window, the try not counted).
    action = invoice(db_url, inv[4])
    assert (action["status"], action["attempt_count"], action["waiting_for"], action["next_attempt_at"],
            action["action_required_until"], action["last_failure_reason"]) == \
        ("OPEN", 0, None, T0 + timedelta(hours=72), T0 + timedelta(hours=72), "authentication_required")
    (method,) = query(db_url, "SELECT * FROM billing.payment_method WHERE customer_id = %s", 4)
    assert (method["status"], method["is_default"]) == ("ACTIVE", True)
    (asked,) = events(db_url, "InvoiceActionRequired")
    assert asked["data"]["invoiceId"] == inv[4] and asked["data"]["paymentReference"].startswith("pi_")
    waiting = {e["data"]["invoiceId"]: e["data"] for e in events(db_url, "InvoicePaymentMethodRequired")}
    assert set(waiting) == {inv[3]} and {w["reason"] for w in waiting.values()} == {"HARD_DECLINE"}
    failed = {e["data"]["invoiceId"]: e["data"]["hardDecline"] for e in events(db_url, "InvoicePaymentFailed")}
    assert failed == {inv[2]: False, inv[3]: True}
    # The timeout: UNKNOWN first, then the lookup (the customer's payment intents listed, the one with
    # the key in its metadata) found it; the Search API is not used.
    timed = invoice(db_url, inv[5])
    assert timed["status"] == "PAID" and timed["gateway_reference"] == fake.intents[timeout_key]["id"]
    lists = [(path, form) for method, path, form, _ in fake.requests if method == "GET"]
    assert fake.list_calls == 1 and not any(path == "/v1/payment_intents/search" for path, _ in lists)
    # Stripe charged each key once: the fake's idempotency store has one intent per key.
    assert len(fake.intents) == 5


def test_without_a_method_the_invoice_waits_and_a_new_method_pays_it_at_once(db_url, stripe_mock_url):
    inv = seed(db_url, {7: None, 8: "pm_card_chargeDeclinedStolenCard"})
    clock = SimulatedClock(T0)
    write_key = create_test_key(db_url, "subscriptions:write")

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        app = create_app(Settings(database_url=db_url), clock=clock)
        async with StripeFake(stripe_mock_url) as fake, httpx.AsyncClient(timeout=30, 
                transport=httpx.ASGITransport(app=app), base_url="http://billing.test") as api:
            provider = provider_for(fake)
            charger = charger_for(pool, provider, clock)
            assert await charger.charge_due() == 1  # customer 7 is not charged: no method
            waiting = {i: invoice(db_url, inv[i])["waiting_for"] for i in (7, 8)}
            assert await charger.charge_due() == 0  # waiting: nothing claims them
            clock.advance(timedelta(hours=1))
            answers = []
            for customer in (7, 8):
                r = await api.put(f"/customers/{customer}/payment-method", headers={
                    "Authorization": f"Bearer {write_key}"}, json={
                    "provider": "stripe", "customerRef": f"cus_{customer}", "paymentMethodRef": "pm_card_visa",
                    "brand": "visa", "last4": "4242", "expMonth": 11, "expYear": 2031})
                answers.append((r.status_code, r.json()))
            due = [invoice(db_url, inv[i])["next_attempt_at"] for i in (7, 8)]
            paid = await charger.charge_due()  # at once: no dunning delay
            await provider.close()
            await app.state.database.close()
        await pool.close()
        return fake, waiting, answers, due, paid

    fake, waiting, answers, due, paid = asyncio.run(scenario())
    assert fake.rejected == []
    assert waiting == {7: "PAYMENT_METHOD", 8: "PAYMENT_METHOD"}
    (event,) = [e for e in events(db_url, "InvoicePaymentMethodRequired") if e["data"]["invoiceId"] == inv[7]]
    assert event["data"]["reason"] == "NO_PAYMENT_METHOD" and event["data"]["provider"] == "stripe"
    assert [a[0] for a in answers] == [200, 200] and answers[0][1]["isDefault"] is True
    assert due == [T0 + timedelta(hours=1)] * 2 and paid == 2
    for customer in (7, 8):
        assert invoice(db_url, inv[customer])["status"] == "PAID"
    updated = events(db_url, "PaymentMethodUpdated")
    assert [e["data"]["retriedInvoiceIds"] for e in updated[-2:]] == [[inv[7]], [inv[8]]]
    assert "paymentMethodRef" not in updated[-1]["data"]  # the provider's references stay out of events


def test_refunds_through_stripe_partial_never_more_than_collected(db_url, stripe_mock_url):
    inv = seed(db_url, {21: "pm_card_visa"})
    clock = SimulatedClock(T0)
    key = create_test_key(db_url, "refunds:write", "subscriptions:read")
    write_only = create_test_key(db_url, "subscriptions:write")

    async def scenario():
        pool = await async_pool(db_url, max_size=6)
        app = create_app(Settings(database_url=db_url), clock=clock)
        auth = {"Authorization": f"Bearer {key}"}
        async with StripeFake(stripe_mock_url) as fake, httpx.AsyncClient(timeout=30, 
                transport=httpx.ASGITransport(app=app), base_url="http://billing.test") as api:
            provider = provider_for(fake)
            await charger_for(pool, provider, clock).charge_due()
            url = f"/invoices/{inv[21]}/refunds"
            forbidden = await api.post(url, json={"amount": 100}, headers={
                "Authorization": f"Bearer {write_only}", "Idempotency-Key": "x"})
            first = await api.post(url, json={"amount": 1000}, headers={**auth, "Idempotency-Key": "r-1"})
            replay = await api.post(url, json={"amount": 1000}, headers={**auth, "Idempotency-Key": "r-1"})
            reused = await api.post(url, json={"amount": 5}, headers={**auth, "Idempotency-Key": "r-1"})
            # A customer asking for more than is left, twice at the same time for all of it: one wins.
            too_much = await api.post(url, json={"amount": 1991}, headers={**auth, "Idempotency-Key": "r-2"})
            races = await asyncio.gather(*(api.post(url, json={"amount": 1990}, headers={
                **auth, "Idempotency-Key": f"race-{n}"}) for n in range(4)))
            refunder = Refunder(pool, provider, LocalGcraLimiter(50), clock=clock, lease_seconds=60)
            fake.rate_limit_next = 1
            executed = await refunder.refund_due()
            again = await refunder.refund_due()  # nothing twice
            listed = await api.get(url, headers=auth)
            after = await api.post(url, json={"amount": 1}, headers={**auth, "Idempotency-Key": "r-3"})
            await provider.close()
            await app.state.database.close()
        await pool.close()
        return fake, forbidden, first, replay, reused, too_much, races, executed, again, listed, after, refunder.counts

    (fake, forbidden, first, replay, reused, too_much, races, executed, again, listed, after,
     counts) = asyncio.run(scenario())
    assert fake.rejected == []
    assert forbidden.status_code == 403  # refunds need their own scope
    assert first.status_code == 200 and first.json()["status"] == "REQUESTED" and first.json()["amount"] == 1000
    assert replay.json()["id"] == first.json()["id"]
    assert reused.status_code == 409
    assert too_much.status_code == 422 and "1990" in too_much.json()["error"]["message"]
    assert sorted(r.status_code for r in races) == [200, 422, 422, 422]
    assert (executed, again, counts["rate_limited"]) == (2, 0, 1)
    data = listed.json()["data"]
    assert [(r["amount"], r["status"]) for r in data] == [(1000, "SUCCEEDED"), (1990, "SUCCEEDED")]
    assert all(r["providerReference"].startswith("re_") for r in data)
    assert after.status_code == 422  # everything collected was given back
    paid = invoice(db_url, inv[21])
    assert (paid["status"], paid["amount_refunded"]) == ("PAID", 2990)
    # Stripe was asked once per refund, with its own key, against the invoice's payment intent.
    assert sum(fake.refunded.values()) == 2990 and len(fake.refunds) == 2
    assert {r["payment_intent"] for r in fake.refunds.values()} == {paid["gateway_reference"]}
    assert [e["data"]["status"] for e in events(db_url, "RefundSucceeded")] == ["SUCCEEDED", "SUCCEEDED"]


def test_refunds_in_doubt_are_looked_up_at_stripe_never_made_twice(db_url, stripe_mock_url):
    """Two refunds whose answers are lost: a 500 that refunded nothing and a timeout that refunded.
    Past their keys' lifetime the worker lists the payment intent's refunds (GET /v1/refunds,
    judged by stripe-mock) instead of sending the keys again: the one Stripe never saw gets a new
    key and is made; the other is found made."""
    inv = seed(db_url, {41: "pm_card_visa", 42: "pm_card_visa"})
    clock = SimulatedClock(T0)

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        async with StripeFake(stripe_mock_url, hold_seconds=2.0) as fake:
            provider = provider_for(fake)
            await charger_for(pool, provider, clock).charge_due()
            with psycopg.connect(db_url, autocommit=True) as conn:
                for customer in (41, 42):
                    conn.execute("SELECT billing.refund_invoice(%s, 1000, NULL, %s)", (inv[customer], T0))
            refunder = Refunder(pool, provider, LocalGcraLimiter(50), clock=clock, lease_seconds=60, concurrency=1)
            fake.fail_next_refund, fake.hold_next_refund = 1, 1
            sent = await refunder.refund_due()
            unknown = [r["outcome"] for r in query(db_url, "SELECT outcome FROM billing.refund ORDER BY id")]
            clock.advance(timedelta(hours=23, minutes=1))
            looked = await refunder.refund_due()
            again = await refunder.refund_due()
            await provider.close()
        await pool.close()
        return fake, sent, unknown, looked, again, refunder.counts

    fake, sent, unknown, looked, again, counts = asyncio.run(scenario())
    assert fake.rejected == [], "stripe-mock rejected a request"
    assert (sent, unknown) == (2, ["UNKNOWN", "UNKNOWN"])
    assert (looked, counts["looked_up"], again) == (3, 2, 0)  # two look-ups, then the new key
    rows = query(db_url, "SELECT * FROM billing.refund ORDER BY id")
    assert [(r["status"], r["try_count"]) for r in rows] == [("SUCCEEDED", 1), ("SUCCEEDED", 0)]
    assert rows[0]["idempotency_key"].endswith("-try-1")
    # Stripe made one refund per row, each with the row's key; the look-ups read the refunds list.
    assert sorted(fake.refunds) == sorted(r["idempotency_key"] for r in rows) and sum(fake.refunded.values()) == 2000
    assert sum(1 for m, path, _, _ in fake.requests if (m, path) == ("GET", "/v1/refunds")) == 2
    assert [invoice(db_url, inv[c])["amount_refunded"] for c in (41, 42)] == [1000, 1000]


# -- webhooks -----------------------------------------------------------------------------------


def signed(event: dict, secret: str = WEBHOOK_SECRET, timestamp: int | None = None) -> tuple[bytes, dict]:
    body = json.dumps(event).encode()
    header = stripe.WebhookSignature.generate_signature_header(body.decode(), secret, timestamp=timestamp)
    return body, {"Stripe-Signature": header, "Content-Type": "application/json"}


def intent_event(event_id: str, kind: str, key: str, *, amount: int = 2990, customer: int = 31,
                 error: dict | None = None) -> dict:
    intent = {"id": "pi_wh_" + event_id, "object": "payment_intent", "amount": amount, "currency": "brl",
              "status": "succeeded" if kind.endswith("succeeded") else "requires_payment_method",
              "last_payment_error": error,
              "metadata": {"idempotency_key": key, "invoice_id": "1", "customer_id": str(customer)}}
    return {"id": event_id, "object": "event", "type": kind, "created": int(time.time()),
            "data": {"object": intent}}


def test_webhooks_signed_by_the_official_library_verify_and_tampered_ones_do_not(db_url):
    inv = seed(db_url, {31: "pm_card_visa", 32: "pm_card_visa", 33: "pm_card_visa"})
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        claims = {r["customer_id"]: r for r in conn.execute(
            "SELECT * FROM billing.claim_charges('t', 10, '5 minutes', %s, 'stripe')", (T0,))}
    settings = Settings(database_url=db_url, stripe_webhook_secret=WEBHOOK_SECRET)

    async def scenario():
        app = create_app(settings, clock=SimulatedClock(T0))
        out = {}
        async with httpx.AsyncClient(timeout=30, transport=httpx.ASGITransport(app=app), base_url="http://billing.test") as api:
            async def post(body, headers):
                r = await api.post("/webhooks/stripe", content=body, headers=headers)
                return r.status_code, r.json()

            ok = intent_event("evt_1", "payment_intent.succeeded", claims[31]["idempotency_key"])
            body, headers = signed(ok)
            out["tampered"] = await post(body.replace(b"2990", b"2991"), headers)
            out["wrong_secret"] = await post(*signed(ok, "whsec_" + secrets.token_urlsafe(32)))
            out["stale"] = await post(*signed(ok, timestamp=int(time.time()) - 301))
            out["unsigned"] = await post(body, {"Content-Type": "application/json"})
            out["ok"] = await post(body, headers)
            out["again"] = await post(body, headers)
            failed = intent_event("evt_2", "payment_intent.payment_failed", claims[32]["idempotency_key"], customer=32,
                                  error={"type": "card_error", "code": "card_declined", "decline_code": "lost_card"})
            out["failed"] = await post(*signed(failed))
            other = intent_event("evt_3", "payment_intent.succeeded", claims[33]["idempotency_key"], amount=1,
                                 customer=33)
            out["mismatch"] = await post(*signed(other))
            out["ignored"] = await post(*signed({"id": "evt_4", "type": "customer.created",
                                                 "data": {"object": {"id": "cus_1"}}}))
            # Rotation: two v1 signatures, the second by the current secret.
            rotated = intent_event("evt_5", "payment_intent.succeeded", claims[33]["idempotency_key"], customer=33)
            body, headers = signed(rotated)
            old = stripe.WebhookSignature._compute_signature(
                f"{headers['Stripe-Signature'].split(',')[0][2:]}.{body.decode()}", "whsec_" + "o" * 20 + "ld")
            headers["Stripe-Signature"] = headers["Stripe-Signature"].replace(",v1=", f",v1={old},v1=")
            out["rotated"] = await post(body, headers)
            # charge.refunded settles the refunds it lists by their key (here one asked of invoice 31).
            with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
                refund = conn.execute("SELECT * FROM billing.refund_invoice(%s, 990, NULL, %s)",
                                      (inv[31], T0)).fetchone()
            refunded = {"id": "evt_6", "type": "charge.refunded", "data": {"object": {
                "id": "ch_1", "object": "charge", "payment_intent": "pi_wh_evt_1", "amount_refunded": 990,
                "refunds": {"object": "list", "data": [
                    {"id": "re_wh_1", "object": "refund", "amount": 990, "currency": "brl", "status": "succeeded",
                     "metadata": {"refund_key": refund["idempotency_key"]}},
                    {"id": "re_other", "object": "refund", "amount": 5, "status": "succeeded", "metadata": {}}]}}}}
            out["refunded"] = await post(*signed(refunded))
            out["refunded_again"] = await post(*signed(refunded))
        await app.state.database.close()
        return out

    out = asyncio.run(scenario())
    for name in ("tampered", "wrong_secret", "stale", "unsigned"):
        assert out[name][0] == 400 and out[name][1]["error"]["code"] == "invalid_signature", (name, out[name])
    assert out["ok"] == (200, {"received": True, "outcomes": ["APPLIED"]})
    assert out["again"] == (200, {"received": True, "outcomes": ["DUPLICATE"]})
    assert out["failed"] == (200, {"received": True, "outcomes": ["APPLIED"]})
    assert out["mismatch"] == (200, {"received": True, "outcomes": ["REVIEW"]})  # 1 centavo is not 2990
    assert out["ignored"] == (200, {"received": True, "outcomes": []})
    assert out["rotated"] == (200, {"received": True, "outcomes": ["APPLIED"]})
    assert invoice(db_url, inv[31])["status"] == "PAID"
    lost = invoice(db_url, inv[32])
    assert (lost["waiting_for"], lost["last_failure_reason"]) == ("PAYMENT_METHOD", "lost_card")
    assert invoice(db_url, inv[33])["status"] == "PAID"  # by evt_5, not by the mismatching evt_3
    assert out["refunded"] == (200, {"received": True, "outcomes": ["REFUND"]}) == out["refunded_again"]
    (refund,) = query(db_url, "SELECT * FROM billing.refund")
    assert (refund["status"], refund["provider_reference"]) == ("SUCCEEDED", "re_wh_1")
    assert invoice(db_url, inv[31])["amount_refunded"] == 990
    assert len(events(db_url, "RefundSucceeded")) == 1  # the second delivery changed nothing


def test_the_verifier_agrees_with_the_official_library_both_ways():
    from billing.providers import WebhookRejected
    from billing.providers.stripe import verify_signature
    from billing.signing import sign

    body = b'{"id":"evt_x","type":"payment_intent.succeeded"}'
    now = int(time.time())
    header = stripe.WebhookSignature.generate_signature_header(body.decode(), WEBHOOK_SECRET, timestamp=now)
    verify_signature(header, body, [WEBHOOK_SECRET], now)  # theirs verifies with ours
    ours = f"t={now},v1={sign(WEBHOOK_SECRET, now, body)}"
    assert stripe.WebhookSignature.verify_header(body, ours, WEBHOOK_SECRET, tolerance=300)  # ours with theirs
    for bad in (header.replace("t=", "t=1"), header[:-1] + ("0" if header[-1] != "0" else "1"), "v1=abc", ""):
        with pytest.raises(WebhookRejected):
            verify_signature(bad, body, [WEBHOOK_SECRET], now)
    with pytest.raises(WebhookRejected):
        verify_signature(header, body + b" ", [WEBHOOK_SECRET], now)
    with pytest.raises(WebhookRejected):
        verify_signature(header, body, [WEBHOOK_SECRET], now + 301)


def test_stripe_mock_is_the_judge_of_every_request(stripe_mock_url):
    """The fake really asks stripe-mock: a request outside Stripe's OpenAPI description is rejected
    and recorded (what the other tests assert never happens to the provider's own requests)."""

    async def scenario():
        async with StripeFake(stripe_mock_url) as fake, httpx.AsyncClient(timeout=30, base_url=fake.url) as client:
            auth = {"Authorization": f"Bearer {API_KEY}"}
            bad = [await client.post("/v1/payment_intents", data={"amount": "2990", "currency": "brl",
                                                                  "paymentMethod": "pm_card_visa"}, headers=auth),
                   await client.post("/v1/payment_intents", data={"amount": "12.5", "currency": "brl"}, headers=auth),
                   await client.post("/v1/refunds", data={"payment_intent": "pi_1", "amount": "ten"}, headers=auth)]
            good = await client.post("/v1/payment_intents", data={"amount": "2990", "currency": "brl"}, headers=auth)
            return [r.status_code for r in bad], good.status_code, fake.rejected

    bad, good, rejected = asyncio.run(scenario())
    assert all(status == 400 for status in bad) and good == 200
    assert [r[0] for r in rejected] == ["POST /v1/payment_intents", "POST /v1/payment_intents", "POST /v1/refunds"]


def test_refund_webhooks_without_their_refunds_and_refunds_that_fail_later(db_url, stripe_mock_url):
    """charge.refunded as API versions from 2022-11-15 send it (no refunds list): the API reads the
    payment intent's refunds from Stripe (through the fake and stripe-mock) and settles ours;
    refund.updated with status failed after the refund had succeeded takes it back; a pending
    refund changes nothing."""
    inv = seed(db_url, {51: "pm_card_visa"})
    clock = SimulatedClock(T0)

    async def scenario():
        pool = await async_pool(db_url, max_size=4)
        out = {}
        async with StripeFake(stripe_mock_url) as fake:
            provider = provider_for(fake)
            await charger_for(pool, provider, clock).charge_due()
            with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
                refund = conn.execute("SELECT * FROM billing.refund_invoice(%s, 700, NULL, %s)",
                                      (inv[51], T0)).fetchone()
                claim = conn.execute("SELECT * FROM billing.claim_refunds('t', 10, '5 minutes', %s)", (T0,)).fetchone()
            from billing.providers import RefundRequest
            made = await provider.refund(RefundRequest(
                claim["idempotency_key"], claim["refund_id"], claim["invoice_id"], claim["customer_id"],
                claim["amount"], claim["currency"].strip(), claim["charge_reference"], claim["charge_key"]))
            out["made"] = made.outcome  # made at Stripe; its answer never recorded (the worker died)
            settings = Settings(database_url=db_url, stripe_webhook_secret=WEBHOOK_SECRET, stripe_api_key=API_KEY,
                                stripe_api_base=fake.url)
            app = create_app(settings, clock=clock)
            pi = invoice(db_url, inv[51])["gateway_reference"]
            async with httpx.AsyncClient(timeout=30, transport=httpx.ASGITransport(app=app), base_url="http://billing.test") as api:
                async def post(event):
                    r = await api.post("/webhooks/stripe", content=signed(event)[0], headers=signed(event)[1])
                    return r.status_code, r.json()

                bare = {"id": "evt_r1", "type": "charge.refunded", "data": {"object": {
                    "id": "ch_1", "object": "charge", "payment_intent": pi, "amount_refunded": 700}}}
                out["bare"] = await post(bare)
                out["after_bare"] = query(db_url, "SELECT status FROM billing.refund")[0]["status"]
                stripe_refund = fake.refunds[refund["idempotency_key"]]
                pending = {"id": "evt_r2", "type": "refund.updated", "data": {"object": {
                    **stripe_refund, "status": "pending"}}}
                out["pending"] = await post(pending)
                failed = {"id": "evt_r3", "type": "refund.updated", "data": {"object": {
                    **stripe_refund, "status": "failed", "failure_reason": "expired_or_canceled_card"}}}
                # Issue 27: a failure after success is never taken on an event's word. While
                # Stripe still says succeeded, the worker's look-up keeps it SUCCEEDED...
                out["failed"] = await post(failed)
                out["failed_again"] = await post(failed)
                refunder = Refunder(pool, provider, LocalGcraLimiter(50), clock=clock, lease_seconds=60)
                await refunder.refund_due()
                out["after_lie"] = query(db_url, "SELECT status, recheck_at IS NULL AS done FROM billing.refund")[0]
                # ...and once Stripe itself says failed (the bank sent it back), the look-up fails it.
                fake.refunds[refund["idempotency_key"]].update(status="failed",
                                                              failure_reason="expired_or_canceled_card")
                out["failed_really"] = await post({**failed, "id": "evt_r4"})
                await refunder.refund_due()
            await app.state.database.close()
            await app.state.stripe.close()
            await provider.close()
        await pool.close()
        return fake, out

    fake, out = asyncio.run(scenario())
    assert fake.rejected == [], "stripe-mock rejected a request"
    assert out["made"] == "SUCCEEDED"
    assert out["bare"] == (200, {"received": True, "outcomes": ["REFUND"]}) and out["after_bare"] == "SUCCEEDED"
    assert out["pending"] == (200, {"received": True, "outcomes": []})
    assert out["failed"] == (200, {"received": True, "outcomes": ["RECHECK"]}) == out["failed_again"]
    assert out["after_lie"] == {"status": "SUCCEEDED", "done": True}
    assert out["failed_really"] == (200, {"received": True, "outcomes": ["RECHECK"]})
    (row,) = query(db_url, "SELECT * FROM billing.refund")
    assert (row["status"], row["failure_reason"]) == ("FAILED", "expired_or_canceled_card")
    assert invoice(db_url, inv[51])["amount_refunded"] == 0  # the money came back to us
    assert [e["data"]["status"] for e in events(db_url, "RefundSucceeded")] == ["SUCCEEDED"]
    assert [e["data"]["status"] for e in events(db_url, "RefundFailed")] == ["FAILED"]
