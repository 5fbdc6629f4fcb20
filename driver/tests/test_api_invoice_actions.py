"""POST /invoices/{id}/retry and /invoices/{id}/void (docs/http-api.md): the operator's, admin scope
only; each maps the SQL API's answer (db/functions/63_invoice_actions.sql) and is audited."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import httpx
import psycopg

from billing.api import create_app
from billing.clock import SimulatedClock
from billing.config import Settings

from .conftest import create_test_key

T0 = datetime(2026, 10, 1, 12, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(hours=2)


def _world(db_url: str) -> tuple[int, int]:
    """An invoice in dunning (declined once, next try in a day) and a PAID one."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('INV_M', 5000, 'EUR', 'MONTH', 1)")
        subs = [conn.execute("SELECT id FROM billing.create_subscription(%s, %s, 'INV_M', %s)",
                             (f"inv-{c}", c, T0)).fetchone()[0] for c in (801, 802)]
        for c in conn.execute("SELECT * FROM billing.claim_charges('w', 10, '5 minutes', %s)", (T0,)).fetchall():
            sub = conn.execute("SELECT subscription_id FROM billing.invoice WHERE id = %s", (c[0],)).fetchone()[0]
            outcome = "DECLINED" if sub == subs[0] else "SUCCEEDED"
            conn.execute("SELECT billing.record_payment_result(%s, %s, 'ch', %s, %s)",
                         (c[2], outcome, "card_declined" if outcome == "DECLINED" else None, T0))
        return tuple(conn.execute("SELECT id FROM billing.invoice WHERE subscription_id = %s", (s,)).fetchone()[0]
                     for s in subs)


def test_retry_and_void_over_http(db_url):
    in_dunning, paid = _world(db_url)
    admin, writer = create_test_key(db_url, "admin"), create_test_key(db_url, "subscriptions:write", "refunds:write")
    app = create_app(Settings(database_url=db_url), clock=SimulatedClock(NOW))

    async def body():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test") as c:
            def post(path, doc, key=admin):
                return c.post(path, json=doc, headers={"Authorization": f"Bearer {key}"})

            # Not the operator: refused before anything is read.
            for path, doc in ((f"/invoices/{in_dunning}/retry", {}), (f"/invoices/{in_dunning}/void", {"reason": "x"})):
                r = await post(path, doc, writer)
                assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
            r = await post(f"/invoices/{in_dunning}/retry", {})
            assert r.status_code == 200, r.text
            doc = r.json()
            assert (doc["object"], doc["status"], doc["attemptCount"]) == ("invoice", "OPEN", 1)
            assert doc["nextAttemptAt"] == NOW.isoformat().replace("+00:00", "Z")
            r = await c.post(f"/invoices/{in_dunning}/retry", headers={"Authorization": f"Bearer {admin}",
                                                                        "Content-Type": "application/json"})
            assert r.status_code == 200  # no body at all is fine too; already due: unchanged
            assert (await post(f"/invoices/{in_dunning}/retry", {"when": "now"})).status_code == 400
            assert (await post(f"/invoices/{in_dunning}/void", {})).status_code == 400
            r = await post(f"/invoices/{in_dunning}/void", {"reason": "  "})
            assert r.status_code == 422, r.text
            r = await post(f"/invoices/{in_dunning}/void", {"reason": "x" * 501})
            assert r.status_code in (400, 422), r.text
            r = await post(f"/invoices/{in_dunning}/void", {"reason": "goodwill"})
            assert r.status_code == 200 and r.json()["status"] == "VOID" and r.json()["nextAttemptAt"] is None
            r = await post(f"/invoices/{in_dunning}/void", {"reason": "again"})
            assert r.status_code == 200 and r.json()["closedAt"] == NOW.isoformat().replace("+00:00", "Z")
            r = await post(f"/invoices/{in_dunning}/retry", {})
            assert r.status_code == 409 and r.json()["error"]["code"] == "conflict", r.text
            r = await post(f"/invoices/{paid}/void", {"reason": "x"})
            assert r.status_code == 409, r.text
            assert (await post("/invoices/987654321/void", {"reason": "x"})).status_code == 404
            assert (await post("/invoices/abc/retry", {})).status_code in (400, 404)

    asyncio.run(body())
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT function, actor FROM billing.audit_log WHERE function IN "
                            "('retry_invoice', 'void_invoice') ORDER BY id").fetchall()
        key_id = "_".join(admin.split("_")[:2])
        assert {r[1] for r in rows} == {f"api-key:{key_id}"}
        assert [r[0] for r in rows].count("void_invoice") >= 2
        sub_status = conn.execute("SELECT s.status FROM billing.subscription s JOIN billing.invoice i "
                                  "ON i.customer_id = s.customer_id AND i.subscription_id = s.id WHERE i.id = %s", (in_dunning,)).fetchone()[0]
        assert sub_status == "ACTIVE"  # nothing left unpaid: out of dunning, not canceled
