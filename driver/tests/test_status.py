"""`billing status` and the stats SQL functions behind it (db/functions/70_stats.sql)."""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone

import psycopg
from click.testing import CliRunner

from billing.cli import main
from billing.clock import SimulatedClock
from billing.config import Settings
from billing.status import show, summary

T0 = datetime(2026, 10, 1, 12, 0, tzinfo=timezone.utc)


def populate(db_url: str) -> None:
    """Five subscriptions at T0: one paid, one declined (dunning), one canceled, two untouched."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO_MONTHLY', 300000, 'USD', 'MONTH', 1)")
        for n in range(1, 6):
            conn.execute("SELECT billing.create_subscription(%s, %s, 'PRO_MONTHLY', %s)", (f"st-{n}", n, T0))
        claims = conn.execute(
            "SELECT invoice_id, idempotency_key, customer_id FROM billing.claim_charges('t', 2, '5 minutes', %s) "
            "ORDER BY invoice_id", (T0,)).fetchall()
        conn.execute("SELECT billing.record_payment_result(%s, 'SUCCEEDED', 'ch_1', NULL, %s)", (claims[0][1], T0))
        conn.execute("SELECT billing.record_payment_result(%s, 'DECLINED', NULL, 'insufficient_funds', %s)",
                     (claims[1][1], T0))
        sub = conn.execute("SELECT id FROM billing.subscription WHERE customer_id = 5").fetchone()[0]
        conn.execute("SELECT billing.cancel_subscription(%s, false, %s)", (sub, T0))
        # One event already published and one dead, to see every outbox figure.
        first = conn.execute("SELECT min(id) FROM billing.outbox_event").fetchone()[0]
        conn.execute("SELECT billing.mark_outbox_published(ARRAY[%s]::bigint[], %s)", (first, T0))
        conn.execute("UPDATE billing.outbox_event SET status = 'DEAD' WHERE id = "
                     "(SELECT max(id) FROM billing.outbox_event WHERE status = 'PENDING')")


def test_summary_figures(db_url):
    populate(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        events = dict(conn.execute("SELECT status, count(*) FROM billing.outbox_event GROUP BY 1").fetchall())
    later = T0 + timedelta(days=40)  # every period [T0, T0 + 1 month) is over
    s = summary(db_url, clock=SimulatedClock(later))
    assert (s["subscriptions_active"], s["subscriptions_past_due"], s["subscriptions_canceled"]) == (3, 1, 1)
    assert s["renewals_due"] == 4 and s["oldest_renewal_due_at"] == datetime(2026, 11, 1, 12, tzinfo=timezone.utc)
    assert s["invoices_open"] == 3  # the declined one and the two never claimed
    assert s["invoices_in_dunning"] == 1 and s["invoices_paid"] == 1 and s["invoices_failed"] == 0
    assert s["outbox_backlog"] == events["PENDING"] and s["outbox_dead"] == events["DEAD"] == 1
    assert s["outbox_oldest_age_seconds"] == 40 * 86400

    # At T0 nothing is due to renew, the events are exactly as old as the clock.
    s0 = summary(db_url, clock=SimulatedClock(T0))
    assert s0["renewals_due"] == 0 and s0["outbox_oldest_age_seconds"] == 0


def test_show_prints_a_readable_summary(db_url):
    populate(db_url)
    out = io.StringIO()
    show(Settings(database_url=db_url), clock=SimulatedClock(T0 + timedelta(days=40, hours=3)), out=out)
    text = out.getvalue()
    for label in ("subscriptions", "renewals due", "invoices open", "in dunning", "failed",
                  "outbox backlog", "outbox oldest", "outbox dead"):
        assert label in text, text
    assert "3 active, 1 past due, 1 canceled" in text
    assert "40d03h" in text  # the oldest unpublished event's age
    assert "needs attention" in text  # one DEAD event


def test_status_command(db_url):
    result = CliRunner().invoke(main, ["status", "--database-url", db_url])
    assert result.exit_code == 0, result.output
    assert "outbox backlog  0 unpublished" in result.output
    result = CliRunner().invoke(main, ["status", "--database-url", "postgresql://postgres@127.0.0.1:1/none"])
    assert result.exit_code != 0 and "cannot reach the database" in result.output
