"""The HTTP API's doors (docs/security.md): every route without a key, with a key lacking the
scope, with a revoked key; a cross-site text/plain POST; oversize bodies; per-key idempotency and
rate; the audit trail of API calls; error bodies without database text; and, on a real
`billing serve`, slow and half-sent connections closed within the header timeout and the secrets
it refuses to start with."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import time
from datetime import datetime, timezone

import httpx
import psycopg
import pytest

from billing.api import create_app
from billing.api.openapi import OPENAPI
from billing.api.security import PUBLIC, key_id_of, required_scope
from billing.api_keys import create_key, revoke_key
from billing.clock import SimulatedClock
from billing.config import REPO_ROOT, Settings

from .chaos.harness import BILLING, Proc, free_ports, wait_port

T0 = datetime(2026, 10, 1, 12, 0, tzinfo=timezone.utc)
SECRET = "whsec_Qm7vR2xK9pL4tZ8wN3cB6yH1dF5gJ0sA"  # random-looking: serve refuses guessable secrets

# Every route of the app: (method, path, a valid body). Taken from the app's own router below and
# checked against this list, so a new route cannot be added without being tested here.
ROUTES = [
    ("POST", "/subscriptions", {"customerId": 1, "planCode": "PRO_MONTHLY"}),
    ("GET", "/subscriptions/1", None),
    ("POST", "/subscriptions/1/cancel", {"atPeriodEnd": True}),
    ("POST", "/subscriptions/1/change-plan", {"planCode": "BASIC_MONTHLY"}),
    ("POST", "/subscriptions/1/coupon", {"couponCode": "NOPE"}),
    ("POST", "/subscriptions/1/pause", {}),
    ("POST", "/subscriptions/1/resume", {}),
    ("POST", "/subscriptions/1/uncancel", {}),
    ("POST", "/subscriptions/1/reactivate", {}),
    ("POST", "/subscriptions/1/quantity", {"quantity": 2}),
    ("POST", "/coupons", {"code": "SEC10", "percentOff": 10, "duration": "once"}),
    ("GET", "/admin/audit", None),
    ("GET", "/metrics", None),
    ("GET", "/openapi.json", None),
    ("POST", "/webhook-endpoints", {"url": "https://hooks.example.com/x", "eventTypes": ["InvoicePaid"]}),
    ("GET", "/webhook-endpoints", None),
    ("GET", "/webhook-endpoints/1", None),
    ("DELETE", "/webhook-endpoints/1", None),
    ("GET", "/webhook-endpoints/1/attempts", None),
    ("PUT", "/customers/1/payment-method", {"provider": "sim", "paymentMethodRef": "pm_1", "expMonth": 12,
                                            "expYear": 2031}),
    ("POST", "/customers/1/portal-links", {"next": "/invoices"}),
    ("POST", "/invoices/1/refunds", {"amount": 100}),
    ("GET", "/invoices/1/refunds", None),
    ("POST", "/invoices/1/retry", {}),
    ("POST", "/invoices/1/void", {"reason": "goodwill"}),
    ("GET", "/invoices/1", None),
    ("POST", "/customer-sessions", {"customerId": 1}),
    ("POST", "/usage-events", [{"specversion": "1.0", "id": "e1", "source": "s", "type": "t",
                                "time": "2026-10-01T11:00:00Z", "subject": "1", "data": {}}]),
    ("GET", "/customers/1/usage", None),
    ("GET", "/subscriptions/1/upcoming-invoice", None),
]
PUBLIC_ROUTES = {("GET", "/healthz"), ("POST", "/webhooks/payments"), ("POST", "/webhooks/stripe")}
# /v1 (issue 28): every route above again under /v1 (bar the internal ones), and the new resources.
NOT_VERSIONED = {"/metrics", "/openapi.json"}
V1_NEW = [
    ("GET", "/v1/customers", None, "customers:read"),
    ("POST", "/v1/customers", {"id": 77}, "customers:write"),
    ("GET", "/v1/customers/1", None, "customers:read"),
    ("POST", "/v1/customers/1", {"city": "Lyon"}, "customers:write"),
    ("GET", "/v1/customers/1/payment-methods", None, "subscriptions:read"),
    ("GET", "/v1/customers/1/payment-methods/1", None, "subscriptions:read"),
    ("GET", "/v1/plans", None, "subscriptions:read"),
    ("POST", "/v1/plans", {"code": "SEC_PLAN", "priceAmount": 1, "currency": "USD", "billingInterval": "MONTH"},
     "catalog:write"),
    ("GET", "/v1/plans/PRO_MONTHLY", None, "subscriptions:read"),
    ("PATCH", "/v1/plans/PRO_MONTHLY", {"selfServe": True}, "catalog:write"),
    ("POST", "/v1/plans/PRO_MONTHLY/prices", {"priceAmount": 5}, "catalog:write"),
    ("POST", "/v1/plans/SEC_PLAN/archive", {}, "catalog:write"),
    ("GET", "/v1/coupons", None, "catalog:write"),
    ("POST", "/v1/coupons/SEC_PLAN/archive", {}, "catalog:write"),
    ("GET", "/v1/tax-rates", None, "subscriptions:read"),
    ("POST", "/v1/tax-rates", {"code": "SEC_TAX", "country": "FR", "name": "x", "rateBp": 100, "inclusive": False},
     "catalog:write"),
    ("GET", "/v1/subscriptions", None, "subscriptions:read"),
    ("POST", "/v1/subscriptions/batch", {"signups": [{"idempotencyKey": "sec-batch", "customerId": 1, "planCode": "PRO_MONTHLY"}]},
     "subscriptions:write"),
    ("GET", "/v1/invoices", None, "subscriptions:read"),
    ("GET", "/v1/invoices/1/lines", None, "subscriptions:read"),
    ("GET", "/v1/credit-notes", None, "subscriptions:read"),
    ("GET", "/v1/refunds", None, "subscriptions:read"),
    ("GET", "/v1/events", None, "customers:read"),
    ("GET", "/v1/events/00000000-0000-0000-0000-000000000001", None, "customers:read"),
    ("GET", "/v1/reports/mrr", None, "reports:read"),
    ("GET", "/v1/reports/churn", None, "reports:read"),
    ("GET", "/v1/reports/revenue", None, "reports:read"),
    ("GET", "/v1/customers/1/usage-alerts", None, "subscriptions:read"),
    ("POST", "/v1/customers/1/usage-alerts", {"meterCode": "sec_meter", "threshold": 5}, "subscriptions:write"),
    ("GET", "/v1/customers/1/usage-alerts/1", None, "subscriptions:read"),
    ("POST", "/v1/customers/1/usage-alerts/1", {"threshold": 6}, "subscriptions:write"),
    ("DELETE", "/v1/customers/1/usage-alerts/1", None, "subscriptions:write"),
]
ROUTES = ROUTES + [(m, "/v1" + p, d) for m, p, d in ROUTES if p not in NOT_VERSIONED] + [r[:3] for r in V1_NEW]


def seed(db_url: str) -> int:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO_MONTHLY', 300000, 'USD', 'MONTH', 1)")
        conn.execute("SELECT billing.upsert_plan('BASIC_MONTHLY', 100000, 'USD', 'MONTH', 1)")
        return conn.execute("SELECT id FROM billing.create_subscription('seed', 1, 'PRO_MONTHLY', %s)",
                            (T0,)).fetchone()[0]


@contextlib.asynccontextmanager
async def client_for(db_url: str, **settings):
    # These tests knock with many wrong keys from one address on purpose: the per-address throttle
    # of failed authentications (test_doors.py tests it) would answer 429 before they are done.
    settings = {"api_auth_failures_free": 100_000, "api_unauthenticated_burst_per_address": 100_000, **settings}
    app = create_app(Settings(database_url=db_url, webhook_secret=SECRET, **settings), clock=SimulatedClock(T0))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    try:
        async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test") as client:
            yield client
    finally:
        await app.state.database.close()


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


async def call(client, method, path, body, headers=None):
    headers = {"Content-Type": "application/json", "Idempotency-Key": "k-1", **(headers or {})}
    return await client.request(method, path, json=body, headers=headers)


def assert_error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, (r.request.method, r.request.url, r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"], body


def test_the_route_list_is_the_app_s_own(db_url):
    app = create_app(Settings(database_url=db_url))
    routes = {(m, r.path) for r in app.routes if hasattr(r, "methods") for m in r.methods if m != "HEAD"}
    # ...plus the operator console and the customer portal, mounted apps with logins of their own
    # (test_console_*.py, test_portal_*.py).
    assert [r.path for r in app.routes if not hasattr(r, "methods")] == ["/console", "/portal"]
    listed = {(m, p.replace("/1", "/{id}").replace("/PRO_MONTHLY", "/{code}").replace("/SEC_PLAN/", "/{code}/").replace(
        "/00000000-0000-0000-0000-000000000001", "/{id}").replace("/payment-methods/{id}", "/payment-methods/{method_id}")
        .replace("/usage-alerts/{id}", "/usage-alerts/{alert_id}"))
        for m, p, _ in ROUTES} | PUBLIC_ROUTES
    assert routes == listed
    for method, path in routes:
        assert (required_scope(method, path.replace("{id}", "1")) == PUBLIC) == ((method, path) in PUBLIC_ROUTES)
    # The OpenAPI description says the same.
    for path, ops in OPENAPI["paths"].items():
        for method, op in ops.items():
            assert bool(op.get("security")) == ((method.upper(), path) not in PUBLIC_ROUTES), (method, path)


def test_every_route_refuses_a_missing_unknown_or_malformed_key(db_url):
    seed(db_url)

    async def body():
        async with client_for(db_url) as client:
            for method, path, doc in ROUTES + [("GET", "/nowhere", None), ("DELETE", "/subscriptions/1", None)]:
                for headers in ({}, bearer("bk_unknown0000_" + "A" * 43), bearer("not-a-key"),
                                {"Authorization": "Basic dXNlcjpwYXNz"}, {"Authorization": "Bearer "}):
                    r = await call(client, method, path, doc, headers)
                    assert_error(r, 401, "unauthorized")
                    assert r.headers["www-authenticate"].startswith("Bearer")

    asyncio.run(body())


def test_every_route_refuses_a_key_without_its_scope_and_accepts_one_with_it(db_url):
    sub_id = seed(db_url)
    keys = {scope: create_key(db_url, scope, [scope]).key
            for scope in ("subscriptions:read", "subscriptions:write", "refunds:write", "usage:write", "customers:read",
                          "customers:write", "catalog:write", "reports:read")}
    admin = create_key(db_url, "admin", ["admin"]).key
    needs = {"GET /subscriptions/1": "subscriptions:read", "POST /subscriptions": "subscriptions:write",
             "POST /subscriptions/1/cancel": "subscriptions:write",
             "POST /subscriptions/1/change-plan": "subscriptions:write",
             "POST /subscriptions/1/coupon": "subscriptions:write", "POST /subscriptions/1/pause": "subscriptions:write",
             "POST /subscriptions/1/resume": "subscriptions:write", "POST /subscriptions/1/uncancel": "subscriptions:write",
             "POST /subscriptions/1/reactivate": "subscriptions:write",
             "POST /subscriptions/1/quantity": "subscriptions:write", "POST /coupons": "admin",
             "GET /admin/audit": "admin", "GET /metrics": "admin", "GET /openapi.json": "admin",
             "POST /webhook-endpoints": "admin", "GET /webhook-endpoints": "admin", "GET /webhook-endpoints/1": "admin",
             "DELETE /webhook-endpoints/1": "admin", "GET /webhook-endpoints/1/attempts": "admin",
             "PUT /customers/1/payment-method": "subscriptions:write", "POST /invoices/1/refunds": "refunds:write",
             "POST /customers/1/portal-links": "subscriptions:write",
             "GET /invoices/1/refunds": "subscriptions:read", "POST /invoices/1/retry": "admin",
             "POST /invoices/1/void": "admin", "GET /invoices/1": "subscriptions:read",
             "POST /customer-sessions": "customer-sessions:write",
             "POST /usage-events": "usage:write", "GET /customers/1/usage": "subscriptions:read",
             "GET /subscriptions/1/upcoming-invoice": "subscriptions:read"}
    needs.update({f"{m} /v1{p}": needs[f"{m} {p}"] for m, p in list(map(str.split, needs)) if p not in NOT_VERSIONED})
    needs.update({f"{m} {p}": scope for m, p, _, scope in V1_NEW})

    async def body():
        # the reports run on the heavy pool, whose statement timeout is 5 s: report_revenue alone takes
        # seconds on a loaded machine (docs/reports.md), so this test gives it time
        async with client_for(db_url, api_heavy_statement_timeout_ms=60_000) as client:
            for method, path, doc in ROUTES:
                needed = needs[f"{method} {path}"]
                path = path.replace("/subscriptions/1", f"/subscriptions/{sub_id}")
                # Past the doors: whatever the route then says (404 for an endpoint that does not
                # exist...), never 401, 403, 415 or 429.
                passed = (401, 403, 415, 429)
                for scope, key in keys.items():
                    r = await call(client, method, path, doc, bearer(key))
                    if scope == needed:
                        assert r.status_code not in passed and r.status_code < 500, (method, path, r.status_code, r.text)
                    else:
                        assert_error(r, 403, "forbidden")
                r = await call(client, method, path, doc, bearer(admin))  # admin allows everything
                assert r.status_code not in passed and r.status_code < 500, (method, path, r.status_code, r.text)

    asyncio.run(body())


def test_a_revoked_key_is_refused_at_once(db_url):
    seed(db_url)
    key = create_key(db_url, "soon revoked", ["admin"])

    async def body():
        async with client_for(db_url) as client:
            assert (await client.get("/subscriptions/1", headers=bearer(key.key))).status_code == 200
            revoke_key(db_url, key.key_id)
            for method, path, doc in ROUTES:
                assert_error(await call(client, method, path, doc, bearer(key.key)), 401, "unauthorized")

    asyncio.run(body())
    # The CLI lists it as revoked, with its last use; the key itself is nowhere in the database.
    out = subprocess.run([BILLING, "api-key", "list", "--database-url", db_url], capture_output=True, text=True,
                         check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith(key.key_id))
    assert "soon revoked" in line and line.count("20") >= 3, line
    with psycopg.connect(db_url) as conn:
        dump = str(conn.execute("SELECT array_agg(k::text) FROM billing.api_key k").fetchone()[0])
        dump += str(conn.execute("SELECT array_agg(a::text) FROM billing.audit_log a").fetchone()[0])
    assert key.key.split("_", 2)[2] not in dump


def test_cli_creates_a_key_printed_alone_on_the_last_line(db_url):
    out = subprocess.run([BILLING, "api-key", "create", "--name", "ci", "--scope", "subscriptions:read",
                          "--scope", "subscriptions:write", "--database-url", db_url],
                         capture_output=True, text=True, check=True).stdout
    key = out.rstrip("\n").splitlines()[-1]
    assert key.startswith("bk_") and " " not in key and len(key) >= 3 + 8 + 1 + 43
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT id, scopes, created_by FROM billing.api_key WHERE key_hash = sha256(%s::bytea)",
                           (key.encode(),)).fetchone()
        audit = conn.execute("SELECT actor, args FROM billing.audit_log WHERE function = 'create_api_key'").fetchone()
    assert row[0] == key_id_of(key) and row[1] == ["subscriptions:read", "subscriptions:write"]
    assert row[2].startswith("cli:") and audit[0].startswith("cli:")
    assert set(audit[1]) == {"id", "name", "scopes"}  # never the hash or the key


def test_cross_site_text_plain_post_is_refused_and_changes_nothing(db_url):
    """A browser form or fetch() without preflight can send text/plain with the operator's
    cookies but never an Authorization header; even with a key, text/plain is 415."""
    sub_id = seed(db_url)
    key = create_key(db_url, "ops", ["admin"]).key
    with psycopg.connect(db_url) as conn:
        before = conn.execute("SELECT status, version FROM billing.subscription WHERE id = %s", (sub_id,)).fetchone()

    async def body():
        async with client_for(db_url) as client:
            for path, doc in ((f"/subscriptions/{sub_id}/cancel", b'{"atPeriodEnd": false}'),
                              (f"/subscriptions/{sub_id}/change-plan", b'{"planCode": "BASIC_MONTHLY"}'),
                              ("/subscriptions", b'{"customerId": 5, "planCode": "PRO_MONTHLY"}')):
                for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
                    r = await client.post(path, content=doc, headers={"Content-Type": ctype, "Idempotency-Key": "x",
                                                                       "Origin": "https://evil.example"})
                    assert_error(r, 401, "unauthorized")  # the browser case: no key
                    r = await client.post(path, content=doc, headers={"Content-Type": ctype, "Idempotency-Key": "x",
                                                                       **bearer(key)})
                    assert_error(r, 415, "unsupported_media_type")
                r = await client.post(path, content=doc, headers={"Idempotency-Key": "x", **bearer(key)})
                assert_error(r, 415, "unsupported_media_type")  # no Content-Type at all
            # The webhook too.
            r = await client.post("/webhooks/payments", content=b"{}", headers={"Content-Type": "text/plain"})
            assert_error(r, 415, "unsupported_media_type")

    asyncio.run(body())
    with psycopg.connect(db_url) as conn:
        after = conn.execute("SELECT status, version FROM billing.subscription WHERE id = %s", (sub_id,)).fetchone()
        n, = conn.execute("SELECT count(*) FROM billing.subscription").fetchone()
    assert after == before and n == 1


def test_oversize_bodies_are_413_declared_or_streamed(db_url):
    seed(db_url)
    key = create_key(db_url, "ops", ["admin"]).key

    async def body():
        async with client_for(db_url) as client:
            big = b'{"planCode": "' + b"A" * 300_000 + b'"}'
            r = await client.post("/subscriptions/1/change-plan", content=big,
                                  headers={"Content-Type": "application/json", **bearer(key)})
            assert_error(r, 413, "payload_too_large")

            async def chunks():  # no Content-Length: refused as it streams past the handler's limit
                yield b'{"planCode": "'
                for _ in range(100):
                    yield b"A" * 1000
                yield b'"}'

            r = await client.post("/subscriptions/1/change-plan", content=chunks(),
                                  headers={"Content-Type": "application/json", **bearer(key)})
            assert_error(r, 413, "payload_too_large")

    asyncio.run(body())


def test_idempotency_keys_are_per_api_key_and_expire_after_a_day(db_url):
    seed(db_url)
    alice, bob = (create_key(db_url, n, ["subscriptions:write"]).key for n in ("alice", "bob"))

    async def body():
        async with client_for(db_url) as client:
            r1 = await call(client, "POST", "/subscriptions", {"customerId": 41, "planCode": "PRO_MONTHLY"},
                            {"Idempotency-Key": "order-1", **bearer(alice)})
            assert r1.status_code == 201
            # Bob's same key is his own: a new subscription, and nothing about Alice's request leaks.
            r2 = await call(client, "POST", "/subscriptions", {"customerId": 42, "planCode": "BASIC_MONTHLY"},
                            {"Idempotency-Key": "order-1", **bearer(bob)})
            assert r2.status_code == 201 and r2.json()["id"] != r1.json()["id"]
            # Alice's replay with other parameters: 409 about her own request only.
            r3 = await call(client, "POST", "/subscriptions", {"customerId": 43, "planCode": "PRO_MONTHLY"},
                            {"Idempotency-Key": "order-1", **bearer(alice)})
            # (Bob's customer by its words: the random key id in the message may hold the digits 42.)
            assert r3.status_code == 409 and "customer 42" not in r3.text and "BASIC" not in r3.text
            # A 255-character key still fits behind the key id.
            long_key = "x" * 255
            r4 = await call(client, "POST", "/subscriptions", {"customerId": 44, "planCode": "PRO_MONTHLY"},
                            {"Idempotency-Key": long_key, **bearer(alice)})
            r5 = await call(client, "POST", "/subscriptions", {"customerId": 44, "planCode": "PRO_MONTHLY"},
                            {"Idempotency-Key": long_key, **bearer(alice)})
            assert (r4.status_code, r5.status_code) == (201, 200) and r4.json()["id"] == r5.json()["id"]
            # A day later the key is forgotten (the worker's hourly expiry) and makes a new one.
            with psycopg.connect(db_url, autocommit=True) as conn:
                kept = conn.execute("SELECT billing.expire_idempotency_keys('24 hours', 10000, now())").fetchone()[0]
                gone = conn.execute("SELECT billing.expire_idempotency_keys('24 hours', 10000, now() + interval '25 hours')"
                                    ).fetchone()[0]
            assert kept == 0 and gone == 4  # seed + three API keys
            r6 = await call(client, "POST", "/subscriptions", {"customerId": 43, "planCode": "PRO_MONTHLY"},
                            {"Idempotency-Key": "order-1", **bearer(alice)})
            assert r6.status_code == 201 and r6.json()["id"] != r1.json()["id"]

    asyncio.run(body())


def test_every_api_mutation_is_audited_with_its_key(db_url):
    sub_id = seed(db_url)
    key = create_key(db_url, "writer", ["subscriptions:write"])
    admin = create_key(db_url, "auditor", ["admin"]).key

    async def body():
        async with client_for(db_url) as client:
            await call(client, "POST", "/subscriptions", {"customerId": 7, "planCode": "PRO_MONTHLY"},
                       {"Idempotency-Key": "a-1", **bearer(key.key)})
            await call(client, "POST", f"/subscriptions/{sub_id}/change-plan", {"planCode": "BASIC_MONTHLY"},
                       bearer(key.key))
            await call(client, "POST", f"/subscriptions/{sub_id}/cancel", {"atPeriodEnd": True}, bearer(key.key))
            # A refused call (unknown plan) leaves no row: same transaction.
            r = await call(client, "POST", f"/subscriptions/{sub_id}/change-plan", {"planCode": "NOPE"},
                           bearer(key.key))
            assert r.status_code == 422
            assert_error(await client.get("/admin/audit", headers=bearer(key.key)), 403, "forbidden")
            r = await client.get("/admin/audit", params={"actor": f"api-key:{key.key_id}"}, headers=bearer(admin))
            assert r.status_code == 200, r.text
            return r.json()["entries"]

    entries = asyncio.run(body())
    assert [e["function"] for e in entries] == ["cancel_subscription", "change_plan", "create_subscription"]
    assert all(e["actor"] == f"api-key:{key.key_id}" and e["dbRole"] == "postgres" for e in entries)
    assert entries[2]["args"]["idempotency_key"] == f"{key.key_id}/a-1"
    assert entries[1]["args"]["plan_code"] == "BASIC_MONTHLY"


def test_per_key_rate_limit_answers_429_with_retry_after(db_url, redis_url):
    seed(db_url)
    busy, calm = (create_key(db_url, n, ["subscriptions:read"]).key for n in ("busy", "calm"))

    async def body(redis):
        async with client_for(db_url, api_rate_per_key=1.0, api_burst_per_key=3, redis_url=redis) as client:
            statuses = [(await client.get("/subscriptions/1", headers=bearer(busy))).status_code for _ in range(5)]
            assert statuses[:3] == [200, 200, 200] and statuses[3:] == [429, 429], statuses
            r = await client.get("/subscriptions/1", headers=bearer(busy))
            assert_error(r, 429, "rate_limited")
            assert 1 <= int(r.headers["retry-after"]) <= 2
            assert (await client.get("/subscriptions/1", headers=bearer(calm))).status_code == 200  # per key

    asyncio.run(body(redis_url))  # shared through Redis
    asyncio.run(body(None))  # in process


def test_errors_never_echo_database_text_and_healthz_says_only_ok_or_not(db_url):
    seed(db_url)
    key = create_key(db_url, "w", ["admin"]).key

    from billing.api.errors import database_error

    # A constraint violation: the answer names our rule, never PostgreSQL's text (row contents...).
    with psycopg.connect(db_url) as conn:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute("INSERT INTO billing.plan (code, price_amount, currency, billing_interval) "
                         "VALUES ('secret-plan', -1, 'USD', 'MONTH')")
    response = database_error(caught.value, None)
    assert response.status_code == 422
    assert b"plan_price_not_negative" in response.body
    assert b"secret-plan" not in response.body and b"violates" not in response.body

    async def body():
        async with client_for(db_url) as client:
            r = await call(client, "POST", "/subscriptions", {"customerId": 1, "planCode": "A" * 101},
                           {"Idempotency-Key": "long-plan", **bearer(key)})
            assert r.status_code == 422 and "ERROR" not in r.text
        async with client_for("postgresql://postgres:s3cret-pw@127.0.0.1:1/nowhere?connect_timeout=1") as client:
            r = await client.get("/healthz")
            assert r.status_code == 503 and r.json() == {"status": "unavailable"}

    asyncio.run(body())


# -- a real `billing serve`: timeouts, the internal listener, refused secrets ------------------------


@pytest.fixture
def served(db_url, tmp_path):
    seed(db_url)
    port, internal = free_ports(2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BILLING_")}
    env.update(BILLING_DATABASE_URL=db_url, BILLING_WEBHOOK_SECRET=SECRET, BILLING_LOG_LEVEL="WARNING",
               BILLING_API_HEADER_TIMEOUT_SECONDS="1.5", BILLING_API_BODY_TIMEOUT_SECONDS="2",
               BILLING_API_KEEP_ALIVE_SECONDS="1")
    proc = Proc("serve", [BILLING, "serve", "--port", str(port), "--internal-port", str(internal)], env, tmp_path)
    proc.start()
    try:
        assert wait_port(port, 30) and wait_port(internal, 30), proc.tail()
        yield port, internal
    finally:
        proc.stop(timeout=10)


def _closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed the connection (EOF or reset), None if still open."""
    sock.settimeout(seconds)
    start = time.monotonic()
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return time.monotonic() - start
    except (ConnectionResetError, BrokenPipeError):
        return time.monotonic() - start
    except socket.timeout:
        return None


def test_slow_and_half_sent_requests_are_closed_within_the_header_timeout(served):
    port, _ = served
    cases = {
        "silent": b"",
        "half a request line": b"GET /subscrip",
        "head without its end": b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
        "slowloris": None,  # one header byte a second, forever
    }
    for name, payload in cases.items():
        with socket.create_connection(("127.0.0.1", port)) as sock:
            if payload is None:
                sock.sendall(b"GET /healthz HTTP/1.1\r\n")
                start = time.monotonic()
                closed = None
                while time.monotonic() - start < 6:
                    try:
                        sock.sendall(b"X")
                    except OSError:
                        closed = time.monotonic() - start
                        break
                    got = _closed_within(sock, 0.5)
                    if got is not None:
                        closed = time.monotonic() - start
                        break
                assert closed is not None and closed < 3.5, f"{name}: still open after 6 s"
                continue
            sock.sendall(payload)
            took = _closed_within(sock, 6)
            assert took is not None and took < 3.5, f"{name}: not closed within the 1.5 s header timeout ({took})"
    # A body promised and never sent: closed after the body timeout (2 s).
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /webhooks/payments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"a\":")
        took = _closed_within(sock, 8)
        assert took is not None and took < 5, took
    # An idle keep-alive connection: closed after the keep-alive timeout (1 s).
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(5)
        assert b"200" in sock.recv(4096).split(b"\r\n")[0]
        took = _closed_within(sock, 6)
        assert took is not None and took < 3.5, took
    # The server still serves.
    assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200


def test_metrics_and_openapi_need_admin_on_the_public_port_but_not_on_the_internal_one(served):
    port, internal = served
    for path in ("/metrics", "/openapi.json"):
        assert httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5).status_code == 401
        assert httpx.get(f"http://127.0.0.1:{internal}{path}", timeout=5).status_code == 200
    assert httpx.get(f"http://127.0.0.1:{internal}/subscriptions/1", timeout=5).status_code == 404


@pytest.mark.parametrize("secret, why", [
    ("change-me", "placeholder"), ("whsec_test", "placeholder"), ("s" * 40, "placeholder"),
    ("short-but-random-9f3a", "shorter than 32"), ("REPLACE-ME-with-a-real-secret-0123456789", "placeholder"),
    # issue 27, finding 8: long enough, varied enough, and guessable
    ("passwordpasswordpasswordpassword1", "guessable"), ("12345678901234567890123456789012", "guessable"),
    ("abcdefghijklmnopqrstuvwxyzabcdef", "guessable"),
])
def test_serve_and_worker_refuse_weak_secrets(db_url, tmp_path, secret, why):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BILLING_")}
    env.update(BILLING_DATABASE_URL=db_url, BILLING_WEBHOOK_SECRET=secret)
    for command in (["serve", "--port", "1"], ["worker"]):
        out = subprocess.run([BILLING, *command], env=env, capture_output=True, text=True, timeout=30)
        assert out.returncode != 0 and why in out.stderr and secret not in out.stderr, (command, out.stderr)
    # The same from a file (BILLING_WEBHOOK_SECRET_FILE), and a weak database password.
    path = tmp_path / "secret"
    path.write_text(secret + "\n")
    env.pop("BILLING_WEBHOOK_SECRET")
    env["BILLING_WEBHOOK_SECRET_FILE"] = str(path)
    out = subprocess.run([BILLING, "serve", "--port", "1"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and why in out.stderr
    env.pop("BILLING_WEBHOOK_SECRET_FILE")
    env["BILLING_DATABASE_URL"] = "postgresql://billing:billing@127.0.0.1:1/billing"
    out = subprocess.run([BILLING, "worker"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "BILLING_DATABASE_URL" in out.stderr


def test_no_default_webhook_secret_so_a_forged_webhook_marks_nothing_paid(db_url):
    """The compose file's old `change-me` let anyone sign a webhook. No default exists now: without
    a configured secret every webhook is refused, and `change-me` is refused at start."""
    assert Settings().webhook_secret is None
    import re

    for name in ("docker-compose.yml", "README.md", "docs/http-api.md", "docs/security.md", "Dockerfile",
                 "deploy/make-secrets.sh"):
        # No file sets a secret to a fixed value (docs/security.md may name refused placeholders).
        assert not re.search(r"(SECRET|PASSWORD)[A-Z_]*\s*[:=]\s*['\"]?[A-Za-z0-9-]", (REPO_ROOT / name).read_text()), name
    assert "change-me" not in (REPO_ROOT / "docker-compose.yml").read_text()
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO_MONTHLY', 300000, 'USD', 'MONTH', 1)")
        conn.execute("SELECT billing.create_subscription('forge', 1, 'PRO_MONTHLY', %s)", (T0,))
        key = conn.execute("SELECT idempotency_key FROM billing.claim_charges('w', 10, '5 minutes', %s)",
                           (T0,)).fetchone()[0]
    from billing.signing import sign

    body = (f'{{"eventId": "evt_forged", "idempotencyKey": "{key}", "status": "succeeded", "id": "ch_x"}}').encode()
    now = int(time.time())

    async def post(app_secret):
        app = create_app(Settings(database_url=db_url, webhook_secret=app_secret), clock=SimulatedClock(T0))
        async with httpx.AsyncClient(timeout=30, transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            r = await client.post("/webhooks/payments", content=body, headers={
                "Content-Type": "application/json", "Billing-Signature": f"t={now},v1={sign('change-me', now, body)}"})
        await app.state.database.close()
        return r

    assert asyncio.run(post(None)).status_code == 400  # no secret configured: refused
    assert asyncio.run(post(SECRET)).status_code == 400  # the real secret: the forgery does not match
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM billing.invoice WHERE status = 'PAID'").fetchone()[0] == 0
