"""Two bodies of `create_subscription` in one backend, call blocks interleaved (issue 32): the figure
that separates a few per cent on a loaded host, where two databases run one after the other differ
by +-10 % from round to round.

    python -m bench.signup.interleaved                       # main 230cbe5's body against this tree's
    python -m bench.signup.interleaved --baseline HEAD~1 --blocks 40 --size 50

On a fresh database migrated from this tree (one monthly plan, as bench/signup/run.py): REV's
`billing.create_subscription` is installed beside this tree's as `billing.create_subscription_base`
(its body only: both call this tree's helpers and fire this tree's triggers, so what compares is
the function's own statements; a change to a helper or a trigger is measured by whole trees with
`bench.signup.profile --baseline`). Then --blocks rounds of --size calls to each, the order
swapped every round, one transaction per call, a new customer each; each block's CPU from the
backend's /proc/<pid>/schedstat (nanoseconds, not the 10 ms ticks of /proc/<pid>/stat).

Environment: BILLING_TEST_DATABASE_URL (a superuser URL); --database-url overrides.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from datetime import timedelta

import psycopg

from bench.baseline import ROOT, host_load
from bench.signup.run import NOW, fresh

DB = "bench_signup_interleaved"


def base_function(rev: str) -> str:
    """REV's CREATE FUNCTION billing.create_subscription(...), renamed create_subscription_base."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:db/functions/30_subscriptions.sql"],
                         check=True, capture_output=True, text=True).stdout
    start = src.index("CREATE OR REPLACE FUNCTION billing.create_subscription(")
    body = src.index("AS $$", start)
    end = src.index("$$;", body + 5) + 3
    return re.sub(r"billing\.create_subscription\(", "billing.create_subscription_base(", src[start:end], count=1)


def schedstat_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="230cbe5", help="git revision whose create_subscription body is the baseline")
    ap.add_argument("--blocks", type=int, default=20)
    ap.add_argument("--size", type=int, default=50, help="calls per block")
    ap.add_argument("--database-url", default=os.environ.get("BILLING_TEST_DATABASE_URL") or os.environ.get("BILLING_DATABASE_URL"))
    args = ap.parse_args()
    url = fresh(args.database_url, DB)
    sides = ("billing.create_subscription_base", "billing.create_subscription")
    spent = dict.fromkeys(sides, 0)
    rounds = []  # per block: (the baseline's, this tree's) µs per call, and the host's load then
    load0 = host_load()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(base_function(args.baseline))
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        k = 0
        for f in sides:  # the session's caches warm (plans, relations) on both
            for _ in range(30):
                k += 1
                conn.execute(f"SELECT ({f}(%s, %s, 'BENCH_M', %s)).id", (f"il-{k}", 10 + k, NOW))
        for b in range(args.blocks):
            block = {}
            for f in (sides if b % 2 == 0 else sides[::-1]):
                t0 = schedstat_ns(pid)
                for _ in range(args.size):
                    k += 1
                    conn.execute(f"SELECT ({f}(%s, %s, 'BENCH_M', %s)).id",
                                 (f"il-{k}", 10 + k, NOW + timedelta(microseconds=k % 1000)))
                block[f] = schedstat_ns(pid) - t0
                spent[f] += block[f]
            rounds.append((block[sides[0]] / args.size / 1000, block[sides[1]] / args.size / 1000, os.getloadavg()[0]))
    n = args.blocks * args.size
    base, ours = (spent[s] / n / 1000 for s in sides)
    print(f"\ncreate_subscription, {n:,} calls each, interleaved in blocks of {args.size}; {load0} at the start, "
          f"{host_load()} at the end:\n")
    print(f"| body | server CPU µs per call |\n|---|---:|\n| {args.baseline} | {base:,.0f} |\n| this tree | {ours:,.0f} |")
    print(f"\nthis tree against {args.baseline}: {(ours - base) / base * 100:+.1f} %; "
          f"lower in {sum(1 for r in rounds if r[1] < r[0])} of {len(rounds)} blocks\n")
    print(f"| block | first | {args.baseline} µs | this tree µs | load (1 min) |\n|---:|---|---:|---:|---:|")
    for i, (b_us, o_us, load) in enumerate(rounds, 1):
        print(f"| {i} | {'baseline' if i % 2 == 1 else 'this tree'} | {b_us:,.0f} | {o_us:,.0f} | {load:.1f} |")


if __name__ == "__main__":
    main()
