"""The /v1 lists on a big database: each list's page (first and deep in the walk) with its plan.

    python -m bench.api_lists.run                          # 1,000,000 subscriptions
    python -m bench.api_lists.run --subscriptions 200000
    python -m bench.api_lists.run --existing URL          # read-only, on a database generated elsewhere
                                                          # (e.g. bench/scale's): nothing written

On a fresh database (migrated with --simulation) it writes --subscriptions subscriptions (one
customer each, 4 plans, statuses spread, creation times over a year) and as many invoices straight
into the tables in a few set-based statements (the SQL API's per-row checks are not what is
measured), ANALYZEs, then for each list filter of db/functions/77_api_lists.sql times a first page
and a page deep in the walk (a cursor near the bottom) through the function itself, and prints the
plan of the statement the function runs (billing._page) with its buffers. A page must cost the same
at any depth: an index range from the cursor, never an offset or a sort of the table. The cheap
check of the same plans runs in make test (db/tests/770_api_lists.sql, the planner told a scan is
out of the question); this bench is the evidence on real sizes (docs/http-api.md, "Lists").

Environment: BILLING_TEST_DATABASE_URL (a superuser URL); --database-url overrides.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parents[2]

# (what, function call with %(after)s, the statement's FROM, WHERE, prepared types and arguments); {plan},
# {email}, {invoice_status}, {customer}, {created_from/to}, {period_from/to}: this database's values.
CASES = [
    ("subscriptions, all", "list_subscriptions(11, %(after)s)", "billing.subscription", None, ""),
    ("subscriptions by status", "list_subscriptions(11, %(after)s, NULL, NULL, 'PAST_DUE')", "billing.subscription",
     ["status = $3"], ", 'PAST_DUE'::text"),
    ("subscriptions by plan", "list_subscriptions(11, %(after)s, NULL, NULL, NULL, '{plan}')", "billing.subscription",
     ["plan_id = (SELECT p.id FROM billing.plan p WHERE p.code = $3)"], ", '{plan}'::text"),
    ("subscriptions of a customer", "list_subscriptions(11, %(after)s, NULL, {customer})", "billing.subscription",
     ["customer_id = $3"], ", {customer}::bigint"),
    ("subscriptions created in a week", "list_subscriptions(11, %(after)s, NULL, NULL, NULL, NULL, '{created_from}', "
     "'{created_to}')", "billing.subscription", ["created_at >= $3", "created_at < $4"],
     ", '{created_from}'::timestamptz, '{created_to}'::timestamptz"),
    ("invoices by status", "list_invoices(11, %(after)s, NULL, NULL, '{invoice_status}')", "billing.invoice", ["status = $3"],
     ", '{invoice_status}'::text"),
    ("invoices, all", "list_invoices(11, %(after)s)", "billing.invoice", None, ""),
    ("invoices of a customer", "list_invoices(11, %(after)s, NULL, {customer})", "billing.invoice", ["customer_id = $3"],
     ", {customer}::bigint"),
    ("invoices by period (a week)", "list_invoices(11, %(after)s, NULL, NULL, NULL, '{period_from}', '{period_to}')",
     "billing.invoice", ["period_start >= $3", "period_start < $4"], ", '{period_from}'::timestamptz, '{period_to}'::timestamptz"),
    ("customers by email", "list_customers(11, %(after)s, NULL, '{email}')", "billing.customer",
     ["email IS NOT NULL AND lower(email) = lower($3)"], ", '{email}'::text"),
    ("events of a customer", "list_events(11, %(after)s, NULL, NULL, NULL, NULL, {customer})", "billing.outbox_event",
     ["customer_id = $3"], ", {customer}::bigint"),
]


def values(conn) -> dict:
    """This database's values for the cases: the second plan, customer 4242 and its email, the rarer of
    the invoice statuses present, a week of signups and of invoice periods in the middle."""
    one = lambda q: conn.execute(q).fetchone()[0]  # noqa: E731
    return {"plan": one("SELECT code FROM billing.plan ORDER BY id OFFSET 1 LIMIT 1"), "customer": 4242,
            "email": one("SELECT email FROM billing.customer WHERE id = 4242"),
            "invoice_status": one("SELECT status FROM billing.invoice GROUP BY status ORDER BY count(*) LIMIT 1"),
            "created_from": one("SELECT created_at FROM billing.subscription WHERE id = (SELECT max(id) / 2 FROM billing.subscription)"),
            "created_to": one("SELECT created_at + interval '7 days' FROM billing.subscription "
                              "WHERE id = (SELECT max(id) / 2 FROM billing.subscription)"),
            "period_from": one("SELECT period_start FROM billing.invoice WHERE id = (SELECT max(id) / 2 FROM billing.invoice)"),
            "period_to": one("SELECT period_start + interval '7 days' FROM billing.invoice "
                             "WHERE id = (SELECT max(id) / 2 FROM billing.invoice)")}


def populate(conn, n: int) -> None:
    conn.execute("SELECT billing.upsert_plan('BENCH_' || g, 1000 * g, 'USD', 'MONTH', 1) FROM generate_series(1, 4) g")
    conn.execute("INSERT INTO billing.customer (id, email) SELECT g, 'c' || g || '@example.com' "
                 "FROM generate_series(1, %s) g", (n,))
    conn.execute("""
        INSERT INTO billing.subscription (customer_id, plan_id, status, canceled_at, timezone, billing_anchor,
                                          current_period_start, current_period_end, period_price, created_at)
        SELECT g, (SELECT id FROM billing.plan WHERE code = 'BENCH_' || (1 + g %% 4)), x.status,
               CASE WHEN x.status = 'CANCELED' THEN x.t END, 'UTC', x.t, x.t, x.t + interval '1 month', 1000, x.t
          FROM generate_series(1, %s) g,
               LATERAL (SELECT timestamptz '2026-01-01' + g * interval '30 seconds' AS t,
                               (ARRAY['ACTIVE', 'ACTIVE', 'ACTIVE', 'PAST_DUE', 'CANCELED'])[1 + g %% 5] AS status) x""",
                 (n,))
    conn.execute("""
        INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, amount,
                                     currency, status, paid_at, due_at, created_at, plan_id, plan_price,
                                     billing_interval, interval_count)
        SELECT s.id, s.customer_id, 'INITIAL', s.current_period_start, s.current_period_end, 1000, 1000, 'USD',
               CASE WHEN s.status = 'PAST_DUE' THEN 'FAILED' ELSE 'PAID' END,
               CASE WHEN s.status <> 'PAST_DUE' THEN s.current_period_start END, s.current_period_start,
               s.current_period_start, s.plan_id, 1000, 'MONTH', 1
          FROM billing.subscription s""")
    conn.execute("ANALYZE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subscriptions", type=int, default=1_000_000)
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--existing", default=None, metavar="URL",
                    help="a database already generated (bench/scale's): read and EXPLAIN only, nothing written")
    args = ap.parse_args()
    if args.existing:
        with psycopg.connect(args.existing, autocommit=True) as conn:
            # This tree's _page as a temporary function of the session (the database keeps its own
            # functions: nothing is written to it), then every statement read only.
            text = (REPO / "db" / "functions" / "77_api_lists.sql").read_text()
            text = text[text.index("CREATE OR REPLACE FUNCTION billing._page("):]
            text = text[:text.index("$$;") + 3].replace("FUNCTION billing._page(", "FUNCTION pg_temp._page(")
            conn.execute(text)
            conn.execute("SET default_transaction_read_only = on")
            n = conn.execute("SELECT count(*) FROM billing.subscription").fetchone()[0]
            print(f"{n:,} subscriptions (an existing database, read only; this tree's billing._page)")
            measure(conn, n, values(conn), "pg_temp._page")
        return
    server = args.database_url or os.environ["BILLING_TEST_DATABASE_URL"]
    url = server.rsplit("/", 1)[0] + "/billing_bench_lists"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS billing_bench_lists WITH (FORCE)")
        conn.execute("CREATE DATABASE billing_bench_lists")
    subprocess.run([sys.executable, "-m", "billing.cli", "--log-level", "WARNING", "db", "migrate", "--simulation",
                    "--database-url", url], check=True)
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.monotonic()
        populate(conn, args.subscriptions)
        print(f"{args.subscriptions:,} subscriptions, customers and invoices written and analyzed in "
              f"{time.monotonic() - started:.0f} s")
        measure(conn, args.subscriptions, values(conn))


def measure(conn, n: int, found: dict, page_fn: str = "billing._page") -> None:
    """Each case's statement (page_fn: this tree's billing._page), a first page and one deep in the walk,
    best of 3, and the plan of the deep page."""
    deep = max(1, n // 50)  # a cursor near the bottom of the walk (98 % down)
    print(f"{'list':<32} {'first page ms':>14} {'deep page ms':>14}  plan of the deep page")
    for what, _call, source, where, types in CASES:
        types = types.format(**found)
        walk = 2000 if where and any(">=" in w for w in where) else None  # a time range: list_* passes 2000
        timings, plan = [], ""
        for after in (None, deep):
            sql = conn.execute(f"SELECT {page_fn}(%s, 'id', %s::text[], %s, false, 11, %s)",
                               (source, where, after is not None, walk)).fetchone()[0]
            extra = "".join(", " + t for t in re.findall(r"::([a-z]+)", types))
            conn.execute(f"PREPARE bench_page(bigint, bigint{extra}) AS {sql}")
            try:
                call = f"EXECUTE bench_page({after or 'NULL'}, NULL{types})"
                timings.append(min(_timed(conn, call) for _ in range(3)))
                if after is not None:
                    rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {call}").fetchall()
                    nodes = [r[0].strip().lstrip("-> ") for r in rows
                             if " using " in r[0] or "Sort Method" in r[0] or "Rows Removed" in r[0]]
                    total = [r[0].strip() for r in rows if r[0].strip().startswith("Buffers")][:1]
                    plan = " | ".join(nodes[:4] + total)
            finally:
                conn.execute("DEALLOCATE bench_page")
        print(f"{what:<32} {timings[0]:>14.2f} {timings[1]:>14.2f}  {plan}")


def _timed(conn, query: str) -> float:
    started = time.perf_counter()
    conn.execute(query).fetchall()
    return (time.perf_counter() - started) * 1000


if __name__ == "__main__":
    main()
