"""The demo's figures: read from its database after the run through the figures' read functions
(db/functions/79_figures.sql: billing.figures_by_hour, figures_counts, figures_revenue) and the
reports, plus the run's own step samples; and what the report derives from them (the peaks, the
pace while a queue waited, the dunning funnel). Money stays integer (smallest unit)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta, timezone

import psycopg
from psycopg.rows import dict_row

from billing import db
from billing.demo.model import RunResult
from billing.demo.scenario import PEAKS

UTC = timezone.utc
HOUR = timedelta(hours=1)
# The single counts of billing.figures_counts (key and key2 NULL).
SINGLE_COUNTS = ("charged", "webhooks", "trials", "redemptions", "discounted", "seats", "paused", "finalized",
                 "unfinalized", "void_notes", "refund_notes", "taxed", "tax_included", "prorations", "credits")


def hour_of(dt: datetime) -> datetime:
    return dt.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def collect(url: str, result: RunResult) -> dict:
    """Everything the report shows, through the figures' read functions (db/functions/79_figures.sql)
    and the board's reports (75_reports.sql), plus the run's own step samples."""
    with psycopg.connect(url, row_factory=dict_row, options="-c TimeZone=UTC") as conn:
        by_hour = conn.execute(db.FIGURES_BY_HOUR).fetchall()
        counts: dict[str, list[dict]] = defaultdict(list)
        for r in conn.execute(db.FIGURES_COUNTS).fetchall():
            counts[r["figure"]].append(r)
        revenue = conn.execute(db.FIGURES_REVENUE).fetchall()
        # The board figures (docs/reports.md), through the read-only report functions.
        first, last = result.started.date(), result.ended.date()
        reports = {
            "mrr": conn.execute(db.REPORT_MRR, {"at": result.ended}).fetchall(),
            "movements": conn.execute(db.REPORT_MRR_MOVEMENTS, {"from": first, "to": last}).fetchall(),
            "churn": conn.execute(db.REPORT_CHURN, {"from": first, "to": last}).fetchall(),
            "revenue": conn.execute(db.REPORT_REVENUE, {"from": first, "to": last}).fetchall(),
        }
    due = [{"h": r["hour"], "kind": r["key"], "n": r["n"]} for r in by_hour if r["figure"] == "due"]
    attempts = [{"h": r["hour"], "retry": r["key"] == "RETRY", "n": r["n"]} for r in by_hour if r["figure"] == "attempts"]
    single = {name: counts[name][0]["n"] for name in SINGLE_COUNTS}
    outcomes = {r["key"] or "IN FLIGHT": r["n"] for r in counts["outcomes"]}
    invoices = sorted(({"kind": r["key"], "status": r["key2"], "n": r["n"]} for r in counts["invoices"]),
                      key=lambda r: (r["kind"], r["status"]))
    subs = sorted(({"status": r["key"], "reason": r["key2"], "n": r["n"]} for r in counts["subscriptions"]),
                  key=lambda r: (r["status"], r["reason"]))
    plans = sorted(({"interval": r["key"], "n": r["n"]} for r in counts["plans"]), key=lambda r: -r["n"])
    funnel = [{"status": r["key"], "paid_try": None if r["key2"] is None else int(r["key2"]), "n": r["n"]}
              for r in counts["funnel"]]
    tries = {int(r["key"]): r["n"] for r in counts["tries"]}
    events = {r["key"]: r["n"] for r in sorted(counts["events"], key=lambda r: r["key"])}
    charged, webhooks = single["charged"], single["webhooks"]
    lifecycle = {k: single[k] for k in ("trials", "redemptions", "discounted", "seats", "paused")}
    documents = {k: single[k] for k in ("finalized", "unfinalized", "void_notes", "refund_notes", "taxed",
                                        "tax_included")}
    changes = {k: single[k] for k in ("prorations", "credits")}

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
