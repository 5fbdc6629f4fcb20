"""The HTTP API's /v1 (issue 28; docs/http-api.md), in process over a real PostgreSQL: every new
resource, cursor pages in both directions, a walk over concurrent inserts (no row skipped or
repeated), a customer token's lists, the served OpenAPI document equal to the committed one."""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import datetime, timedelta, timezone

import httpx
import psycopg

from billing.api import create_app
from billing.api.openapi import OPENAPI
from billing.config import Settings
from billing.clock import SimulatedClock
from billing.config import REPO_ROOT

from .conftest import create_test_key
from .test_api import assert_error, run, seed_plans

T0 = datetime(2026, 10, 1, 12, 0, tzinfo=timezone.utc)


@contextlib.asynccontextmanager
async def api_client(db_url: str, *, clock=None, key: str | None = None):
    """The app in process with an admin key of its own (or `key`), as test_api's, with a statement
    timeout for the reports' pool long enough for a loaded machine (report_revenue takes seconds even
    on a small database)."""
    app = create_app(Settings(database_url=db_url, webhook_secret="whsec_test", api_heavy_statement_timeout_ms=60_000),
                     clock=clock)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    key = key or create_test_key(db_url, "admin")
    try:
        async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test",
                                     headers={"Authorization": f"Bearer {key}"}) as client:
            yield client
    finally:
        await app.state.database.close()


def subscribe(db_url: str, customers: range, plan: str = "BASIC_MONTHLY", at: datetime = T0) -> list[int]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return [conn.execute("SELECT id FROM billing.create_subscription(%s, %s, %s, %s)",
                             (f"v1-{c}", c, plan, at)).fetchone()[0] for c in customers]


async def walk(client, path: str, limit: int, params: dict | None = None, backward_from: str | None = None) -> list:
    """Every page of a list, following nextCursor (or previousCursor from `backward_from`)."""
    seen, cursor = [], backward_from
    while True:
        q = {"limit": limit, **(params or {})}
        if cursor is not None:
            q["ending_before" if backward_from is not None else "starting_after"] = cursor
        r = await client.get(path, params=q)
        assert r.status_code == 200, r.text
        page = r.json()
        assert page["object"] == "list" and len(page["data"]) <= limit
        seen.append(page["data"])
        if not page["hasMore"]:
            return seen
        cursor = page["previousCursor"] if backward_from is not None else page["nextCursor"]


def test_every_new_resource(db_url):
    seed_plans(db_url)

    async def body():
        async with api_client(db_url, clock=SimulatedClock(T0)) as client:
            # customers
            r = await client.post("/v1/customers", json={"id": 501, "timezone": "Europe/Paris", "name": "Ada",
                                                         "email": "Ada@Example.com", "country": "FR"})
            assert r.status_code == 201, r.text
            assert r.json()["email"] == "Ada@Example.com" and r.json()["timezone"] == "Europe/Paris"
            assert_error(await client.post("/v1/customers", json={"id": 501}), 409, "conflict")
            r = await client.post("/v1/customers/501", json={"city": "Lyon", "name": None})
            assert r.status_code == 200 and r.json()["city"] == "Lyon" and r.json()["name"] is None
            assert r.json()["email"] == "Ada@Example.com", "a field not given keeps its value"
            assert (await client.get("/v1/customers/501")).json()["city"] == "Lyon"
            assert_error(await client.get("/v1/customers/502"), 404)
            assert_error(await client.post("/v1/customers/502", json={"city": "x"}), 404)
            found = (await client.get("/v1/customers", params={"email": "ada@example.COM"})).json()
            assert [c["id"] for c in found["data"]] == [501] and found["hasMore"] is False
            # plans and prices
            r = await client.post("/v1/plans", json={"code": "V1_TEAM", "priceAmount": 5000, "currency": "EUR",
                                                     "billingInterval": "MONTH"})
            assert r.status_code == 201, r.text
            assert_error(await client.post("/v1/plans", json={"code": "V1_TEAM", "priceAmount": 1, "currency": "EUR",
                                                              "billingInterval": "MONTH"}), 409)
            assert_error(await client.post("/v1/plans/V1_TEAM/prices",
                                           json={"priceAmount": 6000, "effectiveFrom": "2026-09-01T00:00:00Z"}), 422)
            r = await client.post("/v1/plans/V1_TEAM/prices",
                                  json={"priceAmount": 6000, "effectiveFrom": "2026-11-01T00:00:00Z"})
            assert r.status_code == 200 and r.json()["priceEffectiveFrom"] == "2026-11-01T00:00:00Z", r.text
            assert (await client.get("/v1/plans/V1_TEAM")).json()["currency"] == "EUR"
            assert_error(await client.get("/v1/plans/NOPE"), 404)
            codes = [p["code"] for p in (await client.get("/v1/plans", params={"limit": 100})).json()["data"]]
            assert codes[0] == "V1_TEAM" and set(codes) >= {"PRO_MONTHLY", "BASIC_MONTHLY", "PRO_EUR"}
            # tax rates and coupons
            r = await client.post("/v1/tax-rates", json={"code": "FR_VAT", "country": "FR", "name": "TVA",
                                                         "rateBp": 2000, "inclusive": True})
            assert r.status_code == 200, r.text
            assert [t["code"] for t in (await client.get("/v1/tax-rates")).json()["data"]] == ["FR_VAT"]
            await client.post("/coupons", json={"code": "V1OFF", "percentOff": 10, "duration": "once"})
            assert [c["code"] for c in (await client.get("/v1/coupons")).json()["data"]] == ["V1OFF"]
            # subscriptions through /v1, the lists and their filters
            r = await client.post("/v1/subscriptions", json={"customerId": 501, "planCode": "V1_TEAM"},
                                  headers={"Idempotency-Key": "v1-a"})
            assert r.status_code == 201, r.text
            sub = r.json()["id"]
            assert (await client.get(f"/v1/subscriptions/{sub}")).json()["planCode"] == "V1_TEAM"
            subs = (await client.get("/v1/subscriptions", params={"customer_id": 501})).json()["data"]
            assert [s["id"] for s in subs] == [sub] and subs[0]["object"] == "subscription"
            assert (await client.get("/v1/subscriptions", params={"plan_code": "V1_TEAM", "status": "ACTIVE"})).json()["data"]
            assert not (await client.get("/v1/subscriptions", params={"plan_code": "V1_TEAM", "status": "PAUSED"})).json()["data"]
            # created_at is the creating transaction's real time (docs/sql-api.md), not the simulated clock
            wall = datetime.now(timezone.utc)
            recent = {"created_from": (wall - timedelta(hours=1)).isoformat(), "customer_id": 501}
            assert [s["id"] for s in (await client.get("/v1/subscriptions", params=recent)).json()["data"]] == [sub]
            assert not (await client.get("/v1/subscriptions", params={
                "created_to": "2000-01-01T00:00:00Z"})).json()["data"]
            invoices = (await client.get("/v1/invoices", params={"customer_id": 501})).json()["data"]
            assert len(invoices) == 1 and invoices[0]["subscriptionId"] == sub
            assert (await client.get("/v1/invoices", params={"status": "OPEN", "subscription_id": sub})).json()["data"]
            lines = (await client.get(f"/v1/invoices/{invoices[0]['id']}/lines")).json()
            assert lines["object"] == "list" and lines["data"]
            assert (await client.get("/v1/credit-notes", params={"customer_id": 501})).json()["data"] == []
            assert (await client.get("/v1/refunds", params={"invoice_id": invoices[0]["id"]})).json()["data"] == []
            assert (await client.get("/v1/customers/501/payment-methods")).json()["data"] == []
            # events, by type and by id
            events = (await client.get("/v1/events", params={"customer_id": 501, "limit": 100})).json()["data"]
            assert events and all(e["customerId"] == 501 for e in events)
            kind = events[0]["type"]
            typed = (await client.get("/v1/events", params={"type": kind, "customer_id": 501})).json()["data"]
            assert typed and {e["type"] for e in typed} == {kind}
            one = await client.get(f"/v1/events/{events[0]['id']}")
            assert one.status_code == 200 and one.json()["seq"] == events[0]["seq"]
            assert_error(await client.get("/v1/events/00000000-0000-0000-0000-000000000000"), 404)
            assert_error(await client.get("/v1/events/not-a-uuid"), 404)
            # reports
            mrr = await client.get("/v1/reports/mrr", params={"at": "2026-10-15T00:00:00Z"})
            assert mrr.status_code == 200 and mrr.json()["report"] == "mrr", mrr.text
            for name in ("churn", "revenue"):
                r = await client.get(f"/v1/reports/{name}", params={"from": "2026-09-01", "to": "2026-10-31"})
                assert r.status_code == 200 and r.json()["report"] == name, r.text
            assert_error(await client.get("/v1/reports/revenue", params={"from": "2026-13-01"}), 400)
            # bad queries are 400, never 500
            for q in ({"limit": 0}, {"limit": 101}, {"limit": "x"}, {"starting_after": "-1"},
                      {"starting_after": 5, "ending_before": 9}, {"status": "NOPE"}, {"created_from": "yesterday"}):
                assert_error(await client.get("/v1/subscriptions", params=q), 400)
            # the old paths still answer (deprecated aliases)
            assert (await client.get(f"/subscriptions/{sub}")).status_code == 200

    run(body())


def test_pages_forward_and_back_cover_every_row_once(db_url):
    seed_plans(db_url)
    ids = subscribe(db_url, range(600, 623))

    async def body():
        async with api_client(db_url) as client:
            params = {"plan_code": "BASIC_MONTHLY"}
            forward = await walk(client, "/v1/subscriptions", 5, params)
            flat = [s["id"] for page in forward for s in page]
            assert flat == sorted(ids, reverse=True), "newest first, each row once"
            assert [len(p) for p in forward] == [5, 5, 5, 5, 3]
            # back from the end: the same pages, each in the list's own order (newest first)
            backward = await walk(client, "/v1/subscriptions", 5, params, backward_from=str(min(ids)))
            back = [s["id"] for page in reversed(backward) for s in page]
            assert back == sorted(ids, reverse=True)[:-1]
            assert all([s["id"] for s in page] == sorted((s["id"] for s in page), reverse=True) for page in backward)

    run(body())


def test_a_walk_over_concurrent_inserts_skips_and_repeats_nothing(db_url):
    """Rows inserted while a client pages are newer than its cursor: the forward walk sees each row
    that existed when it started exactly once; a walk back from its first page finds the new ones."""
    seed_plans(db_url)
    before = subscribe(db_url, range(700, 740))

    async def body():
        async with api_client(db_url) as client:
            inserted: list[int] = []

            async def writer():
                for n in range(30):
                    r = await client.post("/v1/subscriptions", json={"customerId": 800 + n, "planCode": "BASIC_MONTHLY"},
                                          headers={"Idempotency-Key": f"conc-{n}"})
                    assert r.status_code == 201, r.text
                    inserted.append(r.json()["id"])
                    await asyncio.sleep(0)

            async def reader():
                seen, cursor, first = [], None, None
                while True:
                    q = {"limit": 3, **({"starting_after": cursor} if cursor else {})}
                    page = (await client.get("/v1/subscriptions", params=q)).json()
                    first = first or page["previousCursor"]
                    seen += [s["id"] for s in page["data"]]
                    await asyncio.sleep(0)
                    if not page["hasMore"]:
                        return seen, first
                    cursor = page["nextCursor"]

            (seen, first), _ = await asyncio.gather(reader(), writer())
            assert len(seen) == len(set(seen)), "a row was repeated"
            assert set(before) <= set(seen), f"rows skipped: {set(before) - set(seen)}"
            assert seen == sorted(seen, reverse=True)
            newer = await walk(client, "/v1/subscriptions", 4, backward_from=first)
            found = {s["id"] for page in newer for s in page}
            assert set(inserted) - set(seen) <= found, "a walk back from the first page finds every newer row"

    run(body())


def test_a_customer_token_lists_its_own_customer_only(db_url):
    seed_plans(db_url)
    subscribe(db_url, range(900, 903))

    async def body():
        server_key = create_test_key(db_url, "customer-sessions:write", "subscriptions:read", name="portal")
        async with api_client(db_url, key=server_key) as client:
            r = await client.post("/customer-sessions", json={"customerId": 901})
            assert r.status_code == 201, r.text
            token = r.json()["token"]
            own = {"Authorization": f"Bearer {token}"}
            subs = (await client.get("/v1/subscriptions", headers=own)).json()["data"]
            assert {s["customerId"] for s in subs} == {901}
            invoices = (await client.get("/v1/invoices", headers=own, params={"limit": 100})).json()["data"]
            assert invoices and {i["customerId"] for i in invoices} == {901}
            assert_error(await client.get("/v1/subscriptions", headers=own, params={"customer_id": 902}), 404)
            assert_error(await client.get("/v1/invoices", headers=own, params={"customer_id": 900}), 404)
            assert_error(await client.get("/v1/customers/902/payment-methods", headers=own), 404)
            assert_error(await client.get("/v1/customers", headers=own), 403)
            assert_error(await client.get("/v1/events", headers=own), 403)
            # the server key itself lacks customers:read and reports:read
            assert_error(await client.get("/v1/customers"), 403)
            assert_error(await client.get("/v1/reports/mrr"), 403)

    run(body())


def test_the_served_document_is_the_committed_one(db_url):
    committed = json.loads((REPO_ROOT / "docs" / "openapi.json").read_text())

    async def body():
        async with api_client(db_url) as client:
            r = await client.get("/openapi.json")
            assert r.status_code == 200
            assert r.json() == committed, "docs/openapi.json is stale: run make openapi"

    run(body())
    assert committed == json.loads(json.dumps(OPENAPI))


def test_the_documented_routes_are_the_served_ones(db_url):
    """Every route the app serves is in the document (and the reverse), the /v1 forms included."""
    from starlette.routing import Mount, Route

    app = create_app(Settings(database_url=db_url))
    served = {(m.lower(), r.path) for r in app.routes if isinstance(r, Route) and not isinstance(r, Mount)
              for m in (r.methods or ()) if m != "HEAD"}
    documented = {(m, p) for p, item in OPENAPI["paths"].items() for m in item}
    assert served == documented, {"served, not documented": served - documented,
                                  "documented, not served": documented - served}


def test_external_ids_work_wherever_our_ids_do(db_url):
    seed_plans(db_url)

    async def body():
        async with api_client(db_url, clock=SimulatedClock(T0)) as client:
            r = await client.post("/v1/customers", json={"id": 61, "externalId": "cus_ext_61", "email": "e@x.com"})
            assert r.status_code == 201 and r.json()["externalId"] == "cus_ext_61", r.text
            assert_error(await client.post("/v1/customers", json={"id": 62, "externalId": "cus_ext_61"}), 409)
            assert (await client.get("/v1/customers/cus_ext_61")).json()["id"] == 61
            assert (await client.post("/v1/customers/cus_ext_61", json={"city": "Oslo"})).json()["city"] == "Oslo"
            listed = (await client.get("/v1/customers", params={"external_id": "cus_ext_61"})).json()["data"]
            assert [c["id"] for c in listed] == [61]
            assert (await client.get("/v1/customers", params={"external_id": "cus_nobody"})).json()["data"] == []
            assert_error(await client.get("/v1/customers/cus_nobody"), 404)
            assert_error(await client.get("/v1/customers/%20padded%20"), 404)
            r = await client.post("/v1/plans", json={"code": "EXT_PLAN", "priceAmount": 700, "currency": "USD",
                                                     "billingInterval": "MONTH", "externalId": "price_ext_1"})
            assert r.status_code == 201 and r.json()["externalId"] == "price_ext_1", r.text
            assert (await client.get("/v1/plans/price_ext_1")).json()["code"] == "EXT_PLAN"
            r = await client.post("/v1/subscriptions", json={"customerId": 61, "planCode": "EXT_PLAN",
                                                             "externalId": "sub_ext_1"}, headers={"Idempotency-Key": "e1"})
            assert r.status_code == 201 and r.json()["externalId"] == "sub_ext_1", r.text
            sub = r.json()["id"]
            assert (await client.get("/v1/subscriptions/sub_ext_1")).json()["id"] == sub
            assert [s["id"] for s in (await client.get("/v1/subscriptions", params={"external_id": "sub_ext_1"})).json()[
                "data"]] == [sub]
            r = await client.post("/v1/subscriptions/sub_ext_1/cancel", json={"atPeriodEnd": True})
            assert r.status_code == 200 and r.json()["cancelAtPeriodEnd"] is True, r.text
            assert_error(await client.post("/v1/subscriptions/sub_nobody/cancel", json={"atPeriodEnd": True}), 404)
            # the unprefixed (deprecated) paths keep our ids only
            assert_error(await client.get("/subscriptions/sub_ext_1"), 400)

    run(body())


def test_archiving_the_catalog_and_a_customer_s_payment_method(db_url):
    seed_plans(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_coupon('V1_OFF', 10, NULL, NULL, 'once')")
        conn.execute("SELECT billing.upsert_customer(601)")
        conn.execute("SELECT billing.upsert_customer(602)")
        method = conn.execute("SELECT id FROM billing.set_payment_method(601, 'sim', NULL, 'pm_1', 'visa', '4242', 12, 2030, %s)",
                              (T0,)).fetchone()

    async def body():
        async with api_client(db_url, clock=SimulatedClock(T0)) as client:
            r = await client.post("/v1/plans/PRO_EUR/archive", json={})
            assert r.status_code == 200 and r.json()["archivedAt"] == "2026-10-01T12:00:00Z", r.text
            again = await client.post("/v1/plans/PRO_EUR/archive", json={})  # again: the same answer
            assert again.status_code == 200 and again.json() == r.json()
            assert_error(await client.post("/v1/plans/NO_SUCH/archive", json={}), 404, "not_found")
            codes = lambda r: [p["code"] for p in r.json()["data"]]  # noqa: E731
            assert codes(await client.get("/v1/plans", params={"archived": "true"})) == ["PRO_EUR"]
            assert "PRO_EUR" not in codes(await client.get("/v1/plans", params={"archived": "false"}))
            assert_error(await client.get("/v1/plans", params={"archived": "maybe"}), 400, "invalid_query")
            r = await client.post("/v1/subscriptions", json={"customerId": 602, "planCode": "PRO_EUR"},
                                  headers={"Idempotency-Key": "v1-archived"})
            assert r.status_code == 422, r.text
            r = await client.post("/v1/coupons/V1_OFF/archive", json={})
            assert r.status_code == 200 and r.json()["archivedAt"] is not None, r.text
            assert codes(await client.get("/v1/coupons", params={"archived": "true"})) == ["V1_OFF"]
            assert_error(await client.post("/v1/coupons/bad%20code/archive", json={}), 404, "not_found")
            r = await client.post("/v1/subscriptions", json={"customerId": 602, "planCode": "BASIC_MONTHLY",
                                                             "couponCode": "V1_OFF"}, headers={"Idempotency-Key": "v1-cp"})
            assert r.status_code == 422, r.text
            # one payment method of a customer; another customer's or an unknown id: 404
            r = await client.get(f"/v1/customers/601/payment-methods/{method[0]}")
            assert r.status_code == 200 and r.json()["paymentMethodRef"] == "pm_1", r.text
            assert_error(await client.get(f"/v1/customers/602/payment-methods/{method[0]}"), 404, "not_found")
            assert_error(await client.get("/v1/customers/601/payment-methods/abc"), 404, "not_found")

    run(body())


def test_signups_in_bulk(db_url):
    seed_plans(db_url)
    signups = [{"idempotencyKey": f"bulk-{i}", "customerId": 700 + i, "planCode": "BASIC_MONTHLY", "quantity": 1 + i % 3}
               for i in range(5)] + [{"idempotencyKey": "bulk-trial", "customerId": 710, "planCode": "PRO_MONTHLY",
                                      "trialDays": 14, "externalId": "sub_bulk"}]

    async def body():
        async with api_client(db_url, clock=SimulatedClock(T0)) as client:
            r = await client.post("/v1/subscriptions/batch", json={"signups": signups})
            assert r.status_code == 200, r.text
            rows = r.json()["data"]
            assert [x["outcome"] for x in rows] == ["created"] * 6
            assert [x["idempotencyKey"] for x in rows] == [s["idempotencyKey"] for s in signups]
            ids = [x["subscriptionId"] for x in rows]
            r = await client.get(f"/v1/subscriptions/{ids[-1]}")
            assert r.json()["status"] == "TRIALING" and r.json()["externalId"] == "sub_bulk"
            # the same batch again: every row replayed, nothing new
            r = await client.post("/v1/subscriptions/batch", json={"signups": signups})
            assert [x["outcome"] for x in r.json()["data"]] == ["replayed"] * 6
            assert [x["subscriptionId"] for x in r.json()["data"]] == ids
            # a key of the per-call route is the same key here (both scoped to the API key)
            r = await client.post("/v1/subscriptions", json={"customerId": 700, "planCode": "BASIC_MONTHLY", "quantity": 1},
                                  headers={"Idempotency-Key": "bulk-0"})
            assert r.status_code == 200 and r.json()["id"] == ids[0], r.text
            # a key used for other parameters: 409, nothing of the batch made
            r = await client.post("/v1/subscriptions/batch", json={"signups": [
                {"idempotencyKey": "bulk-new", "customerId": 720, "planCode": "BASIC_MONTHLY"},
                {"idempotencyKey": "bulk-1", "customerId": 701, "planCode": "PRO_MONTHLY"}]})
            assert r.status_code == 409, r.text
            assert_error(await client.post("/v1/subscriptions/batch", json={"signups": [
                {"idempotencyKey": "x", "customerId": 0, "planCode": "BASIC_MONTHLY"}]}), 422, "invalid_input")
            assert (await client.post("/v1/subscriptions/batch", json={"signups": []})).status_code == 400
            assert (await client.post("/v1/subscriptions/batch", json={"signups": [{"customerId": 1}]})).status_code == 400
            assert (await client.post("/v1/subscriptions/batch", json={"rows": []})).status_code == 400
        # another API key's same keys are its own: new subscriptions
        async with api_client(db_url, clock=SimulatedClock(T0), key=create_test_key(db_url, "subscriptions:write")) as client:
            r = await client.post("/v1/subscriptions/batch", json={"signups": signups[:1]})
            assert r.status_code == 200 and r.json()["data"][0]["outcome"] == "created"
            assert r.json()["data"][0]["subscriptionId"] not in ids

    run(body())
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM billing.subscription WHERE customer_id = 720").fetchone()[0] == 0
        events = conn.execute("SELECT event_type, count(*) FROM billing.outbox_event WHERE customer_id BETWEEN 700 AND 710 "
                              "GROUP BY 1 ORDER BY 1").fetchall()
    assert events == [("InvoiceCreated", 6), ("SubscriptionCreated", 7)]  # the second key's signup too
