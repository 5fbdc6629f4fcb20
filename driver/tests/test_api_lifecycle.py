"""The lifecycle over HTTP (docs/http-api.md, docs/lifecycle.md): trials, coupons, pause and resume,
uncancel, reactivation, seats and scheduled changes, their error statuses and their scopes; and a
coupon's redemptions counted exactly once under concurrency."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import psycopg

from billing.clock import SimulatedClock

from .conftest import create_test_key
from .test_api import api_client, assert_error, run, seed_plans

T0 = datetime(2026, 9, 1, 12, 0, tzinfo=timezone.utc)


def _coupon(db_url: str, code: str, percent: float | None, amount: int | None, duration: str, **kw) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_coupon(%s, %s, %s, %s, %s, %s, %s)",
                     (code, percent, amount, "USD" if amount else None, duration, kw.get("periods"), kw.get("max")))


def test_trial_coupon_and_seats_at_signup(db_url):
    seed_plans(db_url)
    _coupon(db_url, "SEPT", 20, None, "once")

    async def body():
        clock = SimulatedClock(T0)
        async with api_client(db_url, clock=clock) as client:
            r = await client.post("/subscriptions", headers={"Idempotency-Key": "lc-1"},
                                  json={"customerId": 71, "planCode": "PRO_MONTHLY", "trialDays": 14,
                                        "couponCode": "SEPT", "quantity": 3})
            assert r.status_code == 201, r.text
            sub = r.json()
            assert (sub["status"], sub["quantity"], sub["couponCode"]) == ("TRIALING", 3, "SEPT")
            assert sub["trialEnd"] == "2026-09-15T12:00:00.000000Z" == sub["currentPeriodEnd"]
            # same key, other options: 409
            r = await client.post("/subscriptions", headers={"Idempotency-Key": "lc-1"},
                                  json={"customerId": 71, "planCode": "PRO_MONTHLY", "trialDays": 7})
            assert_error(r, 409, "conflict")
            for i, (bad, status) in enumerate((({"trialDays": -1}, 422), ({"trialDays": "3"}, 400), ({"quantity": 0}, 422),
                                               ({"couponCode": "NOPE"}, 422), ({"trialDays": True}, 400))):
                r = await client.post("/subscriptions", headers={"Idempotency-Key": f"lc-bad-{i}"},
                                      json={"customerId": 71, "planCode": "PRO_MONTHLY", **bad})
                assert_error(r, status)
            return sub["id"]

    sub_id = run(body())
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.create_due_invoices(100, %s)", (T0 + timedelta(days=14),))
        row = conn.execute("SELECT subtotal, discount_amount, quantity FROM billing.invoice WHERE subscription_id = %s",
                           (sub_id,)).fetchone()
    assert row == (720000, 180000, 3), "3 seats x 300000, 20% off once, billed when the trial ends"


def test_pause_resume_uncancel_quantity_and_scheduled_change(db_url):
    seed_plans(db_url)

    async def body():
        clock = SimulatedClock(T0)
        async with api_client(db_url, clock=clock) as client:
            r = await client.post("/subscriptions", headers={"Idempotency-Key": "lc-2"},
                                  json={"customerId": 72, "planCode": "PRO_MONTHLY"})
            sid = r.json()["id"]
            clock.advance(timedelta(days=5))
            r = await client.post(f"/subscriptions/{sid}/pause", json={"resumeAt": "2026-09-03T00:00:00Z"})
            assert_error(r, 422, "invalid_input")  # not after now
            r = await client.post(f"/subscriptions/{sid}/pause", json={"resumeAt": "tomorrow"})
            assert_error(r, 400, "invalid_field")
            r = await client.post(f"/subscriptions/{sid}/pause", json={"resumeAt": "2026-10-01T00:00:00Z"})
            assert r.status_code == 200, r.text
            assert (r.json()["status"], r.json()["resumeAt"]) == ("PAUSED", "2026-10-01T00:00:00.000000Z")
            r = await client.post(f"/subscriptions/{sid}/resume", json={})
            assert (r.status_code, r.json()["status"]) == (200, "ACTIVE")
            assert r.json()["currentPeriodStart"] == "2026-09-06T12:00:00.000000Z"
            r = await client.post(f"/subscriptions/{sid}/cancel", json={"atPeriodEnd": True})
            r = await client.post(f"/subscriptions/{sid}/uncancel", json={})
            assert (r.status_code, r.json()["cancelAtPeriodEnd"]) == (200, False)
            r = await client.post(f"/subscriptions/{sid}/quantity", json={"quantity": 2})
            assert (r.status_code, r.json()["quantity"]) == (200, 2)
            r = await client.post(f"/subscriptions/{sid}/quantity", json={"quantity": 0})
            assert_error(r, 422)
            r = await client.post(f"/subscriptions/{sid}/change-plan", json={"planCode": "BASIC_MONTHLY",
                                                                             "when": "period_end"})
            assert (r.status_code, r.json()["scheduledPlanCode"], r.json()["planCode"]) == \
                (200, "BASIC_MONTHLY", "PRO_MONTHLY")
            r = await client.post(f"/subscriptions/{sid}/change-plan", json={"planCode": "BASIC_MONTHLY",
                                                                             "when": "tomorrow"})
            assert_error(r, 422)
            r = await client.post(f"/subscriptions/{sid}/change-plan", json={"planCode": "PRO_MONTHLY",
                                                                             "when": "period_end"})
            assert r.json()["scheduledPlanCode"] is None, "withdrawn"
            r = await client.post(f"/subscriptions/{sid}/reactivate", json={})
            assert (r.status_code, r.json()["status"]) == (200, "ACTIVE"), "a live subscription: unchanged"
            r = await client.post(f"/subscriptions/{sid}/cancel", json={"atPeriodEnd": False})
            r = await client.post(f"/subscriptions/{sid}/reactivate", json={})
            assert_error(r, 422)  # canceled on request, not by dunning
            r = await client.post(f"/subscriptions/{sid}/resume", json={})
            assert_error(r, 422)
            r = await client.post(f"/subscriptions/{sid}/uncancel", json={})
            assert_error(r, 422)
            r = await client.post("/subscriptions/999999/pause", json={})
            assert_error(r, 404)

    run(body())


def test_coupon_endpoints_and_scopes(db_url):
    seed_plans(db_url)
    writer = create_test_key(db_url, "subscriptions:write")

    async def body():
        clock = SimulatedClock(T0)
        async with api_client(db_url, clock=clock) as admin:
            r = await admin.post("/coupons", json={"code": "TENOFF", "amountOff": 1000, "currency": "USD",
                                                   "duration": "repeating", "durationPeriods": 3,
                                                   "maxRedemptions": 10, "redeemBy": "2026-12-31T00:00:00Z",
                                                   "planCodes": ["PRO_MONTHLY"]})
            assert r.status_code == 200, r.text
            assert r.json()["timesRedeemed"] == 0 and r.json()["durationPeriods"] == 3
            r = await admin.post("/coupons", json={"code": "BAD", "percentOff": 150, "duration": "once"})
            assert_error(r, 422)
            r = await admin.post("/coupons", json={"code": "BAD", "percentOff": "10", "duration": "once"})
            assert_error(r, 400)
        async with api_client(db_url, clock=clock, key=writer) as client:
            r = await client.post("/coupons", json={"code": "FREE", "percentOff": 100, "duration": "forever"})
            assert_error(r, 403, "forbidden")  # a subscriptions:write key cannot make money
            r = await client.post("/subscriptions", headers={"Idempotency-Key": "lc-3"},
                                  json={"customerId": 73, "planCode": "PRO_MONTHLY"})
            sid = r.json()["id"]
            r = await client.post(f"/subscriptions/{sid}/coupon", json={"couponCode": "TENOFF"})
            assert (r.status_code, r.json()["couponCode"]) == (200, "TENOFF")
            r = await client.post(f"/subscriptions/{sid}/coupon", json={"couponCode": "NOPE"})
            assert_error(r, 422)
            r = await client.post(f"/subscriptions/{sid}/coupon", json={})
            assert_error(r, 400, "missing_field")
        reader = create_test_key(db_url, "subscriptions:read")
        async with api_client(db_url, clock=clock, key=reader) as client:
            r = await client.post(f"/subscriptions/{sid}/pause", json={})
            assert_error(r, 403, "forbidden")

    run(body())


def test_a_coupon_limited_per_customer_over_http(db_url):
    """maxRedemptionsPerCustomer on POST /coupons; a customer's second redemption answers 409
    conflict (BL409) on every route that redeems: a signup, one in bulk, apply; removing the coupon
    (replacing it) never gives the redemption back."""
    seed_plans(db_url)

    async def body():
        async with api_client(db_url, clock=SimulatedClock(T0)) as admin:
            r = await admin.post("/v1/coupons", json={"code": "ONCE_EACH", "percentOff": 50, "duration": "forever",
                                                   "maxRedemptionsPerCustomer": 1})
            assert r.status_code == 200 and r.json()["maxRedemptionsPerCustomer"] == 1, r.text
            assert_error(await admin.post("/coupons", json={"code": "ZERO_EACH", "percentOff": 5, "duration": "once",
                                                            "maxRedemptionsPerCustomer": 0}), 422)
            await admin.post("/coupons", json={"code": "OTHER", "percentOff": 5, "duration": "forever"})
            signup = {"customerId": 74, "planCode": "PRO_MONTHLY", "couponCode": "ONCE_EACH"}
            r = await admin.post("/v1/subscriptions", headers={"Idempotency-Key": "pc-1"}, json=signup)
            assert r.status_code == 201, r.text
            first = r.json()["id"]
            assert_error(await admin.post("/v1/subscriptions", headers={"Idempotency-Key": "pc-2"}, json=signup),
                         409, "conflict")
            r = await admin.post("/v1/subscriptions/batch", json={"signups": [{"idempotencyKey": "pc-3", **signup}]})
            assert_error(r, 409, "conflict")
            # replaced by another coupon, then asked for again on a new subscription: still counted
            assert (await admin.post(f"/v1/subscriptions/{first}/coupon", json={"couponCode": "OTHER"})).status_code == 200
            r = await admin.post("/v1/subscriptions", headers={"Idempotency-Key": "pc-4"},
                                 json={"customerId": 74, "planCode": "PRO_MONTHLY"})
            assert_error(await admin.post(f"/v1/subscriptions/{r.json()['id']}/coupon", json={"couponCode": "ONCE_EACH"}),
                         409, "conflict")
            r = await admin.post("/v1/subscriptions", headers={"Idempotency-Key": "pc-5"}, json={**signup, "customerId": 75})
            assert r.status_code == 201, "another customer redeems it"

    run(body())
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT customer_id, count(*) FROM billing.coupon_redemption WHERE coupon_code = 'ONCE_EACH' "
                            "GROUP BY 1 ORDER BY 1").fetchall() == [(74, 1), (75, 1)]


def test_coupon_redemptions_are_counted_once_under_concurrency(db_url):
    """Twelve sessions redeem a coupon limited to 5 at the same moment, each on its own subscription:
    exactly 5 succeed, the counter says 5, and the others get BL409."""
    seed_plans(db_url)
    _coupon(db_url, "LIMITED", 10, None, "forever", max=5)
    with psycopg.connect(db_url, autocommit=True) as conn:
        subs = [conn.execute("SELECT id FROM billing.create_subscription(%s, %s, 'PRO_MONTHLY', %s)",
                             (f"race-{i}", 800 + i, T0)).fetchone()[0] for i in range(12)]
    barrier = threading.Barrier(len(subs))
    outcomes: list[str] = []
    lock = threading.Lock()

    def redeem(sub_id: int) -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            barrier.wait()
            try:
                conn.execute("SELECT billing.apply_coupon(%s, 'LIMITED', %s)", (sub_id, T0 + timedelta(hours=1)))
                result = "ok"
            except psycopg.Error as exc:
                result = exc.sqlstate or "?"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=redeem, args=(s,)) for s in subs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["BL409"] * 7 + ["ok"] * 5
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT times_redeemed FROM billing.coupon WHERE code = 'LIMITED'").fetchone()[0] == 5
        assert conn.execute("SELECT count(*) FROM billing.coupon_redemption WHERE coupon_code = 'LIMITED'"
                            ).fetchone()[0] == 5
