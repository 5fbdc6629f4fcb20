"""Invoices as documents (docs/invoices.md) and the board reports (docs/reports.md), against a real
PostgreSQL: gapless numbering under concurrent finalizations and forced rollbacks; taxes per line
(inclusive, exclusive, several rates, rounding) against a Python oracle, on both invoice paths (the
per-row signup and the set-based renewal statement); the JSON, HTML and PDF documents over HTTP
(the PDF read back with Debian's pdftotext); each report against a Python oracle on generated
histories (a property test)."""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
import threading
from collections import defaultdict
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from psycopg.rows import dict_row

from billing.invoices.money import format_amount

from .conftest import create_test_key
from .test_api import api_client

pytestmark = pytest.mark.timeout(300)

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


def connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, row_factory=dict_row)


# -- gapless numbering ---------------------------------------------------------------------------

def test_numbers_are_gapless_under_concurrent_finalizations_and_rollbacks(db_url):
    with connect(db_url) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO', 1000, 'EUR', 'MONTH', 1)")
        for c in range(1, 121):
            conn.execute("SELECT billing.create_subscription(%s, %s, 'PRO', %s)", (f"k{c}", c, T0))
    errors: list[BaseException] = []
    rolled_back = [0]

    def finalizer(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            with psycopg.connect(db_url) as conn:  # transactions of our own
                for _ in range(25):
                    one = rnd.random() < 0.4
                    with conn.cursor() as cur:
                        if one:
                            cur.execute("SELECT id FROM billing.invoice WHERE number IS NULL ORDER BY random() LIMIT 1")
                            row = cur.fetchone()
                            if row:
                                cur.execute("SELECT billing.finalize_invoice(%s, %s)", (row[0], T0 + timedelta(hours=1)))
                        else:
                            cur.execute("SELECT billing.finalize_invoices(%s, %s)", (rnd.randint(1, 7), T0 + timedelta(hours=1)))
                    if rnd.random() < 0.3:
                        conn.rollback()  # forced: the numbers taken go back
                        rolled_back[0] += 1
                    else:
                        conn.commit()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=finalizer, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with connect(db_url) as conn:
        conn.execute("SELECT billing.finalize_invoices(1000, %s)", (T0 + timedelta(hours=2),))
        numbers = [r["number"] for r in conn.execute("SELECT number FROM billing.invoice ORDER BY number")]
        series = conn.execute("SELECT next_number FROM billing.document_series WHERE series = '2026'").fetchone()
        lines = conn.execute("SELECT count(DISTINCT invoice_id) AS n FROM billing.invoice_line").fetchone()["n"]
    assert rolled_back[0] > 0
    assert numbers == [f"2026-{n:06d}" for n in range(1, 121)], numbers[:5]
    assert series["next_number"] == 121
    assert lines == 120


# -- taxes against an oracle ----------------------------------------------------------------------

def half_up(x: Fraction) -> int:
    return int((x + Fraction(1, 2)) // 1)


def tax_oracle(base: int, rates: list[tuple[int, bool]]) -> tuple[int, int, list[int]]:
    """(exclusive tax, inclusive tax, the line of each rate): each line rounded half up on its own."""
    total_bp = sum(bp for bp, _ in rates)
    lines = [half_up(Fraction(base * bp, (10000 + total_bp) if incl else 10000)) for bp, incl in rates]
    excl = sum(a for a, (_, incl) in zip(lines, rates) if not incl)
    incl = sum(a for a, (_, i) in zip(lines, rates) if i)
    return excl, incl, lines


rate_sets = st.tuples(
    st.booleans(),
    st.lists(st.tuples(st.integers(0, 5000), st.sampled_from([None, "R1", "R2"])), min_size=0, max_size=4))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(price=st.integers(0, 5_000_000), quantity=st.integers(1, 40), rates=rate_sets,
       status=st.sampled_from(["TAXABLE", "TAXABLE", "TAXABLE", "EXEMPT", "REVERSE_CHARGE"]))
def test_tax_lines_match_the_oracle_on_signup_and_renewal(db_url, price, quantity, rates, status):
    inclusive, specs = rates
    with connect(db_url) as conn, conn.transaction(force_rollback=True):
        conn.execute("SELECT billing.upsert_plan('TAXED', %s, 'EUR', 'MONTH', 1)", (price,))
        for i, (bp, region) in enumerate(specs):
            conn.execute("SELECT billing.upsert_tax_rate(%s, 'XA', %s, %s, %s, %s)", (f"R{i}", region, f"Tax{i}", bp, inclusive))
        conn.execute("SELECT billing.upsert_tax_rate('OTHER', 'XB', NULL, 'Elsewhere', 1500, false)")
        conn.execute("SELECT billing.set_customer_details(1, 'C', NULL, NULL, NULL, NULL, 'R1', 'XA', 'XA1', %s)", (status,))
        conn.execute("SELECT billing.create_subscription('t', 1, 'TAXED', %s, 0, NULL, %s)", (T0, quantity))
        conn.execute("SELECT billing.create_due_invoices(100, %s)", (T0 + timedelta(days=31),))
        conn.execute("SELECT billing.finalize_invoices(100, %s)", (T0 + timedelta(days=31),))
        invoices = conn.execute("SELECT * FROM billing.invoice ORDER BY id").fetchall()
        assert [i["kind"] for i in invoices] == ["INITIAL", "RENEWAL"]
        applicable = [(bp, inclusive) for bp, region in specs if region in (None, "R1")] if status == "TAXABLE" else []
        excl, incl, lines = tax_oracle(price * quantity, applicable)
        for inv in invoices:
            assert (inv["subtotal"], inv["tax_amount"], inv["tax_included"], inv["amount"]) == \
                (price * quantity, excl, incl, price * quantity + excl), inv["kind"]
            got = conn.execute("SELECT kind, amount, tax_rate_bp, tax_inclusive FROM billing.invoice_line "
                               "WHERE invoice_id = %s ORDER BY line_no", (inv["id"],)).fetchall()
            taxes = [r for r in got if r["kind"] == "TAX"]
            if applicable:
                # one line per rate, country-wide first, then by code (the oracle's order sorted the same way)
                assert sorted(r["amount"] for r in taxes) == sorted(lines)
            else:
                assert [(r["amount"], r["tax_rate_bp"]) for r in taxes] == [(0, 0)]
            totals = conn.execute("SELECT * FROM billing._invoice_totals(ARRAY[%s]::bigint[])", (inv["id"],)).fetchone()
            assert (totals["subtotal"], totals["tax_amount"], totals["tax_included"], totals["amount_due"]) == \
                (inv["subtotal"], inv["tax_amount"], inv["tax_included"], inv["amount"])


# -- the documents over HTTP --------------------------------------------------------------------

def test_invoice_document_json_html_and_pdf(db_url):
    assert shutil.which("pdftotext"), "pdftotext is missing: `make poppler` installs Debian's poppler-utils (make test does)"
    with connect(db_url) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO', 2999, 'EUR', 'MONTH', 1)")
        conn.execute("SELECT billing.upsert_plan('YEN', 12000, 'JPY', 'YEAR', 1)")
        conn.execute("SELECT billing.upsert_tax_rate('DE_VAT', 'DE', NULL, 'VAT', 1900, false)")
        conn.execute("SELECT billing.set_customer_details(7, 'Zoë Łukasiewicz GmbH', 'billing@zoe.example', "
                     "'Hauptstraße 5', 'Berlin', '10115', NULL, 'DE', 'DE123456789', 'TAXABLE')")
        conn.execute("SELECT billing.create_subscription('doc', 7, 'PRO', %s, 0, NULL, 3)", (T0,))
        conn.execute("SELECT billing.create_subscription('yen', 8, 'YEN', %s)", (T0,))
        conn.execute("SELECT billing.finalize_invoices(100, %s)", (T0 + timedelta(minutes=5),))
        eur = conn.execute("SELECT * FROM billing.invoice WHERE customer_id = 7").fetchone()
        yen = conn.execute("SELECT * FROM billing.invoice WHERE customer_id = 8").fetchone()
    reader = create_test_key(db_url, "subscriptions:read", "customers:read")  # the bill-to: customers:read (money10)
    refunder = create_test_key(db_url, "refunds:write")

    async def scenario():
        async with api_client(db_url, key=reader) as client:
            doc = (await client.get(f"/invoices/{eur['id']}")).json()
            html = await client.get(f"/invoices/{eur['id']}.html")
            pdf = await client.get(f"/invoices/{eur['id']}.pdf")
            yen_pdf = await client.get(f"/invoices/{yen['id']}.pdf")
            missing = await client.get("/invoices/999999.pdf")
            bad = await client.get(f"/invoices/{eur['id']}.docx")
            anonymous = await client.get(f"/invoices/{eur['id']}.pdf", headers={"Authorization": ""})
        async with api_client(db_url, key=refunder) as client:
            wrong_scope = await client.get(f"/invoices/{eur['id']}")
        return doc, html, pdf, yen_pdf, missing, bad, anonymous, wrong_scope

    doc, html, pdf, yen_pdf, missing, bad, anonymous, wrong_scope = asyncio.run(scenario())
    assert doc["object"] == "invoice" and doc["number"] == "2026-000001"
    assert [(l["kind"], l["amount"]) for l in doc["lines"]] == [("PLAN", 8997), ("TAX", 1709)]
    assert (doc["subtotal"], doc["taxAmount"], doc["total"], doc["amountDue"]) == (8997, 1709, 10706, 10706)
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
    assert "2026-000001" in html.text and "107.06 EUR" in html.text and "Zoë Łukasiewicz GmbH" in html.text
    assert pdf.status_code == 200 and pdf.headers["content-type"] == "application/pdf"
    assert pdf.content.startswith(b"%PDF-")
    text = subprocess.run(["pdftotext", "-layout", "-", "-"], input=pdf.content, capture_output=True, check=True).stdout.decode()
    for expected in ("Invoice 2026-000001", "PRO (3 seats), 2026-03-01 to 2026-04-01", "29.99 EUR", "89.97 EUR",
                     "VAT 19%", "17.09 EUR", "Total", "107.06 EUR", "Amount due", "Zoë Łukasiewicz GmbH",
                     "DE123456789", "Billing Engine Demo Ltd"):
        assert expected in text, (expected, text)
    yen_text = subprocess.run(["pdftotext", "-layout", "-", "-"], input=yen_pdf.content, capture_output=True,
                              check=True).stdout.decode()
    assert "12,000 JPY" in yen_text and "No tax" in yen_text  # JPY has no minor unit
    assert missing.status_code == 404 and bad.status_code == 404
    assert anonymous.status_code == 401 and wrong_scope.status_code == 403


def test_currency_minor_units():
    assert format_amount(123456, "EUR") == "1,234.56 EUR"
    assert format_amount(123456, "JPY") == "123,456 JPY"
    assert format_amount(123456, "KWD") == "123.456 KWD"
    assert format_amount(-5, "BRL") == "-0.05 BRL"


# -- reports against an oracle on generated histories --------------------------------------------

PLANS = {  # code: (price, currency, interval, count)
    "EUR_M": (1000, "EUR", "MONTH", 1), "EUR_M_BIG": (2500, "EUR", "MONTH", 1), "EUR_Y": (10000, "EUR", "YEAR", 1),
    "USD_W": (300, "USD", "WEEK", 1), "USD_Q": (2700, "USD", "MONTH", 3), "JPY_M": (500, "JPY", "MONTH", 1),
}
FACTOR = {"MONTH": Fraction(12), "YEAR": Fraction(1), "WEEK": Fraction(52), "DAY": Fraction(365)}
PLAN_TERMS: dict[int, tuple[str, int]] = {}  # plan id -> (interval, count), read with the history
PLAN_CURRENCY: dict[int, str] = {}

actions = st.lists(st.tuples(
    st.sampled_from(["create", "create", "create", "cancel_now", "cancel_end", "seats", "change", "pay", "advance"]),
    st.integers(0, 10_000)), min_size=5, max_size=35)


def us(t: datetime) -> int:
    return (t - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)


def line_in_force(line: dict, status: dict) -> bool:
    """billing._line_in_force: its invoice PAID, OPEN or REVIEW (or none), none it depends on VOID or FAILED."""
    if line["invoice_id"] is not None and status.get((line["customer_id"], line["invoice_id"])) not in ("PAID", "OPEN", "REVIEW"):
        return False
    return not any(status.get((line["customer_id"], d)) in ("VOID", "FAILED") for d in (line["depends_on"] or []))


def oracle_mrr_at(lines, invoices, subs, at: datetime) -> dict[int, tuple[str, int, Fraction]]:
    """subscription -> (currency, customer, MRR) as docs/reports.md defines it (billing._mrr_points),
    from the service ledger: the PLAN lines in force covering the instant and not reversed by then,
    each its whole period's net without contained tax, normalized to a month."""
    status = {(i["customer_id"], i["id"]): i["status"] for i in invoices}
    live = [line for line in lines if line["item"] == "PLAN" and line_in_force(line, status)]
    ended: dict[tuple[int, int], datetime] = {}
    for r in live:
        if r["kind"] == "REVERSAL":
            key = (r["customer_id"], r["reverses_id"])
            ended[key] = min(ended.get(key, r["span_start"]), r["span_start"])
    out = {}
    for sid, s in subs.items():
        if s["canceled_at"] is not None and s["canceled_at"] <= at:
            continue
        if s["status"] == "PAUSED" and s["paused_at"] <= at:
            continue
        seen = at
        if (s["status"] in ("ACTIVE", "PAST_DUE") and not s["cancel_at_period_end"] and s["canceled_at"] is None
                and at >= s["current_period_end"]):
            seen = s["current_period_end"] - timedelta(microseconds=1)  # not renewed yet: that period's terms
        value, found = Fraction(0), False
        for line in live:
            if (line["kind"] != "CHARGE" or line["customer_id"] != s["customer_id"] or line["subscription_id"] != sid
                    or not line["span_start"] <= seen < line["span_end"]):
                continue
            stop = ended.get((line["customer_id"], line["id"]))
            if stop is not None and stop <= seen:
                continue
            share = (Fraction(line["net"] - line["tax"], line["net"]) if line["tax_inclusive"] and line["net"] > 0
                     else Fraction(1))
            interval, count = PLAN_TERMS[line["plan_id"]]
            value += line["basis_net"] * share * FACTOR[interval] / (12 * count)
            found = True
        if found:
            out[sid] = (line_currency(lines, sid), s["customer_id"], value)
    return out


def line_currency(lines, sid) -> str:
    return next(line["currency"].strip() for line in lines if line["subscription_id"] == sid)


def months(first: date, last: date):
    m = date(first.year, first.month, 1)
    while m <= date(last.year, last.month, 1):
        nxt = date(m.year + (m.month == 12), m.month % 12 + 1, 1)
        yield m, datetime(m.year, m.month, 1, tzinfo=timezone.utc), datetime(nxt.year, nxt.month, 1, tzinfo=timezone.utc)
        m = nxt


def close(a, b) -> bool:
    return abs(Fraction(Decimal(a)) - Fraction(b)) <= Fraction(1, 100) if a is not None else b is None


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(steps=actions, seed=st.integers(0, 2**32))
def test_reports_match_the_oracle_on_generated_histories(db_url, steps, seed):
    rnd = random.Random(seed)
    now = T0
    with connect(db_url) as conn, conn.transaction(force_rollback=True):
        for code, (price, cur, interval, count) in PLANS.items():
            conn.execute("SELECT billing.upsert_plan(%s, %s, %s, %s, %s)", (code, price, cur, interval, count))
        conn.execute("SELECT billing.upsert_tax_rate('JP_CT', 'JP', NULL, 'Consumption tax', 1000, true)")
        conn.execute("SELECT billing.set_customer_details(3, 'JP', NULL, NULL, NULL, NULL, NULL, 'JP', NULL)")
        n = 0
        for action, k in steps:
            subs = [r["id"] for r in conn.execute(
                "SELECT id FROM billing.subscription WHERE status IN ('ACTIVE', 'PAST_DUE') ORDER BY id")]
            try:
                with conn.transaction():
                    if action == "create":
                        n += 1
                        code = list(PLANS)[k % len(PLANS)]
                        customer = 3 if code == "JPY_M" else 1 + k % 5
                        conn.execute("SELECT billing.create_subscription(%s, %s, %s, %s, %s, NULL, %s)",
                                     (f"h{n}", customer, code, now, 7 if k % 7 == 0 else 0, 1 + k % 3))
                    elif action in ("cancel_now", "cancel_end") and subs:
                        conn.execute("SELECT billing.cancel_subscription(%s, %s, %s)",
                                     (subs[k % len(subs)], action == "cancel_end", now))
                    elif action == "seats" and subs:
                        conn.execute("SELECT billing.set_quantity(%s, %s, %s)", (subs[k % len(subs)], 1 + k % 4, now))
                    elif action == "change" and subs:
                        conn.execute("SELECT billing.change_plan(%s, %s, %s)",
                                     (subs[k % len(subs)], "EUR_M_BIG" if k % 2 else "EUR_M", now))
                    elif action == "pay":
                        for c in conn.execute("SELECT * FROM billing.claim_charges('o', 100, '5 minutes', %s)", (now,)).fetchall():
                            outcome = "DECLINED" if rnd.random() < 0.35 else "SUCCEEDED"
                            conn.execute("SELECT billing.record_payment_result(%s, %s, %s, 'card_declined', %s)",
                                         (c["idempotency_key"], outcome, "ch_" + c["idempotency_key"], now))
            except psycopg.Error as exc:
                if not (exc.sqlstate or "").startswith("BL"):
                    raise
                # a refused call (BL422/BL409: a currency mismatch, ...) changes nothing
            now += timedelta(days=1 + k % 12 if action == "advance" else k % 3, hours=k % 24)
            while conn.execute("SELECT billing.create_due_invoices(500, %s) AS n", (now,)).fetchone()["n"]:
                pass
        end = now + timedelta(days=20)
        while conn.execute("SELECT billing.create_due_invoices(500, %s) AS n", (end,)).fetchone()["n"]:
            pass

        invoices = conn.execute("SELECT * FROM billing.invoice").fetchall()
        subs = {s["id"]: s for s in conn.execute("SELECT * FROM billing.subscription")}
        for p in conn.execute("SELECT * FROM billing.plan"):
            PLAN_TERMS[p["id"]] = (p["billing_interval"], p["interval_count"])
            PLAN_CURRENCY[p["id"]] = p["currency"].strip()
        lines = conn.execute("SELECT * FROM billing.service_line ORDER BY customer_id, id").fetchall()
        unserved_notes = {r["invoice_id"]: int(r["subtotal"]) for r in conn.execute(
            "SELECT invoice_id, sum(subtotal) AS subtotal FROM billing.credit_note WHERE reason = 'UNSERVED' GROUP BY 1")}
        refunds = conn.execute(
            "SELECT r.currency, r.amount, r.settled_at, i.subtotal, i.tax_amount, i.tax_included FROM billing.refund r"
            " JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id"
            " WHERE r.status = 'SUCCEEDED' AND r.reason <> 'SUBSCRIPTION_CANCELED' AND i.status = 'PAID'"
            "   AND r.attempt_id = i.paid_attempt_id").fetchall()
        attempts = conn.execute("SELECT * FROM billing.payment_attempt WHERE outcome = 'SUCCEEDED'").fetchall()

        # MRR at a few instants: as the engine's writes left it (customers marked, recomputed by the
        # reader), then folded into the kept aggregate (76_mrr_aggregate.sql); the movements below
        # read the folded aggregate.
        for at, fold in [(a, f) for f in (False, True)
                         for a in (T0 + timedelta(days=3), now, now + timedelta(days=5), end + timedelta(days=40))]:
            if fold:
                conn.execute("SELECT billing._mrr_fold()")
            want = defaultdict(Fraction)
            subs_n = defaultdict(int)
            for cur, _, v in oracle_mrr_at(lines, invoices, subs, at).values():
                want[cur] += v
                subs_n[cur] += v > 0
            got = {r["currency"]: r for r in conn.execute("SELECT * FROM billing.report_mrr(%s)", (at,))}
            assert set(got) == {c for c, v in want.items() if v > 0}
            for cur, r in got.items():
                assert close(r["mrr"], want[cur]) and r["subscriptions"] == subs_n[cur], (at, cur, r, want[cur])
                assert close(r["arr"], want[cur] * 12)

        first, last = T0.date(), (end + timedelta(days=40)).date()
        movements = {(r["month"], r["currency"]): r for r in conn.execute(
            "SELECT * FROM billing.report_mrr_movements(%s, %s)", (first, last))}
        churn = {(r["month"], r["currency"]): r for r in conn.execute(
            "SELECT * FROM billing.report_churn(%s, %s)", (first, last))}
        revenue = {(r["month"], r["currency"]): r for r in conn.execute(
            "SELECT * FROM billing.report_revenue(%s, %s)", (first, last))}
        for month, start, stop in months(first, last):
            a, b = oracle_mrr_at(lines, invoices, subs, start), oracle_mrr_at(lines, invoices, subs, stop)
            per = defaultdict(lambda: defaultdict(Fraction))
            customers = defaultdict(lambda: defaultdict(lambda: [Fraction(0), Fraction(0)]))
            for sid in set(a) | set(b):
                cur, cust, _ = a.get(sid) or b.get(sid)
                s, e = (a[sid][2] if sid in a else Fraction(0)), (b[sid][2] if sid in b else Fraction(0))
                p = per[cur]
                p["start"] += s
                p["end"] += e
                p["new"] += e if s == 0 and e > 0 else 0
                p["expansion"] += e - s if 0 < s < e else 0
                p["contraction"] += s - e if 0 < e < s else 0
                p["churned"] += s if s > 0 and e == 0 else 0
                customers[cur][cust][0] += s
                customers[cur][cust][1] += e
            for cur, p in per.items():
                if p["start"] == 0 and p["end"] == 0:
                    assert (month, cur) not in movements
                    continue
                r = movements[(month, cur)]
                for col, key in (("starting_mrr", "start"), ("new_mrr", "new"), ("expansion_mrr", "expansion"),
                                 ("contraction_mrr", "contraction"), ("churned_mrr", "churned"), ("ending_mrr", "end")):
                    assert close(r[col], p[key]), (month, cur, col, r[col], p[key])
                if p["start"] > 0:
                    c = churn[(month, cur)]
                    n_start = sum(1 for s, _ in customers[cur].values() if s > 0)
                    lost = [cust for cust, (s, e) in customers[cur].items() if s > 0 and e == 0]
                    assert (c["customers_start"], c["customers_churned"]) == (n_start, len(lost))
                    dunning = 0
                    for cust in lost:
                        canceled = sorted((s for s in subs.values() if s["customer_id"] == cust
                                           and PLANS[plan_code(conn, s["plan_id"])][1] == cur and s["canceled_at"]
                                           and start <= s["canceled_at"] < stop), key=lambda s: (s["canceled_at"], s["id"]))
                        dunning += bool(canceled) and canceled[-1]["cancel_reason"] == "DUNNING_EXHAUSTED"
                    assert (c["churned_dunning"], c["churned_voluntary"]) == (dunning, len(lost) - dunning)
                    assert close(c["churned_mrr"], p["churned"])
                    assert abs(Fraction(c["revenue_churn_rate"]) - p["churned"] / p["start"]) <= Fraction(1, 10000)
            # revenue: straight line to the microsecond, cumulative floors
            recognized, cash = defaultdict(int), defaultdict(int)
            # every line in force (a reversal while its line is), net of contained tax, straight
            # line over its span; refunds of the paying charge at their settlement (net of tax)
            status = {(i["customer_id"], i["id"]): i["status"] for i in invoices}
            by_id = {(line["customer_id"], line["id"]): line for line in lines}
            for line in lines:
                if not (line["span_start"] < stop and line["span_end"] > start) or not line_in_force(line, status):
                    continue
                if (line["invoice_id"] is None and line["reverses_id"] is not None
                        and not line_in_force(by_id[(line["customer_id"], line["reverses_id"])], status)):
                    continue
                span = us(line["span_end"]) - us(line["span_start"])
                net = line["net"] - (line["tax"] if line["tax_inclusive"] else 0)
                e = min(span, max(0, us(stop) - us(line["span_start"])))
                s = min(span, max(0, us(start) - us(line["span_start"])))
                recognized[line["currency"].strip()] += net * e // span - net * s // span
            # an invoice's contained tax is its document's: the rounding difference with its lines'
            for i in invoices:
                if i["status"] not in ("PAID", "OPEN", "REVIEW") or not (i["period_start"] < stop and i["period_end"] > start):
                    continue
                line_tax = sum(line["tax"] for line in lines if line["customer_id"] == i["customer_id"]
                               and line["invoice_id"] == i["id"] and line["tax_inclusive"])
                note = unserved_notes.get(i["id"], 0)
                note_tax = note * i["tax_included"] // i["subtotal"] if note and i["subtotal"] > 0 else 0
                net = line_tax - (i["tax_included"] - note_tax)
                if net:
                    span = us(i["period_end"]) - us(i["period_start"])
                    e = min(span, max(0, us(stop) - us(i["period_start"])))
                    s = min(span, max(0, us(start) - us(i["period_start"])))
                    recognized[i["currency"].strip()] += net * e // span - net * s // span
            for r in refunds:
                if start <= r["settled_at"] < stop:
                    base = r["subtotal"] + r["tax_amount"]
                    tax = r["amount"] * (r["tax_amount"] + r["tax_included"]) // base if base > 0 else 0
                    recognized[r["currency"].strip()] -= r["amount"] - tax
            for att in attempts:
                if start <= att["result_at"] < stop:
                    cash[att["currency"].strip()] += att["amount"]
            for cur in set(recognized) | set(cash):
                r = revenue.get((month, cur))
                assert r is not None and (r["recognized"], r["cash_collected"]) == (recognized[cur], cash[cur]), \
                    (month, cur, r, recognized[cur], cash[cur])

        # Over the whole history, revenue recognized (billing._revenue_recognized) = what the
        # customers paid or still owe for their invoices, less tax, less the credit they still hold
        # (on their balance or pending): the credit a change gave back is counted once.
        total = {r["currency"].strip(): r["recognized"] for r in conn.execute(
            "SELECT * FROM billing._revenue_recognized(%s, %s)", (T0 - timedelta(days=400), end + timedelta(days=1500)))}
        owed = defaultdict(int)
        # An invoice a cancellation cut bills its amount less what it took off (what went back
        # beyond the amount is on the balance), less the tax its UNSERVED credit note did not take.
        notes = {n["invoice_id"]: n for n in conn.execute(
            "SELECT invoice_id, subtotal, tax_amount FROM billing.credit_note WHERE reason = 'UNSERVED'").fetchall()}
        for i in invoices:
            if i["status"] in ("PAID", "OPEN", "REVIEW"):
                n = notes.get(i["id"])
                note_tax = n["tax_amount"] if n else 0
                note_incl = n["subtotal"] * i["tax_included"] // i["subtotal"] if n and i["subtotal"] > 0 else 0
                owed[i["currency"].strip()] += (i["amount"] - min(i["unserved"], i["amount"])
                                                - (i["tax_amount"] - note_tax) - (i["tax_included"] - note_incl))
        for b in conn.execute("SELECT currency, balance FROM billing.credit_balance").fetchall():
            owed[b["currency"].strip()] -= b["balance"]
        for c in conn.execute("SELECT currency, amount FROM billing.credit_pending WHERE status = 'PENDING'").fetchall():
            owed[c["currency"].strip()] -= c["amount"]
        # The credit a change gave back includes the tax of the time given back (its lines' tax):
        # tax, not revenue.
        for c in conn.execute(
                "SELECT l.currency, sum(l.tax) AS tax FROM billing.service_line l"
                " LEFT JOIN billing.service_line o ON o.customer_id = l.customer_id AND o.id = l.reverses_id"
                " WHERE l.invoice_id IS NULL AND billing._line_in_force(l) AND (o.id IS NULL OR billing._line_in_force(o))"
                " GROUP BY 1").fetchall():
            owed[c["currency"].strip()] -= c["tax"]
        for cur in set(total) | {c for c, v in owed.items() if v}:
            assert total.get(cur, 0) == owed[cur], (cur, total.get(cur), owed[cur])


_plan_codes: dict[int, str] = {}


def plan_code(conn, plan_id: int) -> str:
    if plan_id not in _plan_codes:
        _plan_codes[plan_id] = conn.execute("SELECT code FROM billing.plan WHERE id = %s", (plan_id,)).fetchone()["code"]
    return _plan_codes[plan_id]


def test_the_console_serves_the_documents_to_a_logged_in_operator(db_url):
    import re

    import httpx

    from .console_world import ConsoleServer

    with connect(db_url) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO', 2999, 'EUR', 'MONTH', 1)")
        conn.execute("SELECT billing.create_subscription('c', 5, 'PRO', %s)", (T0,))
        conn.execute("SELECT billing.finalize_invoices(100, %s)", (T0,))
        invoice_id = conn.execute("SELECT id FROM billing.invoice").fetchone()["id"]
    key = create_test_key(db_url, "subscriptions:read")
    with ConsoleServer(db_url) as server, httpx.Client(timeout=30, base_url=server.url) as c:
        anonymous = c.get(f"/console/invoices/{invoice_id}.html")
        assert anonymous.status_code == 303 and "/console/login" in anonymous.headers["location"]
        form = c.get("/console/login")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
        c.post("/console/login", data={"csrf": token, "key": key, "next": "/console/"})
        html = c.get(f"/console/invoices/{invoice_id}.html")
        pdf = c.get(f"/console/invoices/{invoice_id}.pdf")
        missing = c.get("/console/invoices/999999.pdf")
        other = c.get(f"/console/invoices/{invoice_id}.txt")
    assert html.status_code == 200 and "Invoice 2026-000001" in html.text
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF-")
    assert missing.status_code == 404 and other.status_code == 404
