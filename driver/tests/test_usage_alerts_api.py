"""A customer's usage alerts over HTTP (issue 29, docs/usage.md "Usage alerts"):
/v1/customers/{id}/usage-alerts, against the real PostgreSQL: create (idempotent), list, read,
change the threshold, delete; the worker's check fires the alert made over HTTP; the errors; a
customer token manages its own customer's alerts only."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import httpx
import psycopg

from billing.api import create_app
from billing.clock import SimulatedClock
from billing.config import Settings

from .conftest import create_test_key

T0 = datetime(2026, 10, 10, 12, 30, tzinfo=timezone.utc)


def test_usage_alerts_over_http(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        for c in (41, 42):
            conn.execute("SELECT billing.upsert_customer(%s)", (c,))
        conn.execute("SELECT billing.upsert_meter('requests', 'api.request', 'count', NULL, '{}', %s)", (T0,))
    writer = create_test_key(db_url, "subscriptions:write", name="alerts-writer")
    reader = create_test_key(db_url, "subscriptions:read", name="alerts-reader")
    sessions = create_test_key(db_url, "customer-sessions:write", "subscriptions:read", "subscriptions:write",
                               name="alerts-sessions")

    async def body():
        app = create_app(Settings(database_url=db_url), clock=SimulatedClock(T0))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        try:
            async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test") as client:
                def auth(key):
                    return {"Authorization": f"Bearer {key}"}

                base = "/v1/customers/41/usage-alerts"
                r = await client.post(base, json={"meterCode": "requests", "threshold": 100}, headers=auth(writer))
                assert r.status_code == 201, r.text
                alert = r.json()
                assert (alert["object"], alert["customerId"], alert["meterCode"], alert["threshold"], alert["firedFor"]) == \
                    ("usage_alert", 41, "requests", 100, None)
                assert r.headers["location"] == f"{base}/{alert['id']}"
                # the same threshold again: the same alert
                r = await client.post(base, json={"meterCode": "requests", "threshold": 100.0}, headers=auth(writer))
                assert r.json()["id"] == alert["id"]
                r = await client.post(base, json={"meterCode": "requests", "threshold": 2.5}, headers=auth(writer))
                assert r.status_code == 201 and r.json()["threshold"] == 2.5
                second = r.json()["id"]
                r = await client.get(base, headers=auth(reader))
                assert r.status_code == 200
                assert [(a["id"], a["threshold"]) for a in r.json()["data"]] == [(second, 2.5), (alert["id"], 100)]
                assert (await client.get(f"{base}/{alert['id']}", headers=auth(reader))).json()["threshold"] == 100
                # the errors: each a clear answer, nothing written
                for doc, status in (({"meterCode": "nope", "threshold": 1}, 404), ({"meterCode": "requests", "threshold": 0}, 422),
                                    ({"meterCode": "requests", "threshold": True}, 422),
                                    ({"meterCode": "requests", "threshold": "5"}, 422),
                                    ({"meterCode": "requests"}, 400), ({"meterCode": "requests", "threshold": 1, "x": 1}, 400)):
                    r = await client.post(base, json=doc, headers=auth(writer))
                    assert r.status_code == status, (doc, r.text)
                assert (await client.post("/v1/customers/999/usage-alerts", json={"meterCode": "requests", "threshold": 1},
                                          headers=auth(writer))).status_code == 404
                assert (await client.get("/v1/customers/999/usage-alerts", headers=auth(reader))).status_code == 404
                assert (await client.get(f"{base}/999999", headers=auth(reader))).status_code == 404
                assert (await client.post(base, json={"meterCode": "requests", "threshold": 1},
                                          headers=auth(reader))).status_code == 403
                # change the threshold; another alert's threshold is a conflict
                r = await client.post(f"{base}/{alert['id']}", json={"threshold": 3}, headers=auth(writer))
                assert r.status_code == 200 and r.json()["threshold"] == 3
                r = await client.post(f"{base}/{alert['id']}", json={"threshold": 2.5}, headers=auth(writer))
                assert r.status_code == 409, r.text
                # the worker's check fires the alert set over HTTP once the meter reaches it
                with psycopg.connect(db_url, autocommit=True) as conn:
                    events = [{"specversion": "1.0", "id": f"a{i}", "source": "gw", "type": "api.request",
                               "time": (T0 - timedelta(minutes=i + 1)).isoformat().replace("+00:00", "Z"),
                               "subject": "41", "data": {}} for i in range(3)]
                    import json
                    conn.execute("SELECT billing.ingest_usage(%s::jsonb, %s)", (json.dumps(events), T0))
                    assert conn.execute("SELECT billing.check_usage_alerts(100, %s)", (T0,)).fetchone()[0] == 2
                r = await client.get(f"{base}/{alert['id']}", headers=auth(reader))
                assert r.json()["firedFor"] is not None
                # a customer token: its own customer's alerts only (another's: 404, as if none)
                r = await client.post("/v1/customer-sessions", json={"customerId": 42}, headers=auth(sessions))
                assert r.status_code == 201, r.text
                token = r.json()["token"]
                assert (await client.get(base, headers=auth(token))).status_code == 404
                assert (await client.delete(f"{base}/{alert['id']}", headers=auth(token))).status_code == 404
                r = await client.post("/v1/customers/42/usage-alerts", json={"meterCode": "requests", "threshold": 9},
                                      headers=auth(token))
                assert r.status_code == 201 and r.json()["customerId"] == 42
                # delete; deleted already: 404
                r = await client.delete(f"{base}/{alert['id']}", headers=auth(writer))
                assert r.status_code == 200 and r.json()["deleted"] is True
                assert (await client.delete(f"{base}/{alert['id']}", headers=auth(writer))).status_code == 404
                assert [a["id"] for a in (await client.get(base, headers=auth(reader))).json()["data"]] == [second]
        finally:
            await app.state.database.close()

    asyncio.run(body())


def test_a_customer_keeps_at_most_100_alerts(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_customer(43)")
        conn.execute("SELECT billing.upsert_meter('requests', 'api.request', 'count', NULL, '{}', %s)", (T0,))
        for k in range(1, 101):
            conn.execute("SELECT billing.set_usage_alert(43, 'requests', %s, %s)", (k, T0))
        conn.execute("SELECT billing.set_usage_alert(43, 'requests', 100, %s)", (T0,))  # set before: still fine
        try:
            conn.execute("SELECT billing.set_usage_alert(43, 'requests', 101, %s)", (T0,))
            raise AssertionError("a 101st alert was accepted")
        except psycopg.Error as exc:
            assert exc.sqlstate == "BL422"
        assert conn.execute("SELECT count(*) FROM billing.usage_alert WHERE customer_id = 43").fetchone()[0] == 100
