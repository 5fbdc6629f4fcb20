"""The ingestion statement on Citus beside the baseline's, in the same run (issue 29; docs/usage.md
"Exactly once": on Citus the ingestion holds each customer's row FOR SHARE on its node in the
statement that marks late spans, one per customer, as before). billing.ingest_usage (the HTTP
door's call, batches of 1,000) on two databases of the same three-node cluster, one migrated from
the baseline's db/ and one from this tree's; 3 meters, --customers customers, events of the last
10 minutes at random over them. The CPU is every process of the three nodes (their postmasters'
children, live and reaped: bench.usage.rating_citus's reading), per event; rounds alternate.

    python -m bench.usage.statement_citus                       # this tree beside main 605dd63
    python -m bench.usage.statement_citus --customers 2000 --batches 10 --rounds 4

Environment: BILLING_CITUS_PORT, BILLING_CITUS_WORKER1_PORT, BILLING_CITUS_WORKER2_PORT (citus.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

from bench.baseline import baseline_tree, host_load
from billing.migrate import migrate

from .rating_citus import CITUS, cluster_cpu

REPO = Path(__file__).resolve().parents[2]
BASELINE = "605dd63"  # main before the usage2pc branch
METERS = [("requests", "count", None), ("tokens", "sum", "{tokens}"), ("users", "unique_count", "{user}")]


def fresh_db(name: str, db_dir: Path, customers: int) -> str:
    url = subprocess.run(["bash", str(CITUS), "createdb", name], check=True, capture_output=True,
                         text=True).stdout.strip().splitlines()[-1]
    migrate(url, db_dir, simulation=True, citus=True)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with psycopg.connect(url, autocommit=True) as conn:
        for code, agg, prop in METERS:
            conn.execute("SELECT billing.upsert_meter(%s, 'api.request', %s, %s::text[], '{}', %s)", (code, agg, prop, start))
        conn.execute("SELECT count(*) FROM billing.import_customers(%s::jsonb, %s)",
                     (json.dumps([{"external_id": f"c{i}", "id": i} for i in range(1, customers + 1)]), start))
        conn.execute("VACUUM ANALYZE")
    return url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--customers", type=int, default=2000)
    ap.add_argument("--batches", type=int, default=10, help="batches of 1,000 events a round and tree")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--baseline", default=BASELINE, help="git revision of the baseline")
    args = ap.parse_args()
    trees = [(f"baseline {args.baseline}", baseline_tree(args.baseline) / "db"), ("this tree", REPO / "db")]
    urls = {name: fresh_db(f"bench_ingest_citus_{i}", db, args.customers) for i, (name, db) in enumerate(trees)}
    rnd = random.Random(29)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    results: dict[str, list[tuple[float, float, float]]] = {}
    for r in range(args.rounds):
        for name, _ in trees if r % 2 == 0 else list(reversed(trees)):
            batches = [[{"specversion": "1.0", "id": f"{r}-{b}-{k}", "source": "bench", "type": "api.request",
                         "time": (now - timedelta(seconds=rnd.uniform(0, 600))).isoformat().replace("+00:00", "Z"),
                         "subject": str(rnd.randint(1, args.customers)), "data": {"tokens": k % 97, "user": f"u{k % 13}"}}
                        for k in range(1000)] for b in range(args.batches)]
            with psycopg.connect(urls[name], autocommit=True) as conn:
                conn.execute("SELECT 1")
                cpu0, t0 = cluster_cpu(), time.perf_counter()
                accepted = 0
                for batch in batches:
                    rows = conn.execute("SELECT status FROM billing.ingest_usage(%s::jsonb, %s)", (json.dumps(batch), now))
                    accepted += sum(1 for (s,) in rows if s == "accepted")
                cpu, wall = cluster_cpu() - cpu0, time.perf_counter() - t0
            events = args.batches * 1000
            load = os.getloadavg()[0]
            results.setdefault(name, []).append((cpu / events * 1e6, wall / events * 1e6, load))
            print(f"round {r + 1} {name:>18}: {cpu / events * 1e6:8.1f} µs cluster CPU/event, {wall / events * 1e6:8.1f} µs "
                  f"wall/event, {accepted:,} accepted of {events:,}; load {load:.1f}", flush=True)
    print(f"\n{host_load()}\n")
    print("| code | cluster CPU µs/event (median of rounds) | each round | wall µs/event | load (1 min) |")
    print("|---|---:|---|---:|---:|")
    for name, rs in results.items():
        print(f"| {name} | {statistics.median(x[0] for x in rs):.1f} | {' / '.join(f'{x[0]:.1f}' for x in rs)} | "
              f"{statistics.median(x[1] for x in rs):.1f} | {min(x[2] for x in rs):.1f}-{max(x[2] for x in rs):.1f} |")
    for i in range(len(trees)):
        subprocess.run(["bash", str(CITUS), "dropdb", f"bench_ingest_citus_{i}"], check=False, capture_output=True)


if __name__ == "__main__":
    main()
