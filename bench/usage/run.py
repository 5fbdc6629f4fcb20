"""Usage benchmark (issue 29, docs/usage.md): ingestion, rating in arrears, current usage and the
upcoming invoice, on one fresh database.

    python -m bench.usage.run                                # 2,000 customers, 200,000 events
    python -m bench.usage.run --customers 10000 --events 1000000

Measured:
1. ingestion through `billing.ingest_usage` (what both doors call) in batches of 1,000 events of 3
   meters (count, sum, unique_count), 10% of them sent twice: events/s, beside the naive form in the
   same run (one call per event, as a consumer that inserts each message alone), on a sample;
2. rating in arrears: every subscription renewed at its period's end, then `billing.rate_usage` in
   batches of 500 after the grace (3 charges each: per-unit, graduated, package): subscriptions/s and
   the time per subscription (the renewal itself is timed apart: the rating is a step of its own);
3. `current_usage` and `upcoming_invoice`: p50 / p99 over 300 calls on random customers.

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

from billing.migrate import migrate

REPO = Path(__file__).resolve().parents[2]
DB = "bench_usage"
START = datetime(2026, 10, 1, tzinfo=timezone.utc)
END = datetime(2026, 11, 1, tzinfo=timezone.utc)


def url_for_db(server_url: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


def event(n: int, customer: int, at: datetime) -> dict:
    kind = n % 3
    return {"specversion": "1.0", "id": f"b{n}", "source": "bench", "type": "api.request",
            "time": at.isoformat().replace("+00:00", "Z"), "subject": str(customer),
            "data": {"tokens": n % 97, "user": f"u{n % 13}", "kind": kind}}


def api_catalogue(conn) -> None:
    """The API product's catalogue, the same in every usage bench (run, reads, rating and rating_citus
    through it): three meters of api.request (count, sum of tokens, unique users) and the plan API at
    9.00 USD a month with one charge each (per unit over 10 included, graduated, packages of 100)."""
    conn.execute("SELECT billing.upsert_meter('requests', 'api.request', 'count', NULL, '{}', %s)", (START,))
    conn.execute("SELECT billing.upsert_meter('tokens', 'api.request', 'sum', '{tokens}', '{}', %s)", (START,))
    conn.execute("SELECT billing.upsert_meter('users', 'api.request', 'unique_count', '{user}', '{}', %s)", (START,))
    conn.execute("SELECT billing.upsert_plan('API', 900, 'USD', 'MONTH', 1, %s)", (START - timedelta(days=1),))
    conn.execute("SELECT billing.upsert_plan_charge('API', 'requests', 'per_unit', 0.5, NULL, '[]', 10, NULL, NULL, %s)", (START,))
    conn.execute("SELECT billing.upsert_plan_charge('API', 'tokens', 'graduated', NULL, NULL, "
                 "'[{\"upTo\": 1000, \"unitAmount\": 0.1}, {\"upTo\": null, \"unitAmount\": 0.05}]', 0, NULL, NULL, %s)", (START,))
    conn.execute("SELECT billing.upsert_plan_charge('API', 'users', 'package', 100, 5, '[]', 0, NULL, NULL, %s)", (START,))


def setup(conn, customers: int) -> list[int]:
    api_catalogue(conn)
    conn.execute("SELECT billing.upsert_customer(c) FROM generate_series(1, %s) c", (customers,))
    conn.execute("SELECT billing.create_subscription('bench-' || c, c, 'API', %s) FROM generate_series(1, %s) c",
                 (START, customers))
    return list(range(1, customers + 1))


def ingest(conn, batches: list[list[dict]], now: datetime) -> tuple[float, int, int]:
    accepted = duplicate = 0
    t0 = time.perf_counter()
    for batch in batches:
        with conn.transaction():
            rows = conn.execute("SELECT status, count(*) FROM billing.ingest_usage(%s::jsonb, %s, interval '1 hour') "
                                "GROUP BY status", (json.dumps(batch), now)).fetchall()
        for status, n in rows:
            accepted += n if status == "accepted" else 0
            duplicate += n if status == "duplicate" else 0
    return time.perf_counter() - t0, accepted, duplicate


def timed(conn, query: str, params_of, calls: int) -> tuple[float, float]:
    lat = []
    for _ in range(calls):
        t0 = time.perf_counter()
        conn.execute(query, params_of()).fetchall()
        lat.append((time.perf_counter() - t0) * 1000)
    lat.sort()
    return statistics.median(lat), lat[int(len(lat) * 0.99) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-url", default=os.environ.get("BILLING_TEST_DATABASE_URL"))
    ap.add_argument("--customers", type=int, default=2000)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--naive", type=int, default=3000, help="events sent one call each (the naive consumer)")
    args = ap.parse_args()
    rnd = random.Random(29)
    with psycopg.connect(args.server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB}")
    url = url_for_db(args.server_url, DB)
    migrate(url, REPO / "db", simulation=True)
    figures = {}
    with psycopg.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        customers = setup(conn, args.customers)
        print(f"setup: {args.customers} customers and subscriptions in {time.perf_counter() - t0:.1f} s", flush=True)
        span = (END - START).total_seconds() - 7200
        events = [event(n, rnd.choice(customers), START + timedelta(seconds=rnd.uniform(0, span)))
                  for n in range(args.events)]
        stream = events + rnd.sample(events, args.events // 10)  # 10% sent twice
        rnd.shuffle(stream)
        batches = [stream[i:i + 1000] for i in range(0, len(stream), 1000)]
        now = END - timedelta(minutes=30)
        seconds, accepted, duplicate = ingest(conn, batches, now)
        assert accepted == args.events, (accepted, args.events)
        figures["ingest"] = (len(stream) / seconds, accepted, duplicate, seconds)
        print(f"ingest_usage, batches of 1,000: {len(stream) / seconds:,.0f} events/s "
              f"({accepted:,} accepted, {duplicate:,} duplicates, {seconds:.1f} s)", flush=True)
        naive = [event(10_000_000 + n, rnd.choice(customers), START + timedelta(seconds=rnd.uniform(0, span)))
                 for n in range(args.naive)]
        seconds, accepted, _ = ingest(conn, [[e] for e in naive], now)
        figures["naive"] = (args.naive / seconds, seconds)
        print(f"naive, one call per event: {args.naive / seconds:,.0f} events/s ({seconds:.1f} s)", flush=True)

        t0 = time.perf_counter()
        while conn.execute("SELECT billing.create_due_invoices(1000, %s)", (END + timedelta(seconds=1),)).fetchone()[0]:
            pass
        figures["renew"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        rated = invoices = 0
        while True:
            looked, made = conn.execute("SELECT count(*), count(invoice_id) FROM billing.rate_usage(500, %s, interval '1 hour')",
                                        (END + timedelta(hours=1, seconds=1),)).fetchone()
            rated += looked
            invoices += made
            if looked < 500:
                break
        seconds = time.perf_counter() - t0
        figures["rate"] = (rated / seconds, seconds / max(rated, 1) * 1000, invoices, seconds)
        print(f"rate_usage: {rated:,} subscriptions x 3 charges in {seconds:.1f} s: {rated / seconds:,.0f}/s, "
              f"{seconds / max(rated, 1) * 1000:.2f} ms each ({invoices:,} USAGE invoices); renewal before it "
              f"{figures['renew']:.1f} s", flush=True)
        lines = conn.execute("SELECT count(*) FROM billing.service_line WHERE item = 'USAGE'").fetchone()[0]
        assert lines == invoices * 3, (lines, invoices)
        stored = conn.execute("SELECT count(*) FROM billing.usage_event").fetchone()[0]
        figures["current"] = timed(conn, "SELECT * FROM billing.current_usage(%s, %s)",
                                   lambda: (rnd.choice(customers), END + timedelta(days=3)), 300)
        figures["upcoming"] = timed(conn, "SELECT billing.upcoming_invoice(%s, %s)",
                                    lambda: (rnd.choice(customers), END + timedelta(days=3)), 300)
        print(f"current_usage p50/p99: {figures['current'][0]:.2f} / {figures['current'][1]:.2f} ms; "
              f"upcoming_invoice p50/p99: {figures['upcoming'][0]:.2f} / {figures['upcoming'][1]:.2f} ms "
              f"({stored:,} events stored)", flush=True)
    load = os.getloadavg()
    print()
    print(f"| measure ({args.customers:,} customers, {args.events:,} events + 10% duplicates; load {load[0]:.1f}) | figure |")
    print("|---|---:|")
    print(f"| ingest_usage, batches of 1,000 | {figures['ingest'][0]:,.0f} events/s |")
    print(f"| naive: one call per event (same run) | {figures['naive'][0]:,.0f} events/s |")
    print(f"| rate_usage (3 charges a subscription) | {figures['rate'][0]:,.0f} subscriptions/s, {figures['rate'][1]:.2f} ms each |")
    print(f"| current_usage p50 / p99 | {figures['current'][0]:.2f} / {figures['current'][1]:.2f} ms |")
    print(f"| upcoming_invoice p50 / p99 | {figures['upcoming'][0]:.2f} / {figures['upcoming'][1]:.2f} ms |")


if __name__ == "__main__":
    main()
