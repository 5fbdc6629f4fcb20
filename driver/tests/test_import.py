"""Bulk import (docs/import.md): `billing import stripe` against stripe-mock and `billing import csv`
on the sample files, each run twice (nothing duplicated), then renewal runs showing that the first
period billed here starts where the source's ended.

stripe-mock validates every request against Stripe's OpenAPI description but answers one canned
object per list, with periods that are not periods (end before start). So, as driver/tests/
stripe_fake.py does for charges, a thin account sits in front of it: every request goes to
stripe-mock first (a request it refuses fails the test), and its answer, if accepted, is replaced by
a page of an account built from stripe-mock's own objects with coherent periods (250 customers and
subscriptions: three pages of 100, so the import's pagination is exercised).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg
import pytest

from billing.config import REPO_ROOT

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)
SAMPLES = REPO_ROOT / "docs" / "import"


def _ts(at: datetime) -> int:
    return int(at.timestamp())


def _mock_get(base: str, path: str) -> dict:
    request = urllib.request.Request(base + path, headers={"Authorization": "Bearer sk_test_123"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


class Account:
    """A Stripe account of `n` customers, each with one subscription, built from stripe-mock's objects."""

    def __init__(self, mock: str, n: int = 250):
        customer = _mock_get(mock, "/v1/customers?expand[]=data.invoice_settings.default_payment_method")["data"][0]
        price = _mock_get(mock, "/v1/prices")["data"][0]
        coupon = _mock_get(mock, "/v1/coupons")["data"][0]
        sub = _mock_get(mock, "/v1/subscriptions")["data"][0]
        monthly = dict(price, id="price_monthly", unit_amount=2000, currency="usd", lookup_key=None, type="recurring",
                       billing_scheme="per_unit", recurring=dict(price["recurring"], interval="month", interval_count=1,
                                                                 usage_type="licensed"))
        metered = dict(monthly, id="price_metered", recurring=dict(monthly["recurring"], usage_type="metered"))
        self.prices = [monthly, metered]
        self.coupons = [dict(coupon, id="QUARTER_OFF", percent_off=25, amount_off=None, duration="repeating",
                             duration_in_months=3, redeem_by=None, max_redemptions=None)]
        self.customers, self.subscriptions = [], []
        # The expectations: for each imported subscription, where its first period here starts.
        self.first_period: dict[str, datetime] = {}
        self.refused: set[str] = set()
        for i in range(n):
            cid = f"cus_{i:04d}"
            pm = copy.deepcopy(customer["invoice_settings"]["default_payment_method"])
            pm["id"] = f"pm_{i:04d}"
            self.customers.append(dict(customer, id=cid, email=f"c{i}@example.com", name=f"Customer {i}",
                                       invoice_settings=dict(customer["invoice_settings"], default_payment_method=pm)))
            end = NOW + timedelta(days=1 + i % 27, hours=i % 5)
            start = end - timedelta(days=30)
            item = copy.deepcopy(sub["items"]["data"][0])
            item.update(price=monthly, quantity=1 + i % 3, current_period_start=_ts(start), current_period_end=_ts(end))
            s = dict(sub, id=f"sub_{i:04d}", customer=cid, status="active", cancel_at_period_end=False,
                     pause_collection=None, collection_method="charge_automatically", discounts=[], discount=None,
                     trial_start=None, trial_end=None, items=dict(sub["items"], data=[item]))
            if i % 10 == 3:  # a trial: billed from its end
                s.update(status="trialing", trial_start=_ts(NOW - timedelta(days=2)), trial_end=_ts(end))
            if i % 10 == 5:  # a coupon until two months after the period
                s["discounts"] = [{"id": f"di_{i}", "object": "discount", "coupon": self.coupons[0],
                                   "end": _ts(end + timedelta(days=61)), "start": _ts(start)}]
            if i == 7:
                s["status"] = "past_due"
            if i == 8:
                s["items"] = dict(s["items"], data=[item, dict(item, id="si_other")])
            if i == 9:
                s["status"] = "canceled"  # over: skipped, not refused
            if i in (7, 8):
                self.refused.add(s["id"])
            elif i != 9:
                self.first_period[s["id"]] = end
            self.subscriptions.append(s)
        self.lists = {"/v1/prices": self.prices, "/v1/coupons": self.coupons, "/v1/customers": self.customers,
                      "/v1/subscriptions": self.subscriptions}


@pytest.fixture
def stripe_account(stripe_mock_url):
    """(the account's API base, the account, the requests stripe-mock refused)."""
    account = Account(stripe_mock_url)
    refused: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            # stripe-mock judges the request first (its shape, parameters, authentication).
            request = urllib.request.Request(stripe_mock_url + self.path,
                                             headers={"Authorization": self.headers.get("Authorization", "")})
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    answer.read()
            except urllib.error.HTTPError as exc:
                refused.append(f"{self.path}: {exc.code} {exc.read()[:300]!r}")
                self.send_response(exc.code)
                self.end_headers()
                return
            url = urllib.parse.urlsplit(self.path)
            params = urllib.parse.parse_qs(url.query)
            objects = account.lists[url.path]
            after = params.get("starting_after", [None])[0]
            start = 0 if after is None else [o["id"] for o in objects].index(after) + 1
            limit = int(params.get("limit", ["10"])[0])
            page = objects[start:start + limit]
            body = json.dumps({"object": "list", "url": url.path, "data": page,
                               "has_more": start + limit < len(objects)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", account, refused
    server.shutdown()
    server.server_close()


def _billing(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "billing.cli", "--log-level", "WARNING", *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def _counts(conn) -> dict:
    return {t: conn.execute(f"SELECT count(*) FROM billing.{t}").fetchone()[0]  # noqa: S608 (fixed names)
            for t in ("customer", "subscription", "external_ref", "payment_method", "outbox_event", "invoice", "plan")}


def _renew_all(conn, until: datetime) -> None:
    """The renewal job, day by day until `until` (one period per call per subscription)."""
    at = NOW
    while at <= until:
        while conn.execute("SELECT billing.create_due_invoices(1000, %s)", (at,)).fetchone()[0]:
            pass
        at += timedelta(hours=6)


def test_stripe_import_twice_then_renewals_start_where_stripe_stopped(db_url, stripe_account):
    base, account, refused = stripe_account
    env = {"BILLING_STRIPE_API_KEY": "sk_test_123", "BILLING_STRIPE_API_BASE": base}
    common = ["--database-url", db_url, "--now", NOW.strftime("%Y-%m-%dT%H:%M:%S%z"), "--batch", "100"]

    dry = _billing("import", "stripe", "--dry-run", *common, env=env)
    assert dry.returncode == 2, dry.stderr
    assert "sub_0007: status past_due" in dry.stdout and "sub_0008: 2 items" in dry.stdout, dry.stdout
    assert "price_metered: a metered price" in dry.stdout
    assert "247 would be created" in dry.stdout, dry.stdout  # 250 less past due, two items, canceled
    with psycopg.connect(db_url) as conn:
        assert _counts(conn)["customer"] == 0, "a dry run writes nothing"

    first = _billing("import", "stripe", *common, env=env)
    assert first.returncode == 2, first.stderr  # two subscriptions and a metered price reported
    assert "247 created" in first.stdout and "250 created" in first.stdout and "250 set" in first.stdout, first.stdout
    with psycopg.connect(db_url) as conn:
        after_first = _counts(conn)
    second = _billing("import", "stripe", *common, env=env)
    assert "247 exists" in second.stdout and "250 exists" in second.stdout, second.stdout
    assert refused == [], f"stripe-mock refused requests: {refused}"
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert _counts(conn) == after_first, "the second run imported nothing again"
        assert after_first["subscription"] == 247 and after_first["payment_method"] == 250
        subs = {r[0]: r[1:] for r in conn.execute(
            "SELECT external_id, id, customer_id, status, quantity, coupon_code FROM billing.subscription")}
        assert set(subs) == set(account.first_period)
        assert conn.execute("SELECT count(*) FROM billing.invoice").fetchone()[0] == 0, "nothing billed at import"

        _renew_all(conn, NOW + timedelta(days=29))
        firsts = dict(conn.execute(
            "SELECT s.external_id, min(i.period_start) FROM billing.invoice i "
            "JOIN billing.subscription s ON s.customer_id = i.customer_id AND s.id = i.subscription_id "
            "GROUP BY s.external_id").fetchall())
        assert firsts == account.first_period, "every first period billed here starts where Stripe's ended"
        ends = dict(conn.execute(
            "SELECT s.external_id, min(i.period_end) FROM billing.invoice i "
            "JOIN billing.subscription s ON s.customer_id = i.customer_id AND s.id = i.subscription_id "
            "GROUP BY s.external_id").fetchall())
        month_later = {k: v.replace(year=v.year + v.month // 12, month=v.month % 12 + 1) for k, v in firsts.items()}
        assert ends == month_later, "and lasts one whole month of the plan (the calendar continues Stripe's)"
        # Consecutive periods: none skipped, none billed twice.
        gaps = conn.execute(
            "SELECT count(*) FROM (SELECT period_start, lag(period_end) OVER (PARTITION BY subscription_id "
            "ORDER BY period_start) AS prev FROM billing.invoice) x WHERE prev IS NOT NULL AND prev <> period_start"
        ).fetchone()[0]
        assert gaps == 0
        # The coupon discounts the periods here until the end Stripe gave it, and not after.
        discounted = conn.execute(
            "SELECT count(*) FILTER (WHERE i.discount_amount > 0), count(*) FROM billing.invoice i "
            "JOIN billing.subscription s ON s.customer_id = i.customer_id AND s.id = i.subscription_id "
            "WHERE s.external_id LIKE 'sub_%5'").fetchone()
        assert discounted[0] == discounted[1] > 0
        seats = conn.execute(
            "SELECT bool_and(i.quantity = s.quantity) FROM billing.invoice i "
            "JOIN billing.subscription s ON s.customer_id = i.customer_id AND s.id = i.subscription_id").fetchone()[0]
        assert seats


def test_csv_sample_import_twice_then_renewals(db_url):
    files = ["--plans", str(SAMPLES / "plans.csv"), "--customers", str(SAMPLES / "customers.csv"),
             "--subscriptions", str(SAMPLES / "subscriptions.csv")]
    common = ["--database-url", db_url, "--now", NOW.strftime("%Y-%m-%dT%H:%M:%S%z")]
    first = _billing("import", "csv", *files, *common)
    assert first.returncode == 2, first.stderr  # the sample's past due subscription is reported
    assert "sub_late: status 'PAST_DUE' cannot be imported" in first.stdout
    assert "3 created" in first.stdout, first.stdout
    with psycopg.connect(db_url, autocommit=True) as conn:
        after_first = _counts(conn)
        second = _billing("import", "csv", *files, *common)
        assert "3 exists" in second.stdout, second.stdout
        assert _counts(conn) == after_first, "the second run imported nothing again"
        _renew_all(conn, datetime(2027, 3, 2, tzinfo=timezone.utc))
        rows = conn.execute(
            "SELECT s.external_id, i.kind, i.period_start, i.period_end, i.subtotal FROM billing.invoice i "
            "JOIN billing.subscription s ON s.customer_id = i.customer_id AND s.id = i.subscription_id "
            "ORDER BY 1, 3 LIMIT 4").fetchall()
        utc = timezone.utc
        assert rows[:2] == [
            ("sub_ada", "RENEWAL", datetime(2026, 12, 20, tzinfo=utc), datetime(2027, 1, 20, tzinfo=utc), 4500),
            ("sub_ada", "RENEWAL", datetime(2027, 1, 20, tzinfo=utc), datetime(2027, 2, 20, tzinfo=utc), 4500)]
        alan = conn.execute(
            "SELECT i.kind, i.period_start FROM billing.invoice i JOIN billing.subscription s "
            "ON s.customer_id = i.customer_id AND s.id = i.subscription_id WHERE s.external_id = 'sub_alan' "
            "ORDER BY 2 LIMIT 1").fetchone()
        assert alan == ("INITIAL", datetime(2026, 12, 15, tzinfo=utc)), "the trial is billed from its end"
        grace = conn.execute("SELECT status, cancel_reason FROM billing.subscription WHERE external_id = 'sub_grace'").fetchone()
        assert grace == ("CANCELED", "PERIOD_END")
        assert conn.execute("SELECT count(*) FROM billing.invoice i JOIN billing.subscription s ON s.customer_id = "
                            "i.customer_id AND s.id = i.subscription_id WHERE s.external_id = 'sub_grace'").fetchone()[0] == 0
