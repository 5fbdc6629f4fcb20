"""The usage rating on Citus (issue 29; docs/usage.md "Per shard group (Citus)"): per shard group
(`billing.worker.renewal.rate_due_usage_in_shards`: the claim and the set statement on each group's
node, the usage locks on the coordinator), `billing.rate_usage` called on the coordinator (per group
too since usage2pc) and one subscription at a time (`_rate_usage_rows`, main 230cbe5's and 605dd63's
`rate_usage` on Citus), on copies of one database (citus.sh templatedb/clonedb), in the same run.
bench/usage/rating.py's world (N customers, a plan of 3 charges, the month's rollups and distinct
values), renewed, followed.

    python -m bench.usage.rating_citus --subscriptions 4000 --sample 400
    python -m bench.usage.rating_citus --subscriptions 100000 --sample 200 --workers 2   # the issue's figure

Four copies: per shard group by one loop and by --workers loops (the worker's step), `rate_usage`
on the coordinator (admin, the demo: per group through the force-delegated `_rate_usage_group`, all N),
one subscription at a time (`_rate_usage_rows`, main 230cbe5's `rate_usage` on Citus, a sample);
--baseline REV (default 605dd63, 'none': skip): one more copy with the baseline's db/ migrated over
it (function files re-applied), rated per shard group by one loop. Every path prints the wall seconds
for its subscriptions and the loops used.

The server CPU is every process of the three nodes (coordinator and workers: the work is spread),
read from /proc before and after each path (connections kept open meanwhile), with the load average.
--build-only builds the world and stops (the template database alone on the disk); --reuse then
rates copies of it without building again (the copies made after, e.g. once another bench's
database is dropped; or a second run of the ratings on the same world).

Environment: BILLING_CITUS_PORT, BILLING_CITUS_WORKER1_PORT, BILLING_CITUS_WORKER2_PORT (citus.sh).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from bench.baseline import baseline_tree, host_load
from billing.clock import SimulatedClock
from billing.migrate import migrate
from billing.worker.renewal import rate_due_usage_in_shards
from billing.worker.shards import ShardLeases

from .rating import END
from .rating import build as build_world

REPO = Path(__file__).resolve().parents[2]
CITUS = REPO / "scripts" / "services" / "citus.sh"
DB, ROWS, GROUPS, GROUPS2 = "bench_rate_citus", "bench_rate_citus_rows", "bench_rate_citus_groups", "bench_rate_citus_groups2"
COORD, BASE = "bench_rate_citus_coord", "bench_rate_citus_base"
BASELINE = "605dd63"  # main before the usage2pc branch


def citus(*args: str) -> str:
    return subprocess.run(["bash", str(CITUS), *args], check=True, capture_output=True, text=True).stdout.strip()


def cluster_cpu() -> float:
    """CPU seconds of every process of the three nodes (their postmasters and all children)."""
    ports = [os.environ.get(k) for k in ("BILLING_CITUS_PORT", "BILLING_CITUS_WORKER1_PORT", "BILLING_CITUS_WORKER2_PORT")]
    masters = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"postgres") and any(p and (b"-p" in cmd and p.encode() in cmd) for p in ports):
            masters.add(int(proc.name))
    total = 0.0
    tck = os.sysconf("SC_CLK_TCK")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            f = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(proc.name) in masters or int(f[1]) in masters:
            total += (int(f[11]) + int(f[12])) / tck
    return total


def build(url: str, n: int, hours: int) -> None:
    """The same world as bench.usage.rating's, on the cluster (its DDL-free writes one shard at a time)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET citus.multi_shard_modify_mode TO 'sequential'")
        build_world(conn, n, hours, chunk=2000)


def ratings(url: str, limit: int) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("""
            SELECT r.customer_id, r.meter_code, r.span_start, r.span_end, r.quantity, r.amount, r.billed, i.subtotal, i.status, l.net
              FROM billing.usage_rating r
              LEFT JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id
              LEFT JOIN billing.service_line l ON l.customer_id = r.customer_id AND l.id = r.line_id
             WHERE r.customer_id <= %s ORDER BY r.customer_id, r.meter_code""", (limit,)).fetchall()


async def by_groups(url: str, now, batch: int, workers: int = 1) -> tuple[int, float, float]:
    pool = AsyncConnectionPool(url, min_size=1, max_size=2 * workers, open=False, kwargs={"row_factory": dict_row})
    await pool.open()
    shards = ShardLeases(pool, url, "bench-rater", clock=SimulatedClock(now), lease_seconds=600)
    try:
        await shards.lease()
        for group in shards.held():  # the node pools opened before the measure
            async with (await shards.pool_for(group)).connection() as conn:
                await conn.execute("SELECT 1")
        cpu0, t0 = cluster_cpu(), time.perf_counter()
        made = await rate_due_usage_in_shards(pool, shards, SimulatedClock(now), batch=batch, grace=3600.0,
                                              workers=workers)
        return made, time.perf_counter() - t0, cluster_cpu() - cpu0
    finally:
        await shards.close()
        await pool.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscriptions", type=int, default=4000)
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--batch", type=int, default=500, help="the per-group batch (rate_due_usage_in_shards)")
    ap.add_argument("--sample", type=int, default=400, help="subscriptions rated one at a time (0: none)")
    ap.add_argument("--workers", type=int, default=2, help="rating loops sharing the groups, beside one (0: none)")
    ap.add_argument("--baseline", default=BASELINE, help="git revision rated per group beside this tree ('none': skip)")
    ap.add_argument("--build-only", action="store_true",
                    help="build the world and leave it as the template (no copy, no rating): its disk alone")
    ap.add_argument("--reuse", action="store_true",
                    help="rate copies of the template --build-only left (the same --subscriptions), no build")
    args = ap.parse_args()
    n = args.subscriptions
    if not args.reuse:
        url = citus("createdb", DB)
        migrate(url, REPO / "db", simulation=True, citus=True)
        t0, cpu0 = time.perf_counter(), cluster_cpu()
        build(url, n, args.hours)
        print(f"setup: {n:,} subscriptions x 3 charges, renewed, on the cluster in {time.perf_counter() - t0:.0f} s, "
              f"cluster CPU {cluster_cpu() - cpu0:.0f} s ({host_load()})", flush=True)
        citus("templatedb", DB)
        if args.build_only:
            return
    rows_url, groups_url = citus("clonedb", ROWS, DB), citus("clonedb", GROUPS, DB)
    groups2_url = citus("clonedb", GROUPS2, DB) if args.workers else None
    coord_url = citus("clonedb", COORD, DB)
    base_url = citus("clonedb", BASE, DB) if args.baseline != "none" else None
    if base_url:
        migrate(base_url, baseline_tree(args.baseline) / "db", simulation=True, citus=True)
        print(f"baseline {args.baseline}: its function files re-applied on a copy", flush=True)
    now = END + timedelta(hours=1, seconds=1)

    load0 = os.getloadavg()[0]
    made, seconds, cpu = asyncio.run(by_groups(groups_url, now, args.batch))
    load1 = os.getloadavg()[0]
    print(f"per shard group (rate_due_usage_in_shards, batch {args.batch}), 1 loop: {made:,} USAGE invoices of {n:,} in "
          f"{seconds:.1f} s ({n / seconds:,.0f}/s), cluster CPU {cpu:.1f} s = {cpu / n * 1000:.2f} ms a subscription; "
          f"load {load0:.1f} -> {load1:.1f}", flush=True)
    assert made == n, (made, n)
    if groups2_url:
        load0 = os.getloadavg()[0]
        made2, seconds2, cpu2 = asyncio.run(by_groups(groups2_url, now, args.batch, args.workers))
        print(f"per shard group, {args.workers} loops sharing the groups: {made2:,} USAGE invoices in {seconds2:.1f} s "
              f"({n / seconds2:,.0f}/s), cluster CPU {cpu2:.1f} s = {cpu2 / n * 1000:.2f} ms a subscription; "
              f"load {load0:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
        assert made2 == n, (made2, n)

    if base_url:
        load0 = os.getloadavg()[0]
        madeb, secondsb, cpub = asyncio.run(by_groups(base_url, now, args.batch))
        print(f"baseline {args.baseline}, per shard group, 1 loop: {madeb:,} USAGE invoices in {secondsb:.1f} s "
              f"({n / secondsb:,.0f}/s), cluster CPU {cpub:.1f} s = {cpub / n * 1000:.2f} ms a subscription; "
              f"load {load0:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
        assert madeb == n, (madeb, n)
        assert ratings(base_url, args.sample or 400) == ratings(groups_url, args.sample or 400), "baseline and this tree disagree"

    with psycopg.connect(coord_url, autocommit=True) as conn:
        conn.execute("SELECT 1")
        load0 = os.getloadavg()[0]
        cpu0, t0 = cluster_cpu(), time.perf_counter()
        looked = invoiced = calls = 0
        while True:
            a, b = conn.execute("SELECT count(*), count(invoice_id) FROM billing.rate_usage(%s, %s, interval '1 hour', %s)",
                                (args.batch, now, calls == 0)).fetchone()
            looked, invoiced, calls = looked + a, invoiced + b, calls + 1
            if a < args.batch:
                break
        cseconds, ccpu = time.perf_counter() - t0, cluster_cpu() - cpu0
    print(f"rate_usage({args.batch}) on the coordinator (per group, _rate_usage_group force-delegated), 1 caller: "
          f"{invoiced:,} USAGE invoices of {n:,} in {cseconds:.1f} s ({n / cseconds:,.0f}/s), cluster CPU {ccpu:.1f} s = "
          f"{ccpu / n * 1000:.2f} ms a subscription; {calls} calls; load {load0:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
    assert invoiced == n, (invoiced, n)
    assert ratings(coord_url, args.sample or 400) == ratings(groups_url, args.sample or 400), "rate_usage and per group disagree"

    if args.sample > 0:  # (0: the per-subscription path not run)
        with psycopg.connect(rows_url, autocommit=True) as conn:
            # (the private function runs as its caller: as the functions' owner, as rate_usage ran it; Citus
            # refuses one transaction's placements modified by two users)
            conn.execute("SET ROLE billing_owner")
            load2 = os.getloadavg()[0]
            cpu0, t0 = cluster_cpu(), time.perf_counter()
            looked = 0
            while looked < args.sample:
                looked += conn.execute("SELECT count(*) FROM billing._rate_usage_rows(%s, %s, interval '1 hour')",
                                       (min(500, args.sample - looked), now)).fetchone()[0]
            rseconds, rcpu = time.perf_counter() - t0, cluster_cpu() - cpu0
        load3 = os.getloadavg()[0]
        print(f"one subscription at a time (_rate_usage_rows: main 605dd63's rate_usage on Citus): {looked:,} in {rseconds:.1f} s "
              f"({looked / rseconds:,.0f}/s), cluster CPU {rcpu:.1f} s = {rcpu / looked * 1000:.2f} ms a subscription; "
              f"load {load2:.1f} -> {load3:.1f}", flush=True)
        same = ratings(rows_url, args.sample) == ratings(groups_url, args.sample)
        print(f"the sample's ratings, invoices and lines equal on both copies: {same}", flush=True)
        assert same
    print(host_load(), flush=True)
    for db in (ROWS, GROUPS, GROUPS2, COORD, BASE, DB):
        subprocess.run(["bash", str(CITUS), "dropdb", db], check=False, capture_output=True)


if __name__ == "__main__":
    main()
