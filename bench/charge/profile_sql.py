"""Where the charge path's PostgreSQL CPU goes: one backend claims and records like a worker.

A database migrated from this tree (or `--tree`'s db/) with `--invoices` OPEN invoices; one
connection then claims them `--claim` at a time and records their results (SUCCEEDED) through
`record_payment_results` in batches of each `--batches` size. Per phase: the backend's CPU per
charge (from /proc), and the functions' own and total time per charge (track_functions = all).

    python -m bench.charge.profile_sql [--invoices 3000] [--claim 50] [--batches 1,10,100] [--tree DIR]

Needs PostgreSQL on BILLING_TEST_DATABASE_URL (what `make services` writes), as a superuser.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]
from bench.baseline import proc_cpu
from bench.charge.run import PG, admin, prepare_template, url_for_db
from psycopg import sql  # noqa: E402

RECORD = ("SELECT count(*) FROM billing.record_payment_results(%s::text[], %s::text[], %s::text[], NULL, now(), NULL)")


def function_times(conn) -> dict[str, tuple[float, float, int]]:
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT 1")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute("SELECT funcname, self_time, total_time, calls FROM pg_stat_user_functions "
                        "WHERE schemaname = 'billing'").fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--invoices", type=int, default=3000)
    ap.add_argument("--claim", type=int, default=50)
    ap.add_argument("--batches", default="1,10,100")
    ap.add_argument("--tree", default=None, help="another checkout's root (its db/ is migrated)")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    tree = Path(args.tree) if args.tree else ROOT
    name = "bench_profile_sql"
    sizes = [int(s) for s in args.batches.split(",")]
    # History first (prepare_template): the statistics of a database that has run before.
    prepare_template(name, args.invoices * len(sizes), tree / "db", history=args.invoices)
    url = url_for_db(PG, name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SET track_functions = 'all'")
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            for size in sizes:
                conn.execute("SELECT pg_stat_reset()")
                before = function_times(conn)
                cpu0, t0 = proc_cpu(pid), time.monotonic()
                claimed = recorded = claims = 0
                claim_cpu = 0.0
                while recorded < args.invoices:
                    c0 = proc_cpu(pid)
                    keys = [r[0] for r in conn.execute(
                        "SELECT idempotency_key FROM billing.claim_charges('profile', %s, interval '5 minutes', "
                        "now(), 'sim')", (args.claim,)).fetchall()]
                    claim_cpu += proc_cpu(pid) - c0
                    claims += 1
                    claimed += len(keys)
                    if not keys:
                        break
                    for i in range(0, len(keys), size):
                        part = keys[i:i + size]
                        conn.execute(RECORD, (part, ["SUCCEEDED"] * len(part), [f"ch_{k}" for k in part]))
                        recorded += len(part)
                cpu = proc_cpu(pid) - cpu0
                wall = time.monotonic() - t0
                after = function_times(conn)
                print(f"\nrecord batches of {size}: {recorded} charges, {claims} claims of {args.claim}; backend CPU "
                      f"{cpu / recorded * 1e6:.0f} us per charge (claims {claim_cpu / recorded * 1e6:.0f}), "
                      f"wall {wall / recorded * 1e6:.0f} us per charge")
                rows = []
                for fn, (self_t, total_t, calls) in after.items():
                    b = before.get(fn, (0.0, 0.0, 0))
                    rows.append((fn, (self_t - b[0]) * 1000 / recorded, (total_t - b[1]) * 1000 / recorded,
                                 (calls - b[2]) / recorded))
                rows.sort(key=lambda r: -r[1])
                print(f"  {'function':40} {'self us/charge':>15} {'total us/charge':>16} {'calls/charge':>13}")
                for fn, self_us, total_us, calls in rows[:args.top]:
                    print(f"  {fn:40} {self_us:15.1f} {total_us:16.1f} {calls:13.2f}")
    finally:
        admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


if __name__ == "__main__":
    main()
