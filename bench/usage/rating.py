"""Rating bench (issue 29: "the first of the month with 100,000 usage subscriptions of 3 meters each,
rated in under 60 s"; docs/usage.md "Rating in arrears"): the set-based rating (`billing.rate_usage`
on one PostgreSQL) by one worker, beside --workers workers at once (each call takes the due cursors
no other holds), beside the per-subscription path (`billing._rate_usage_rows`, what rate_usage was
before, and still is on Citus) in the same run, on copies of the same data.

    python -m bench.usage.rating                          # 20,000 subscriptions, main 605dd63 beside
    python -m bench.usage.rating --subscriptions 100000 --sample 0   # the issue's figure

--baseline REV (default 605dd63; 'none': skip): copies of the same database with the baseline's
function files re-applied (its db/ migrated over the copy: the schema must be the same), rated the
same ways in the same run, one path after the other (this tree, then the baseline), their ratings
compared. Every line prints the wall seconds for the N subscriptions and the worker count.

The world: N customers, each with one subscription (imported in the month, set-based:
`import_subscriptions`) on a plan of 3 charges (per_unit on a count meter, graduated on a sum
meter, package on a unique_count meter), renewed at the month's end (`create_due_invoices`); the
month's usage written as the ingestion leaves it (hourly rollups and distinct values: `--hours`
active hours per meter and subscription; the ingestion itself is bench/usage/run.py's). Then:

1. the cursors made before the renewal (`_usage_follow_all`, set-based), the database copied (CREATE DATABASE ...
   TEMPLATE), so both paths start from the same state;
2. set-based: `rate_usage(--batch)` until it looks at less than a batch, over all N, one worker;
2b. the same by --workers workers at once (threads, a connection each) on a copy: the wall clock
   and the CPU of all their server processes;
3. per subscription: `_rate_usage_rows(500)` on the copy for `--sample` subscriptions (all N would
   take tens of minutes), its rate per second and the time it would take for N;
4. the sample's ratings and invoices compared between the two databases (they must be equal).

Environment: BILLING_TEST_DATABASE_URL (a superuser URL of the server), as `make services` writes it.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

from bench.baseline import baseline_tree, host_load
from bench.usage.run import api_catalogue
from billing.migrate import migrate

from .run import url_for_db

REPO = Path(__file__).resolve().parents[2]
DB = "bench_usage_rating"
COPY = "bench_usage_rating_rows"
PARALLEL = "bench_usage_rating_workers"
BASE, BASE_PARALLEL = "bench_usage_rating_base", "bench_usage_rating_base_workers"
BASELINE = "605dd63"  # main before the usage2pc branch
START = datetime(2026, 10, 1, tzinfo=timezone.utc)
END = datetime(2026, 11, 1, tzinfo=timezone.utc)


def build(conn, n: int, hours: int, chunk: int = 10_000) -> float:
    """N customers of the API plan, a month of usage in the rollups, renewed; returns the follow's
    seconds. (bench.usage.rating_citus builds its cluster with it too, in chunks of 2,000.)"""
    api_catalogue(conn)
    at = START + timedelta(days=1)
    for lo in range(1, n + 1, chunk):
        hi = min(lo + chunk - 1, n)
        conn.execute("SELECT count(*) FROM billing.import_customers(%s::jsonb, %s)",
                     (json.dumps([{"external_id": f"c{i}", "id": i} for i in range(lo, hi + 1)]), at))
        conn.execute("SELECT count(*) FROM billing.import_subscriptions(%s::jsonb, %s)",
                     (json.dumps([{"external_id": f"s{i}", "customer_id": i, "plan_code": "API", "status": "ACTIVE",
                                   "current_period_start": START.isoformat(), "current_period_end": END.isoformat()}
                                  for i in range(lo, hi + 1)]), at))
    # the month's usage as the ingestion leaves it: `hours` active hours per meter and customer
    conn.execute("""
        INSERT INTO billing.usage_rollup (customer_id, meter_code, bucket, events, total, max_value, latest_time, latest_value)
        SELECT c, m, %(start)s::timestamptz + make_interval(hours => (c * 7 + h * 31) %% 743), 1 + (c + h) %% 9,
               CASE WHEN m = 'tokens' THEN (c * h) %% 300 ELSE 0 END, NULL, %(start)s::timestamptz, NULL
          FROM generate_series(1, %(n)s) c, generate_series(0, %(hours)s - 1) h, unnest(ARRAY['requests', 'tokens', 'users']) m
        ON CONFLICT DO NOTHING""", {"start": START, "n": n, "hours": hours})
    conn.execute("""
        INSERT INTO billing.usage_unique (customer_id, meter_code, bucket, value)
        SELECT c, 'users', %(start)s::timestamptz + make_interval(hours => (c * 7 + h * 31) %% 743), 'u' || ((c + h * v) %% 23)
          FROM generate_series(1, %(n)s) c, generate_series(0, %(hours)s - 1) h, generate_series(1, 2) v
        ON CONFLICT DO NOTHING""", {"start": START, "n": n, "hours": hours})
    # and each day's distinct values, which the ingestion writes beside the hour's (migration 0610):
    # usage_between reads a whole day's from them (the per-subscription path), the set statement the hours'
    conn.execute("""
        INSERT INTO billing.usage_unique_day (customer_id, meter_code, day, value)
        SELECT DISTINCT u.customer_id, u.meter_code, date_trunc('day', u.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', u.value
          FROM billing.usage_unique u
        ON CONFLICT DO NOTHING""")
    # the cursors, made as the worker's first round after the import makes them (before the renewal)
    t0 = time.perf_counter()
    conn.execute("SELECT billing._usage_follow_all(%s)", (at,))
    follow = time.perf_counter() - t0
    while conn.execute("SELECT billing.create_due_invoices(10000, %s)", (END + timedelta(seconds=1),)).fetchone()[0]:
        pass
    conn.execute("VACUUM ANALYZE")
    return follow


def backend_cpu(conn) -> float | None:
    """CPU seconds the connection's server process has used (the server runs on this machine): on a
    shared machine the wall clock says more about the load than about the work."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ratings(conn, limit: int) -> list[tuple]:
    return conn.execute("""
        SELECT r.subscription_id, r.meter_code, r.span_start, r.span_end, r.quantity, r.amount, r.billed,
               i.subtotal, i.amount, i.status, l.net, l.tax
          FROM billing.usage_rating r
          LEFT JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id
          LEFT JOIN billing.service_line l ON l.customer_id = r.customer_id AND l.id = r.line_id
         WHERE r.customer_id <= %s ORDER BY r.subscription_id, r.meter_code""", (limit,)).fetchall()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-url", default=os.environ.get("BILLING_TEST_DATABASE_URL"))
    ap.add_argument("--subscriptions", type=int, default=20_000)
    ap.add_argument("--hours", type=int, default=24, help="active hours per meter and subscription in the month")
    ap.add_argument("--batch", type=int, default=5000, help="rate_usage's batch size (set-based)")
    ap.add_argument("--sample", type=int, default=1000, help="subscriptions rated by the per-subscription path (0: none)")
    ap.add_argument("--workers", type=int, default=2, help="rating workers at once, beside the one worker")
    ap.add_argument("--baseline", default=BASELINE, help="git revision rated beside this tree ('none': skip)")
    args = ap.parse_args()
    n = args.subscriptions
    with psycopg.connect(args.server_url, autocommit=True) as conn:
        for db in (DB, COPY, PARALLEL, BASE, BASE_PARALLEL):
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB}")
    url = url_for_db(args.server_url, DB)
    migrate(url, REPO / "db", simulation=True)
    now = END + timedelta(hours=1, seconds=1)
    with psycopg.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        follow = build(conn, n, args.hours)
        rollups = conn.execute("SELECT count(*) FROM billing.usage_rollup").fetchone()[0]
        uniques = conn.execute("SELECT count(*) FROM billing.usage_unique").fetchone()[0]
        print(f"setup: {n:,} subscriptions renewed, {rollups:,} rollup rows + {uniques:,} distinct values "
              f"in {time.perf_counter() - t0:.0f} s", flush=True)
    with psycopg.connect(args.server_url, autocommit=True) as conn:
        t0 = time.perf_counter()
        if args.sample:
            conn.execute(f"CREATE DATABASE {COPY} TEMPLATE {DB}")
        if args.workers:
            conn.execute(f"CREATE DATABASE {PARALLEL} TEMPLATE {DB}")
        if args.baseline != "none":
            conn.execute(f"CREATE DATABASE {BASE} TEMPLATE {DB}")
            if args.workers:
                conn.execute(f"CREATE DATABASE {BASE_PARALLEL} TEMPLATE {DB}")
        print(f"cursors made (set-based) in {follow:.1f} s; copy of the database in {time.perf_counter() - t0:.0f} s",
              flush=True)
    if args.baseline != "none":
        base_db = baseline_tree(args.baseline) / "db"
        for db in (BASE, BASE_PARALLEL) if args.workers else (BASE,):
            migrate(url_for_db(args.server_url, db), base_db, simulation=True)
        print(f"baseline {args.baseline}: its function files re-applied on copies", flush=True)

    load_before = os.getloadavg()[0]
    with psycopg.connect(url, autocommit=True) as conn:
        cpu0 = backend_cpu(conn)
        t0 = time.perf_counter()
        looked = invoices = calls = 0
        while True:
            # (the worker's loop: the subscriptions not followed yet looked for by its round's first call)
            a, b = conn.execute("SELECT count(*), count(invoice_id) FROM billing.rate_usage(%s, %s, interval '1 hour', %s)",
                                (args.batch, now, calls == 0)).fetchone()
            looked, invoices, calls = looked + a, invoices + b, calls + 1
            if a < args.batch:
                break
        set_seconds = time.perf_counter() - t0
        set_cpu = backend_cpu(conn) - cpu0 if cpu0 is not None else float("nan")
        assert looked == n == invoices, (looked, n, invoices)
        lines = conn.execute("SELECT count(*) FROM billing.service_line WHERE item = 'USAGE'").fetchone()[0]
        set_rows = ratings(conn, args.sample)
    print(f"set-based rate_usage({args.batch}), 1 worker: {n:,} subscriptions x 3 charges in {set_seconds:.1f} s wall "
          f"({n / set_seconds:,.0f}/s; server CPU {set_cpu:.1f} s, {set_cpu / n * 1000:.2f} ms each; {calls} calls, {invoices:,} USAGE invoices, {lines:,} lines; load {load_before:.1f})",
          flush=True)

    base = {}
    if args.baseline != "none":
        base["load"] = os.getloadavg()[0]
        b = set_based(url_for_db(args.server_url, BASE), args.batch, now, n)
        base["set"] = b
        assert (ratings_of(url_for_db(args.server_url, BASE), args.sample or 1000)
                == ratings_of(url, args.sample or 1000)), "baseline and this tree disagree"
        print(f"baseline {args.baseline}, set-based rate_usage({args.batch}), 1 worker: {n:,} subscriptions in {b[0]:.1f} s wall "
              f"({n / b[0]:,.0f}/s; server CPU {b[1]:.1f} s, {b[1] / n * 1000:.2f} ms each; load {base['load']:.1f}); "
              f"ratings equal to this tree's", flush=True)

    par_seconds = par_cpu = float("nan")
    load_par = os.getloadavg()[0]
    if args.workers:
        par_seconds, par_cpu, par_calls = parallel(url_for_db(args.server_url, PARALLEL), args.workers, args.batch, now, n)
        with psycopg.connect(url_for_db(args.server_url, PARALLEL), autocommit=True) as conn:
            par_rows = ratings(conn, args.sample or 1000)
        assert par_rows == ratings_of(url, args.sample or 1000), "one worker and several disagree"
        print(f"{args.workers} workers at once, rate_usage({args.batch}) each: {n:,} subscriptions in {par_seconds:.1f} s "
              f"({n / par_seconds:,.0f}/s; server CPU {par_cpu:.1f} s in all, {par_cpu / n * 1000:.2f} ms each; "
              f"{par_calls} calls; load {load_par:.1f}); the first {args.sample or 1000:,} customers' ratings equal to one worker's",
              flush=True)
        if args.baseline != "none":
            base["par_load"] = os.getloadavg()[0]
            base["par"] = parallel(url_for_db(args.server_url, BASE_PARALLEL), args.workers, args.batch, now, n)
            print(f"baseline {args.baseline}, {args.workers} workers at once: {n:,} subscriptions in {base['par'][0]:.1f} s wall "
                  f"({n / base['par'][0]:,.0f}/s; server CPU {base['par'][1]:.1f} s in all, {base['par'][1] / n * 1000:.2f} ms each; "
                  f"load {base['par_load']:.1f})", flush=True)
    if not args.sample:
        summary(args, n, rollups, set_seconds, set_cpu, par_seconds, par_cpu, None, None, None,
                (load_before, load_par, os.getloadavg()[0]), base)
        with psycopg.connect(args.server_url, autocommit=True) as conn:
            for db in (PARALLEL, BASE, BASE_PARALLEL):
                conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        return
    load_rows = os.getloadavg()[0]
    with psycopg.connect(url_for_db(args.server_url, COPY), autocommit=True) as conn:
        cpu0 = backend_cpu(conn)
        t0 = time.perf_counter()
        rated = 0
        while rated < args.sample:
            rated += conn.execute("SELECT count(*) FROM billing._rate_usage_rows(%s, %s, interval '1 hour')",
                                  (min(500, args.sample - rated), now)).fetchone()[0]
        rows_seconds = time.perf_counter() - t0
        rows_cpu = backend_cpu(conn) - cpu0 if cpu0 is not None else float("nan")
        rows_rows = ratings(conn, args.sample)
    assert rows_rows == set_rows, "the two paths disagree on the sample"
    print(f"per subscription _rate_usage_rows(500): {rated:,} subscriptions in {rows_seconds:.1f} s "
          f"({rated / rows_seconds:,.0f}/s; server CPU {rows_cpu:.1f} s, {rows_cpu / rated * 1000:.2f} ms each; "
          f"{n:,} would take {n * rows_seconds / rated:,.0f} s); "
          f"the sample's {len(set_rows):,} ratings equal in both", flush=True)
    with psycopg.connect(args.server_url, autocommit=True) as conn:
        for db in (COPY, PARALLEL, BASE, BASE_PARALLEL):
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    summary(args, n, rollups, set_seconds, set_cpu, par_seconds, par_cpu, rated, rows_seconds, rows_cpu,
            (load_before, load_par, load_rows, os.getloadavg()[0]), base)


def set_based(url: str, batch: int, now, n: int) -> tuple[float, float, int]:
    """One worker's loop of rate_usage(batch) until a call looks at less than a batch: wall seconds,
    server CPU seconds, calls."""
    with psycopg.connect(url, autocommit=True) as conn:
        cpu0 = backend_cpu(conn)
        t0 = time.perf_counter()
        looked = invoices = calls = 0
        while True:
            a, b = conn.execute("SELECT count(*), count(invoice_id) FROM billing.rate_usage(%s, %s, interval '1 hour', %s)",
                                (batch, now, calls == 0)).fetchone()
            looked, invoices, calls = looked + a, invoices + b, calls + 1
            if a < batch:
                break
        seconds = time.perf_counter() - t0
        cpu = backend_cpu(conn) - cpu0 if cpu0 is not None else float("nan")
    assert looked == n == invoices, (looked, n, invoices)
    return seconds, cpu, calls


def ratings_of(url: str, limit: int) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return ratings(conn, limit)


def parallel(url: str, workers: int, batch: int, now, n: int) -> tuple[float, float, int]:
    """`workers` threads, a connection each, calling rate_usage until a call looks at less than a
    batch, all started at once: the wall clock and the server CPU of all their backends."""
    barrier = threading.Barrier(workers + 1)
    looked: list[int] = []
    invoiced: list[int] = []
    calls: list[int] = []
    cpu: list[float] = []
    errors: list[BaseException] = []

    def work(first: bool) -> None:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                cpu0 = backend_cpu(conn)
                barrier.wait()
                k = 0
                while True:
                    a, b = conn.execute("SELECT count(*), count(invoice_id) FROM billing.rate_usage(%s, %s, interval '1 hour', %s)",
                                        (batch, now, k == 0 and first)).fetchone()
                    looked.append(a)
                    invoiced.append(b)
                    k += 1
                    if a < batch:
                        break
                calls.append(k)
                cpu.append(backend_cpu(conn) - cpu0 if cpu0 is not None else float("nan"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(w == 0,)) for w in range(workers)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    assert not errors, errors
    assert sum(invoiced) == n, (sum(looked), sum(invoiced), n)
    return seconds, sum(cpu), sum(calls)


def summary(args, n, rollups, set_seconds, set_cpu, par_seconds, par_cpu, rated, rows_seconds, rows_cpu, loads,
            base=None) -> None:
    print()
    print(host_load())
    print(f"| rating, {n:,} subscriptions x 3 meters, {args.hours} active hours a meter ({rollups:,} rollup rows); "
          f"load {' / '.join(f'{x:.1f}' for x in loads)} | subscriptions/s | time for {n:,} | server CPU per subscription | CPU for {n:,} |")
    print("|---|---:|---:|---:|---:|")
    print(f"| set-based `rate_usage({args.batch})`, one worker | {n / set_seconds:,.0f} | {set_seconds:.1f} s | "
          f"{set_cpu / n * 1000:.2f} ms | {set_cpu:.1f} s |")
    if args.workers:
        print(f"| set-based `rate_usage({args.batch})`, {args.workers} workers at once | {n / par_seconds:,.0f} | "
              f"{par_seconds:.1f} s | {par_cpu / n * 1000:.2f} ms | {par_cpu:.1f} s |")
    if base:
        b = base["set"]
        print(f"| baseline {args.baseline}: set-based `rate_usage({args.batch})`, one worker | {n / b[0]:,.0f} | {b[0]:.1f} s | "
              f"{b[1] / n * 1000:.2f} ms | {b[1]:.1f} s |")
        if "par" in base:
            b = base["par"]
            print(f"| baseline {args.baseline}: set-based `rate_usage({args.batch})`, {args.workers} workers at once | "
                  f"{n / b[0]:,.0f} | {b[0]:.1f} s | {b[1] / n * 1000:.2f} ms | {b[1]:.1f} s |")
    if rated:
        print(f"| per subscription `_rate_usage_rows(500)` (sample of {rated:,}) | {rated / rows_seconds:,.0f} | "
              f"{n * rows_seconds / rated:,.0f} s (extrapolated) | {rows_cpu / rated * 1000:.2f} ms | {rows_cpu / rated * n:,.0f} s |")


if __name__ == "__main__":
    main()
