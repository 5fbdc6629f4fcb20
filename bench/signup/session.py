"""Signups in bulk from one long session (issue 32): a client that keeps its connection and sends
batch after batch, as a pool does, beside a baseline commit.

    python -m bench.signup.session --baseline c38faea                 # 10 batches of 5,000 a side
    python -m bench.signup.session --baseline c38faea --batches 12 --batch 10000

`make bench-signup` opens new connections every round (two batches each at its usual sizes), so it
never meets what a session meets from its sixth call of `billing.create_subscriptions` on: plpgsql's
plan cache may then keep a generic plan of each statement, planned without the batch's arrays. On a
fresh database (migrated with --simulation, one monthly plan, as bench/signup/run.py) for this tree
and one for REV's db/: one connection each, --batches batches of --batch new signups, alternating
between the two (the order swapped every batch), an ANALYZE of each database after its second batch
(as autovacuum does on tables this path grows), each batch's server CPU a signup from the backend's
/proc/<pid>/schedstat. Prints every batch and the medians of the batches before and from the sixth.

Environment: BILLING_TEST_DATABASE_URL (a superuser URL); --database-url overrides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import psycopg

from bench.baseline import baseline_tree, host_load
from bench.signup.profile import schedstat_ns
from bench.signup.run import NOW, fresh

DB = "bench_signup_session"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="a git revision whose db/ runs side by side")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--database-url", default=os.environ.get("BILLING_TEST_DATABASE_URL") or os.environ.get("BILLING_DATABASE_URL"))
    args = ap.parse_args()
    tree = baseline_tree(args.baseline)
    rev = (tree / ".complete").read_text().strip()[:7]
    sides = (("baseline " + rev, fresh(args.database_url, DB + "_baseline", tree / "db")),
             ("this tree", fresh(args.database_url, DB)))
    conns = {side: psycopg.connect(url, autocommit=True) for side, url in sides}
    pids = {side: c.execute("SELECT pg_backend_pid()").fetchone()[0] for side, c in conns.items()}
    spent: dict[str, list[float]] = {side: [] for side, _ in sides}
    first = 7_000_000
    print(f"{host_load()} at the start")
    try:
        for b in range(args.batches):
            for side, _ in (sides if b % 2 == 0 else sides[::-1]):
                if b == 2:
                    conns[side].execute("ANALYZE")
                doc = json.dumps([{"idempotency_key": f"session-{first + i}", "customer_id": first + i, "plan_code": "BENCH_M"}
                                  for i in range(args.batch)])
                first += args.batch
                t0 = schedstat_ns(pids[side])
                with conns[side].transaction():
                    made = conns[side].execute("SELECT count(*) FILTER (WHERE outcome = 'created') FROM "
                                               "billing.create_subscriptions(%s::jsonb, %s)", (doc, NOW)).fetchone()[0]
                spent[side].append((schedstat_ns(pids[side]) - t0) / args.batch / 1000)
                assert made == args.batch, made
            print(f"  batch {b + 1}: " + ", ".join(f"{side} {spent[side][-1]:,.0f} µs" for side, _ in sides)
                  + f" (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        for c in conns.values():
            c.close()
    print(f"{host_load()} at the end\n")
    print(f"| side | µs of server CPU a signup, each batch of {args.batch:,} | median, batches 1-5 | median, batches 6-{args.batches} |")
    print("|---|---|---:|---:|")
    for side, _ in sides:
        xs = spent[side]
        print(f"| {side} | {' / '.join(f'{x:,.0f}' for x in xs)} | **{statistics.median(xs[:5]):,.0f}** | "
              f"**{statistics.median(xs[5:]) if xs[5:] else float('nan'):,.0f}** |")


if __name__ == "__main__":
    main()
