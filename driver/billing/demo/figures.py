"""The demo's figures: read from its database after the run (as superuser, straight from the
tables), plus the run's own step samples; and what the report derives from them (the peaks, the
pace while a queue waited, the dunning funnel). Money stays integer (smallest unit)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta, timezone

import psycopg
from psycopg.rows import dict_row

from billing.demo.model import RunResult
from billing.demo.scenario import PEAKS

UTC = timezone.utc
HOUR = timedelta(hours=1)


def hour_of(dt: datetime) -> datetime:
    return dt.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def collect(url: str, result: RunResult) -> dict:
    """Everything the report shows, from the tables (superuser), plus the run's own step samples."""
    with psycopg.connect(url, row_factory=dict_row) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        q = lambda text, params=None: conn.execute(text, params).fetchall()  # noqa: E731
        due = q("""SELECT date_trunc('hour', CASE WHEN kind = 'RENEWAL' THEN period_start ELSE due_at END) AS h,
                          kind, count(*) AS n
                     FROM billing.invoice WHERE subtotal > 0 GROUP BY 1, 2""")
        # A claim happens at a step's end instant: it belongs to the step that ends there.
        attempts = q("""SELECT date_trunc('hour', first_claimed_at - interval '1 microsecond') AS h,
                               attempt_number > 0 AS retry, count(*) AS n
                          FROM billing.payment_attempt GROUP BY 1, 2""")
        outcomes = {r["outcome"] or "IN FLIGHT": r["n"] for r in q(
            "SELECT outcome, count(*) AS n FROM billing.payment_attempt GROUP BY 1")}
        invoices = q("SELECT kind, status, count(*) AS n FROM billing.invoice GROUP BY 1, 2 ORDER BY 1, 2")
        subs = q("""SELECT s.status, coalesce(s.cancel_reason, '') AS reason, count(*) AS n
                      FROM billing.subscription s GROUP BY 1, 2 ORDER BY 1, 2""")
        plans = q("""SELECT p.billing_interval AS interval, count(*) AS n FROM billing.subscription s
                       JOIN billing.plan p ON p.id = s.plan_id GROUP BY 1 ORDER BY 2 DESC""")
        funnel = q("""
            WITH declined_first AS (
                SELECT i.id, i.status, pa.attempt_number AS paid_try
                  FROM billing.invoice i
                  LEFT JOIN billing.payment_attempt pa ON pa.id = i.paid_attempt_id
                 WHERE EXISTS (SELECT 1 FROM billing.payment_attempt a
                                WHERE a.invoice_id = i.id AND a.attempt_number = 0 AND a.outcome = 'DECLINED'))
            SELECT status, paid_try, count(*) AS n FROM declined_first GROUP BY 1, 2""")
        tries = {r["attempt_number"]: r["n"] for r in q(
            "SELECT attempt_number, count(*) AS n FROM billing.payment_attempt GROUP BY 1")}
        charged = q("SELECT count(DISTINCT invoice_id) AS n FROM billing.payment_attempt")[0]["n"]
        revenue = q("""
            SELECT currency,
                   sum(amount) FILTER (WHERE status = 'PAID') AS collected,
                   count(*) FILTER (WHERE status = 'PAID') AS paid,
                   sum(amount) FILTER (WHERE status = 'FAILED') AS failed,
                   sum(amount) FILTER (WHERE status = 'OPEN') AS open,
                   sum(amount) FILTER (WHERE status = 'VOID') AS void,
                   sum(credit_applied) AS credit_applied,
                   sum(amount) FILTER (WHERE status = 'PAID' AND kind = 'PRORATION') AS proration
              FROM billing.invoice GROUP BY currency ORDER BY currency""")
        credit = {r["currency"].strip(): r["granted"] for r in q(
            """SELECT currency, sum(amount) AS granted FROM billing.credit_entry
                WHERE reason = 'PRORATION' GROUP BY currency""")}
        events = {r["event_type"]: r["n"] for r in q(
            "SELECT event_type, count(*) AS n FROM billing.outbox_event GROUP BY 1 ORDER BY 1")}
        webhooks = q("SELECT count(*) AS n FROM billing.gateway_webhook")[0]["n"]
        lifecycle = q("""SELECT (SELECT count(*) FROM billing.subscription WHERE trial_end IS NOT NULL) AS trials,
                                (SELECT count(*) FROM billing.coupon_redemption) AS redemptions,
                                (SELECT count(*) FROM billing.invoice WHERE discount_amount > 0) AS discounted,
                                (SELECT count(*) FROM billing.subscription WHERE quantity > 1) AS seats,
                                (SELECT count(*) FROM billing.subscription WHERE status = 'PAUSED') AS paused""")[0]
        # The board figures (docs/reports.md), through the read-only report functions.
        first, last = result.started.date(), result.ended.date()
        reports = {
            "mrr": q("SELECT * FROM billing.report_mrr(%s)", (result.ended,)),
            "movements": q("SELECT * FROM billing.report_mrr_movements(%s, %s)", (first, last)),
            "churn": q("SELECT * FROM billing.report_churn(%s, %s)", (first, last)),
            "revenue": q("SELECT * FROM billing.report_revenue(%s, %s)", (first, last)),
        }
        documents = q("""SELECT (SELECT count(*) FROM billing.invoice WHERE number IS NOT NULL) AS finalized,
                                (SELECT count(*) FROM billing.invoice WHERE number IS NULL AND status <> 'VOID') AS unfinalized,
                                (SELECT count(*) FROM billing.credit_note WHERE reason = 'VOID') AS void_notes,
                                (SELECT count(*) FROM billing.credit_note WHERE reason = 'REFUND') AS refund_notes,
                                (SELECT count(*) FROM billing.invoice WHERE tax_amount > 0) AS taxed,
                                (SELECT count(*) FROM billing.invoice WHERE tax_included > 0) AS tax_included""")[0]
        changes = q("""SELECT count(*) FILTER (WHERE kind = 'PRORATION') AS prorations,
                              (SELECT count(*) FROM billing.credit_entry WHERE reason = 'PRORATION') AS credits
                         FROM billing.invoice""")[0]

    due_by_hour: dict[datetime, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in due:
        due_by_hour[r["h"]][r["kind"]] += r["n"]
    attempts_by_hour: dict[datetime, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in attempts:
        attempts_by_hour[r["h"]]["RETRY" if r["retry"] else "FIRST"] += r["n"]
    # Backlog at the end of each hour, from the run's samples (the last sample of that hour).
    backlog_by_hour: dict[datetime, int] = {}
    calls_by_hour: dict[datetime, int] = defaultdict(int)
    previous = 0
    for s in result.samples:
        hour = hour_of(s.at - timedelta(microseconds=1))
        backlog_by_hour[hour] = s.backlog
        # Gateway calls answered during the step (as the charge workers counted them), put in
        # the step's last hour: exact for the hourly steps of the peak days.
        calls_by_hour[hour] += s.calls - previous
        previous = s.calls
    for r in revenue:
        r["currency"] = r["currency"].strip()
        r["credit_granted"] = credit.get(r["currency"], 0)
        for k in ("collected", "failed", "open", "void", "credit_applied", "proration", "credit_granted"):
            r[k] = int(r[k] or 0)  # sum(bigint) is numeric: back to an exact int
    return {
        "due_by_hour": due_by_hour, "attempts_by_hour": attempts_by_hour, "backlog_by_hour": backlog_by_hour,
        "calls_by_hour": calls_by_hour,
        "outcomes": outcomes, "invoices": invoices, "subscriptions": subs, "plans": plans, "funnel": funnel,
        "tries": tries, "charged": charged, "revenue": revenue, "events": events, "webhooks": webhooks,
        "changes": changes, "lifecycle": lifecycle, "reports": reports, "documents": documents,
    }


def peak(stats: dict, start: datetime, end: datetime) -> dict:
    """The busiest due hour in [start, end), the deepest backlog and when the queue was empty again."""
    span = list(hours_between(start, end))
    due = {h: sum(stats["due_by_hour"].get(h, {}).values()) for h in span}
    busiest = max(span, key=lambda h: due[h])
    backlog = {h: stats["backlog_by_hour"].get(h, 0) for h in span}
    deepest = max(span, key=lambda h: backlog[h])
    drained = next((h for h in span if h > deepest and backlog[h] == 0), None)
    return {"busiest": busiest, "busiest_due": due[busiest], "deepest": deepest, "deepest_backlog": backlog[deepest],
            "drained": drained, "due_total": sum(due.values()),
            "charged_total": sum(stats["calls_by_hour"].get(h, 0) for h in span)}


def pace(result: RunResult) -> tuple[int, int, bool]:
    """(mean charges per simulated hour while a queue waited, how many such hours, whether that is
    the cap): over the hourly steps of the peak days that ended with invoices still queued."""
    s = result.stats
    cap = result.options.cap
    queued = [h for a, b in PEAKS for h in hours_between(a, min(b, result.ended))
             if s["backlog_by_hour"].get(h, 0) > 0 and result.options.step_minutes == 60]
    if not queued:
        return 0, 0, True
    mean = sum(s["calls_by_hour"].get(h, 0) for h in queued) // len(queued)
    return mean, len(queued), mean >= 0.9 * cap


def hours_between(start: datetime, end: datetime):
    h = hour_of(start)
    while h < end:
        yield h
        h += HOUR


def funnel(stats: dict) -> dict:
    declined = sum(r["n"] for r in stats["funnel"])
    recovered = defaultdict(int)
    out = {"declined_first": declined, "failed": 0, "void": 0, "open": 0}
    for r in stats["funnel"]:
        if r["status"] == "PAID":
            recovered[r["paid_try"] if r["paid_try"] is not None else -1] += r["n"]
        elif r["status"] == "FAILED":
            out["failed"] += r["n"]
        elif r["status"] == "VOID":
            out["void"] += r["n"]
        else:
            out["open"] += r["n"]
    out["recovered"] = dict(sorted(recovered.items()))
    return out
