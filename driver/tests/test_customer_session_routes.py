"""Every route a customer session token (`cs_...`, meant to live in a browser) can reach, called with
one for its own customer and for another (docs/security.md, "Customer sessions": a customer session
never makes value from nothing).

The table below names every route of the app (a route added without a line here fails the first
test): what a token of customer A is answered on A's resources with the most valuable body it could
send (a coupon, trial days, prorate: false, seats past its key's guardrail, a payment method by a
reference it cannot prove, a refund, a void ...) and on B's. Then nothing of B's changed, and A has
no coupon, trial, payment method, refund or void it made itself. The token is opened by the
strongest key there is: admin, allowed to skip proration."""

from __future__ import annotations

import asyncio
import json
import uuid

import psycopg

from billing.api import create_app
from billing.api.security import unversioned
from billing.api_keys import Guardrails, create_key
from billing.clock import SimulatedClock
from billing.config import Settings

from .test_doors import STRIPE_SECRET, T0, bearer, client_for, seed

import httpx

A, B = 71, 72
SIGNUP = {"planCode": "PRO_MONTHLY"}
EVIL_METHOD = {"provider": "sim", "paymentMethodRef": "pm_evil", "expMonth": 12, "expYear": 2031}
LEGIT = {200, 201, 409, 422}  # an action a customer may take on its own (done, or refused by the rules)
NEVER = {403}
HIDDEN = {404}  # another customer's: as if it did not exist
NOT_MINE = {403, 404}

# (method, route without /v1) -> [(whose, body, answers)]; "own" runs before "other", in this order.
ROUTES: dict[tuple[str, str], list[tuple[str, object, set[int]]]] = {
    ("POST", "/subscriptions"): [
        ("own", {"customerId": A, **SIGNUP, "couponCode": "FREE100"}, NEVER),
        ("own", {"customerId": A, **SIGNUP, "trialDays": 30}, NEVER),
        ("own", {"customerId": A, **SIGNUP, "trialDays": 0}, NEVER),
        ("own", {"customerId": A, **SIGNUP, "quantity": 6}, NEVER),  # the opening key's guardrail: 5 seats
        ("own", {"customerId": A, **SIGNUP, "externalId": "sub_of_the_operator"}, NEVER),
        # a plan the operator has not made self-serve (a free plan kept for staff), or none at all
        ("own", {"customerId": A, "planCode": "STAFF_FREE"}, NEVER),
        ("own", {"customerId": A, "planCode": "NO_SUCH_PLAN"}, NEVER),
        ("own", {"customerId": A, **SIGNUP}, LEGIT),  # PRO_MONTHLY is self-serve: on its own terms, billed
        ("other", {"customerId": B, **SIGNUP}, HIDDEN)],
    ("POST", "/subscriptions/batch"): [
        ("own", {"signups": [{"idempotencyKey": "b1", "customerId": A, **SIGNUP, "couponCode": "FREE100"}]}, NEVER),
        ("own", {"signups": [{"idempotencyKey": "b2", "customerId": A, **SIGNUP, "trialDays": 14}]}, NEVER),
        ("own", {"signups": [{"idempotencyKey": "b4", "customerId": A, **SIGNUP, "externalId": "sub_x"}]}, NEVER),
        # one row on a plan that is not self-serve refuses the whole batch: its self-serve row is not made either
        ("own", {"signups": [{"idempotencyKey": "b5", "customerId": A, **SIGNUP},
                             {"idempotencyKey": "b6", "customerId": A, "planCode": "STAFF_FREE"}]}, NEVER),
        ("own", {"signups": [{"idempotencyKey": "b7", "customerId": A, **SIGNUP}]}, {200}),
        ("other", {"signups": [{"idempotencyKey": "b3", "customerId": B, **SIGNUP}]}, HIDDEN)],
    ("GET", "/subscriptions"): [("own", None, {200}), ("other", None, HIDDEN)],
    ("GET", "/subscriptions/{id}"): [("own", None, {200}), ("other", None, HIDDEN)],
    ("POST", "/subscriptions/{id}/change-plan"): [
        ("own", {"planCode": "BASIC_MONTHLY", "prorate": False}, NEVER),
        ("own", {"planCode": "STAFF_FREE"}, {422}),  # not a change the operator offers (the portal's check)
        ("other", {"planCode": "BASIC_MONTHLY"}, HIDDEN)],
    ("POST", "/subscriptions/{id}/coupon"): [("own", {"couponCode": "FREE100"}, NEVER),
                                             ("other", {"couponCode": "FREE100"}, NOT_MINE)],
    ("POST", "/subscriptions/{id}/quantity"): [("own", {"quantity": 6}, NEVER), ("own", {"quantity": 2}, LEGIT),
                                               ("other", {"quantity": 1}, HIDDEN)],
    ("POST", "/subscriptions/{id}/pause"): [("own", {}, LEGIT), ("other", {}, HIDDEN)],
    ("POST", "/subscriptions/{id}/resume"): [("own", {}, LEGIT), ("other", {}, HIDDEN)],
    ("POST", "/subscriptions/{id}/uncancel"): [("own", {}, LEGIT), ("other", {}, HIDDEN)],
    ("POST", "/subscriptions/{id}/reactivate"): [("own", {}, LEGIT), ("other", {}, HIDDEN)],
    ("GET", "/subscriptions/{id}/upcoming-invoice"): [("own", None, {200}), ("other", None, HIDDEN)],
    ("POST", "/coupons"): [("own", {"code": "MINE", "percentOff": 100, "duration": "forever"}, NEVER)],
    ("POST", "/webhooks/payments"): [("own", {"id": "evt_1"}, {400, 401, 403, 503})],
    ("POST", "/webhooks/stripe"): [("own", {"id": "evt_1"}, {400, 401, 403, 503})],
    ("PUT", "/customers/{id}/payment-method"): [
        ("own", EVIL_METHOD, NEVER),
        ("own", {"provider": "stripe", "paymentMethodRef": "pm_card_visa", "expMonth": 12, "expYear": 2031}, NEVER),
        ("own", {"provider": "stripe", "setupIntentId": "seti_nobodys"}, NEVER),  # the provider knows none
        ("other", EVIL_METHOD, HIDDEN)],
    ("POST", "/customers/{id}/portal-links"): [("own", {}, {201}), ("other", {}, HIDDEN)],
    ("POST", "/customer-sessions"): [("own", {"customerId": A}, NEVER), ("other", {"customerId": B}, NEVER)],
    ("GET", "/invoices"): [("own", None, {200}), ("other", None, HIDDEN)],
    ("GET", "/invoices/{id}"): [("own", None, {200}), ("other", None, HIDDEN)],
    ("GET", "/invoices/{id}/lines"): [("own", None, {200}), ("other", None, HIDDEN)],
    ("POST", "/invoices/{id}/retry"): [("own", {}, NEVER), ("other", {}, NEVER)],
    ("POST", "/invoices/{id}/void"): [("own", {"reason": "mine"}, NEVER), ("other", {"reason": "x"}, NEVER)],
    ("POST", "/invoices/{id}/refunds"): [("own", {"amount": 1599}, NEVER), ("other", {"amount": 1}, NEVER)],
    ("GET", "/invoices/{id}/refunds"): [("own", None, {200}), ("other", None, HIDDEN)],
    ("GET", "/credit-notes"): [("own", None, {200}), ("other", None, HIDDEN)],
    ("GET", "/refunds"): [("own", None, {200}), ("other", None, HIDDEN)],
    ("POST", "/webhook-endpoints"): [("own", {"url": "https://hooks.example.com/x", "eventTypes": ["InvoicePaid"]},
                                      NEVER)],
    ("GET", "/webhook-endpoints"): [("own", None, NEVER)],
    ("GET", "/webhook-endpoints/{id}"): [("own", None, NEVER)],
    ("DELETE", "/webhook-endpoints/{id}"): [("own", None, NEVER)],
    ("GET", "/webhook-endpoints/{id}/attempts"): [("own", None, NEVER)],
    ("GET", "/admin/audit"): [("own", None, NEVER)],
    ("GET", "/metrics"): [("own", None, NEVER)],
    ("GET", "/openapi.json"): [("own", None, NEVER)],
    ("GET", "/healthz"): [("own", None, {200})],
    ("POST", "/usage-events"): [("own", [{"specversion": "1.0", "id": "u1", "source": "s", "type": "t",
                                          "time": "2026-09-01T03:00:00Z", "subject": str(A), "data": {}}], NEVER)],
    ("GET", "/customers/{id}/usage"): [("own", None, {200}), ("other", None, HIDDEN)],
    ("GET", "/customers"): [("own", None, NEVER)],
    ("POST", "/customers"): [("own", {"id": 79}, NEVER)],
    ("GET", "/customers/{id}"): [("own", None, NEVER), ("other", None, NOT_MINE)],
    ("POST", "/customers/{id}"): [("own", {"name": "me"}, NEVER), ("other", {"name": "x"}, NOT_MINE)],
    ("GET", "/customers/{id}/payment-methods"): [("own", None, {200}), ("other", None, HIDDEN)],
    ("GET", "/customers/{id}/payment-methods/{method_id}"): [("own", None, {404}), ("other", None, HIDDEN)],
    ("GET", "/plans"): [("own", None, {200})],  # the catalog: no customer's data
    ("POST", "/plans"): [("own", {"code": "CHEAP", "priceAmount": 1, "currency": "USD", "billingInterval": "MONTH"},
                          NEVER)],
    ("GET", "/plans/{code}"): [("own", None, {200})],
    ("PATCH", "/plans/{code}"): [("own", {"selfServe": True}, NEVER)],
    ("POST", "/plans/{code}/prices"): [("own", {"priceAmount": 1}, NEVER)],
    ("POST", "/plans/{code}/archive"): [("own", {}, NEVER)],
    ("GET", "/coupons"): [("own", None, NEVER)],
    ("POST", "/coupons/{code}/archive"): [("own", {}, NEVER)],
    ("GET", "/tax-rates"): [("own", None, {200})],
    ("POST", "/tax-rates"): [("own", {"code": "ZERO", "country": "US", "name": "z", "rateBp": 0, "inclusive": False},
                              NEVER)],
    ("GET", "/events"): [("own", None, NEVER)],
    ("GET", "/events/{id}"): [("own", None, NEVER)],
    ("GET", "/reports/mrr"): [("own", None, NEVER)],
    ("GET", "/reports/churn"): [("own", None, NEVER)],
    ("GET", "/reports/revenue"): [("own", None, NEVER)],
    ("GET", "/customers/{id}/usage-alerts"): [("own", None, {200}), ("other", None, HIDDEN)],
    ("POST", "/customers/{id}/usage-alerts"): [("own", {"meterCode": "calls", "threshold": 5}, LEGIT | {404}),
                                               ("other", {"meterCode": "calls", "threshold": 5}, HIDDEN)],
    ("GET", "/customers/{id}/usage-alerts/{alert_id}"): [("own", None, {404}), ("other", None, HIDDEN)],
    ("POST", "/customers/{id}/usage-alerts/{alert_id}"): [("own", {"threshold": 9}, {404}),
                                                          ("other", {"threshold": 9}, HIDDEN)],
    ("DELETE", "/customers/{id}/usage-alerts/{alert_id}"): [("own", None, {404}), ("other", None, HIDDEN)],
    # last: the own subscription canceled now (a customer may; it never forgives a served period)
    ("POST", "/subscriptions/{id}/cancel"): [("other", {"atPeriodEnd": False}, HIDDEN),
                                             ("own", {"atPeriodEnd": False}, LEGIT)],
}
# The lists take their customer from the query string.
LISTS = {"/subscriptions", "/invoices", "/credit-notes", "/refunds"}


def app_routes(app) -> dict[tuple[str, str], list[str]]:
    """(method, path without /v1) -> the path templates serving it (unprefixed and /v1), for every
    route of the app (the console and the portal are mounted apps with their own sessions: a bearer
    token is nothing there)."""
    out: dict[tuple[str, str], list[str]] = {}
    for route in app.routes:
        for method in sorted(getattr(route, "methods", None) or ()):
            if method != "HEAD":
                out.setdefault((method, unversioned(route.path)), []).append(route.path)
    return out


def test_the_table_names_every_route_of_the_app():
    app = create_app(Settings(database_url="postgresql://nobody@127.0.0.1:1/none"))
    assert set(app_routes(app)) == set(ROUTES), (set(app_routes(app)) ^ set(ROUTES))


def fingerprint(conn, customer_id: int) -> dict:
    """Everything of a customer's that is money or access: its rows, as they are."""
    out = {}
    for table in ("subscription", "invoice", "invoice_line", "payment_method", "coupon_redemption", "credit_balance",
                  "credit_entry", "refund", "credit_note", "usage_alert", "portal_link", "customer_session"):
        out[table] = conn.execute(f"SELECT coalesce(jsonb_agg(to_jsonb(t) ORDER BY to_jsonb(t)::text), '[]') "
                                  f"FROM billing.{table} t WHERE customer_id = %s", (customer_id,)).fetchone()[0]
    return out


def test_a_customer_session_makes_no_value_on_any_route(db_url, stripe_fake):
    subs = seed(db_url, (A, B))
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_coupon('FREE100', 100, NULL, NULL, 'forever')")
        conn.execute("SELECT billing.upsert_plan('STAFF_FREE', 0, 'USD', 'MONTH', 1)")
        conn.execute("SELECT billing.upsert_plan('PRO_MONTHLY', 1599, 'USD', 'MONTH', 1, p_self_serve => true)")
        conn.execute("SELECT billing.set_payment_method(%s, 'sim', NULL, 'pm_b', 'visa', '4242', 12, 2031, %s)", (B, T0))
        invoices = dict(conn.execute("SELECT customer_id, id FROM billing.invoice").fetchall())
        before = fingerprint(conn, B)
    opener = create_key(db_url, "checkout-backend", ["admin"],
                        guardrails=Guardrails(max_quantity=5, allow_no_proration=True)).key
    ids = {"own": {"customer": A, "subscription": subs[A], "invoice": invoices[A]},
           "other": {"customer": B, "subscription": subs[B], "invoice": invoices[B]}}

    def path_of(method: str, template: str, whose: str) -> str:
        route = unversioned(template)
        first = route.split("/")[1]
        kind = {"subscriptions": "subscription", "invoices": "invoice", "customers": "customer"}.get(first)
        value = ids[whose][kind] if kind else uuid.UUID(int=7) if first == "events" else 1
        path = template.replace("{id}", str(value))
        path = path.replace("{method_id}", "999").replace("{alert_id}", "999").replace("{code}", "PRO_MONTHLY")
        if route in LISTS and method == "GET":
            path += f"?customer_id={ids[whose]['customer']}"
        return path

    async def body():
        settings = dict(stripe_webhook_secret=STRIPE_SECRET, stripe_api_key="sk_test_routes",
                        stripe_api_base=stripe_fake.url)
        app = create_app(Settings(database_url=db_url, **settings), clock=SimulatedClock(T0))
        served = app_routes(app)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, client=("127.0.0.1", 40000))
        answers = []
        try:
            async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test") as client:
                r = await client.post("/customer-sessions", json={"customerId": A}, headers=bearer(opener))
                assert r.status_code == 201, r.text
                token = r.json()["token"]
                n = 0
                for (method, route), probes in ROUTES.items():
                    for template in served[(method, route)]:  # unprefixed and /v1, where served
                        for whose, doc, expected in probes:
                            n += 1
                            path = path_of(method, template, whose)
                            headers = {**bearer(token), "Idempotency-Key": f"k-{n}"}
                            content = None if doc is None else json.dumps(doc)
                            if content is not None:
                                headers["Content-Type"] = "application/json"
                            r = await client.request(method, path, content=content, headers=headers)
                            answers.append((method, path, whose, doc, r.status_code, expected, r.text[:200]))
                # the console and the portal: a bearer token opens neither
                for path in ("/console/", "/portal/"):
                    r = await client.get(path, headers=bearer(token), follow_redirects=False)
                    answers.append(("GET", path, "own", None, r.status_code, {302, 303, 401}, r.text[:100]))
        finally:
            await app.state.database.close()
            await app.state.stripe.close()
        return answers

    answers = asyncio.run(body())
    wrong = [a for a in answers if a[4] not in a[5]]
    assert wrong == [], "\n".join(map(repr, wrong))
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert fingerprint(conn, B) == before  # nothing of the other customer's changed
        assert conn.execute("SELECT count(*) FROM billing.coupon_redemption WHERE customer_id = %s", (A,)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM billing.subscription WHERE customer_id = %s AND trial_end IS NOT NULL",
                            (A,)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM billing.payment_method WHERE customer_id = %s", (A,)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM billing.refund WHERE customer_id = %s", (A,)).fetchone()[0] == 0
        # no call of a value-making function by the session reached the database at all
        assert conn.execute("SELECT array_agg(DISTINCT function) FROM billing.audit_log WHERE actor LIKE 'customer-session:%%' "
                            "AND function IN ('void_invoice', 'retry_invoice', 'refund_invoice', 'apply_coupon', "
                            "'upsert_coupon', 'set_payment_method', 'ingest_usage_batch', 'open_customer_session')"
                            ).fetchone()[0] is None
        assert conn.execute("SELECT count(*) FROM billing.subscription WHERE customer_id = %s AND quantity > 5",
                            (A,)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM billing.coupon WHERE code = 'MINE'").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM billing.external_ref WHERE customer_id = %s", (A,)).fetchone()[0] == 0
        # no subscription on a plan that is not self-serve, nor the batch's self-serve row refused with it
        assert conn.execute("SELECT array_agg(DISTINCT billing.plan_code(plan_id)) FROM billing.subscription "
                            "WHERE customer_id = %s", (A,)).fetchone()[0] == ["PRO_MONTHLY"]
        assert conn.execute("SELECT count(*) FROM billing.subscription_request WHERE customer_id = %s "
                            "AND (idempotency_key LIKE '%%/b5' OR idempotency_key LIKE '%%/b6')", (A,)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM billing.subscription_request WHERE customer_id = %s "
                            "AND idempotency_key LIKE '%%/b7'", (A,)).fetchone()[0] == 1
        # its first subscription never moved to a plan nobody offered it
        assert conn.execute("SELECT billing.plan_code(plan_id) FROM billing.subscription WHERE id = %s",
                            (subs[A],)).fetchone()[0] == "PRO_MONTHLY"


def test_a_customer_session_changes_plans_only_as_the_portal_offers(db_url):
    """A plan of its choosing (a free plan kept for staff) is refused (422, nothing changed); the
    change the operator offers is made, prorated, when the offer says; If-Match still holds."""
    subs = seed(db_url, (A,))
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('STAFF_FREE', 0, 'USD', 'MONTH', 1)")
        conn.execute("SELECT billing.upsert_plan('PRO_PLUS', 2999, 'USD', 'MONTH', 1)")
        conn.execute("""SELECT billing.set_plan_change_options('PRO_MONTHLY', '[{"plan": "PRO_PLUS", "when": "now"}]')""")
    opener = create_key(db_url, "checkout-backend", ["customer-sessions:write", "subscriptions:write"],
                        guardrails=Guardrails(allow_no_proration=True)).key

    async def body():
        app = create_app(Settings(database_url=db_url, stripe_webhook_secret=STRIPE_SECRET), clock=SimulatedClock(T0))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, client=("127.0.0.1", 40000))
        try:
            async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test") as client:
                token = (await client.post("/customer-sessions", json={"customerId": A},
                                           headers=bearer(opener))).json()["token"]
                url = f"/v1/subscriptions/{subs[A]}/change-plan"
                free = await client.post(url, json={"planCode": "STAFF_FREE"}, headers=bearer(token))
                stale = await client.post(url, json={"planCode": "PRO_PLUS"}, headers={**bearer(token), "If-Match": '"99"'})
                offered = await client.post(url, json={"planCode": "PRO_PLUS", "when": "now"}, headers=bearer(token))
                return free, stale, offered
        finally:
            await app.state.database.close()
            await app.state.stripe.close()

    free, stale, offered = asyncio.run(body())
    assert free.status_code == 422 and "not offered" in free.json()["error"]["message"], free.text
    assert stale.status_code == 412, stale.text
    assert offered.status_code == 200 and offered.json()["planCode"] == "PRO_PLUS", offered.text
    with psycopg.connect(db_url, autocommit=True) as conn:
        kinds = [r[0] for r in conn.execute("SELECT kind FROM billing.invoice WHERE subscription_id = %s ORDER BY id",
                                            (subs[A],)).fetchall()]
    assert kinds == ["INITIAL", "PRORATION"], kinds  # the upgrade prorated, as the portal's changes


def test_a_customer_session_signs_up_only_to_a_self_serve_plan(db_url):
    """A plan says whether customers may choose it themselves (plan.self_serve, migration 0850; false
    unless the operator says so): a customer session's signup to another plan is 403 and writes
    nothing; a server key signs up to any plan; POST /v1/plans selfServe makes one self-serve, and a
    new price keeps it so."""
    seed(db_url, (A,))
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('STAFF_FREE', 0, 'USD', 'MONTH', 1)")
    server = create_key(db_url, "checkout-backend", ["customer-sessions:write", "subscriptions:write", "catalog:write"]).key

    async def body():
        out = {}
        async with client_for(db_url) as client:
            token = (await client.post("/customer-sessions", json={"customerId": A}, headers=bearer(server))).json()["token"]

            async def signup(key, plan, who=token):
                return await client.post("/v1/subscriptions", json={"customerId": A, "planCode": plan},
                                         headers={**bearer(who), "Idempotency-Key": key})

            out["staff"] = await signup("s-1", "STAFF_FREE")
            out["pro"] = await signup("s-2", "PRO_MONTHLY")  # made by seed, never marked
            out["server"] = await signup("s-3", "STAFF_FREE", server)
            out["bad flag"] = await client.post("/v1/plans", headers=bearer(server), json={
                "code": "SELF", "priceAmount": 900, "currency": "USD", "billingInterval": "MONTH", "selfServe": "yes"})
            out["plan"] = await client.post("/v1/plans", headers=bearer(server), json={
                "code": "SELF", "priceAmount": 900, "currency": "USD", "billingInterval": "MONTH", "selfServe": True})
            out["price"] = await client.post("/v1/plans/SELF/prices", headers=bearer(server), json={"priceAmount": 950})
            out["self"] = await signup("s-4", "SELF")
            out["plain"] = await client.post("/v1/plans", headers=bearer(server), json={
                "code": "PLAIN", "priceAmount": 900, "currency": "USD", "billingInterval": "MONTH"})
        return out

    out = asyncio.run(body())
    for name in ("staff", "pro"):
        assert out[name].status_code == 403 and out[name].json()["error"]["code"] == "forbidden", out[name].text
        assert "self-serve" in out[name].json()["error"]["message"], out[name].text
    assert out["server"].status_code == 201, out["server"].text
    assert out["bad flag"].status_code == 400, out["bad flag"].text
    assert out["plan"].status_code == 201 and out["plan"].json()["selfServe"] is True, out["plan"].text
    assert out["price"].status_code == 200 and out["price"].json()["selfServe"] is True, out["price"].text
    assert out["self"].status_code == 201 and out["self"].json()["planCode"] == "SELF", out["self"].text
    assert out["plain"].status_code == 201 and out["plain"].json()["selfServe"] is False, out["plain"].text
    with psycopg.connect(db_url, autocommit=True) as conn:
        made = conn.execute("SELECT billing.plan_code(plan_id) FROM billing.subscription WHERE customer_id = %s ORDER BY id",
                            (A,)).fetchall()
        keys = conn.execute("SELECT array_agg(split_part(idempotency_key, '/', 2) ORDER BY idempotency_key) "
                            "FROM billing.subscription_request WHERE customer_id = %s AND idempotency_key LIKE '%%/s-_'",
                            (A,)).fetchone()[0]
    assert [m[0] for m in made] == ["PRO_MONTHLY", "STAFF_FREE", "SELF"]  # seed's, the server key's, the session's
    assert sorted(keys) == ["s-3", "s-4"], keys  # the refused signups' keys were never taken


def test_a_plan_switched_off_while_a_customer_signs_up_is_not_signed_up_to(db_url):
    """The self-serve check is part of the signup's transaction (money10): a switch-off in flight (its
    UPDATE of the plan not yet committed) is waited for by a customer session's signup, which then
    sees it and is refused (403, nothing written): before, the check was a read before the signup and
    the signup was made. And the other way round: a switch-off waits for a signup holding the plan
    (billing.lock_self_serve_plans), so none is made after the switch-off returns. Two real
    connections each time, the wait seen in pg_stat_activity."""
    seed(db_url, (A,))
    with psycopg.connect(db_url, autocommit=True) as conn:
        for code in ("RACE", "RACE_BATCH"):
            conn.execute("SELECT billing.upsert_plan(%s, 900, 'USD', 'MONTH', 1, p_self_serve => true)", (code,))
    server = create_key(db_url, "checkout-backend", ["customer-sessions:write", "subscriptions:write"]).key

    def waiting_on(conn, text: str) -> bool:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                            (f"%{text}%",)).fetchone()[0] > 0

    async def body():
        out = {}
        async with client_for(db_url) as client:
            token = (await client.post("/customer-sessions", json={"customerId": A}, headers=bearer(server))).json()["token"]
            requests = {
                "RACE": lambda: client.post("/v1/subscriptions", json={"customerId": A, "planCode": "RACE"},
                                            headers={**bearer(token), "Idempotency-Key": "race-1"}),
                "RACE_BATCH": lambda: client.post("/v1/subscriptions/batch", headers=bearer(token), json={"signups": [
                    {"idempotencyKey": "race-2", "customerId": A, "planCode": "RACE_BATCH"}]})}
            with psycopg.connect(db_url, autocommit=True) as watch:
                for code, request in requests.items():
                    with psycopg.connect(db_url) as switch:  # a transaction: the switch-off in flight
                        switch.execute("UPDATE billing.plan SET self_serve = false WHERE code = %s", (code,))
                        signup = asyncio.ensure_future(request())
                        waited = False
                        for _ in range(400):
                            await asyncio.sleep(0.025)
                            if signup.done():
                                break
                            if waiting_on(watch, "lock_self_serve_plans"):
                                waited = True
                                break
                        switch.commit()
                    out[code] = (waited, await signup)
        return out

    out = asyncio.run(body())
    for code, (waited, answer) in out.items():
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden", (code, answer.text)
        assert waited, f"{code}: the signup did not wait for the switch-off in flight"
    with psycopg.connect(db_url, autocommit=True) as conn:
        made = conn.execute("SELECT count(*) FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id "
                            "WHERE p.code IN ('RACE', 'RACE_BATCH')").fetchone()[0]
    assert made == 0

    # The other order: a signup holds the plan (its transaction open), the switch-off waits for it.
    import threading

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.set_plan_self_serve('RACE', true, %s)", (T0,))
    with psycopg.connect(db_url) as signup, psycopg.connect(db_url, autocommit=True) as watch:
        held = signup.execute("SELECT billing.lock_self_serve_plans(ARRAY['RACE', 'NO_SUCH', 'BASIC_MONTHLY'])").fetchone()[0]
        assert held == ["RACE"]
        done = {}

        def switch_off():
            with psycopg.connect(db_url, autocommit=True) as conn:
                done["plan"] = conn.execute("SELECT self_serve FROM billing.set_plan_self_serve('RACE', false, %s)",
                                            (T0,)).fetchone()[0]

        thread = threading.Thread(target=switch_off)
        thread.start()
        import time
        deadline = time.monotonic() + 10
        while not waiting_on(watch, "set_plan_self_serve") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "plan" not in done and waiting_on(watch, "set_plan_self_serve"), "the switch-off did not wait"
        signup.commit()
        thread.join(10)
    assert done == {"plan": False}


def test_a_plan_is_made_self_serve_and_back_by_patch_and_by_the_cli(db_url):
    """PATCH /v1/plans/{code} {"selfServe": ...} (catalog:write) and `billing plan-self-serve PLAN on|off`:
    the switch without SQL; a key without catalog:write is 403, an unknown plan 404, a body without a
    boolean 400, and nothing else of the plan changes."""
    from click.testing import CliRunner

    from billing.cli import main

    seed(db_url, (A,))
    writer = create_key(db_url, "catalog", ["catalog:write"]).key
    reader = create_key(db_url, "reader", ["subscriptions:read", "subscriptions:write"]).key

    async def body():
        async with client_for(db_url) as client:
            patch = lambda key, code, doc: client.patch(f"/v1/plans/{code}", json=doc, headers=bearer(key))  # noqa: E731
            return {"on": await patch(writer, "BASIC_MONTHLY", {"selfServe": True}),
                    "again": await patch(writer, "BASIC_MONTHLY", {"selfServe": True}),
                    "reader": await patch(reader, "BASIC_MONTHLY", {"selfServe": False}),
                    "unknown": await patch(writer, "NO_SUCH", {"selfServe": False}),
                    "bad": await patch(writer, "BASIC_MONTHLY", {"selfServe": "no"}),
                    "price": await patch(writer, "BASIC_MONTHLY", {"priceAmount": 1}),
                    "get": await client.get("/v1/plans/BASIC_MONTHLY", headers=bearer(reader))}

    out = asyncio.run(body())
    assert out["on"].status_code == 200 and out["on"].json()["selfServe"] is True, out["on"].text
    assert out["again"].status_code == 200 and out["again"].json() == out["on"].json(), out["again"].text
    assert out["reader"].status_code == 403, out["reader"].text
    assert out["unknown"].status_code == 404, out["unknown"].text
    assert out["bad"].status_code == 400 and out["price"].status_code == 400, (out["bad"].text, out["price"].text)
    assert out["get"].json()["selfServe"] is True and out["get"].json()["priceAmount"] == 500, out["get"].text

    runner = CliRunner()
    off = runner.invoke(main, ["plan-self-serve", "BASIC_MONTHLY", "off", "--database-url", db_url])
    assert off.exit_code == 0 and "may not sign up" in off.output, off.output
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT self_serve FROM billing.plan WHERE code = 'BASIC_MONTHLY'").fetchone()[0] is False
    on = runner.invoke(main, ["plan-self-serve", "BASIC_MONTHLY", "on", "--database-url", db_url])
    assert on.exit_code == 0, on.output
    missing = runner.invoke(main, ["plan-self-serve", "NO_SUCH", "on", "--database-url", db_url])
    assert missing.exit_code != 0 and "does not exist" in missing.output, missing.output
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = conn.execute("SELECT self_serve, price_amount FROM billing.plan WHERE code = 'BASIC_MONTHLY'").fetchone()
        audited = conn.execute("SELECT count(*) FROM billing.audit_log WHERE function = 'set_plan_self_serve'").fetchone()[0]
    assert row == (True, 500) and audited >= 4, (row, audited)


def test_a_customer_session_sets_a_payment_method_only_through_its_own_setup_intent(db_url, stripe_fake):
    """The portal's check, over the API: a SetupIntent the provider confirms was made for this
    customer and succeeded; another customer's answers 403, one waiting for the bank 422, and
    neither stores anything."""
    seed(db_url, (A, B))
    opener = create_key(db_url, "checkout-backend", ["customer-sessions:write", "subscriptions:write"]).key
    mine = stripe_fake._setup("k-a", {"customer": "cus_a", "payment_method": "pm_card_visa",
                                      "metadata[customer_id]": str(A), "return_url": "x"}, {})[1]["id"]
    theirs = stripe_fake._setup("k-b", {"customer": "cus_b", "payment_method": "pm_card_mastercard",
                                        "metadata[customer_id]": str(B), "return_url": "x"}, {})[1]["id"]
    waiting = stripe_fake._setup("k-w", {"customer": "cus_a", "payment_method": "pm_card_authenticationRequired",
                                         "metadata[customer_id]": str(A), "return_url": "x"}, {})[1]["id"]

    async def body():
        app = create_app(Settings(database_url=db_url, stripe_webhook_secret=STRIPE_SECRET,
                                  stripe_api_key="sk_test_routes", stripe_api_base=stripe_fake.url),
                         clock=SimulatedClock(T0))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, client=("127.0.0.1", 40000))
        out = {}
        try:
            async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test") as client:
                token = (await client.post("/customer-sessions", json={"customerId": A},
                                           headers=bearer(opener))).json()["token"]

                async def put(doc):
                    r = await client.put(f"/v1/customers/{A}/payment-method", json=doc, headers=bearer(token))
                    return r.status_code, r.json()

                out["theirs"] = await put({"provider": "stripe", "setupIntentId": theirs})
                out["waiting"] = await put({"setupIntentId": waiting})
                out["stored before"] = methods()
                out["mine"] = await put({"provider": "stripe", "setupIntentId": mine})
        finally:
            await app.state.database.close()
            await app.state.stripe.close()
        return out

    def methods():
        with psycopg.connect(db_url, autocommit=True) as conn:
            return conn.execute("SELECT customer_id, provider, payment_method_ref, is_default FROM billing.payment_method "
                                "ORDER BY customer_id, id").fetchall()

    out = asyncio.run(body())
    assert out["theirs"][0] == 403 and out["theirs"][1]["error"]["code"] == "forbidden"
    assert out["waiting"][0] == 422
    assert out["stored before"] == []
    assert out["mine"][0] == 200 and out["mine"][1]["paymentMethodRef"] == "pm_card_visa", out["mine"]
    assert methods() == [(A, "stripe", "pm_card_visa", True)]
    assert stripe_fake.rejected == []


def test_an_external_id_in_use_names_nothing_of_its_owner(db_url):
    """A caller that tries another customer's external id learns that it is in use, never which
    subscription (or customer) holds it: one signup, one in bulk, and the SQL call itself. (A customer
    session passes no external id at all: 403, the table above.)"""
    subs = seed(db_url, (A, B))
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.set_external_id('subscription', %s, 'sub_secret_bee', %s)", (subs[B], T0))
    token = create_key(db_url, "checkout-backend", ["subscriptions:write"]).key
    opener = create_key(db_url, "portal-backend", ["customer-sessions:write", "subscriptions:read"]).key

    async def body():
        app = create_app(Settings(database_url=db_url, stripe_webhook_secret=STRIPE_SECRET), clock=SimulatedClock(T0))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, client=("127.0.0.1", 40000))
        try:
            async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test") as client:
                one = await client.post("/v1/subscriptions", json={"customerId": A, **SIGNUP, "externalId": "sub_secret_bee"},
                                        headers={**bearer(token), "Idempotency-Key": "x-1"})
                bulk = await client.post("/v1/subscriptions/batch", headers=bearer(token), json={"signups": [
                    {"idempotencyKey": "x-2", "customerId": A, **SIGNUP, "externalId": "sub_secret_bee"}]})
                session = (await client.post("/customer-sessions", json={"customerId": A},
                                             headers=bearer(opener))).json()["token"]
                taken = await client.get("/v1/subscriptions/sub_secret_bee", headers=bearer(session))
                unknown = await client.get("/v1/subscriptions/sub_nobody_has", headers=bearer(session))
                return one, bulk, taken, unknown
        finally:
            await app.state.database.close()
            await app.state.stripe.close()

    answers = asyncio.run(body())
    with psycopg.connect(db_url, autocommit=True) as conn:
        try:
            conn.execute("SELECT billing.create_subscription('x-3', %s, 'PRO_MONTHLY', %s, 0, NULL, 1, 'sub_secret_bee')", (A, T0))
            raise AssertionError("the external id was taken twice")
        except psycopg.Error as exc:
            sql_message = exc.diag.message_primary
    messages = [r.json()["error"]["message"] for r in answers[:2]] + [sql_message]
    assert [r.status_code for r in answers[:2]] == [409, 409], messages
    # and a customer session addressing another customer's external id, or one nobody has, is
    # answered the same: no oracle of which external ids exist
    taken, unknown = answers[2:]
    assert (taken.status_code, taken.json()) == (unknown.status_code, unknown.json()) and taken.status_code == 404
    for message in messages:
        said = message.rsplit("): ", 1)[-1]  # (a batch's row first names its own key: "signup '<key>' (row 1): ")
        assert "sub_secret_bee" in said, message
        assert not any(ch.isdigit() for ch in said), f"names another's id: {message}"


def test_a_provider_s_refusal_and_its_failure_are_told_apart_by_status_not_text(db_url):
    """PUT /customers/{id}/payment-method with a customer session: a SetupIntent the provider answers
    4xx for is not proven (403); a 5xx, or an answer it cannot read, is the provider failing (503);
    nothing is stored either way. LookupFailed carries the status (never parsed from its text)."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from billing.gateway.client import LookupFailed
    from billing.providers.stripe import StripeProvider

    seed(db_url, (A,))
    opener = create_key(db_url, "checkout-backend", ["customer-sessions:write", "subscriptions:write"]).key
    answers = {"seti_gone": (404, '{"error": {"type": "invalid_request_error"}}'),
               "seti_refused": (403, '{"error": {"type": "invalid_request_error"}}'),
               "seti_broken": (500, '{"error": {"type": "api_error"}}'),
               "seti_limited": (429, '{"error": {"type": "rate_limit_error"}}'),
               "seti_garbage": (200, "[]")}

    async def setup_intent(request: web.Request) -> web.Response:
        status, text = answers[request.match_info["id"]]
        return web.Response(status=status, text=text, content_type="application/json")

    async def body():
        provider_app = web.Application()
        provider_app.router.add_get("/v1/setup_intents/{id}", setup_intent)
        server = TestServer(provider_app, host="127.0.0.1")
        await server.start_server()
        base = str(server.make_url("")).rstrip("/")
        out = {}
        provider = StripeProvider("sk_test_status", api_base=base)
        try:
            for setup_id in answers:
                try:
                    await provider.retrieve_setup_intent(setup_id)
                except LookupFailed as exc:
                    out[("status", setup_id)] = exc.status
            async with client_for(db_url, stripe_api_key="sk_test_status", stripe_api_base=base) as client:
                token = (await client.post("/customer-sessions", json={"customerId": A},
                                           headers=bearer(opener))).json()["token"]
                for setup_id in answers:
                    r = await client.put(f"/v1/customers/{A}/payment-method", headers=bearer(token),
                                         json={"provider": "stripe", "setupIntentId": setup_id})
                    out[("http", setup_id)] = (r.status_code, r.json()["error"]["code"])
        finally:
            await provider.close()
            await server.close()
        return out

    out = asyncio.run(body())
    assert out == {("status", "seti_gone"): 404, ("status", "seti_refused"): 403, ("status", "seti_broken"): 500,
                   ("status", "seti_limited"): 429, ("status", "seti_garbage"): None,
                   ("http", "seti_gone"): (403, "forbidden"), ("http", "seti_refused"): (403, "forbidden"),
                   ("http", "seti_broken"): (503, "unavailable"), ("http", "seti_limited"): (503, "unavailable"),
                   ("http", "seti_garbage"): (503, "unavailable")}, out
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM billing.payment_method WHERE customer_id = %s", (A,)).fetchone()[0] == 0
