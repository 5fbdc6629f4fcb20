"""The /v1 lists on a big database: each list's page (first and deep in the walk) with its plan.

    python -m bench.api_lists.run                          # 1,000,000 subscriptions
    python -m bench.api_lists.run --subscriptions 200000

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
import subprocess
import sys
import time

import psycopg

CASES = [  # (what, function call with %(after)s, the statement's FROM, WHERE, prepared types, arguments)
    ("subscriptions, all", "list_subscriptions(11, %(after)s)", "billing.subscription", None, ""),
    ("subscriptions by status", "list_subscriptions(11, %(after)s, NULL, NULL, 'PAST_DUE')", "billing.subscription",
     ["status = $3"], ", 'PAST_DUE'::text"),
    ("subscriptions by plan", "list_subscriptions(11, %(after)s, NULL, NULL, NULL, 'BENCH_2')", "billing.subscription",
     ["plan_id = (SELECT p.id FROM billing.plan p WHERE p.code = $3)"], ", 'BENCH_2'::text"),
    ("subscriptions of a customer", "list_subscriptions(11, %(after)s, NULL, 4242)", "billing.subscription",
     ["customer_id = $3"], ", 4242::bigint"),
    ("invoices by status", "list_invoices(11, %(after)s, NULL, NULL, 'FAILED')", "billing.invoice", ["status = $3"],
     ", 'FAILED'::text"),
    ("invoices, all", "list_invoices(11, %(after)s)", "billing.invoice", None, ""),
    ("customers by email", "list_customers(11, %(after)s, NULL, 'c4242@example.com')", "billing.customer",
     ["email IS NOT NULL AND lower(email) = lower($3)"], ", 'c4242@example.com'::text"),
]


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
    args = ap.parse_args()
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
        deep = max(1, args.subscriptions // 50)  # a cursor near the bottom of the walk (98 % down)
        print(f"{'list':<30} {'first page ms':>14} {'deep page ms':>14}  plan of the deep page")
        for what, call, source, where, types in CASES:
            timings = []
            for after in (None, deep):
                best = min(_timed(conn, f"SELECT count(*) FROM billing.{call}", {"after": after}) for _ in range(3))
                timings.append(best)
            plan = _plan(conn, source, where, types, deep)
            print(f"{what:<30} {timings[0]:>14.2f} {timings[1]:>14.2f}  {plan}")


def _timed(conn, query: str, params: dict) -> float:
    started = time.perf_counter()
    conn.execute(query, params).fetchall()
    return (time.perf_counter() - started) * 1000


def _plan(conn, source, where, types, after) -> str:
    sql = conn.execute("SELECT billing._page(%s, 'id', %s::text[], true, false, 11)", (source, where)).fetchone()[0]
    extra = ", text" if "text" in types else ", bigint" if types else ""
    conn.execute(f"PREPARE bench_page(bigint, bigint{extra}) AS {sql}")
    try:
        rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE bench_page({after}, NULL{types})").fetchall()
    finally:
        conn.execute("DEALLOCATE bench_page")
    nodes = [r[0].strip() for r in rows if "Scan" in r[0] or "Sort" in r[0] or "Buffers" in r[0]]
    return " | ".join(nodes[:3])


if __name__ == "__main__":
    main()
