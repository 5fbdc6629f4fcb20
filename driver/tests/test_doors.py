"""Issue 27 over HTTP ("Doors, round two"): each finding as a test that fails on the code before it.

1. a genuine signed Stripe refund event about another refund, carrying our key, is not applied;
2. expensive requests (the console's overview, invoice PDFs) cannot starve another key: bounded
   load on loopback (a real uvicorn), 429 with Retry-After past the key's cost budget;
4. keys have guardrails; customer tokens reach one customer only;
5. a webhook endpoint on any numeric or embedded form of loopback is refused at registration (422);
7. failed authentications are throttled per address, logged without the secret, counted, audited;
8. an operator's weak webhook secret is refused (422);
9. documents and pages carry the security headers; the console's flash messages are codes.
(3: test_connection_limits.py; 5 at delivery: test_ssrf_delivery.py; 6: test_roles.py, pgTAP 850/860/590;
8 at start: unit/test_secrets.py, test_api_security.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from datetime import datetime, timezone

import httpx
import psycopg
import stripe
from psycopg.rows import dict_row

from billing.api import create_app
from billing.api_keys import Guardrails, create_key
from billing.clock import SimulatedClock
from billing.config import Settings
from billing.metrics import AUTH_FAILURES

from .console_world import ConsoleServer

T0 = datetime(2026, 9, 1, 3, 0, tzinfo=timezone.utc)
STRIPE_SECRET = "whsec_Zq4mV8rT2nX6pL0wK3bY7cH1dF5gJ9sA"


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def seed(db_url: str, customers=(1, 2)) -> dict[int, int]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO_MONTHLY', 1599, 'USD', 'MONTH', 1)")
        conn.execute("SELECT billing.upsert_plan('BASIC_MONTHLY', 500, 'USD', 'MONTH', 1)")
        return {c: conn.execute("SELECT id FROM billing.create_subscription(%s, %s, 'PRO_MONTHLY', %s)",
                                (f"d-{c}", c, T0)).fetchone()[0] for c in customers}


@contextlib.asynccontextmanager
async def client_for(db_url: str, address: str = "127.0.0.1", **settings):
    app = create_app(Settings(database_url=db_url, stripe_webhook_secret=STRIPE_SECRET, **settings),
                     clock=SimulatedClock(T0))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, client=(address, 40000))
    try:
        async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test") as client:
            yield client
    finally:
        await app.state.database.close()
        await app.state.stripe.close()


def audit(db_url: str, function: str) -> list[dict]:
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute("SELECT actor, db_role, args FROM billing.audit_log WHERE function = %s ORDER BY id",
                            (function,)).fetchall()


# -- 1. refund events bound to their refund -------------------------------------------------------------

def test_a_signed_refund_event_about_another_refund_is_not_applied(db_url):
    subs = seed(db_url, (11,))
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        (claim,) = conn.execute("SELECT * FROM billing.claim_charges('d', 10, '5 minutes', %s)", (T0,)).fetchall()
        conn.execute("SELECT billing.record_payment_result(%s, 'SUCCEEDED', 'pi_ours', NULL, %s)",
                     (claim["idempotency_key"], T0))
        invoice = conn.execute("SELECT id FROM billing.invoice WHERE subscription_id = %s", (subs[11],)).fetchone()["id"]
        refund = conn.execute("SELECT * FROM billing.refund_invoice(%s, 1599, NULL, %s)", (invoice, T0)).fetchone()
    key = refund["idempotency_key"]  # predictable, and published in RefundRequested

    def event(event_id, kind, **refund_fields):
        obj = {"object": "refund", "metadata": {"refund_key": key}, **refund_fields}
        body = json.dumps({"id": event_id, "object": "event", "type": kind, "created": int(time.time()),
                           "data": {"object": obj}})
        header = stripe.WebhookSignature.generate_signature_header(body, STRIPE_SECRET)
        return body, {"Stripe-Signature": header, "Content-Type": "application/json"}

    async def body():
        async with client_for(db_url) as client:
            async def post(*args):
                b, h = event(*args[:2], **args[2])
                r = await client.post("/webhooks/stripe", content=b, headers=h)
                assert r.status_code == 200, r.text
                return r.json()["outcomes"]

            other = await post("evt_a", "refund.updated", dict(id="re_OTHER", amount=999999, currency="eur",
                                                                status="succeeded", payment_intent="pi_theirs"))
            state_after_other = row()
            ours = await post("evt_b", "refund.updated", dict(id="re_OURS", amount=1599, currency="usd",
                                                               status="succeeded", payment_intent="pi_ours"))
            third = await post("evt_c", "refund.failed", dict(id="re_THIRD", amount=1599, currency="usd",
                                                               status="failed", payment_intent="pi_ours"))
            return other, state_after_other, ours, third

    def row():
        with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
            return conn.execute("SELECT r.status, r.provider_reference, i.amount_refunded FROM billing.refund r "
                                "JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id"
                                ).fetchone()

    other, state_after_other, ours, third = asyncio.run(body())
    assert other == ["REVIEW"] and state_after_other == {"status": "REQUESTED", "provider_reference": None,
                                                          "amount_refunded": 0}
    assert ours == ["REFUND"]
    assert third == ["REVIEW"]  # another refund id than ours: never FAILED, never off amount_refunded
    assert row() == {"status": "SUCCEEDED", "provider_reference": "re_OURS", "amount_refunded": 1599}
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM billing.outbox_event WHERE event_type = 'RefundReviewRequired'"
                            ).fetchone()[0] == 2


# -- 2. cost-aware limits: expensive requests cannot starve another key ------------------------------

def _console_session(client: httpx.Client, key: str) -> None:
    form = client.get("/console/login")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
    r = client.post("/console/login", data={"csrf": token, "key": key, "next": "/console/"})
    assert r.status_code == 303 and "/console/" in r.headers["location"], r.text


def test_expensive_requests_of_one_key_do_not_starve_another(db_url):
    """20 concurrent overviews from one read-only session and 16 concurrent PDFs from one read key:
    past the key's cost budget they answer 429 with Retry-After, the console reads run on their own
    pool, and another key's GET /subscriptions/{id} keeps answering 200 quickly. Bounded: ~40
    requests, a few seconds."""
    subs = seed(db_url, (21, 22))
    with psycopg.connect(db_url, autocommit=True) as conn:  # a few thousand rows for the overview to read
        conn.execute("SELECT billing.create_subscription('bulk-' || g, 100000 + g, 'BASIC_MONTHLY', %s) "
                     "FROM generate_series(1, 300) g", (T0,))
        invoice = conn.execute("SELECT id FROM billing.invoice WHERE subscription_id = %s", (subs[21],)).fetchone()[0]
    reader = create_key(db_url, "dashboard", ["subscriptions:read"]).key
    other = create_key(db_url, "checkout", ["subscriptions:read"]).key

    with ConsoleServer(db_url, now=T0) as server:
        with httpx.Client(base_url=server.url, follow_redirects=False, timeout=30) as console:
            _console_session(console, reader)
            cookies = dict(console.cookies)

        async def load():
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                async def overview():
                    r = await client.get("/console/", cookies=cookies)
                    return r.status_code, r.headers.get("retry-after")

                async def pdf():
                    r = await client.get(f"/invoices/{invoice}.pdf", headers=bearer(reader))
                    return r.status_code, r.headers.get("retry-after")

                latencies, statuses = [], []

                async def others():
                    for _ in range(15):
                        start = time.monotonic()
                        r = await client.get(f"/subscriptions/{subs[22]}", headers=bearer(other))
                        latencies.append(time.monotonic() - start)
                        statuses.append(r.status_code)
                        await asyncio.sleep(0.02)

                results = await asyncio.gather(*(overview() for _ in range(20)), *(pdf() for _ in range(16)),
                                               others())
                return results[:20], results[20:36], latencies, statuses

        overviews, pdfs, latencies, statuses = asyncio.run(load())
    for answers, most in ((overviews, 10), (pdfs, 8)):
        assert {s for s, _ in answers} <= {200, 429}, answers
        # the budget: a burst of 40 cost units, then 20 a second (an overview 10, a PDF 10)
        assert sum(s == 200 for s, _ in answers) <= most, answers
        assert all(ra and int(ra) >= 1 for s, ra in answers if s == 429), answers
        assert any(s == 429 for s, _ in answers)
    assert statuses == [200] * 15, statuses  # never 503
    assert max(latencies) < 1.5, latencies


# -- 4. key guardrails and customer sessions ------------------------------------------------------------

def test_key_guardrails_and_operator_only_fields(db_url):
    subs = seed(db_url, (31, 32))
    with psycopg.connect(db_url, autocommit=True) as conn:
        (claim,) = [c for c in conn.execute("SELECT customer_id, idempotency_key FROM billing.claim_charges("
                                            "'d', 10, '5 minutes', %s)", (T0,)).fetchall() if c[0] == 31]
        conn.execute("SELECT billing.record_payment_result(%s, 'SUCCEEDED', 'pi_31', NULL, %s)", (claim[1], T0))
        invoice = conn.execute("SELECT id FROM billing.invoice WHERE customer_id = 31").fetchone()[0]
    limited = create_key(db_url, "limited", ["subscriptions:write", "refunds:write"],
                         guardrails=Guardrails(max_quantity=500, max_trial_days=30, max_refund=500)).key
    plain = create_key(db_url, "plain", ["subscriptions:write"]).key
    allowed = create_key(db_url, "may-skip", ["subscriptions:write"], guardrails=Guardrails(allow_no_proration=True)).key
    admin = create_key(db_url, "admin", ["admin"]).key

    async def body():
        async with client_for(db_url) as client:
            async def post(path, doc, key, idem="i-1"):
                return await client.post(path, json=doc, headers={**bearer(key), "Idempotency-Key": idem})

            out = {}
            out["million seats"] = (await post("/subscriptions", {"customerId": 33, "planCode": "PRO_MONTHLY",
                                                                  "quantity": 1_000_000}, limited)).status_code
            out["730-day trial"] = (await post("/subscriptions", {"customerId": 33, "planCode": "PRO_MONTHLY",
                                                                  "trialDays": 730}, limited)).status_code
            out["within"] = (await post("/subscriptions", {"customerId": 33, "planCode": "PRO_MONTHLY",
                                                           "quantity": 500, "trialDays": 30}, limited, "i-2")).status_code
            out["seats later"] = (await post(f"/subscriptions/{subs[32]}/quantity", {"quantity": 501},
                                             limited)).status_code
            out["refund over"] = (await post(f"/invoices/{invoice}/refunds", {"amount": 501}, limited)).status_code
            out["refund within"] = (await post(f"/invoices/{invoice}/refunds", {"amount": 500}, limited,
                                               "r-2")).status_code
            no_proration = {"planCode": "BASIC_MONTHLY", "prorate": False}
            out["no proration, plain key"] = (await post(f"/subscriptions/{subs[32]}/change-plan", no_proration,
                                                         plain)).status_code
            out["no proration, flag"] = (await post(f"/subscriptions/{subs[32]}/change-plan", no_proration,
                                                    allowed)).status_code
            out["no proration, admin"] = (await post(f"/subscriptions/{subs[31]}/change-plan", no_proration,
                                                     admin)).status_code
            return out

    out = asyncio.run(body())
    assert out == {"million seats": 403, "730-day trial": 403, "within": 201, "seats later": 403, "refund over": 403,
                   "refund within": 200, "no proration, plain key": 403, "no proration, flag": 200,
                   "no proration, admin": 200}, out


def test_a_customer_session_reads_and_acts_on_its_customer_only(db_url):
    subs = seed(db_url, (41, 42))
    with psycopg.connect(db_url, autocommit=True) as conn:
        invoices = dict(conn.execute("SELECT customer_id, id FROM billing.invoice").fetchall())
    server = create_key(db_url, "portal-backend", ["customer-sessions:write", "subscriptions:write",
                                                   "subscriptions:read"]).key
    reader = create_key(db_url, "reader", ["subscriptions:read"]).key

    async def body():
        async with client_for(db_url) as client:
            out = {}
            r = await client.post("/customer-sessions", json={"customerId": 41, "ttlSeconds": 600},
                                  headers=bearer(server))
            assert r.status_code == 201, r.text
            token = r.json()["token"]
            assert token.startswith("cs_41_") and r.json()["customerId"] == 41
            out["reader opens"] = (await client.post("/customer-sessions", json={"customerId": 41},
                                                     headers=bearer(reader))).status_code
            out["too long"] = (await client.post("/customer-sessions", json={"customerId": 41, "ttlSeconds": 7200},
                                                 headers=bearer(server))).status_code
            out["own subscription"] = (await client.get(f"/subscriptions/{subs[41]}", headers=bearer(token))).status_code
            out["other subscription"] = (await client.get(f"/subscriptions/{subs[42]}",
                                                          headers=bearer(token))).status_code
            out["own invoice"] = (await client.get(f"/invoices/{invoices[41]}", headers=bearer(token))).status_code
            out["other invoice"] = (await client.get(f"/invoices/{invoices[42]}.html",
                                                     headers=bearer(token))).status_code
            out["other refunds"] = (await client.get(f"/invoices/{invoices[42]}/refunds",
                                                     headers=bearer(token))).status_code
            method = {"provider": "sim", "paymentMethodRef": "pm_evil", "expMonth": 12, "expYear": 2031}
            out["other payment method"] = (await client.put("/customers/42/payment-method", json=method,
                                                            headers=bearer(token))).status_code
            # a reference it cannot prove (no SetupIntent of its own the provider confirms): refused
            out["own payment method"] = (await client.put("/customers/41/payment-method", json=method,
                                                          headers=bearer(token))).status_code
            out["cancel other"] = (await client.post(f"/subscriptions/{subs[42]}/cancel", json={"atPeriodEnd": True},
                                                     headers=bearer(token))).status_code
            out["cancel own"] = (await client.post(f"/subscriptions/{subs[41]}/cancel", json={"atPeriodEnd": True},
                                                   headers=bearer(token))).status_code
            out["subscribe another"] = (await client.post(
                "/subscriptions", json={"customerId": 42, "planCode": "PRO_MONTHLY"},
                headers={**bearer(token), "Idempotency-Key": "x"})).status_code
            out["refund"] = (await client.post(f"/invoices/{invoices[41]}/refunds", json={"amount": 1},
                                               headers={**bearer(token), "Idempotency-Key": "x"})).status_code
            out["audit"] = (await client.get("/admin/audit", headers=bearer(token))).status_code
            out["own usage"] = (await client.get("/customers/41/usage", headers=bearer(token))).status_code
            out["other usage"] = (await client.get("/customers/42/usage", headers=bearer(token))).status_code
            event = {"specversion": "1.0", "id": "u1", "source": "s", "type": "t", "time": "2026-09-01T03:00:00Z",
                     "subject": "42", "data": {}}
            out["report usage"] = (await client.post("/usage-events", json=[event], headers=bearer(token))).status_code
            out["forged token"] = (await client.get(f"/subscriptions/{subs[42]}",
                                                    headers=bearer("cs_42_" + token.split("_", 2)[2]))).status_code
            return out

    out = asyncio.run(body())
    assert out == {"reader opens": 403, "too long": 422, "own subscription": 200, "other subscription": 404,
                   "own invoice": 200, "other invoice": 404, "other refunds": 404, "other payment method": 404,
                   "own payment method": 403, "cancel other": 404, "cancel own": 200, "subscribe another": 404,
                   "refund": 403, "audit": 403, "own usage": 200, "other usage": 404, "report usage": 403,
                   "forged token": 401}, out
    rows = audit(db_url, "cancel_subscription")
    assert [r["actor"] for r in rows] == [f"customer-session:41 (api-key:{server.split('_')[0]}_{server.split('_')[1]})"]
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT payment_method_ref FROM billing.payment_method WHERE customer_id IN (41, 42)"
                            ).fetchall() == []


# -- 5. and 8. webhook endpoints: no loopback in any form, no weak secret ----------------------------------

def test_webhook_endpoints_refuse_numeric_loopback_forms_and_weak_secrets(db_url):
    admin = create_key(db_url, "ops", ["admin"]).key

    async def body():
        async with client_for(db_url) as client:
            out = {}
            for host in ("2130706433", "127.1", "0", "017700000001", "[64:ff9b::7f00:1]", "[2002:7f00:1::]",
                         "[::ffff:127.0.0.1]"):
                r = await client.post("/webhook-endpoints", headers=bearer(admin),
                                      json={"url": f"http://{host}:8080/hook", "eventTypes": ["InvoicePaid"]})
                out[host] = r.status_code
            for secret in ("a" * 16, "a" * 40, "passwordpasswordpasswordpassword1"):
                r = await client.post("/webhook-endpoints", headers=bearer(admin),
                                      json={"url": "https://hooks.example.com/x", "eventTypes": ["InvoicePaid"],
                                            "secret": secret})
                out[secret] = r.status_code
            return out

    out = asyncio.run(body())
    assert set(out.values()) == {422}, out


# -- 7. failed authentication: throttled per address, logged, counted, audited ----------------------------

def test_failed_authentications_are_throttled_logged_counted_and_audited(db_url, caplog):
    seed(db_url, (51,))
    real = create_key(db_url, "real", ["subscriptions:read"])
    wrong = f"{real.key_id}_{'W' * 43}"  # the real key's public id, a wrong secret
    before = {r: AUTH_FAILURES.labels(reason=r)._value.get() for r in ("unknown", "throttled")}

    async def body():
        async with client_for(db_url, address="198.51.100.7") as attacker, \
                client_for(db_url, address="198.51.100.8") as neighbour:
            statuses = []
            for i in range(60):
                r = await attacker.get("/subscriptions/1", headers=bearer(wrong if i % 2 else f"bk_nobody{i:05d}_{'x' * 43}"))
                statuses.append((r.status_code, r.headers.get("retry-after")))
            good = await attacker.get("/subscriptions/1", headers=bearer(real.key))  # shut out, even with a key
            other = await neighbour.get("/subscriptions/1", headers=bearer(real.key))  # another address: fine
            return statuses, good.status_code, other.status_code

    with caplog.at_level(logging.WARNING, logger="billing.api.auth"):
        statuses, good, other = asyncio.run(body())
    assert [s for s, _ in statuses[:10]] == [401] * 10
    assert all(s == 429 and int(ra) >= 1 for s, ra in statuses[11:]), statuses
    assert good == 429 and other == 200
    failures = [r for r in caplog.records if r.getMessage() == "authentication failed"]
    assert len(failures) >= 60
    assert any(getattr(r, "keyId", None) == real.key_id and getattr(r, "address", None) == "198.51.100.7"
               for r in failures)
    assert all("W" * 43 not in json.dumps(r.__dict__, default=str) for r in failures)  # never the secret
    assert AUTH_FAILURES.labels(reason="unknown")._value.get() - before["unknown"] >= 10
    assert AUTH_FAILURES.labels(reason="throttled")._value.get() - before["throttled"] >= 49
    rows = audit(db_url, "authentication_failed")
    assert 1 <= len(rows) <= 6 and {r["args"]["key_id"] for r in rows} == {real.key_id}  # only a real key id
    assert rows[0]["args"]["address"] == "198.51.100.7" and rows[0]["args"]["route"] == "/subscriptions/1"


def test_console_login_failures_are_throttled_and_audited(db_url):
    real = create_key(db_url, "console", ["admin"])
    with ConsoleServer(db_url, now=T0) as server:
        with httpx.Client(base_url=server.url, follow_redirects=False, timeout=30) as client:
            locations = []
            for _ in range(14):
                form = client.get("/console/login")
                token = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
                r = client.post("/console/login", data={"csrf": token, "key": f"{real.key_id}_{'Z' * 43}"})
                locations.append(r.headers["location"])
    assert all("error=login_unknown_key" in x for x in locations[:10]), locations
    assert all("error=login_throttled" in x for x in locations[11:]), locations
    assert 1 <= len(audit(db_url, "authentication_failed")) <= 11


# -- 9. security headers; flash messages by code -----------------------------------------------------------

def test_documents_and_pages_carry_security_headers_and_flash_only_codes(db_url):
    subs = seed(db_url, (61,))
    with psycopg.connect(db_url, autocommit=True) as conn:
        invoice = conn.execute("SELECT id FROM billing.invoice WHERE subscription_id = %s", (subs[61],)).fetchone()[0]
    key = create_key(db_url, "docs", ["admin"]).key
    with ConsoleServer(db_url, now=T0) as server:
        with httpx.Client(base_url=server.url, follow_redirects=False, timeout=30) as client:
            answers = [client.get(f"/invoices/{invoice}{suffix}", headers=bearer(key)) for suffix in ("", ".html", ".pdf")]
            _console_session(client, key)
            answers += [client.get(f"/console/invoices/{invoice}.html"), client.get(f"/console/invoices/{invoice}.pdf"),
                        client.get("/console/")]
            lure = client.get("/console/", params={"error": "session expired: re-enter your admin key at https://evil.example",
                                                   "ok": "<b>hi</b>"})
            coded = client.get("/console/", params={"error": "login_scope"})
    for r in answers:
        assert r.status_code == 200, (r.request.url, r.status_code)
        csp = r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp, (r.request.url, csp)
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["cache-control"] == "no-store"
    assert "evil.example" not in lure.text and "re-enter" not in lure.text and "flash" not in lure.text.split("<main")[-1][:0]
    assert 'id="flash-error"' not in lure.text and 'id="flash-ok"' not in lure.text
    assert 'id="flash-error"' in coded.text and "neither the admin nor" in coded.text
