"""Where a signup's time goes (issue 32): the per-call path by function, the bulk path by statement.

    python -m bench.signup.profile                       # 1,000 calls, one batch of 5,000
    python -m bench.signup.profile --calls 2000 --batch 10000
    python -m bench.signup.profile --baseline 230cbe5 --rounds 4   # side by side with a commit's db/

On a fresh database (migrated with --simulation, one monthly plan, as bench/signup/run.py):
1. per call: --calls signups through `billing.create_subscription`, one transaction each, with
   track_functions = all: each function's (and trigger function's) total and own time per call,
   beside the backend's CPU per call;
2. in bulk: one warm-up batch, then one batch of --batch through `billing.create_subscriptions`
   under auto_explain (nested statements, ANALYZE without per-node timing): each of the function's
   statements taking over 1 ms with its time and share, and the triggers each fired (foreign keys
   per row, the statement triggers once).
Shares, not absolute times, are what compares on a loaded host; the load average is printed.
With --baseline REV both steps run on this tree and on REV's db/ (its own fresh database), then the
figure that compares, each side's server CPU per signup: per call in blocks of 50 calls interleaved
between the two databases (one connection each, CPU from /proc/<pid>/schedstat), in bulk --rounds
batches each, alternating.

Environment: BILLING_TEST_DATABASE_URL (a superuser URL: LOAD 'auto_explain', track_functions);
--database-url overrides.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from datetime import timedelta

import psycopg

from bench.baseline import baseline_tree, host_load, proc_cpu
from bench.signup.run import NOW, fresh

DB = "bench_signup_profile"


def per_call(url: str, calls: int, offset: int = 0, label: str = "", quiet: bool = False) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.execute("SELECT billing.create_subscription('warm', 1, 'BENCH_M', %s)", (NOW,))
        for i in range(offset + calls, offset + calls + 20):  # the session's caches warm (plans, relations)
            conn.execute("SELECT billing.create_subscription(%s, %s, 'BENCH_M', %s)", (f"profile-{i}", 10 + i, NOW))
        if not quiet:  # (the CPU alone: without the tracking's own cost)
            conn.execute("SET track_functions = 'all'")
            conn.execute("SELECT pg_stat_reset()")
        cpu0, t0 = proc_cpu(pid), time.perf_counter()
        for i in range(offset, offset + calls):
            conn.execute("SELECT (billing.create_subscription(%s, %s, 'BENCH_M', %s)).id",
                         (f"profile-{i}", 10 + i, NOW + timedelta(microseconds=i)))
        cpu, wall = proc_cpu(pid) - cpu0, time.perf_counter() - t0
        if quiet:
            return cpu / calls
        conn.execute("SELECT pg_stat_force_next_flush()")
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(50):  # the statistics arrive when the session above flushed them
            rows = conn.execute("SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions "
                                "ORDER BY total_time DESC LIMIT 25").fetchall()
            if rows and rows[0][1] >= calls:
                break
            time.sleep(0.1)
    top = rows[0][2] if rows else 1.0
    print(f"\nper call{label}: {calls:,} calls, server CPU {cpu / calls * 1e6:,.0f} µs a call, wall {wall / calls * 1e6:,.0f} µs "
          f"(load {os.getloadavg()[0]:.1f}); track_functions (wall µs per call, inflated by the tracking and the load):\n")
    print("| function | calls per signup | total µs | own µs | share of create_subscription |")
    print("|---|---:|---:|---:|---:|")
    for name, n, total, own in rows:
        print(f"| {name} | {n / calls:.1f} | {total * 1000 / calls:,.1f} | {own * 1000 / calls:,.1f} | {total / top * 100:.0f} % |")
    return cpu / calls


def bulk(url: str, batch: int, first: int = 6_000_000, label: str = "", quiet: bool = False) -> float:
    def rows(first: int) -> str:
        return json.dumps([{"idempotency_key": f"profile-bulk-{first + i}", "customer_id": first + i, "plan_code": "BENCH_M"}
                           for i in range(batch)])

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT count(*) FROM billing.create_subscriptions(%s::jsonb, %s)", (rows(first - 1_000_000), NOW))  # warm-up
        if quiet:  # the CPU alone, without auto_explain
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            cpu0 = proc_cpu(pid)
            conn.execute("SELECT count(*) FROM billing.create_subscriptions(%s::jsonb, %s)", (rows(first), NOW))
            return (proc_cpu(pid) - cpu0) / batch
        msgs: list[str] = []
        conn.add_notice_handler(lambda d: msgs.append(d.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        for setting in ("auto_explain.log_min_duration = 1", "auto_explain.log_analyze = on", "auto_explain.log_timing = off",
                        "auto_explain.log_nested_statements = on", "auto_explain.log_triggers = on",
                        "auto_explain.log_level = notice"):
            conn.execute(f"SET {setting}")
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        cpu0 = proc_cpu(pid)
        conn.execute("SELECT count(*) FROM billing.create_subscriptions(%s::jsonb, %s)", (rows(first), NOW))
        cpu = proc_cpu(pid) - cpu0
    stmts = []
    for m in msgs:
        d = re.search(r"duration: ([\d.]+) ms", m)
        q = re.search(r"Query Text: (.*?)\n(?:[A-Z]|\s*->)", m, re.S)
        if not d or not q:
            continue
        text = " ".join(q.group(1).split())
        if text.startswith("SELECT 1 FROM ONLY"):
            continue  # a foreign key's check of one row (counted in its statement's triggers)
        stmts.append((float(d.group(1)), text[:110], re.findall(r"Trigger (.*?): (?:time=[\d.]+ )?calls=(\d+)", m)))
    whole = next((s for s in stmts if s[1].startswith("SELECT count(*) FROM billing.create_subscriptions")), None)
    total = whole[0] if whole else sum(s[0] for s in stmts)
    print(f"\nin bulk{label}: one batch of {batch:,}, server CPU {cpu / batch * 1e6:,.0f} µs a signup under auto_explain "
          f"(load {os.getloadavg()[0]:.1f}); its statements over 1 ms (the trigger functions' own statements appear "
          f"before the statement that fired them):\n")
    print("| ms | share | statement | triggers fired (calls) |")
    print("|---:|---:|---|---|")
    for ms, text, triggers in stmts:
        fired = ", ".join(f"{t} ({n})" for t, n in triggers)
        print(f"| {ms:,.1f} | {ms / total * 100:.0f} % | `{text}` | {fired} |")
    return cpu / batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--baseline", default=None, help="a git revision whose db/ runs side by side (e.g. 230cbe5)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds with --baseline")
    ap.add_argument("--database-url", default=os.environ.get("BILLING_TEST_DATABASE_URL") or os.environ.get("BILLING_DATABASE_URL"))
    args = ap.parse_args()
    url = fresh(args.database_url, DB)
    if not args.baseline:
        per_call(url, args.calls)
        bulk(url, args.batch)
        return
    tree = baseline_tree(args.baseline)
    rev = (tree / ".complete").read_text().strip()[:7]
    base = fresh(args.database_url, DB + "_baseline", tree / "db")
    sides = (("baseline " + rev, base), ("this tree", url))
    for side, u in sides:  # the breakdowns (tracked / explained), once each
        per_call(u, args.calls, label=f" ({side})")
        bulk(u, args.batch, label=f" ({side})")
    load0 = host_load()
    # Per call: one connection to each database, blocks of 50 calls interleaved (the order swapped
    # every block), each block's CPU from the backend's schedstat (ns): both sides share every
    # minute of the host's load, which in whole rounds one after the other moved the figure +-10 %.
    spent = {side: 0 for side, _ in sides}
    blocks, size = max(2, args.calls // 50), 50
    with psycopg.connect(base, autocommit=True) as cb, psycopg.connect(url, autocommit=True) as co:
        conns = {sides[0][0]: cb, sides[1][0]: co}
        pids = {side: c.execute("SELECT pg_backend_pid()").fetchone()[0] for side, c in conns.items()}
        k = 20_000_000
        for side, c in conns.items():
            for _ in range(30):
                k += 1
                c.execute("SELECT (billing.create_subscription(%s, %s, 'BENCH_M', %s)).id", (f"il-{k}", k, NOW))
        for b in range(blocks):
            for side, _ in (sides if b % 2 == 0 else sides[::-1]):
                c, t0 = conns[side], schedstat_ns(pids[side])
                for _ in range(size):
                    k += 1
                    c.execute("SELECT (billing.create_subscription(%s, %s, 'BENCH_M', %s)).id",
                              (f"il-{k}", k, NOW + timedelta(microseconds=k % 1000)))
                spent[side] += schedstat_ns(pids[side]) - t0
    load1 = host_load()
    cpu: dict[str, list[float]] = {side: [] for side, _ in sides}
    for r in range(args.rounds):  # in bulk: one batch each, alternating
        for side, u in (sides if r % 2 == 0 else sides[::-1]):
            cpu[side].append(bulk(u, args.batch, first=10_000_000 + r * 1_000_000, quiet=True))
    print(f"\nserver CPU per signup: per call {blocks * size:,} calls each in interleaved blocks of {size} "
          f"({load0} at the start, {load1} at the end); in bulk {args.rounds} batches of {args.batch:,} each, "
          f"alternating ({host_load()} at the end):\n")
    print("| side | per call (µs) | in bulk, each batch (µs) | in bulk, mean (µs) |")
    print("|---|---:|---|---:|")
    for side, _ in sides:
        bk = [x * 1e6 for x in cpu[side]]
        print(f"| {side} | **{spent[side] / (blocks * size) / 1000:,.0f}** | {', '.join(f'{v:,.0f}' for v in bk)} | "
              f"**{sum(bk) / len(bk):,.0f}** |")
    (b0, _), (b1, _) = sides
    print(f"\nper call: {(spent[b1] - spent[b0]) / spent[b0] * 100:+.1f} % against {b0}; in bulk: "
          f"{(sum(cpu[b1]) - sum(cpu[b0])) / sum(cpu[b0]) * 100:+.1f} %")


def schedstat_ns(pid: int) -> int:
    """CPU time a process has used in ns (/proc/<pid>/schedstat), finer than /proc/<pid>/stat's ticks."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])

if __name__ == "__main__":
    main()
