"""The ingestion statement alone, beside the baseline's, in the same run (issue 29; docs/usage.md
"Figures measured"): server CPU per event of the Kafka consumer's call in batches of 10,000 (this
tree: the envelopes parsed in Python, billing.usage.event_columns, then billing.ingest_usage_columns
answered in one row, ingest_columns_counts; a tree with that door before: a018aa0's loop and a row an
event; a tree without it: billing.ingest_usage_batch of the JSON texts), of billing.ingest_usage in
batches of 1,000 (HTTP's) and of ONE event (a client sending events one by one), without Kafka or
HTTP in the way. The client's CPU per event is printed beside it (the consumer's parse is there):
both share the host's cores.

    python -m bench.usage.statement                         # this tree beside main a018aa0
    python -m bench.usage.statement --events 200000 --rounds 3

Each tree gets a fresh database migrated from its own db/ (1,000 customers, the 3 meters of
bench/usage/ingest.py: count, sum, unique_count); the same stream (events of the last 10 minutes
at random over the customers, 10% of them sent twice, shuffled) is sent to both, in alternating
rounds, by one connection each; the server CPU is its backend's (/proc/<pid>/schedstat).

Environment: BILLING_TEST_DATABASE_URL (a superuser URL of the server), as `make services` writes it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

from bench.baseline import baseline_tree, host_load
from billing.migrate import migrate

REPO = Path(__file__).resolve().parents[2]
BASELINE = "a018aa0"  # main before issue 29's fifth ingestion pass (605dd63: before the fourth, 230cbe5: the third)
METERS = [("requests", "count", None), ("tokens", "sum", "{tokens}"), ("users", "unique_count", "{user}")]


def url_for_db(server_url: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


def fresh_db(server_url: str, name: str, db_dir: Path, customers: int) -> str:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = url_for_db(server_url, name)
    migrate(url, db_dir, simulation=True)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with psycopg.connect(url, autocommit=True) as conn:
        for code, agg, prop in METERS:
            conn.execute("SELECT billing.upsert_meter(%s, 'api.request', %s, %s::text[], '{}', %s)", (code, agg, prop, start))
        conn.execute("SELECT billing.upsert_customer(c) FROM generate_series(1, %s) c", (customers,))
        conn.execute("VACUUM ANALYZE")
    return url


def stream(prefix: str, events: int, customers: int, now: datetime, rnd: random.Random) -> list[str]:
    out = []
    for n in range(events):
        c = rnd.randint(1, customers)
        at = now - timedelta(seconds=rnd.uniform(0, 600))
        out.append(json.dumps({"specversion": "1.0", "id": f"{prefix}{n}", "source": "bench", "type": "api.request",
                               "time": at.isoformat().replace("+00:00", "Z"), "subject": str(c),
                               "data": {"tokens": n % 97, "user": f"u{n % 13}", "kind": n % 3}}))
    out += rnd.sample(out, events // 10)  # 10% sent twice
    rnd.shuffle(out)
    return out


def _cpu(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def run(url: str, texts: list[str], size: int, now: datetime, door: str, ours: bool) -> tuple[float, float, int, float]:
    """Server CPU µs per event, wall µs per event, events accepted, client CPU µs per event."""
    with psycopg.connect(url, autocommit=True) as conn:
        pid = conn.info.backend_pid
        accepted = 0
        if door == "batch" and conn.execute("SELECT to_regproc('billing.ingest_usage_columns') IS NOT NULL").fetchone()[0]:
            from billing.config import Settings
            from billing.usage import _each_columns, event_columns, ingest_columns, ingest_columns_counts
            settings = Settings(database_url=url)
            door = "columns"
            # this tree's consumer: the batch path and one row back; a018aa0's: the loop, a row an event
            parse, call = (event_columns, ingest_columns_counts) if ours else (_each_columns, ingest_columns)
            texts = [t.encode() for t in texts]  # the consumer's messages are bytes
        cpu0, t0, c0 = _cpu(pid), time.perf_counter(), time.process_time()
        for i in range(0, len(texts), size):
            chunk = texts[i:i + size]
            if door == "columns":
                columns, _kept, _dead = parse(chunk)  # what the consumer does with its messages
                answers = call(conn, columns, now, settings)
                rows = [("accepted",)] * answers[0] if ours else [(a[1],) for a in answers]
            elif door == "batch":
                rows = conn.execute("SELECT status FROM billing.ingest_usage_batch(%b, %s)", (chunk, now)).fetchall()
            else:
                rows = conn.execute("SELECT status FROM billing.ingest_usage(%s, %s)",
                                    (Jsonb([json.loads(t) for t in chunk]), now)).fetchall()
            accepted += sum(1 for (s,) in rows if s == "accepted")
        cpu, wall, client = _cpu(pid) - cpu0, time.perf_counter() - t0, time.process_time() - c0
    return cpu / len(texts) * 1e6, wall / len(texts) * 1e6, accepted, client / len(texts) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-url", default=os.environ.get("BILLING_TEST_DATABASE_URL"))
    ap.add_argument("--customers", type=int, default=1000)
    ap.add_argument("--events", type=int, default=100_000, help="distinct events a round, Kafka form (+10%% duplicates)")
    ap.add_argument("--http-events", type=int, default=30_000, help="distinct events a round, batches of 1,000")
    ap.add_argument("--ones", type=int, default=300, help="events sent one a call, a round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", default=BASELINE, help="git revision of the baseline ('none': skip)")
    args = ap.parse_args()
    trees = [("this tree", REPO / "db")]
    if args.baseline != "none":
        trees.insert(0, (f"baseline {args.baseline}", baseline_tree(args.baseline) / "db"))
    urls = {name: fresh_db(args.server_url, f"bench_usage_stmt_{i}", db, args.customers) for i, (name, db) in enumerate(trees)}
    rnd = random.Random(29)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for r in range(args.rounds):
        kafka = stream(f"k{r}-", args.events, args.customers, now, rnd)
        http = stream(f"h{r}-", args.http_events, args.customers, now, rnd)
        ones = stream(f"o{r}-", args.ones, args.customers, now, rnd)
        for name, _ in trees if r % 2 == 0 else reversed(trees):
            for door, texts, size, form in (("Kafka consumer's call, batches of 10,000", kafka, 10_000, "batch"),
                                            ("HTTP form, batches of 1,000", http, 1_000, "json"),
                                            ("HTTP form, one event a call", ones, 1, "json")):
                cpu, wall, accepted, client = run(urls[name], texts, size, now, form, name == "this tree")
                load = os.getloadavg()[0]
                results.setdefault((door, name), []).append((cpu, wall, load, client))
                print(f"round {r + 1} {name:>18}: {door}: {cpu:8.1f} µs server CPU/event, {client:6.1f} µs client CPU/event, "
                      f"{wall:8.1f} µs wall/event, {accepted:,} accepted of {len(texts):,}; load {load:.1f}", flush=True)
    print(f"\n{host_load()}\n")
    print("| door | code | server CPU µs/event (median of rounds) | each round | client CPU µs/event | wall µs/event | load (1 min) |")
    print("|---|---|---:|---|---:|---:|---:|")
    for (door, name), rs in results.items():
        print(f"| {door} | {name} | {statistics.median(x[0] for x in rs):.1f} | {' / '.join(f'{x[0]:.1f}' for x in rs)} | "
              f"{statistics.median(x[3] for x in rs):.1f} | {statistics.median(x[1] for x in rs):.1f} | "
              f"{min(x[2] for x in rs):.1f}-{max(x[2] for x in rs):.1f} |")


if __name__ == "__main__":
    main()
