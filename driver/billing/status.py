"""`billing status`: what is due, open, in dunning, failed, unpublished and dead, in one screen.

One call to `billing.status_summary(p_now)` (db/functions/70_stats.sql).
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import TextIO

import psycopg
from psycopg.rows import dict_row

from billing import db
from billing.clock import Clock, SystemClock


def summary(database_url: str, *, clock: Clock | None = None) -> dict:
    now = (clock or SystemClock()).now()
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row, connect_timeout=10) as conn:
        row = conn.execute(db.STATUS_SUMMARY, {"now": now}).fetchone()
    return {"now": now, **row}


def _age(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 172800:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value else "-"


def render(s: dict) -> str:
    rows = [
        ("at", s["now"].strftime("%Y-%m-%d %H:%M:%S UTC")),
        ("", ""),
        ("subscriptions", f"{s['subscriptions_active']} active, {s['subscriptions_past_due']} past due, "
                          f"{s['subscriptions_canceled']} canceled"),
        ("renewals due", f"{s['renewals_due']}" + (f" (oldest due {_when(s['oldest_renewal_due_at'])})"
                                                    if s["renewals_due"] else "")),
        ("invoices open", f"{s['invoices_open']} ({s['charges_due']} to charge now)"),
        ("in dunning", f"{s['invoices_in_dunning']} open invoices declined at least once"),
        ("waiting", f"{s['invoices_waiting_for_method']} open invoices waiting for a payment method"),
        ("refunds", f"{s['refunds_pending']} requested, not executed yet"),
        ("failed", f"{s['invoices_failed']} invoices (dunning exhausted)"),
        ("paid", f"{s['invoices_paid']} invoices"),
        ("", ""),
        ("outbox backlog", f"{s['outbox_backlog']} unpublished ({s['outbox_due']} ready to publish)"),
        ("outbox oldest", _age(s["outbox_oldest_age_seconds"]) if s["outbox_backlog"] else "-"),
        ("outbox dead", f"{s['outbox_dead']}" + ("  <- needs attention" if s["outbox_dead"] else "")),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}".rstrip() if k else "" for k, v in rows)


def show(settings, *, clock: Clock | None = None, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    try:
        s = summary(settings.database_url, clock=clock)
    except psycopg.OperationalError as exc:
        raise SystemExit(f"billing status: cannot reach the database: {str(exc).strip()}") from exc
    print(render(s), file=out)
