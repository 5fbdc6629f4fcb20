"""The operator's reads at scale (issue 32): the console's pages, the customer search and the MRR
reports timed on a generated database of --total subscriptions (default 5,000,000).

    python -m bench.scale.run                         # 5,000,000 subscriptions
    python -m bench.scale.run --total 1000000 --repeat 20
    make bench-scale BENCH_ARGS="--total 1000000"

Data (bench/scale/generate.sql, set-based): one customer per subscription (a name and an email),
four plans (monthly and yearly, USD and EUR), signups over the 24 months before the bench clock
(2026-03-01 00:00Z), 90% ACTIVE, 3% PAST_DUE (an OPEN invoice after one decline), 7% CANCELED; each
subscription's INITIAL invoice and its current period's RENEWAL invoice, each with its service line, and
one service line for the periods between (no invoices: the invoice history is thinner than
production's; the MRR reads the same steps as from one line per period). Indexes and foreign keys are
built after each table's load; the overview's counters come from the engine's triggers and the MRR
aggregate from the engine's fold. --database NAME times an existing database as it is. Built once into a database named after
the size and a hash of the generator (reused; --rebuild forces it); migrations added since are
applied on top; the current function files are applied to it before every run.

Each read runs --repeat times on one connection (after one warm-up call); p50, p95 and max are
printed with the goal of issue 32 beside them: overview and list pages p95 <= 200 ms, customer
search <= 50 ms, report_mrr for one month <= 1 s, 24 months of MRR movements <= 5 s; then the
overview's and status_summary's kept counts are compared with the rows counted. The slow reports run
--report-repeat times (default 1) under --timeout seconds each (a read over the limit is printed as
such). The machine's load is printed with each figure.

Environment: BILLING_TEST_DATABASE_URL (a superuser URL of the server, as `make services` writes
it); --database-url overrides. Needs psql on PATH.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import psycopg
from psycopg import sql

from bench.renewal.run import admin, backend_cpu, host_load, url_for_db
from billing.migrate import migrate

REPO = Path(__file__).resolve().parents[2]
GENERATE = Path(__file__).with_name("generate.sql")
NOW = datetime(2026, 3, 1, tzinfo=timezone.utc)
# Every read and check on one core (a shared host): no parallel workers.
ONE_CORE = "-c max_parallel_workers_per_gather=0 -c max_parallel_maintenance_workers=0"

# (name, goal in ms, SQL, parameters); %(now)s is the bench clock.
PAGES = [
    ("console_overview", 200, "SELECT billing.console_overview(%(now)s)", {}),
    ("console_invoices (all, first page)", 200, "SELECT count(*) FROM billing.console_invoices(NULL, NULL, 50)", {}),
    ("console_invoices (OPEN)", 200, "SELECT count(*) FROM billing.console_invoices('OPEN', NULL, 50)", {}),
    ("console_invoices (FAILED: none)", 200, "SELECT count(*) FROM billing.console_invoices('FAILED', NULL, 50)", {}),
    ("console_invoices (page in the middle)", 200, "SELECT count(*) FROM billing.console_invoices(NULL, %(mid_invoice)s, 50)", {}),
    ("console_customers (first page)", 200, "SELECT count(*) FROM billing.console_customers('', 50)", {}),
    ("console_events (first page)", 200, "SELECT count(*) FROM billing.console_events(NULL, NULL, NULL, 50)", {}),
    ("console_customer", 200, "SELECT billing.console_customer(%(mid_customer)s)", {}),
    ("console_subscription", 200, "SELECT billing.console_subscription(%(mid_customer)s)", {}),
    ("search: an id", 50, "SELECT count(*) FROM billing.console_customers(%(mid_customer_text)s, 50)", {}),
    ("search: an email", 50, "SELECT count(*) FROM billing.console_customers(%(email)s, 50)", {}),
    ("search: a name", 50, "SELECT count(*) FROM billing.console_customers(%(name)s, 50)", {}),
    ("search: a common word", 50, "SELECT count(*) FROM billing.console_customers('globex', 50)", {}),
    ("search: an email's domain (1,000s match)", 50, "SELECT count(*) FROM billing.console_customers(%(domain)s, 50)", {}),
    ("search: '@' and an email's domain (1,000s match)", 50, "SELECT count(*) FROM billing.console_customers(%(at_domain)s, 50)", {}),
    ("search: '@' and a domain's start (111 domains)", 50, "SELECT count(*) FROM billing.console_customers('@example1', 50)", {}),
    ("status_summary (billing status)", 200, "SELECT count(*) FROM billing.status_summary(%(now)s)", {}),
]
REPORTS = [
    ("report_mrr (one instant)", 1000, "SELECT count(*) FROM billing.report_mrr(%(now)s)", {}),
    ("report_mrr_movements (one month)", 1000, "SELECT count(*) FROM billing.report_mrr_movements('2026-02-01', '2026-02-01')", {}),
    ("report_mrr_movements (24 months)", 5000, "SELECT count(*) FROM billing.report_mrr_movements('2024-03-01', '2026-02-01')", {}),
    ("console_mrr (30 days)", 1000, "SELECT count(*) FROM billing.console_mrr(%(now)s, 30)", {}),
]
# The same figures recomputed from every line (the full recomputation, as before migration 0360):
# the "before" beside the kept aggregate, on the same database in the same run (--before).
BEFORE = [
    ("report_mrr (one instant), recomputed", 1000, "SELECT count(*) FROM billing._mrr_totals(ARRAY[%(now)s::timestamptz], true)", {}),
    ("report_mrr_movements (one month), recomputed", 1000, "SELECT count(*) FROM billing._mrr_movements('2026-02-01', '2026-02-01', true)", {}),
    ("report_mrr_movements (24 months), recomputed", 5000, "SELECT count(*) FROM billing._mrr_movements('2024-03-01', '2026-02-01', true)", {}),
    ("console_mrr (30 days), recomputed", 1000,
     "SELECT count(*) FROM billing._mrr_totals(ARRAY(SELECT %(now)s::timestamptz - make_interval(days => k) FROM generate_series(0, 30) k), true)", {}),
]


def fingerprint(total: int) -> str:
    # The generator alone names the database: migrations added since it was generated are applied on
    # top by migrate() (as they would be in production: a migration must backfill what it adds), so a
    # new index or counter table does not cost a new generation. --rebuild starts from scratch.
    h = hashlib.sha256(GENERATE.read_bytes())
    return f"bench_scale_{total}_{h.hexdigest()[:8]}"


def build(server: str, total: int, rebuild: bool) -> str:
    name = fingerprint(total)
    with psycopg.connect(server, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        stale = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
                             (f"bench_scale_{total}_%", name)).fetchall()
    for (old,) in stale:
        admin(server, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(old)))
    url = url_for_db(server, name)
    if exists and not rebuild:
        print(f"  database {name}: reused")
    else:
        admin(server, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)),
              sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        migrate(url, REPO / "db", simulation=True)
        started = time.perf_counter()
        out = subprocess.run(["psql", "-XqAt", "-d", url, "-v", f"total={total}", "-v", f"now={NOW.isoformat()}", "-f", str(GENERATE)],
                             check=True, capture_output=True, text=True).stdout
        # The generator's last line: its backend's CPU in clock ticks (one core: no parallel workers).
        ticks = [int(line.split("|")[1]) for line in out.splitlines() if line.startswith("server_cpu_ticks|")]
        cpu = f", server CPU {ticks[0] / os.sysconf('SC_CLK_TCK'):.0f} s" if ticks else ""
        print(f"  database {name}: {total:,} subscriptions generated in {time.perf_counter() - started:.0f} s{cpu} ({host_load()})")
    with psycopg.connect(url, autocommit=True) as conn:
        size = conn.execute("SELECT pg_size_pretty(pg_database_size(current_database()))").fetchone()[0]
    print(f"  database size: {size}")
    migrate(url, REPO / "db", simulation=True)  # the function files as they are now
    admin(url, sql.SQL("ANALYZE"))
    return url


def backend_ns(pid: int) -> int | None:
    """The backend's time on a CPU so far, in ns (/proc/PID/schedstat; None: server not on this machine)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None


def timed(conn: psycopg.Connection, query: str, params: dict, repeat: int, timeout_s: float,
          cpu: list | None = None) -> list[float] | str:
    """Wall times in ms, sorted; `cpu` gets the backend's CPU ms per call (the server's own work,
    whatever the host's load) when the server runs on this machine."""
    conn.execute(f"SET statement_timeout = {int(timeout_s * 1000)}")
    times = []
    try:
        conn.execute(query, params).fetchall()  # warm-up
        before = backend_ns(conn.info.backend_pid)
        for _ in range(repeat):
            started = time.perf_counter()
            conn.execute(query, params).fetchall()
            times.append((time.perf_counter() - started) * 1000)
        after = backend_ns(conn.info.backend_pid)
        if cpu is not None and before is not None and after is not None:
            cpu.append((after - before) / repeat / 1e6)
    except psycopg.errors.QueryCanceled:
        return f"over {timeout_s:.0f} s"
    return sorted(times)


def pct(times: list[float], p: float) -> float:
    return times[min(len(times) - 1, int(round(p * (len(times) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database-url", default=os.environ.get("BILLING_TEST_DATABASE_URL") or "postgresql://postgres@127.0.0.1:25432/postgres")
    ap.add_argument("--total", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=20, help="calls of each page (after a warm-up)")
    ap.add_argument("--report-repeat", type=int, default=1, help="calls of each report (after a warm-up)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds a read may take")
    ap.add_argument("--skip-reports", action="store_true")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--skip-check", action="store_true", help="do not compare the kept counts with the rows")
    ap.add_argument("--before", action="store_true", help="also time the MRR reports recomputed from every line")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--database", help="time the reads on this existing database as it is (no generation, no migration, no fold)")
    ap.add_argument("--skip-pages", action="store_true", help="time the reports only")
    ap.add_argument("--drop", action="store_true", help="drop the generated database at the end (the disk)")
    args = ap.parse_args()
    print(f"scale bench: {args.total:,} subscriptions, {os.cpu_count()} CPUs, {host_load()}")
    if args.database:
        url = url_for_db(args.database_url, args.database)  # as it is: neither generated nor migrated here
        print(f"  database {args.database}: used as it is")
    else:
        url = build(args.database_url, args.total, args.rebuild)
    # The MRR kept by the engine's writes (migration 0360): the customers marked since the last fold
    # (all of them after a generation or the migration's backfill) recomputed once, timed.
    # (--database: read as it is, no fold).
    if not args.database:
        with psycopg.connect(url, autocommit=True, options=ONE_CORE) as conn:
            started = time.perf_counter()
            pid = conn.info.backend_pid
            cpu = backend_cpu(pid)
            folded = conn.execute("SELECT billing._mrr_fold()").fetchone()[0]
            if folded:
                used = backend_cpu(pid)
                per = f", server CPU {(used - cpu) / folded * 1e6:.0f} us per customer" if cpu is not None and used is not None else ""
                print(f"  MRR fold: {folded:,} customers recomputed in {time.perf_counter() - started:.1f} s{per} ({host_load()})")
            conn.execute("VACUUM ANALYZE billing.mrr_segment, billing.mrr_delta, billing.mrr_movement, billing.mrr_dirty")
    results = {"total": args.total, "reads": {}}
    with psycopg.connect(url, autocommit=True, options=ONE_CORE) as conn:
        mid = args.total // 2
        mid_invoice = conn.execute("SELECT max(id) / 2 FROM billing.invoice").fetchone()[0]
        params = {"now": NOW, "mid_customer": mid, "mid_customer_text": str(mid), "mid_invoice": mid_invoice,
                  "email": f"user{mid}@", "name": f"customer {mid} ", "domain": f"example{mid % 997}.com",
                  "at_domain": f"@example{mid % 997}.com"}
        rows = [] if args.skip_pages else [(n, g, q, p, args.repeat) for n, g, q, p in PAGES]
        if not args.skip_reports:
            rows += [(n, g, q, p, args.report_repeat) for n, g, q, p in REPORTS]
        if args.before:
            rows += [(n, g, q, p, 1) for n, g, q, p in BEFORE]
        print()
        print("| read | goal | p50 | p95 | max | met? | server CPU a call | host |")
        print("|---|---:|---:|---:|---:|---|---:|---|")
        for name, goal, query, extra, repeat in rows:
            cpu: list[float] = []
            t = timed(conn, query, {**params, **extra}, repeat, args.timeout, cpu)
            load = host_load()
            if isinstance(t, str):
                print(f"| {name} | {goal} ms | {t} | | | **no** | | {load} |", flush=True)
                results["reads"][name] = {"goal_ms": goal, "over": t, "host": load}
                continue
            p95 = pct(t, 0.95)
            met = "yes" if p95 <= goal else "**no**"
            used = f"{cpu[0]:.2f} ms" if cpu else ""
            print(f"| {name} | {goal} ms | {pct(t, 0.5):.1f} ms | {p95:.1f} ms | {t[-1]:.1f} ms | {met} | {used} | {load} |", flush=True)
            results["reads"][name] = {"goal_ms": goal, "p50_ms": pct(t, 0.5), "p95_ms": p95, "max_ms": t[-1], "host": load,
                                      "server_cpu_ms": cpu[0] if cpu else None}
        # The kept counts (billing.overview_count, migration 0310) against the rows counted, on
        # this database: the generator's inserts and the migration's backfill must both be counted.
        if not args.skip_check:
            kept = conn.execute("SELECT billing._overview_counts_kept()").fetchone()[0]
            started = time.perf_counter()
            a, b = conn.execute("SELECT billing._console_overview(%(now)s, NOT billing._overview_counts_kept()),"
                                "       billing._console_overview(%(now)s, true)", params).fetchone()
            c, d = conn.execute("SELECT (SELECT row(s.*)::text FROM billing._status_summary(%(now)s, NOT billing._overview_counts_kept()) s),"
                                "       (SELECT row(s.*)::text FROM billing._status_summary(%(now)s, true) s)", params).fetchone()
            same = a == b and c == d
            print(f"\ncounts kept: {kept}; the overview and status_summary equal the rows counted: "
                  f"{'yes' if same else 'NO'} (counting the rows took {time.perf_counter() - started:.1f} s)")
            results["counts_equal_rows"] = same
            if not same:
                print(json.dumps({"kept": a, "rows": b, "status_kept": c, "status_rows": d}, indent=1))
        # The kept MRR against the full recomputation on this database: report_mrr at the bench
        # clock and one month of movements (each recomputation takes about a minute at 1,000,000).
        if not args.skip_check and not args.skip_reports:
            started = time.perf_counter()
            conn.execute("SET statement_timeout = 0")
            # Numeric equality (a kept 0 may print as 0.000...), both ways.
            checks = {
                "report_mrr (the bench clock and 2025-06-15 12:00)":
                    "SELECT * FROM billing._mrr_totals(ARRAY[%(now)s::timestamptz, '2025-06-15 12:00Z'], {}) t WHERE t.mrr > 0",
                "movements (one month)": "SELECT * FROM billing._mrr_movements('2026-02-01', '2026-02-01', {}) m",
            }
            for what, q in checks.items():
                kept_q, full_q = q.format("false"), q.format("true")
                differ = conn.execute(f"WITH k AS MATERIALIZED ({kept_q}), f AS MATERIALIZED ({full_q}) "
                                      "SELECT (SELECT count(*) FROM (SELECT * FROM k EXCEPT ALL SELECT * FROM f) a)"
                                      "     + (SELECT count(*) FROM (SELECT * FROM f EXCEPT ALL SELECT * FROM k) b),"
                                      "       (SELECT count(*) FROM k)", params).fetchone()
                print(f"MRR kept = recomputed, {what}: {'yes' if differ[0] == 0 else 'NO'} ({differ[1]} rows compared)")
                results[f"mrr_equal_{what}"] = differ[0] == 0
            print(f"(the MRR checks took {time.perf_counter() - started:.1f} s, {host_load()})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.drop:
        admin(args.database_url, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(fingerprint(args.total))))
        print(f"database {fingerprint(args.total)} dropped")


if __name__ == "__main__":
    main()
