"""Retention benchmark: batch DELETE (what ships: billing.purge_expired) against dropping a
partition of a natively range-partitioned outbox, with many published rows behind the relay.

    python -m bench.retention.run                    # 5,000,000 published rows
    python -m bench.retention.run --rows 2000000 --share 0.1

One fresh database. Three outboxes with the same columns and the same indexes as
billing.outbox_event: `billing.outbox_event` itself (plain, --rows published rows), `bench.outbox_part`
(the same rows, partitioned by id range into ten partitions plus one for new rows) and
`bench.outbox_empty` (no published rows: the baseline). The published rows span 30 days, oldest
first, each a ~700-byte CloudEvents envelope like the engine's.

Measured, side by side:
1. the relay's claim + mark of a 5,000-event batch, with no published row behind it and with
   --rows behind it, on the plain and on the partitioned table (median of 5);
2. retention of the oldest --share of the rows: on the plain table billing.purge_expired in
   batches of --batch (the worker's loop), on the partitioned one DETACH + DROP of the oldest
   partition(s); the wall time, and meanwhile the latency of a relay-like loop claiming and marking
   500 fresh events at a time (p50, p99, max), against the same loop with nothing else running;
3. the claim + mark again after retention (dead tuples on the plain table) and after VACUUM.

Environment: BILLING_TEST_DATABASE_URL (a superuser URL of the server), as `make services` writes it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

from billing.migrate import migrate

REPO = Path(__file__).resolve().parents[2]
DB = "bench_retention"
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)

DATA = ("jsonb_build_object('invoiceId', g, 'subscriptionId', g, 'customerId', g, 'kind', 'RENEWAL', "
        "'status', 'PAID', 'periodStart', '2026-10-01T00:00:00.000000Z', 'periodEnd', '2026-11-01T00:00:00.000000Z', "
        "'subtotal', 2990, 'creditApplied', 0, 'amount', 2990, 'currency', 'EUR', 'attemptCount', 0, "
        "'paidAt', '2026-10-01T03:00:00.000000Z', 'gatewayReference', 'ch_' || md5(g::text), 'quantity', 1, 'discountAmount', 0, 'couponCode', NULL)")
ROWS = f"""
SELECT g AS id, u AS event_id, 'invoice' AS aggregate_type, g AS aggregate_id, 'InvoicePaid' AS event_type,
       jsonb_build_object('specversion', '1.0', 'id', u::text, 'source', 'billing', 'type', 'InvoicePaid',
                          'subject', 'invoice/' || g, 'time', '2026-10-01T03:00:00.000000Z',
                          'datacontenttype', 'application/json', 'dataschema', 'urn:billing:events:InvoicePaid:v1',
                          'data', {DATA}) AS payload,
       'PUBLISHED' AS status, t AS created_at, t AS available_at, NULL::timestamptz AS lease_until, 0 AS attempts,
       NULL::text AS last_error, t + interval '50 milliseconds' AS published_at, g AS customer_id
  FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) g,
       LATERAL (SELECT gen_random_uuid() AS u,
                       %(start)s::timestamptz + (g - 1) * %(step)s::interval AS t) x
"""


def url_for_db(server_url: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


def claim_sql(table: str) -> str:
    # The two statements of billing.claim_outbox_events (candidates, then the lease through the
    # primary key), on another table; the plain table is claimed by the function itself.
    if table == "billing.outbox_event":
        return "SELECT id FROM billing.claim_outbox_events(%(k)s, interval '30 seconds', %(now)s)"
    return f"""
    WITH candidate AS MATERIALIZED (
        SELECT e.id, e.aggregate_type, e.aggregate_id FROM {table} e
         WHERE e.status = 'PENDING' AND e.available_at <= %(now)s AND (e.lease_until IS NULL OR e.lease_until <= %(now)s)
         ORDER BY e.id LIMIT %(k)s FOR UPDATE SKIP LOCKED
    ), ok AS (
        SELECT array_agg(c.id ORDER BY c.id) AS ids FROM candidate c
         WHERE NOT EXISTS (SELECT 1 FROM {table} earlier
                            WHERE earlier.status <> 'PUBLISHED' AND earlier.status <> 'DEAD'
                              AND earlier.aggregate_type = c.aggregate_type
                              AND earlier.aggregate_id = c.aggregate_id AND earlier.id < c.id
                              AND earlier.id NOT IN (SELECT id FROM candidate) OFFSET 0)
    )
    UPDATE {table} e SET lease_until = %(now)s + interval '30 seconds'
      WHERE e.id = ANY ((SELECT ids FROM ok)::bigint[]) RETURNING e.id"""


def mark_sql(table: str) -> str:
    if table == "billing.outbox_event":
        return "SELECT billing.mark_outbox_published(%(ids)s::bigint[], %(now)s)"
    return (f"UPDATE {table} SET status = 'PUBLISHED', published_at = %(now)s, lease_until = NULL "
            f"WHERE id = ANY (%(ids)s::bigint[]) AND status = 'PENDING'")


class Outbox:
    def __init__(self, url: str, table: str, hot: str | None = None) -> None:
        # `hot`: where new rows land (the table, or its newest partition). It is analyzed once
        # it holds pending rows, as autovacuum would: with the statistics of an empty table the
        # planner probes it by sequential scan, which measures the statistics, not the layout.
        self.url, self.table, self.hot = url, table, hot
        self.next_id = 0
        self.analyzed = hot is None

    def analyze(self, conn) -> None:
        if not self.analyzed:
            conn.execute(f"ANALYZE {self.hot}")
            self.analyzed = True

    def add_pending(self, conn, k: int) -> None:
        lo = self.next_id + 1
        self.next_id += k
        conn.execute(f"INSERT INTO {self.table} SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, "
                     f"'PENDING', created_at, created_at, NULL, 0, NULL, NULL FROM ({ROWS}) r",
                     {"lo": lo, "hi": self.next_id, "start": NOW, "step": timedelta(microseconds=1)})

    def claim_and_mark(self, conn, k: int, cpu: list | None = None) -> float:
        before = backend_cpu_ms(conn)
        started = time.perf_counter()
        ids = [r[0] for r in conn.execute(claim_sql(self.table), {"now": NOW + timedelta(days=1), "k": k}).fetchall()]
        conn.execute(mark_sql(self.table), {"now": NOW + timedelta(days=1), "ids": ids})
        elapsed = (time.perf_counter() - started) * 1000
        if cpu is not None:
            cpu.append(backend_cpu_ms(conn) - before)
        assert len(ids) == k, (self.table, len(ids), k)
        return elapsed

    def cost(self, conn, k: int = 5000, repeat: int = 5) -> tuple[float, float]:
        """Median wall ms and median server CPU ms of claim + mark of k events."""
        times, cpu = [], []
        for _ in range(repeat):
            self.add_pending(conn, k)
            self.analyze(conn)
            times.append(self.claim_and_mark(conn, k, cpu))
        return statistics.median(times), statistics.median(cpu)


def backend_cpu_ms(conn) -> float:
    """The server backend's user + system CPU time so far (ms), from /proc: what the statement cost
    the server whatever else the machine is doing (10 ms resolution)."""
    try:
        with open(f"/proc/{conn.info.backend_pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")
    except OSError:
        return float("nan")


def relay_like(outbox: Outbox, stop: threading.Event, latencies: list[float]) -> None:
    """A relay's rhythm: 500 fresh events written, then claimed and marked; latency of each cycle."""
    with psycopg.connect(outbox.url, autocommit=True) as conn:
        while not stop.is_set():
            outbox.add_pending(conn, 500)
            outbox.analyze(conn)
            latencies.append(outbox.claim_and_mark(conn, 500))
            time.sleep(0.02)


def fmt(cost: tuple[float, float]) -> str:
    return f"{cost[0]:.0f} / {cost[1]:.0f} ms"


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


def under_load(outbox: Outbox, work) -> tuple[float, list[float]]:
    stop, latencies = threading.Event(), []
    thread = threading.Thread(target=relay_like, args=(outbox, stop, latencies))
    thread.start()
    time.sleep(1.0)
    latencies.clear()
    started = time.perf_counter()
    work()
    elapsed = time.perf_counter() - started
    stop.set()
    thread.join()
    return elapsed, latencies


def build(conn, n: int, parts: int, start: datetime, step: timedelta) -> None:
    conn.execute("CREATE SCHEMA bench")
    conn.execute("CREATE TABLE bench.outbox_empty (LIKE billing.outbox_event INCLUDING ALL)")
    conn.execute("CREATE TABLE bench.outbox_part (LIKE billing.outbox_event INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
                 "EXCLUDING IDENTITY) PARTITION BY RANGE (id)")
    size = -(-n // parts)
    for p in range(parts):
        conn.execute(f"CREATE TABLE bench.outbox_part_{p} PARTITION OF bench.outbox_part "
                     f"FOR VALUES FROM ({p * size + 1}) TO ({(p + 1) * size + 1}) WITH (fillfactor = 70)")
    conn.execute(f"CREATE TABLE bench.outbox_part_new PARTITION OF bench.outbox_part "
                 f"FOR VALUES FROM ({parts * size + 1}) TO (MAXVALUE) WITH (fillfactor = 70)")
    for stmt in ("CREATE UNIQUE INDEX ON bench.outbox_part (id)",
                 "CREATE INDEX ON bench.outbox_part (id) WHERE status = 'PENDING'",
                 "CREATE INDEX ON bench.outbox_part (aggregate_type, aggregate_id, id) WHERE status <> 'PUBLISHED'",
                 "CREATE INDEX ON bench.outbox_part (id) WHERE status = 'DEAD'",
                 "CREATE INDEX ON bench.outbox_part (published_at) WHERE status = 'PUBLISHED'"):
        conn.execute(stmt)
    t = time.perf_counter()
    chunk = 500_000
    for lo in range(1, n + 1, chunk):
        hi = min(n, lo + chunk - 1)
        conn.execute(f"INSERT INTO billing.outbox_event {ROWS}", {"lo": lo, "hi": hi, "start": start, "step": step})
        conn.execute(f"INSERT INTO bench.outbox_part SELECT * FROM billing.outbox_event WHERE id BETWEEN {lo} AND {hi}")
        print(f"  filled {hi:,} rows ({time.perf_counter() - t:.0f} s)", flush=True)


def repair(conn, n: int, parts: int, start: datetime, step: timedelta) -> None:
    """Back to the state after `build`: the published rows 1..n in both tables, nothing else."""
    size = -(-n // parts)
    for table in ("billing.outbox_event", "bench.outbox_part"):
        conn.execute(f"DELETE FROM {table} WHERE id > %s OR status <> 'PUBLISHED'", (n,))
    conn.execute("TRUNCATE bench.outbox_empty")
    for table in ("bench.outbox_part", "bench.outbox_empty"):  # databases built before 0021
        conn.execute(f"CREATE INDEX IF NOT EXISTS {table.split('.')[1]}_aggregate_unpublished "
                     f"ON {table} (aggregate_type, aggregate_id, id) WHERE status <> 'PUBLISHED'")
    chunk = 500_000
    for lo in range(1, n + 1, chunk):
        hi = min(n, lo + chunk - 1)
        have = conn.execute("SELECT count(*) FROM billing.outbox_event WHERE id BETWEEN %s AND %s", (lo, hi)).fetchone()[0]
        if have != hi - lo + 1:
            conn.execute("DELETE FROM billing.outbox_event WHERE id BETWEEN %s AND %s", (lo, hi))
            conn.execute(f"INSERT INTO billing.outbox_event {ROWS}", {"lo": lo, "hi": hi, "start": start, "step": step})
            print(f"  refilled rows {lo:,}..{hi:,}", flush=True)
    for p in range(parts):
        if conn.execute("SELECT to_regclass(%s)", (f"bench.outbox_part_{p}",)).fetchone()[0] is None:
            conn.execute(f"CREATE TABLE bench.outbox_part_{p} PARTITION OF bench.outbox_part "
                         f"FOR VALUES FROM ({p * size + 1}) TO ({(p + 1) * size + 1}) WITH (fillfactor = 70)")
            conn.execute(f"INSERT INTO bench.outbox_part SELECT * FROM billing.outbox_event "
                         f"WHERE id BETWEEN {p * size + 1} AND {(p + 1) * size}")
            print(f"  refilled partition {p}", flush=True)
    conn.execute("VACUUM billing.outbox_event")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-url", default=os.environ.get("BILLING_TEST_DATABASE_URL"))
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--share", type=float, default=0.1, help="share of the rows retention removes (oldest first)")
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--reuse", action="store_true",
                    help="keep the database of the previous run with the same --rows, repairing what its run deleted")
    args = ap.parse_args()
    if not args.server_url:
        sys.exit("set BILLING_TEST_DATABASE_URL (make services) or pass --server-url")
    n, parts = args.rows, 10
    url = url_for_db(args.server_url, DB)
    with psycopg.connect(args.server_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB,)).fetchone()
        if not (args.reuse and exists):
            conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {DB}")
    reuse = bool(args.reuse and exists)
    migrate(url, REPO / "db", simulation=True)
    print(f"# retention benchmark: {n:,} published rows, {parts} partitions, retention of the oldest "
          f"{args.share:.0%}, batches of {args.batch:,}", flush=True)

    step = timedelta(days=30) / n
    start = NOW - timedelta(days=31)
    with psycopg.connect(url, autocommit=True) as conn:
        if reuse:
            repair(conn, n, parts, start, step)
        else:
            build(conn, n, parts, start, step)
        size = -(-n // parts)
        conn.execute("VACUUM ANALYZE billing.outbox_event")
        conn.execute("VACUUM ANALYZE bench.outbox_part")
        conn.execute("VACUUM ANALYZE bench.outbox_empty")
        sizes = {r[0]: r[1] for r in conn.execute(
            "SELECT relname, pg_size_pretty(pg_total_relation_size(oid)) FROM pg_class "
            "WHERE relname IN ('outbox_event', 'outbox_event_pending_idx', 'outbox_event_aggregate_unpublished_idx')")}
        print(f"  plain outbox: {sizes.get('outbox_event')} with indexes; pending index {sizes.get('outbox_event_pending_idx')}, "
              f"aggregate-unpublished index {sizes.get('outbox_event_aggregate_unpublished_idx')}", flush=True)

        empty = Outbox(url, "bench.outbox_empty", hot="bench.outbox_empty")
        empty.next_id = n + 10_000_000
        plain = Outbox(url, "billing.outbox_event")
        plain.next_id = n
        part = Outbox(url, "bench.outbox_part", hot="bench.outbox_part_new")
        part.next_id = n
        results = {}
        results["claim empty"] = empty.cost(conn)
        results["claim plain"] = plain.cost(conn)
        results["claim part"] = part.cost(conn)
        print(f"  claim + mark of 5,000 (wall / server CPU): no rows behind {fmt(results['claim empty'])}; {n:,} behind: "
              f"plain {fmt(results['claim plain'])}, partitioned {fmt(results['claim part'])}", flush=True)

        _, idle = under_load(plain, lambda: time.sleep(5))
        doomed = int(n * args.share)
        cutoff_keep = NOW - (start + step * doomed)  # keeps everything published after the doomed rows

        def batch_delete():
            with psycopg.connect(url, autocommit=True) as c2:
                while True:
                    got = c2.execute("SELECT outbox_events FROM billing.purge_expired(%s, %s, %s)",
                                     (cutoff_keep, args.batch, NOW)).fetchone()[0]
                    if got < args.batch:
                        break

        delete_s, during_delete = under_load(plain, batch_delete)
        deleted = n - conn.execute("SELECT count(*) FROM billing.outbox_event WHERE id <= %s", (n,)).fetchone()[0]
        after_delete = plain.cost(conn)
        t = time.perf_counter()
        conn.execute("VACUUM billing.outbox_event")
        vacuum_s = time.perf_counter() - t
        after_vacuum = plain.cost(conn)

        drop_parts = max(1, round(parts * args.share))

        def drop():
            with psycopg.connect(url, autocommit=True) as c2:
                for p in range(drop_parts):
                    c2.execute(f"ALTER TABLE bench.outbox_part DETACH PARTITION bench.outbox_part_{p} CONCURRENTLY")
                    c2.execute(f"DROP TABLE bench.outbox_part_{p}")

        drop_s, during_drop = under_load(part, drop)
        after_drop = part.cost(conn)

    print()
    print("| | batch DELETE (billing.purge_expired) | DROP PARTITION (native, range by id) |")
    print("|---|---|---|")
    print(f"| claim + mark of 5,000, wall / server CPU, with {n:,} published rows behind "
          f"(none behind: {fmt(results['claim empty'])}) | {fmt(results['claim plain'])} | {fmt(results['claim part'])} |")
    print(f"| rows removed | {deleted:,} in {delete_s:.1f} s ({deleted / delete_s:,.0f} rows/s) "
          f"| {drop_parts * size:,} in {drop_s:.2f} s |")
    print(f"| relay-like claim + mark of 500 meanwhile, p50 / p99 / max "
          f"(idle: {pct(idle, .5):.0f} / {pct(idle, .99):.0f} / {max(idle):.0f} ms) "
          f"| {pct(during_delete, .5):.0f} / {pct(during_delete, .99):.0f} / {max(during_delete):.0f} ms "
          f"| {pct(during_drop, .5):.0f} / {pct(during_drop, .99):.0f} / {max(during_drop, default=0):.0f} ms |")
    print(f"| claim + mark of 5,000 right after, wall / server CPU | {fmt(after_delete)} (after VACUUM, {vacuum_s:.1f} s: "
          f"{fmt(after_vacuum)}) | {fmt(after_drop)} |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
