"""`billing demo`: a small run end to end (real PostgreSQL, the real worker code, the simulator),
its report, and proof that the invariant checker can fail."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import copy
import re
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.rows import dict_row

from billing import db
from billing.cli import main
from billing.config import Settings
from billing.demo import documents, invariants, report
from billing.demo.model import Options, exit_status
from billing.demo.runner import simulate
from billing.demo.scenario import build

from .conftest import url_for_db

SUBSCRIPTIONS = 300


@pytest.fixture(scope="module")
def demo_run(pg_server_url, tmp_path_factory):
    """One small demo over the whole window, shared by the tests of this module."""
    out = tmp_path_factory.mktemp("demo")
    name = f"billing_demo_test_{uuid.uuid4().hex[:8]}"
    settings = Settings(database_url=url_for_db(pg_server_url, name))
    options = Options(subscriptions=SUBSCRIPTIONS, rate=500, seed=7, report=str(out / "report.html"), quiet=True)
    result = asyncio.run(simulate(settings, options))
    result.stats["sample_invoices"] = documents.write_samples(result.database_url, settings, out / "report.html")
    report.write_html(result, out / "report.html")
    yield result, out
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        for dbname in (name, f"{name}_copy"):
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))


def test_small_demo_holds_every_invariant_and_writes_its_report(demo_run):
    result, out = demo_run
    failed = [(c.name, c.figures, c.examples) for c in result.checks if not c.ok]
    assert not failed
    assert exit_status(result.checks) == 0
    assert [c.name for c in result.checks] == [
        "no invoice charged twice", "no period skipped or overlapping", "every paid invoice announced",
        "every event matches its schema", "no rate-limit excess", "gateway and database agree",
        "collected minus refunded equals the cash of PAID invoices",
        "every usage event counted once", "every rated quantity equals the requests sent"]
    # Refunds were asked (customers, and the engine's own rules) and executed, each once.
    with psycopg.connect(result.database_url, row_factory=dict_row) as conn:
        refunds = conn.execute("SELECT reason, status FROM billing.refund").fetchall()
    assert refunds and {r["status"] for r in refunds} == {"SUCCEEDED"}
    assert "REQUESTED" in {r["reason"] for r in refunds}
    assert len(result.ledger["refunds"]) == len(refunds)

    # It did the work the scenario describes.
    s = result.stats
    kinds = {r["kind"] for r in s["invoices"]}
    assert {"INITIAL", "RENEWAL", "PRORATION"} <= kinds
    assert s["changes"]["credits"] > 0  # a downgrade granted credit
    assert s["outcomes"].get("DECLINED", 0) > 0
    sim = result.simulator_stats
    # A timed-out key is resolved by sending it again (a replay) or, once the simulated clock has run
    # close to the key's lifetime while the call was out, by looking it up (docs/gateway.md).
    assert sim["timeouts"] > 0 and sim["errors"] > 0 and sim["webhooksDelivered"] > 0
    assert sim["replays"] + sim["lookups"] > 0
    assert {r["reason"] for r in s["subscriptions"]} >= {"REQUESTED", "PERIOD_END"}
    # The lifecycle (docs/lifecycle.md): trials told of their end, the campaign's coupon, seats, pauses.
    life = s["lifecycle"]
    assert life["trials"] > 0 and life["redemptions"] > 0 and life["discounted"] > 0 and life["seats"] > 0
    assert s["events"].get("SubscriptionTrialWillEnd", 0) > 0
    assert s["events"].get("SubscriptionPaused", 0) > 0 and s["events"].get("SubscriptionResumed", 0) > 0
    # The emails of five customers, one per language, sent to the demo's Mailpit and linked from the report.
    assert result.mailpit_url and {e["locale"] for e in result.emails} == {"en", "pt-BR", "es", "de", "zh-CN"}
    html = (out / "report.html").read_text()
    assert "Emails (a sample of customers" in html and result.emails[0]["url"] in html
    with psycopg.connect(result.database_url) as conn:
        left = dict(conn.execute("SELECT status, count(*) FROM billing.notification GROUP BY status").fetchall())
    assert left.get("PENDING", 0) == 0 and left.get("SENT", 0) == len(result.emails) and left.get("SKIPPED", 0) > 0
    assert len(s["revenue"]) == 6

    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count("<svg") == 5
    for title in ("Campaign day, 1 September", "Renewal day, 1 October", "The whole window, per day",
                  "Dunning funnel", "Revenue by currency", "Invariants"):
        assert title in page
    assert page.count("✔ holds") == 9 and "FAILS" not in page
    assert "All invariants hold." in page
    assert (out / "report.events.jsonl").stat().st_size > 0

    text = report.terminal_summary(result)
    assert "ALL INVARIANTS HOLD" in text

    # The API product (billing.demo.usage): requests sent (some twice) without Kafka through the
    # consumer's database call, each stored once; ended months rated onto USAGE invoices.
    u = s["usage"]
    assert u["customers"] >= 3 and u["requests"] > 1000 and u["duplicates"] > 0
    assert u["answers"] == {"accepted": u["requests"], "duplicate": u["duplicates"]}
    assert "USAGE" in kinds and sum(r["invoices"] for r in u["invoices"]) > 0
    assert "Usage: the API product" in page and "usage (API product)" in text

    # Invoices as documents and the board figures (docs/invoices.md, docs/reports.md).
    docs = s["documents"]
    assert docs["finalized"] > 0 and docs["unfinalized"] == 0 and docs["taxed"] > 0 and docs["tax_included"] > 0
    assert docs["refund_notes"] > 0
    assert {r["currency"] for r in s["reports"]["mrr"]} == {"BRL", "EUR", "GBP", "INR", "JPY", "USD"}
    assert all(r["mrr"] > 0 for r in s["reports"]["mrr"])
    assert s["reports"]["churn"] and s["reports"]["revenue"] and s["reports"]["movements"]
    for title in ("Invoices and board figures", "MRR and ARR at", "Churn per month", "Revenue per month"):
        assert title in page
    assert "MRR at the end" in text and "churn 2026-10" in text
    samples = s["sample_invoices"]
    assert len(samples) >= 3
    if shutil.which("pdftotext"):
        for sample in samples:
            pdf_text = subprocess.run(["pdftotext", "-layout", sample["pdf"], "-"], capture_output=True,
                                      check=True).stdout.decode()
            assert f"Invoice {sample['number']}" in pdf_text and "Total" in pdf_text


def test_usage_checkers_fail_on_a_request_counted_twice_or_a_wrong_quantity(demo_run):
    """The usage invariants compare the database with the stream's own record: a request the stream
    did not send (or one the database counted twice) and a rated quantity off by one both fail."""
    from billing.demo import usage

    result, _ = demo_run
    sent, figures = result.usage_sent, result.stats["usage"]
    with psycopg.connect(result.database_url, row_factory=dict_row) as conn:
        assert usage.check_counted_once(conn, sent, figures).ok
        assert usage.check_rated(conn, sent, result.usage_subscriptions, result.ended, timedelta(hours=1)).ok
        rated = next(r for r in conn.execute(db.WITNESS_USAGE_RATINGS, {"meter": "api_requests"}).fetchall()
                     if r["quantity"] > 0)
    # Forget one request the stream sent inside a rated span: the database now holds one more.
    key = next(k for k, at in sent.events.items()
               if k[0] == rated["customer_id"] and rated["span_start"] <= at < rated["span_end"])
    fewer = copy.deepcopy(sent)
    del fewer.events[key]
    with psycopg.connect(result.database_url, row_factory=dict_row) as conn:
        counted = usage.check_counted_once(conn, fewer, {**figures, "answers": {
            **figures["answers"], "accepted": figures["answers"]["accepted"] - 1}})
        rated_check = usage.check_rated(conn, fewer, result.usage_subscriptions, result.ended, timedelta(hours=1))
    assert not counted.ok and any(f"request {key} stored but never sent" in e for e in counted.examples)
    assert not rated_check.ok and any("the stream sent" in e for e in rated_check.examples)
    # The oracle of the tiers: 100 included, then 1.0 / 0.5 / 0.2 USD cents a request, rounded up once.
    assert [usage.tier_amount("USD", q) for q in (0, 100, 101, 600, 601, 2100, 2101)] == [0, 0, 1, 500, 501, 1250, 1251]


def test_checker_fails_on_a_second_charge_of_one_invoice(demo_run):
    result, _ = demo_run
    ledger = copy.deepcopy(result.ledger)
    paid = next(c for c in ledger["charges"] if c["status"] == "succeeded")
    # The same key listed twice, and another key charged for the same invoice.
    ledger["charges"].append(dict(paid))
    namespace, invoice = re.match(r"(.+)-inv-(\d+)-try-", paid["idempotencyKey"]).groups()
    ledger["charges"].append({**paid, "idempotencyKey": f"{namespace}-inv-{invoice}-try-9", "id": "ch_forged"})
    with psycopg.connect(result.database_url, row_factory=dict_row) as conn:
        check = invariants.check_charged_once(conn, ledger)
    assert not check.ok
    assert any(f"invoice {invoice} charged successfully" in e for e in check.examples)
    assert any("twice" in e for e in check.examples)
    assert exit_status([check]) == 1


def test_checker_fails_on_a_refund_executed_twice(demo_run):
    result, _ = demo_run
    ledger = copy.deepcopy(result.ledger)
    ledger["refunds"].append(dict(ledger["refunds"][0]))
    with psycopg.connect(result.database_url, row_factory=dict_row) as conn:
        assert invariants.check_money(conn, result.ledger).ok
        check = invariants.check_money(conn, ledger)
    assert not check.ok and any("twice" in e for e in check.examples)


def test_checker_fails_when_a_paid_invoice_was_never_announced(demo_run):
    result, _ = demo_run
    events = invariants.load_jsonl_events(result.events_path)
    victim = next(e for e in events if e["type"] == "InvoicePaid")
    kept = [e for e in events if e["subject"] != victim["subject"]]
    with psycopg.connect(result.database_url, row_factory=dict_row) as conn:
        assert invariants.check_announced(conn, events).ok
        check = invariants.check_announced(conn, kept)
    assert not check.ok
    assert any(victim["subject"].replace("invoice/", "invoice ") in e for e in check.examples)


def test_checker_fails_on_a_rate_limit_excess(demo_run):
    result, _ = demo_run
    assert invariants.check_rate(result.ledger, 500, result.accepted_times, None).ok
    burst = [100.0 + i / 1000 for i in range(501)]  # 501 calls within half a second
    assert not invariants.check_rate(result.ledger, 500, burst, None).ok
    assert not invariants.check_rate({**result.ledger, "rateLimited": 1}, 500, [], None).ok


def test_checker_fails_on_a_skipped_or_overlapping_period(demo_run, pg_server_url):
    result, _ = demo_run
    source = psycopg.conninfo.conninfo_to_dict(result.database_url)["dbname"]
    copy_name = f"{source}_copy"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(copy_name),
                                                                       sql.Identifier(source)))
    url = url_for_db(pg_server_url, copy_name)
    with psycopg.connect(url, row_factory=dict_row) as conn:
        # Move one renewal's period an hour later: a gap after the previous period.
        conn.execute("SET session_replication_role = replica")  # bypass triggers: we are the vandal
        row = conn.execute("SELECT id, subscription_id FROM billing.invoice WHERE kind = 'RENEWAL' "
                           "ORDER BY id LIMIT 1").fetchone()
        conn.execute("UPDATE billing.invoice SET period_start = period_start + interval '1 hour' WHERE id = %s",
                     (row["id"],))
        conn.commit()
        check = invariants.check_periods(conn, result.ended)
    assert not check.ok
    assert any(f"subscription {row['subscription_id']}: gap" in e for e in check.examples)


def test_calendar_boundaries_match_the_contract():
    from datetime import datetime, timezone

    utc = timezone.utc
    jan31 = datetime(2026, 1, 31, 15, 0, tzinfo=utc)
    assert invariants.boundary(jan31, "MONTH", 1, 1, "UTC") == datetime(2026, 2, 28, 15, 0, tzinfo=utc)
    assert invariants.boundary(jan31, "MONTH", 1, 2, "UTC") == datetime(2026, 3, 31, 15, 0, tzinfo=utc)
    assert invariants.boundary(jan31, "MONTH", 1, 3, "UTC") == datetime(2026, 4, 30, 15, 0, tzinfo=utc)
    # Local time of day kept across DST (Berlin: 09:00 CEST, then 09:00 CET).
    sep = datetime(2026, 9, 30, 7, 0, tzinfo=utc)
    assert invariants.boundary(sep, "MONTH", 1, 1, "Europe/Berlin") == datetime(2026, 10, 30, 8, 0, tzinfo=utc)
    assert invariants.max_sliding_window([0.0, 0.5, 0.999, 1.0, 1.5]) == 3


def test_scenario_is_deterministic_and_clustered():
    a, b = build(2000, seed=5), build(2000, seed=5)
    assert a.actions == b.actions
    assert build(2000, seed=6).actions != a.actions
    signups = [x for x in a.actions if x.kind == "signup"]
    assert len(signups) == 2000
    on_campaign_day = [x for x in signups if a.peaks[0][0] <= x.at < a.peaks[0][1]]
    assert len(on_campaign_day) > 0.5 * len(signups)
    assert {x.kind for x in a.actions} == {"signup", "upgrade", "downgrade", "cancel_now", "cancel_at_end",
                                           "seats", "pause", "resume", "uncancel", "refund"}
    # The lifecycle: the campaign's coupon on its signups only, trials, seats, pauses with and without a date.
    assert all((x.coupon == "SEPT1") == (x.at < datetime(2026, 9, 2, 12, tzinfo=timezone.utc)
                                         and not x.plan_code.startswith("WEEKLY")) for x in signups)
    assert 0.05 < sum(x.trial_days > 0 for x in signups) / len(signups) < 0.2
    assert 0.03 < sum(x.quantity > 1 for x in signups) / len(signups) < 0.15
    pauses = [x for x in a.actions if x.kind == "pause"]
    assert any(x.resume_at for x in pauses) and any(x.resume_at is None for x in pauses)
    assert all(x.at >= y.at - timedelta(0) for x, y in zip(a.actions[1:], a.actions))


def test_demo_help_explains_every_option():
    out = CliRunner().invoke(main, ["demo", "--help"]).output
    for option in ("--subscriptions", "--rate", "--seed", "--report", "--hour-seconds", "--step-minutes",
                   "--quiet-step-hours", "--days", "--decline-rate", "--timeout-rate", "--error-rate",
                   "--webhook-duplicate-rate", "--concurrency", "--events", "--database-url"):
        assert option in out
    # every option has a help text (click prints it after the option on the same or the next line)
    assert "gateway's limit" in out and "Seed of every random choice" in out
