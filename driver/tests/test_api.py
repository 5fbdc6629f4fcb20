"""The HTTP API (docs/http-api.md) in process, over a real PostgreSQL: happy paths, every error
status, and bad input that must never be a 500."""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import datetime, timedelta, timezone

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from billing.api import create_app
from billing.clock import SimulatedClock
from billing.config import Settings
from .synthetic import invoice_paid_data_sql

from .conftest import create_test_key

T0 = datetime(2026, 10, 1, 12, 0, tzinfo=timezone.utc)


def seed_plans(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO_MONTHLY', 300000, 'USD', 'MONTH', 1)")
        conn.execute("SELECT billing.upsert_plan('BASIC_MONTHLY', 100000, 'USD', 'MONTH', 1)")
        conn.execute("SELECT billing.upsert_plan('PRO_EUR', 300000, 'EUR', 'MONTH', 1)")


@contextlib.asynccontextmanager
async def api_client(db_url: str, *, clock=None, secret: str | None = "whsec_test", key: str | None = None,
                     key_url: str | None = None, **app_kwargs):
    """The app in process with an admin key of its own (or `key`)."""
    if key is None:
        try:
            key = create_test_key(key_url or db_url, "admin")
        except psycopg.OperationalError:
            key = "bk_unreachable_" + "x" * 43  # the database is away on purpose
    app = create_app(Settings(database_url=db_url, webhook_secret=secret), clock=clock, **app_kwargs)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    try:
        async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test",
                                     headers={"Authorization": f"Bearer {key}"}) as client:
            yield client
    finally:
        await app.state.database.close()


def run(coro):
    return asyncio.run(coro)


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["message"]
    if code:
        assert body["error"]["code"] == code, body
    return body["error"]


async def create(client, key="key-1", customer=1, plan="PRO_MONTHLY"):
    return await client.post("/subscriptions", json={"customerId": customer, "planCode": plan},
                             headers={"Idempotency-Key": key})


def test_create_replay_and_get(db_url):
    seed_plans(db_url)

    async def body():
        async with api_client(db_url, clock=SimulatedClock(T0)) as client:
            r = await create(client)
            assert r.status_code == 201, r.text
            sub = r.json()
            assert set(sub) == {"id", "customerId", "planCode", "status", "currentPeriodStart",
                                "currentPeriodEnd", "cancelAtPeriodEnd", "version", "quantity", "trialEnd",
                                "pausedAt", "resumeAt", "scheduledPlanCode", "couponCode", "externalId"}
            assert sub["customerId"] == 1 and sub["planCode"] == "PRO_MONTHLY" and sub["status"] == "ACTIVE"
            assert sub["currentPeriodStart"] == "2026-10-01T12:00:00.000000Z"
            assert sub["currentPeriodEnd"] == "2026-11-01T12:00:00.000000Z"
            assert sub["cancelAtPeriodEnd"] is False and sub["version"] == 1
            assert r.headers["etag"] == '"1"' and r.headers["location"] == f"/subscriptions/{sub['id']}"

            # The same key and body again, even at the same simulated instant: a replay (200).
            again = await create(client)
            assert again.status_code == 200 and again.json() == sub

            got = await client.get(f"/subscriptions/{sub['id']}")
            assert got.status_code == 200 and got.json() == sub and got.headers["etag"] == '"1"'

            other = await create(client, key="key-2")
            assert other.status_code == 201 and other.json()["id"] != sub["id"]

    run(body())


def test_create_errors(db_url):
    seed_plans(db_url)

    async def body():
        async with api_client(db_url) as client:
            r = await client.post("/subscriptions", json={"customerId": 1, "planCode": "PRO_MONTHLY"})
            assert_error(r, 400, "missing_idempotency_key")
            assert_error(await client.post("/subscriptions", json={"customerId": 1, "planCode": "PRO_MONTHLY"},
                                           headers={"Idempotency-Key": ""}), 400)
            assert_error(await create(client, plan="NO_SUCH_PLAN"), 422, "invalid_input")
            assert (await create(client, key="k")).status_code == 201
            # The key reused with other parameters.
            assert_error(await create(client, key="k", customer=2), 409, "conflict")
            assert_error(await create(client, key="k", plan="BASIC_MONTHLY"), 409, "conflict")

    run(body())


def test_cancel_and_if_match(db_url):
    seed_plans(db_url)

    async def body():
        async with api_client(db_url) as client:
            sub = (await create(client)).json()
            url = f"/subscriptions/{sub['id']}/cancel"
            assert_error(await client.post(url, json={"atPeriodEnd": True}, headers={"If-Match": '"7"'}),
                         412, "precondition_failed")
            r = await client.post(url, json={"atPeriodEnd": True}, headers={"If-Match": '"1"'})
            assert r.status_code == 200, r.text
            flagged = r.json()
            assert flagged["cancelAtPeriodEnd"] is True and flagged["status"] == "ACTIVE"
            assert flagged["version"] == 2 and r.headers["etag"] == '"2"'
            # The old ETag is now stale.
            assert_error(await client.post(url, json={"atPeriodEnd": False}, headers={"If-Match": '"1"'}), 412)
            # Without If-Match, no version check; W/ and unquoted forms are accepted.
            r = await client.post(url, json={"atPeriodEnd": False}, headers={"If-Match": 'W/"2"'})
            assert r.status_code == 200 and r.json()["status"] == "CANCELED"
            again = await client.post(url, json={"atPeriodEnd": False})
            assert again.status_code == 200 and again.json()["status"] == "CANCELED"  # harmless repeat
            assert_error(await client.post("/subscriptions/999999/cancel", json={"atPeriodEnd": True}), 404, "not_found")
            # A canceled subscription cannot change plan.
            assert_error(await client.post(f"/subscriptions/{sub['id']}/change-plan",
                                           json={"planCode": "BASIC_MONTHLY"}), 422)

    run(body())


def test_change_plan(db_url):
    seed_plans(db_url)
    clock = SimulatedClock(T0)

    async def body():
        async with api_client(db_url, clock=clock) as client:
            sub = (await create(client)).json()
            url = f"/subscriptions/{sub['id']}/change-plan"
            clock.advance(timedelta(days=10))
            assert_error(await client.post(url, json={"planCode": "NOPE"}), 422, "invalid_input")
            assert_error(await client.post(url, json={"planCode": "PRO_EUR"}), 422)  # other currency
            assert_error(await client.post(url, json={"planCode": "BASIC_MONTHLY"}, headers={"If-Match": '"9"'}), 412)
            r = await client.post(url, json={"planCode": "BASIC_MONTHLY"}, headers={"If-Match": '"1"'})
            assert r.status_code == 200, r.text
            assert r.json()["planCode"] == "BASIC_MONTHLY" and r.json()["version"] == 2
            assert_error(await client.post("/subscriptions/424242/change-plan", json={"planCode": "BASIC_MONTHLY"}),
                         404)
            got = await client.get(f"/subscriptions/{sub['id']}")
            assert got.json()["planCode"] == "BASIC_MONTHLY" and got.headers["etag"] == '"2"'

    run(body())


BAD_REQUESTS = [
    # (method, path, headers, raw body)
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b"{not json"),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b""),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b"[]"),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b"null"),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b"\xff\xfe"),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b'{"customerId": "1", "planCode": "PRO_MONTHLY"}'),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b'{"customerId": 1.5, "planCode": "PRO_MONTHLY"}'),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b'{"customerId": true, "planCode": "PRO_MONTHLY"}'),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"},
     b'{"customerId": 99999999999999999999999999, "planCode": "PRO_MONTHLY"}'),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b'{"customerId": 1, "planCode": 7}'),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b'{"customerId": 1, "planCode": "PRO\\u0000"}'),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b'{"customerId": 1, "planCode": "\\ud800"}'),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b'{"customerId": 1, "planCode": "' + b"x" * 5000 + b'"}'),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b'{"customerId": 1}'),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"},
     b'{"customerId": 1, "planCode": "PRO_MONTHLY", "extra": 1}'),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b"[" * 30000 + b"]" * 30000),
    ("POST", "/subscriptions", {"Idempotency-Key": "b1"}, b" " * 70000 + b"{}"),
    ("POST", "/webhooks/payments", {"Billing-Signature": "t=1,v1=00"}, b"x" * 300000),
    ("POST", "/subscriptions", {"Idempotency-Key": "x" * 300}, b'{"customerId": 1, "planCode": "PRO_MONTHLY"}'),
    ("POST", "/subscriptions", {"Idempotency-Key": "has space"}, b'{"customerId": 1, "planCode": "PRO_MONTHLY"}'),
    ("GET", "/subscriptions/abc", {}, b""),
    ("GET", "/subscriptions/-1", {}, b""),
    ("GET", "/subscriptions/0", {}, b""),
    ("GET", "/subscriptions/1e3", {}, b""),
    ("GET", "/subscriptions/99999999999999999999999999999", {}, b""),
    ("GET", "/subscriptions/%C2%B2", {}, b""),
    ("POST", "/subscriptions/1/cancel", {}, b'{"atPeriodEnd": "yes"}'),
    ("POST", "/subscriptions/1/cancel", {}, b"{}"),
    ("POST", "/subscriptions/1/cancel", {}, b'{"atPeriodEnd": true, "now": "2020-01-01"}'),
    ("POST", "/subscriptions/1/cancel", {"If-Match": "garbage"}, b'{"atPeriodEnd": true}'),
    ("POST", "/subscriptions/1/cancel", {"If-Match": '"1", "2"'}, b'{"atPeriodEnd": true}'),
    ("POST", "/subscriptions/1/cancel", {"If-Match": '"99999999999999999999999"'}, b'{"atPeriodEnd": true}'),
    ("POST", "/subscriptions/99999999999999999999/cancel", {}, b'{"atPeriodEnd": true}'),
    ("POST", "/subscriptions/1/change-plan", {}, b'{"planCode": null}'),
    ("POST", "/subscriptions/1/change-plan", {}, b'{"planCode": ""}'),
    ("POST", "/subscriptions/1/change-plan", {}, b'{"planCode": ["PRO_MONTHLY"]}'),
    ("POST", "/subscriptions/1/change-plan", {}, b'{"plan": "PRO_MONTHLY"}'),
    ("DELETE", "/subscriptions/1", {}, b""),
    ("PUT", "/subscriptions", {}, b""),
    ("GET", "/nowhere", {}, b""),
    ("POST", "/webhooks/payments", {}, b'{"eventId": "e"}'),
    ("POST", "/webhooks/payments", {"Billing-Signature": "t=abc,v1=00"}, b"{}"),
    ("POST", "/webhooks/payments", {"Billing-Signature": "garbage"}, b"{}"),
    ("POST", "/webhooks/payments", {"Billing-Signature": "t=99999999999999999999,v1=00"}, b"{}"),
]


def test_bad_input_is_4xx_with_the_error_body(db_url):
    seed_plans(db_url)

    async def body():
        async with api_client(db_url) as client:
            assert (await create(client)).status_code == 201  # subscription 1 exists
            for method, path, headers, raw in BAD_REQUESTS:
                r = await client.request(method, path, headers={"Content-Type": "application/json", **headers},
                                         content=raw)
                assert 400 <= r.status_code < 500, (method, path, headers, raw[:80], r.status_code, r.text)
                err = r.json()["error"]
                assert err["code"] and err["message"], (path, r.text)
            # Nothing above created anything: still one subscription, version 1.
            got = await client.get("/subscriptions/1")
            assert got.json()["version"] == 1 and got.json()["status"] == "ACTIVE"
            assert (await client.get("/subscriptions/2")).status_code == 404

    run(body())


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
FIELDS = st.fixed_dictionaries({}, optional={
    "customerId": JSON, "planCode": JSON | st.sampled_from(["PRO_MONTHLY", "BASIC_MONTHLY", ""]),
    "atPeriodEnd": JSON, "extra": JSON})


def test_fuzzed_bodies_never_500(db_url):
    seed_plans(db_url)
    statuses: list[int] = []

    async def one(client, path: str, doc, key: str | None) -> None:
        headers = {"Idempotency-Key": key.encode("utf-8")} if key is not None else {}
        r = await client.post(path, content=json.dumps(doc).encode(), headers=headers)
        statuses.append(r.status_code)
        assert r.status_code < 500, (path, doc, key, r.status_code, r.text)
        if r.status_code >= 400:
            assert set(r.json()["error"]) == {"code", "message"}

    @hsettings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(path=st.sampled_from(["/subscriptions", "/subscriptions/1/cancel", "/subscriptions/1/change-plan"]),
           doc=FIELDS | JSON, key=st.none() | st.text(max_size=20))
    def check(path, doc, key):
        async def body():
            async with api_client(db_url) as client:
                await one(client, path, doc, key)

        run(body())

    check()
    assert statuses


def test_openapi_metrics_healthz(db_url):
    seed_plans(db_url)

    async def body():
        async with api_client(db_url) as client:
            spec = (await client.get("/openapi.json")).json()
            assert spec["openapi"].startswith("3.")
            assert {"/subscriptions", "/subscriptions/{id}", "/subscriptions/{id}/cancel",
                    "/subscriptions/{id}/change-plan", "/webhooks/payments"} <= set(spec["paths"])
            assert (await client.get("/healthz")).json() == {"status": "ok"}
            with psycopg.connect(db_url, autocommit=True) as conn:
                conn.execute(f"SELECT billing._emit_event('invoice', g, 'InvoicePaid', {invoice_paid_data_sql('g')}, now()) "
                             "FROM generate_series(1, 7) g")
            text = (await client.get("/metrics")).text
            assert "billing_outbox_backlog 7.0" in text
            assert "billing_outbox_dead 0.0" in text
            assert "billing_relay_active" in text and "billing_http_requests_total" in text

    run(body())


def test_healthz_when_the_database_is_unreachable():
    async def body():
        url = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=1"
        async with api_client(url, pool_timeout=1.0) as client:
            r = await client.get("/healthz")
            assert r.status_code == 503 and r.json()["status"] == "unavailable"
            assert_error(await client.get("/subscriptions/1"), 503, "unavailable")

    run(body())


def test_api_needs_nothing_but_execute_rights(db_url):
    """Run as billing_app, which may only execute the SQL API: the API must work through it."""
    seed_plans(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        missing = [f for f in ("billing.plan_code(bigint)", "billing.outbox_stats(timestamptz)")
                   if not conn.execute("SELECT has_function_privilege('billing_app', %s, 'EXECUTE')", (f,)).fetchone()[0]]
    if missing:
        pytest.skip(f"billing_app lacks EXECUTE on {missing}: db/functions/90_grants.sql must grant them")
    for role in ("billing_app", "billing_api"):  # the deprecated union role, and the API's own job role
        info = psycopg.conninfo.conninfo_to_dict(db_url)
        info["options"] = f"-c role={role}"
        app_url = psycopg.conninfo.make_conninfo(**info)

        async def body():
            async with api_client(app_url, key_url=db_url) as client:
                r = await create(client, key=f"as-{role}")
                assert r.status_code == 201, r.text
                assert (await client.get(f"/subscriptions/{r.json()['id']}")).status_code == 200
                assert "billing_outbox_backlog" in (await client.get("/metrics")).text
                assert (await client.get("/admin/audit")).status_code == 200

        run(body())


def test_billing_serve_answers_over_http(db_url):
    """`billing serve` on a real uvicorn: /healthz and a request, then a clean SIGTERM."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    seed_plans(db_url)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "BILLING_DATABASE_URL": db_url}
    auth = {"Authorization": f"Bearer {create_test_key(db_url, 'subscriptions:write')}"}
    proc = subprocess.Popen([sys.executable, "-m", "billing.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read().decode()
                assert time.monotonic() < deadline, "billing serve did not start"
                time.sleep(0.2)
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        r = httpx.post(f"http://127.0.0.1:{port}/subscriptions", json={"customerId": 9, "planCode": "PRO_MONTHLY"},
                       headers={"Idempotency-Key": "over-http", **auth})
        assert r.status_code == 201, r.text
        r = httpx.post(f"http://127.0.0.1:{port}/subscriptions", content=b"{",
                       headers={"Idempotency-Key": "x", "Content-Type": "application/json", **auth})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
