"""Migration 0100 (the service ledger, issue 26): a database made by the engine before the ledger, with
invoices of every kind (renewals, upgrades and downgrades, interval changes, seats, coupons, taxes
exclusive and inclusive, trials, pauses, cancellations, declines, refunds), is migrated to today's
engine: every invoice keeps its figures, and gets lines that reproduce them exactly."""

from __future__ import annotations

import io
import subprocess
import tarfile
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from billing.config import REPO_ROOT
from billing.migrate import migrate

from .conftest import url_for_db

BASE = "f7c5828"  # main before the service ledger: its migrations and functions made the old invoices
T0 = datetime(2027, 1, 31, 9, 0, tzinfo=timezone.utc)
PLANS = [("LM_BASIC", 1000, "USD", "MONTH"), ("LM_PRO", 3000, "USD", "MONTH"), ("LM_YEAR", 10000, "USD", "YEAR"),
         ("LM_WEEK", 300, "USD", "WEEK"), ("LM_EUR", 2000, "EUR", "MONTH")]
COUPONS = [("LM_HALF", 50, None, None, "repeating", 2), ("LM_TEN", 10, None, None, "forever", None),
           ("LM_FIVE", None, 500, "USD", "once", None)]


@pytest.fixture
def old_database(pg_server_url, tmp_path):
    """A database migrated by the engine at BASE (its db/ directory from git)."""
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", BASE, "db"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tmp_path, filter="data")
    name = f"ledger_mig_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = url_for_db(pg_server_url, name)
    migrate(url, tmp_path / "db", simulation=True)
    yield url
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _business(conn) -> None:
    """Three months of a small business on the old engine, through its SQL API."""
    q = conn.execute

    def attempt(query, params):
        """A call the API may refuse (BLxxx: another currency, a canceled subscription): refused, nothing kept."""
        conn.execute("SAVEPOINT a")
        try:
            q(query, params)
        except psycopg.Error as exc:
            assert exc.sqlstate and exc.sqlstate.startswith("BL"), exc
            conn.execute("ROLLBACK TO SAVEPOINT a")

    for code, price, currency, interval in PLANS:
        q("SELECT billing.upsert_plan(%s, %s, %s, %s, 1, %s)", (code, price, currency, interval, T0 - timedelta(days=30)))
    for code, percent, amount, currency, duration, periods in COUPONS:
        q("SELECT billing.upsert_coupon(%s, %s, %s, %s, %s, %s)", (code, percent, amount, currency, duration, periods))
    q("SELECT billing.upsert_tax_rate('LM_XE', 'XE', NULL, 'VAT 20%%', 2000, false)")
    q("SELECT billing.upsert_tax_rate('LM_XI', 'XI', NULL, 'VAT 10%%', 1000, true)")
    subs = []
    for i in range(1, 121):
        customer = 7000 + i
        q("SELECT billing.upsert_customer(%s)", (customer,))
        if i % 3:
            q("SELECT billing.set_customer_details(%s, %s, %s, '1 Road', 'Town', '1000', NULL, %s, NULL)",
              (customer, f"C{i}", f"c{i}@example.org", "XE" if i % 3 == 1 else "XI"))
        plan = PLANS[i % len(PLANS)][0]
        coupon = None if i % 4 else COUPONS[(i // 4) % len(COUPONS)][0]
        if plan == "LM_EUR" and coupon == "LM_FIVE":
            coupon = None
        at = T0 + timedelta(hours=i)
        row = q("SELECT id FROM billing.create_subscription(%s, %s, %s, %s, %s, %s, %s)",
                (f"lm-{i}", customer, plan, at, 3 if i % 10 == 0 else 0, coupon, 1 + i % 3)).fetchone()
        subs.append((i, row["id"], at))

    def charge(now, decline_every):
        for n, c in enumerate(q("SELECT * FROM billing.claim_charges('lm', 1000, interval '5 minutes', %s)", (now,)).fetchall()):
            outcome = "DECLINED" if n % decline_every == 0 else "SUCCEEDED"
            q("SELECT billing.record_payment_result(%s, %s, %s, 'card_declined', %s)",
              (c["idempotency_key"], outcome, "ch_" + c["idempotency_key"], now))

    now = T0 + timedelta(days=6)
    charge(now, 9)
    for i, sub, _ in subs:  # changes in the first period
        if i % 5 == 0:
            attempt("SELECT billing.change_plan(%s, %s, %s)", (sub, "LM_PRO" if i % 2 else "LM_BASIC", now + timedelta(days=3)))
        elif i % 7 == 0:
            attempt("SELECT billing.set_quantity(%s, %s, %s)", (sub, 5 if i % 2 else 1, now + timedelta(days=4)))
        elif i % 11 == 0:
            attempt("SELECT billing.change_plan(%s, 'LM_YEAR', %s)", (sub, now + timedelta(days=5)))
    charge(now + timedelta(days=6), 5)
    for day in range(30, 100, 15):
        now = T0 + timedelta(days=day)
        while q("SELECT billing.create_due_invoices(500, %s) AS n", (now,)).fetchone()["n"]:
            pass
        charge(now, 7)
        for i, sub, _ in subs:
            if i % 13 == day % 13:
                attempt("SELECT billing.pause_subscription(%s, %s, %s)", (sub, now + timedelta(days=10), now + timedelta(hours=1)))
            elif i % 17 == day % 17:
                attempt("SELECT billing.cancel_subscription(%s, %s, %s)", (sub, bool(i % 2), now + timedelta(hours=2)))
        paid = q("SELECT i.id, i.amount FROM billing.invoice i WHERE i.status = 'PAID' AND i.paid_attempt_id IS NOT NULL "
                 "AND i.amount > 0 ORDER BY i.id").fetchall()
        for r in paid[::19]:
            attempt("SELECT billing.refund_invoice(%s, %s, NULL, %s)", (r["id"], max(1, r["amount"] // 2), now))


FIGURES = ("SELECT id, kind, status, subtotal, discount_amount, tax_amount, tax_included, credit_applied, amount, "
           "plan_id, quantity, period_start, period_end FROM billing.invoice ORDER BY id")


def test_old_invoices_get_lines_reproducing_their_amounts(old_database):
    with psycopg.connect(old_database, row_factory=dict_row) as conn:
        _business(conn)
        before = conn.execute(FIGURES).fetchall()
    kinds = {r["kind"] for r in before}
    assert kinds == {"INITIAL", "RENEWAL", "PRORATION", "PLAN_CHANGE"}, kinds
    assert any(r["discount_amount"] for r in before) and any(r["tax_amount"] for r in before) \
        and any(r["tax_included"] for r in before) and len({r["status"] for r in before}) >= 3

    result = migrate(old_database, REPO_ROOT / "db", simulation=True)
    assert "0100_service_line.sql" in result.applied

    with psycopg.connect(old_database, row_factory=dict_row) as conn:
        after = conn.execute(FIGURES).fetchall()
        assert after == before, "the migration changed an invoice"
        lines = conn.execute("""
            SELECT i.id, count(l.id) AS n, sum(l.net) AS net, sum(l.gross) AS gross, sum(l.discount) AS discount,
                   sum(l.tax) AS tax, bool_and(l.kind = 'CHARGE') AS charges,
                   bool_and(l.span_start = i.period_start AND l.span_end = i.period_end) AS spans,
                   bool_and(l.plan_id = i.plan_id AND l.quantity = i.quantity AND l.unit_price = i.plan_price) AS terms,
                   bool_and(l.tax_inclusive = (i.tax_included > 0)) AS inclusive
              FROM billing.invoice i LEFT JOIN billing.service_line l ON l.customer_id = i.customer_id AND l.invoice_id = i.id
             GROUP BY i.id ORDER BY i.id""").fetchall()
    wrong = [r for r, b in zip(lines, before)
             if (r["n"], r["net"], r["gross"], r["discount"], r["tax"], r["charges"], r["spans"], r["terms"], r["inclusive"])
             != (1, b["subtotal"], b["subtotal"] + b["discount_amount"], b["discount_amount"],
                 b["tax_amount"] + b["tax_included"], True, True, True, True)]
    assert not wrong, f"{len(wrong)} of {len(before)} invoices not reproduced by their lines: {wrong[:3]}"
    assert len(before) > 300
