"""Current usage and the upcoming invoice with many events stored (issue 29: p99 <= 10 ms with 20
million events, flat as events grow; docs/usage.md "Figures measured").

    python -m bench.usage.reads                         # 2M then 20M events, 1,000 customers
    python -m bench.usage.reads --steps 2000000         # 2M only
    python -m bench.usage.reads --baseline 42df2b0      # side by side with main's functions, same rows
    python -m bench.usage.reads --reuse --steps 20000000 --baseline 605dd63   # again on the rows kept

One fresh database: N customers, each with a monthly subscription (from START) on a plan of 3 usage
charges (per_unit on a count meter, graduated on a sum, package on a unique_count), and usage events
of the 25 days since START written set-based, 50 customers a statement (straight into
billing.usage_event, in key order, at random times), with the rollups and distinct values of those
events added in the same statement (what the ingestion statement leaves; on this tree's schema the
hours before the last two then folded into their days, as the ingestion folds them: fold()). The exactly-once keys
(usage_dedup) are not written: no read touches them. At each step (2M, then 20M
events in all), 300 calls each of billing.current_usage and billing.upcoming_invoice on random
customers at START + 25 days - 30 minutes (mid-hour: the partial last hour is read from the raw events), p50 / p99 / max, and
the server CPU per call (/proc of the backend).

Environment: BILLING_TEST_DATABASE_URL (a superuser URL of the server), as `make services` writes it.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

from bench.baseline import baseline_tree, host_load
from bench.usage.run import api_catalogue
from billing.migrate import migrate

REPO = Path(__file__).resolve().parents[2]
DB = "bench_usage_reads"
START = datetime(2026, 10, 1, tzinfo=timezone.utc)
DAYS = 25


def url_for_db(server_url: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


def _cpu(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def setup(conn, customers: int) -> None:
    api_catalogue(conn)
    conn.execute("SELECT billing.upsert_customer(c) FROM generate_series(1, %s) c", (customers,))
    conn.execute("SELECT billing.create_subscription('bench-' || c, c, 'API', %s) FROM generate_series(1, %s) c",
                 (START, customers))
    conn.execute("SELECT billing.usage_partitions(%s, interval '100 days')", (START,))


def add_events(conn, per_customer: int, customers: int, step: int) -> None:
    """per_customer more events for every customer, 50 customers a statement (each its own
    transaction), in key order (customer, time); the rollups and distinct values of those events
    added in the same statement, as the ingestion adds them (exact: events, sum, max, latest)."""
    span = DAYS * 86400
    for lo in range(1, customers + 1, 50):
        hi = min(lo + 49, customers)
        conn.execute(
            "WITH ev AS ("
            " INSERT INTO billing.usage_event (customer_id, event_time, source, event_id, event_type, data, received_at)"
            " SELECT c, %(start)s + make_interval(secs => ((hashint8(c * 100000000 + k + %(salt)s) & 2147483647) %% %(span)s)"
            "        + (k %% 1000) / 1000.0), 'gen', 's' || %(step)s || '-' || k, 'api.request',"
            "        jsonb_build_object('tokens', k %% 97, 'user', 'u' || (c + k) %% 7), %(end)s"
            "   FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) c, generate_series(1::bigint, %(per)s::bigint) k"
            "  ORDER BY 1, 2"
            " RETURNING customer_id, event_time, (data ->> 'tokens')::numeric AS tok, data ->> 'user' AS usr"
            "), hours AS ("
            " SELECT customer_id, date_trunc('hour', event_time AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS b, event_time, tok, usr FROM ev"
            "), rolled AS ("
            " INSERT INTO billing.usage_rollup AS r (customer_id, meter_code, bucket, events, total, max_value, latest_time, latest_value)"
            " SELECT h.customer_id, m.code, h.b, count(*), CASE WHEN m.code = 'tokens' THEN sum(h.tok) ELSE 0 END,"
            "        CASE WHEN m.code = 'tokens' THEN max(h.tok) END, max(h.event_time),"
            "        CASE WHEN m.code = 'tokens' THEN (array_agg(h.tok ORDER BY h.event_time DESC, h.tok DESC))[1] END"
            "   FROM hours h CROSS JOIN (VALUES ('requests'), ('tokens'), ('users')) AS m (code)"
            "  GROUP BY 1, 2, 3"
            " ON CONFLICT ON CONSTRAINT usage_rollup_pkey DO UPDATE"
            "    SET events = r.events + EXCLUDED.events, total = r.total + EXCLUDED.total,"
            "        max_value = greatest(r.max_value, EXCLUDED.max_value),"
            "        latest_value = CASE WHEN EXCLUDED.latest_time > r.latest_time THEN EXCLUDED.latest_value ELSE r.latest_value END,"
            "        latest_time = greatest(r.latest_time, EXCLUDED.latest_time)"
            " RETURNING 1"
            ")"
            " INSERT INTO billing.usage_unique (customer_id, meter_code, bucket, value)"
            " SELECT DISTINCT customer_id, 'users', b, usr FROM hours"
            " ON CONFLICT ON CONSTRAINT usage_unique_pkey DO NOTHING",
            {"start": START, "span": span, "salt": step * 7919, "step": step, "end": START + timedelta(days=DAYS),
             "lo": lo, "hi": hi, "per": per_customer})
    conn.execute("VACUUM ANALYZE billing.usage_rollup")
    conn.execute("VACUUM ANALYZE billing.usage_unique")
    conn.execute("VACUUM ANALYZE billing.usage_event")


def add_events_only(conn, per_customer: int, customers: int, step: int) -> None:
    """The fast fill (--fill events): per_customer more events for every customer in key order,
    without their rollups (the read's cost is the rows it reads, not their values: after the first
    step every customer has a rollup row for nearly every hour and meter) but with the distinct
    values complete: every hour of a customer holds all 7 users (the most the stream has)."""
    span = DAYS * 86400
    for lo in range(1, customers + 1, 50):
        hi = min(lo + 49, customers)
        conn.execute(
            "INSERT INTO billing.usage_event (customer_id, event_time, source, event_id, event_type, data, received_at)"
            " SELECT c, %(start)s + make_interval(secs => ((hashint8(c * 100000000 + k + %(salt)s) & 2147483647) %% %(span)s)"
            "        + (k %% 1000) / 1000.0), 'gen', 's' || %(step)s || '-' || k, 'api.request',"
            "        jsonb_build_object('tokens', k %% 97, 'user', 'u' || (c + k) %% 7), %(end)s"
            "   FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) c, generate_series(1::bigint, %(per)s::bigint) k"
            "  ORDER BY 1, 2",
            {"start": START, "span": span, "salt": step * 7919, "step": step, "end": START + timedelta(days=DAYS),
             "lo": lo, "hi": hi, "per": per_customer})
    conn.execute(
        "INSERT INTO billing.usage_unique (customer_id, meter_code, bucket, value)"
        " SELECT r.customer_id, 'users', r.bucket, 'u' || u FROM billing.usage_rollup r, generate_series(0, 6) u"
        "  WHERE r.meter_code = 'users' ON CONFLICT ON CONSTRAINT usage_unique_pkey DO NOTHING")
    for table in ("usage_rollup", "usage_unique", "usage_event"):
        conn.execute(f"VACUUM ANALYZE billing.{table}")


def fold(conn, now) -> None:
    """What the ingestion statement would have done with those events (migration 0610, this tree's
    schema only): the hours before the last two folded into their days' rows (usage_rollup_day),
    every distinct value in its day (usage_unique_day). A no-op on a baseline's schema."""
    if conn.execute("SELECT to_regclass('billing.usage_rollup_day')").fetchone()[0] is None:
        return
    conn.execute(
        "WITH f AS (UPDATE billing.usage_rollup r SET folded = true"
        "            WHERE r.folded IS NOT TRUE AND r.bucket < date_trunc('hour', %(now)s::timestamptz) - interval '1 hour'"
        "           RETURNING r.customer_id, r.meter_code, r.bucket, r.events, r.total, r.max_value, r.latest_time, r.latest_value)"
        " INSERT INTO billing.usage_rollup_day AS d (customer_id, meter_code, day, events, total, max_value, latest_time, latest_value)"
        " SELECT f.customer_id, f.meter_code, date_trunc('day', f.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', sum(f.events),"
        "        sum(f.total), max(f.max_value), max(f.latest_time),"
        "        (array_agg(f.latest_value ORDER BY f.latest_time DESC NULLS LAST, f.latest_value DESC NULLS LAST))[1]"
        "   FROM f GROUP BY 1, 2, 3"
        " ON CONFLICT ON CONSTRAINT usage_rollup_day_pkey DO UPDATE"
        "    SET events = d.events + EXCLUDED.events, total = d.total + EXCLUDED.total,"
        "        max_value = greatest(d.max_value, EXCLUDED.max_value),"
        "        latest_value = CASE WHEN d.latest_time IS NULL OR EXCLUDED.latest_time > d.latest_time"
        "                            THEN EXCLUDED.latest_value ELSE d.latest_value END,"
        "        latest_time = greatest(d.latest_time, EXCLUDED.latest_time)", {"now": now})
    conn.execute(
        "INSERT INTO billing.usage_unique_day (customer_id, meter_code, day, value)"
        " SELECT DISTINCT u.customer_id, u.meter_code, date_trunc('day', u.bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', u.value"
        "   FROM billing.usage_unique u ON CONFLICT ON CONSTRAINT usage_unique_day_pkey DO NOTHING")
    for table in ("usage_rollup", "usage_rollup_day", "usage_unique_day"):
        conn.execute(f"VACUUM ANALYZE billing.{table}")


def timed(conn, query: str, params_of, calls: int) -> tuple[float, float, float, float, float, float]:
    """p50, p99, max of the wall clock (ms), the server CPU a call on average, and the p50 / p99 of
    each call's own server CPU (ms; /proc/<backend>/schedstat read before and after each call: what
    a call costs by itself, the latency it would have on an idle host apart from the round trip)."""
    pid = conn.info.backend_pid
    lat, cpus = [], []
    cpu0 = _cpu(pid)
    for _ in range(calls):
        c0 = _cpu(pid)
        t0 = time.perf_counter()
        conn.execute(query, params_of()).fetchall()
        lat.append((time.perf_counter() - t0) * 1000)
        cpus.append((_cpu(pid) - c0) * 1000)
    cpu = (_cpu(pid) - cpu0) / calls * 1000
    lat.sort()
    cpus.sort()
    p99 = max(0, int(len(lat) * 0.99) - 1)
    return statistics.median(lat), lat[p99], lat[-1], cpu, statistics.median(cpus), cpus[p99]


def measure(url: str, customers: int, now, calls: int, rnd: random.Random):
    """Warm, then `calls` calls of current_usage and of upcoming_invoice on random customers."""
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(20):  # warm the plans and the caches
            conn.execute("SELECT * FROM billing.current_usage(%s, %s)", (rnd.randint(1, customers), now)).fetchall()
            conn.execute("SELECT billing.upcoming_invoice(%s, %s)", (rnd.randint(1, customers), now)).fetchall()
        cur = timed(conn, "SELECT * FROM billing.current_usage(%s, %s)", lambda: (rnd.randint(1, customers), now), calls)
        up = timed(conn, "SELECT billing.upcoming_invoice(%s, %s)", lambda: (rnd.randint(1, customers), now), calls)
    return cur, up


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-url", default=os.environ.get("BILLING_TEST_DATABASE_URL"))
    ap.add_argument("--customers", type=int, default=1000)
    ap.add_argument("--steps", default="2000000,20000000", help="events stored at each measure, ascending")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--fill", choices=("exact", "events"), default="exact",
                    help="steps after the first: events with their rollups (exact) or events only (events, faster)")
    ap.add_argument("--reuse", action="store_true", help="keep the database of a previous run and go on from its events")
    ap.add_argument("--baseline", metavar="COMMIT",
                    help="side by side: the events are written in a database migrated from COMMIT's db/; at each step "
                         "it is copied (CREATE DATABASE ... TEMPLATE) and the copy migrated with this tree's db/ (its "
                         "new migrations backfill from the stored rows); both measured in alternating rounds")
    ap.add_argument("--rounds", type=int, default=3, help="with --baseline: alternating rounds of --calls calls each")
    args = ap.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    url = url_for_db(args.server_url, DB)
    ours_url = url_for_db(args.server_url, DB + "_ours")
    base_db = (baseline_tree(args.baseline) / "db") if args.baseline else REPO / "db"
    if not args.reuse:
        with psycopg.connect(args.server_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {DB}")
        migrate(url, base_db, simulation=True)
    rnd = random.Random(29)
    now = START + timedelta(days=DAYS) - timedelta(minutes=30)  # mid-hour: the last partial hour is read from events
    rows = []
    if args.reuse:
        with psycopg.connect(url, autocommit=True) as conn:
            stored = conn.execute("SELECT count(*) FROM billing.usage_event").fetchone()[0]
            step0 = conn.execute("SELECT count(DISTINCT split_part(event_id, '-', 1)) FROM billing.usage_event "
                                 "WHERE customer_id = 1").fetchone()[0]
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            setup(conn, args.customers)
        stored, step0 = 0, 0
    for target in steps:
        if target < stored:
            continue
        with psycopg.connect(url, autocommit=True) as conn:
            t0 = time.perf_counter()
            fill = add_events if stored == 0 or args.fill == "exact" else add_events_only
            if target > stored:  # (equal: measured again as it is, --reuse)
                fill(conn, (target - stored) // args.customers, args.customers, step0 + len(rows))
                fold(conn, now)
                stored = conn.execute("SELECT count(*) FROM billing.usage_event").fetchone()[0]
            gen = time.perf_counter() - t0
            sizes = conn.execute(
                "SELECT (SELECT count(*) FROM billing.usage_rollup), (SELECT count(*) FROM billing.usage_unique), "
                "pg_size_pretty(sum(pg_total_relation_size(c.oid))) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'billing.usage_event'::regclass").fetchone()
        print(f"{stored:,} events stored ({sizes[2]}; {fill.__name__}), {sizes[0]:,} rollup rows, {sizes[1]:,} distinct values; "
              f"written in {gen:.0f} s; {host_load()}", flush=True)
        if not args.baseline:
            cur, up = measure(url, args.customers, now, args.calls, rnd)
            load = os.getloadavg()[0]
            rows.append((stored, sizes[0], "this tree", cur, up, load))
            print(f"  current_usage p50/p99/max {cur[0]:.2f}/{cur[1]:.2f}/{cur[2]:.2f} ms (CPU {cur[3]:.2f} ms, "
                  f"a call's CPU p50/p99 {cur[4]:.2f}/{cur[5]:.2f}); upcoming_invoice {up[0]:.2f}/{up[1]:.2f}/{up[2]:.2f} ms "
                  f"(CPU {up[3]:.2f} ms, p50/p99 {up[4]:.2f}/{up[5]:.2f}); load {load:.1f}", flush=True)
            continue
        t0 = time.perf_counter()
        with psycopg.connect(args.server_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DB}_ours WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {DB}_ours TEMPLATE {DB}")
        migrate(ours_url, REPO / "db", simulation=True)
        with psycopg.connect(ours_url, autocommit=True) as conn:
            fold(conn, now)  # (0610 folded the hours before the wall clock's; the bench's clock may be later)
            conn.execute("VACUUM ANALYZE")
        print(f"  copied and migrated with this tree in {time.perf_counter() - t0:.0f} s; {host_load()}", flush=True)
        for r in range(args.rounds):
            for name, u in ((f"baseline {args.baseline}", url), ("this tree", ours_url)):
                cur, up = measure(u, args.customers, now, args.calls, rnd)
                load = os.getloadavg()[0]
                rows.append((stored, sizes[0], name, cur, up, load))
                print(f"  round {r + 1} {name}: current_usage p50/p99/max {cur[0]:.2f}/{cur[1]:.2f}/{cur[2]:.2f} ms "
                      f"(CPU {cur[3]:.2f} ms, a call's CPU p50/p99 {cur[4]:.2f}/{cur[5]:.2f}); upcoming_invoice "
                      f"{up[0]:.2f}/{up[1]:.2f}/{up[2]:.2f} ms (CPU {up[3]:.2f} ms, p50/p99 {up[4]:.2f}/{up[5]:.2f}); "
                      f"load {load:.1f}", flush=True)
    print()
    print(f"| events stored ({args.customers:,} customers) | rollup rows | code | current_usage p50 / p99 / max ms "
          "| server CPU ms a call (mean; p50 / p99 of a call's own) | upcoming_invoice p50 / p99 / max ms "
          "| server CPU ms a call (mean; p50 / p99 of a call's own) | load (1 min) |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for stored, rollups, name, cur, up, load in rows:
        print(f"| {stored:,} | {rollups:,} | {name} | {cur[0]:.2f} / {cur[1]:.2f} / {cur[2]:.2f} | {cur[3]:.2f}; {cur[4]:.2f} / {cur[5]:.2f} | "
              f"{up[0]:.2f} / {up[1]:.2f} / {up[2]:.2f} | {up[3]:.2f}; {up[4]:.2f} / {up[5]:.2f} | {load:.1f} |")
    print("\nOn a quiet host (load average below 1 on 2 cores) the wall-clock p99 is the goal's figure (<= 10 ms); "
          "under load a call waits for a CPU, and the p99 of a call's own server CPU is what it costs by itself.")

if __name__ == "__main__":
    main()
