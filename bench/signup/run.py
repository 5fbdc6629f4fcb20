"""Signups and imports per second: the per-call path, signups in bulk and the set-based import side by
side, in one run.

    python -m bench.signup.run                              # 5,000 per call, 100,000 in bulk and imported
    make bench-signup BENCH_ARGS="--per-call 2000 --bulk 50000 --import 20000 --batch 5000"
    make bench-signup BENCH_ARGS="--per-call 0 --bulk 80000 --parallel 2 --rounds 4 --import 0 --baseline a018aa0"

On a fresh database (migrated with --simulation, one monthly plan):
1. per call: --per-call subscriptions through `billing.create_subscription` (a new customer each,
   one call per transaction on one connection, as an application signs up) -> subscriptions/s;
2. signups in bulk (issue 32): --bulk subscriptions through `billing.create_subscriptions`, --batch
   rows a call (a new customer each, as the per-call path: the same rows, invoices and events),
   one transaction each, one connection -> subscriptions/s; with --parallel N, N connections at once
   (each its own customers, started together; issue 32's measure of 20,000 a second on two cores)
   -> wall-clock subscriptions/s and the backends' CPU summed;
3. set-based import: --import customers and subscriptions through `billing.import_customers` and
   `billing.import_subscriptions` (issue 28), --batch rows a call, one transaction each, one
   connection; the JSON rows built by the client included -> subscriptions/s (customer + subscription).
Also each path's server CPU per subscription (the backend's user+system time from /proc: immune to
the rest of the machine's load) and the load average during the run. The two paths do not do the
same work: a signup also writes its INITIAL invoice, its line and InvoiceCreated; an import writes no
invoice (the period was billed at the source). Both write the customer, the subscription, the
idempotency or external-id row, SubscriptionCreated and an audit row (the import: one per call).

Environment: BILLING_TEST_DATABASE_URL (a superuser URL, as `make services` writes it); --database-url
overrides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from datetime import datetime, timedelta, timezone

import psycopg
from psycopg import sql

from bench.baseline import baseline_tree, proc_cpu
from billing.migrate import migrate
from billing.config import REPO_ROOT

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
# main when issue 32's sixth signup pass started (2026-12-05 21:42 UTC); --baseline overrides.
BASELINE = "a018aa0"
DB = "bench_signup"


def url_for_db(server_url: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


def fresh(server_url: str, name: str = DB, db_dir=None) -> str:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = url_for_db(server_url, name)
    migrate(url, db_dir or REPO_ROOT / "db", simulation=True)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('BENCH_M', 1000, 'USD', 'MONTH', 1, %s)", (NOW - timedelta(days=400),))
    return url


def per_call(url: str, n: int, offset: int = 0) -> dict:
    with psycopg.connect(url, autocommit=True) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.execute("SELECT billing.create_subscription('warm', 1, 'BENCH_M', %s)", (NOW,))
        cpu0, t0 = proc_cpu(pid), time.perf_counter()
        for i in range(offset, offset + n):
            conn.execute("SELECT (billing.create_subscription(%s, %s, 'BENCH_M', %s)).id",
                         (f"bench-{i}", 10 + i, NOW + timedelta(microseconds=i)))
        wall, cpu = time.perf_counter() - t0, proc_cpu(pid) - cpu0
    return {"path": "create_subscription, one call per transaction", "n": n, "wall": wall, "cpu": cpu}


def rounds(url: str, base_url: str | None, n: int, k: int) -> list[dict]:
    """The per-call path here and at the baseline, alternating k rounds of n/k (same host, same minutes)."""
    out = {"ours": [], "baseline": []}
    for r in range(k):
        order = (("baseline", base_url), ("ours", url))
        for side, u in (order if r % 2 == 0 else order[::-1]):  # swapped every round (bulk_rounds says why)
            if u is None:
                continue
            res = per_call(u, n // k, offset=r * (n // k))
            out[side].append(res)
    total = []
    for side, runs in out.items():
        if runs:
            total.append({"path": f"create_subscription per call ({side}{'' if side == 'ours' else ' ' + BASELINE[:7]})",
                          "n": sum(x["n"] for x in runs), "wall": sum(x["wall"] for x in runs),
                          "cpu": sum(x["cpu"] for x in runs)})
    return total


def bulk(url: str, n: int, batch: int, first_customer: int = 2_000_000, parallel: int = 1) -> dict:
    """n signups through create_subscriptions, batch rows a call, on `parallel` connections at once
    (each its own share of the customers, all started together): wall-clock signups/s and the
    backends' CPU (user+system from /proc, summed)."""
    share = n // parallel
    conns = [psycopg.connect(url, autocommit=True) for _ in range(parallel)]
    try:
        pids = [c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in conns]
        gate = threading.Barrier(parallel + 1)
        errors: list[BaseException] = []

        def work(conn: psycopg.Connection, start: int, count: int) -> None:
            try:
                docs = [(json.dumps([{"idempotency_key": f"bulk-{i}", "customer_id": i, "plan_code": "BENCH_M"}
                                     for i in range(f, min(f + batch, start + count))]), min(batch, start + count - f))
                        for f in range(start, start + count, batch)]  # (built before the clock starts)
                gate.wait()
                for doc, rows in docs:
                    with conn.transaction():
                        got = conn.execute("SELECT count(*) FILTER (WHERE outcome = 'created') FROM "
                                           "billing.create_subscriptions(%s::jsonb, %s)", (doc, NOW)).fetchone()[0]
                    assert got == rows, got
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(e)
                gate.abort()

        threads = [threading.Thread(target=work, args=(c, first_customer + k * share, share)) for k, c in enumerate(conns)]
        for t in threads:
            t.start()
        gate.wait()
        cpu0, t0 = sum(proc_cpu(p) for p in pids), time.perf_counter()
        for t in threads:
            t.join()
        wall, cpu = time.perf_counter() - t0, sum(proc_cpu(p) for p in pids) - cpu0
        if errors:
            raise errors[0]
        # the same work as a signup per call: an INITIAL invoice and two events each
        made = conns[0].execute("SELECT count(*) FROM billing.invoice WHERE customer_id >= %s AND customer_id < %s",
                                (first_customer, first_customer + share * parallel)).fetchone()[0]
        assert made == share * parallel, made
    finally:
        for c in conns:
            c.close()
    on = f", {parallel} connections at once" if parallel > 1 else ""
    return {"path": f"create_subscriptions (in bulk), {batch:,} a call{on}", "n": share * parallel, "wall": wall, "cpu": cpu}


def bulk_rounds(url: str, base_url: str | None, n: int, batch: int, k: int, parallel: int = 1) -> list[dict]:
    """Signups in bulk here and at the baseline (when it has create_subscriptions), alternating k rounds of n/k."""
    if not n:
        return []
    sides = [("ours", url)]
    if base_url is not None:
        with psycopg.connect(base_url) as conn:
            if conn.execute("SELECT to_regprocedure('billing.create_subscriptions(jsonb, timestamptz)') IS NOT NULL").fetchone()[0]:
                sides.insert(0, ("baseline", base_url))
    out: dict[str, list[dict]] = {side: [] for side, _ in sides}
    for r in range(k):
        # the order swapped every round: a side run right after the other meets that one's checkpoint and
        # autovacuum (an A/A run with a fixed order read the second side 40% dearer on a quiet host)
        for side, u in (sides if r % 2 == 0 else sides[::-1]):
            res = bulk(u, n // k, batch, first_customer=2_000_000 + r * (n // k), parallel=parallel)
            print(f"  round {r + 1} {side}: {res['n'] / res['wall']:,.0f} signups/s, "
                  f"{res['cpu'] / res['n'] * 1e6:,.0f} µs of server CPU a signup, load {os.getloadavg()[0]:.1f}", flush=True)
            out[side].append(res)
    on = f", {parallel} connections at once" if parallel > 1 else ""
    # medians of the rounds, not sums: one round meeting a checkpoint or an autovacuum (2x dearer, seen
    # on a quiet host) would otherwise decide the comparison
    return [{"path": f"create_subscriptions (in bulk), {batch:,} a call{on} ({side}{'' if side == 'ours' else ' ' + BASELINE[:7]}; median of {len(runs)} rounds)",
             "n": sum(x["n"] for x in runs),
             "wall": sum(x["n"] for x in runs) / statistics.median(x["n"] / x["wall"] for x in runs),
             "cpu": sum(x["n"] for x in runs) * statistics.median(x["cpu"] / x["n"] for x in runs)}
            for side, runs in out.items()]


def imported(url: str, n: int, batch: int) -> dict:
    start, end = NOW - timedelta(days=10), NOW + timedelta(days=20)
    with psycopg.connect(url, autocommit=True) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        cpu0, t0 = proc_cpu(pid), time.perf_counter()
        for first in range(0, n, batch):
            ids = range(first, min(first + batch, n))
            customers = [{"external_id": f"cus_{i}", "id": 1_000_000 + i, "name": f"Customer {i}"} for i in ids]
            subs = [{"external_id": f"sub_{i}", "customer_external_id": f"cus_{i}", "plan_code": "BENCH_M",
                     "current_period_start": start.isoformat(), "current_period_end": (end + timedelta(seconds=i)).isoformat(),
                     "quantity": 1 + i % 3} for i in ids]
            with conn.transaction():
                conn.execute("SELECT count(*) FROM billing.import_customers(%s::jsonb, %s)", (json.dumps(customers), NOW))
            with conn.transaction():
                got = conn.execute("SELECT count(*) FILTER (WHERE outcome = 'created') FROM "
                                   "billing.import_subscriptions(%s::jsonb, %s)", (json.dumps(subs), NOW)).fetchone()[0]
            assert got == len(subs), got
        wall, cpu = time.perf_counter() - t0, proc_cpu(pid) - cpu0
    return {"path": f"import_customers + import_subscriptions, {batch:,} a call", "n": n, "wall": wall, "cpu": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-call", type=int, default=5000)
    ap.add_argument("--bulk", type=int, default=100_000)
    ap.add_argument("--import", dest="imports", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--baseline", default=None, help="git revision whose db/ the per-call path is also run on ('none': skip)")
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds (per call and in bulk)")
    ap.add_argument("--parallel", type=int, default=1,
                    help="connections calling create_subscriptions at once in bulk (2: both cores; wall-clock signups/s)")
    ap.add_argument("--database-url", default=os.environ.get("BILLING_TEST_DATABASE_URL") or os.environ.get("BILLING_DATABASE_URL"))
    args = ap.parse_args()
    global BASELINE
    url = fresh(args.database_url)
    base_url = None
    if args.baseline != "none":
        tree = baseline_tree(args.baseline or BASELINE)
        BASELINE = (tree / ".complete").read_text().strip()
        base_url = fresh(args.database_url, DB + "_baseline", tree / "db")
    load0 = os.getloadavg()[0]
    results = (rounds(url, base_url, args.per_call, args.rounds) if args.per_call else []) + bulk_rounds(url, base_url, args.bulk, args.batch, args.rounds, args.parallel)
    if args.imports:
        results.append(imported(url, args.imports, args.batch))
    load1 = os.getloadavg()[0]
    print(f"\nload average {load0:.1f} at the start, {load1:.1f} at the end (2 CPUs)\n")
    print("| path | subscriptions | wall s | subscriptions/s | server CPU µs per subscription |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        cpu = f"{r['cpu'] / r['n'] * 1e6:,.0f}" if r["cpu"] else "n/a (server not on this host)"
        print(f"| {r['path']} | {r['n']:,} | {r['wall']:.1f} | {r['n'] / r['wall']:,.0f} | {cpu} |")
    ours = next((r for r in results if r["path"].startswith("create_subscription per call (ours")), None)
    if ours is None:
        return
    rate = lambda r: r["n"] / r["wall"]  # noqa: E731
    for r in results:
        if "bulk" in r["path"] or "import" in r["path"]:
            print(f"{r['path']}: {rate(r) / rate(ours):.1f}x the per-call path's rate (ours)")


if __name__ == "__main__":
    main()
