"""Outbox relay benchmark: our relay next to the seed article's (section 6.4).

    python bench/relay/run.py                       # everything, figures as a Markdown table
    python bench/relay/run.py --events 50000 --duration 10 --skip-seed

Scenarios, each on a fresh database cloned from a migrated template and a fresh Kafka topic:
1. drain: a backlog of --events outbox rows (written before the relay starts) published to
   Kafka; events per second from the relay's start to the last row marked published.
2. steady rate: writer processes commit one event per transaction at 200 and 2,000 events per
   second (paced on a schedule, so a slow relay cannot slow the writers down); latency from each
   COMMIT's return to the Kafka acknowledgement of that event (p50, p99, max).
The same scenarios run against the seed's relay: every second, claim 200 rows in one
transaction, send each and wait for its acknowledgement (`.join()`) before the next, mark it.

Environment: BILLING_TEST_DATABASE_URL (a superuser URL of the server) and
BILLING_TEST_KAFKA_BOOTSTRAP, as `make services` writes them; flags override.
The outbox rows are written by the SQL API's own private emitter (billing._emit_event, same
envelope and NOTIFY as production) or, for the backlog, one INSERT ... SELECT: the bench is not
the driver.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from billing import db as sqlapi
from billing.migrate import migrate
from billing.worker.relay import Relay, RelayOptions
from billing.worker.sinks import KafkaSink

REPO = Path(__file__).resolve().parents[2]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def url_for_db(server_url: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


class Databases:
    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.template = f"bench_relay_tpl_{os.getpid()}"
        self.created: list[str] = []
        self._admin(f"DROP DATABASE IF EXISTS {self.template} WITH (FORCE)", f"CREATE DATABASE {self.template}")
        migrate(url_for_db(server_url, self.template), REPO / "db", simulation=True)

    def _admin(self, *statements: str) -> None:
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)

    def fresh(self) -> str:
        name = f"bench_relay_{uuid.uuid4().hex[:10]}"
        self._admin(f"CREATE DATABASE {name} TEMPLATE {self.template}")
        self.created.append(name)
        return url_for_db(self.server_url, name)

    def drop_all(self) -> None:
        self._admin(*[f"DROP DATABASE IF EXISTS {n} WITH (FORCE)" for n in [*self.created, self.template]])


def fresh_topic(bootstrap: str, partitions: int) -> str:
    name = f"bench.relay.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=60)
    return name


def topic_count(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count"})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        total = 0
        for p in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


def write_backlog(url: str, events: int, aggregates: int) -> float:
    """One statement: `events` InvoicePaid events over `aggregates` aggregates, ids interleaved."""
    t = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("""
            INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload,
                                              created_at, available_at)
            SELECT e.id, 'invoice', e.agg, 'InvoicePaid',
                   billing._cloud_event(e.id, 'InvoicePaid', 'invoice', e.agg, now(),
                       jsonb_build_object('invoiceId', e.agg, 'subscriptionId', e.agg, 'amount', 2990,
                                          'currency', 'BRL', 'paidAt', billing._utc_text(now()))),
                   now(), now()
            FROM (SELECT gen_random_uuid() AS id, (g * 7919) %% %s + 1 AS agg
                  FROM generate_series(1, %s) g) e""", (aggregates, events))
        conn.execute("VACUUM ANALYZE billing.outbox_event")
    return time.perf_counter() - t


def pending(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM billing.outbox_event WHERE status = 'PENDING'").fetchone()[0]


# -- the seed article's relay ------------------------------------------------------------------


class SeedRelay:
    """@Scheduled(fixedDelay = 1_000) @Transactional publishOutbox(): lock 200 unpublished rows,
    for each `kafka.send(...).join()` then markPublished, commit; wait a second; repeat."""

    def __init__(self, url: str, bootstrap: str, topic: str, on_ack=None) -> None:
        self.url, self.topic, self.on_ack = url, topic, on_ack
        # KafkaTemplate defaults: acks=all, idempotence on (clients >= 3.0), no linger.
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 0})
        self.published = 0

    def run(self, stop) -> None:
        with psycopg.connect(self.url) as conn:
            while not stop.is_set():
                with conn.transaction():
                    rows = conn.execute(sqlapi.CLAIM_OUTBOX_EVENTS_RAW,
                                        {"batch": 200, "lease": timedelta(seconds=30), "now": utcnow()}).fetchall()
                    for id_, _type, agg, payload in rows:
                        done = []
                        value = payload.encode()
                        self.producer.produce(self.topic, key=str(agg).encode(), value=value,
                                              on_delivery=lambda err, msg: done.append(err))
                        while not done:  # .join()
                            self.producer.poll(0.05)
                        if done[0] is not None:
                            raise RuntimeError(done[0])
                        if self.on_ack:
                            self.on_ack(value)
                        conn.execute(sqlapi.MARK_OUTBOX_PUBLISHED, {"ids": [id_], "now": utcnow()})
                        self.published += 1
                stop.wait(1.0)


# -- timing sink ------------------------------------------------------------------------------


def bench_seq(value: bytes) -> int | None:
    return json.loads(value)["data"].get("benchSeq")


class TimingSink:
    """KafkaSink, plus the wall time of each event's acknowledgement."""

    def __init__(self, inner: KafkaSink) -> None:
        self.inner = inner
        self.acks: dict[int, float] = {}

    def produce(self, key, value, on_delivery):
        def delivered(err):
            if err is None:
                self.acks[bench_seq(value)] = time.time()
            on_delivery(err)

        self.inner.produce(key, value, delivered)

    def poll(self, timeout):
        return self.inner.poll(timeout)

    def flush(self, timeout):
        return self.inner.flush(timeout)

    def purge(self):
        self.inner.purge()

    def close(self):
        self.inner.close()


async def warm_up(url: str, published, events: int = 20) -> None:
    """A few events first, so that connections (PostgreSQL, Kafka, the idempotent producer's id)
    are established before the measured run: it measures the steady state, not the start."""
    before = published()
    with psycopg.connect(url, autocommit=True) as conn:
        for n in range(events):
            conn.execute("SELECT billing._emit_event('invoice', %s, 'InvoicePaid', %s::jsonb, now())",
                         (n + 1, json.dumps({"benchSeq": -1 - n})))
    deadline = time.monotonic() + 30
    while published() - before < events and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


# -- steady-rate writers (separate processes) ----------------------------------------------------


def _writer(url: str, rate: float, duration: float, go, start_at, offset: int, stride: int, ready, out) -> None:
    commits: dict[int, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT 1")
        ready.put(offset)
        go.wait()  # every writer connected: the schedule starts now for all of them
        t0 = start_at.value
        n = offset
        i = 0
        while True:
            due = t0 + i / rate
            if due - t0 >= duration:
                break
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            conn.execute("SELECT billing._emit_event('invoice', %s, 'InvoicePaid', %s::jsonb, now())",
                         (n % 5000 + 1, json.dumps({"benchSeq": n, "amount": 2990, "currency": "BRL"})))
            commits[n] = time.time()  # autocommit: the statement's return is the commit
            n += stride
            i += 1
    out.put(commits)


def steady(url: str, rate: float, duration: float, writers: int):
    """Start the writer processes; returns once all are connected and writing on one schedule
    (paced by the clock, not by their own progress: a stall shows up as latency, not as fewer
    events)."""
    ctx = mp.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    start_at = ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_writer, args=(url, rate / writers, duration, go, start_at, w, writers, ready, out))
             for w in range(writers)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=60)
    start_at.value = time.time() + 0.05
    go.set()
    return procs, out, start_at.value


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return {"p50": pick(0.50), "p99": pick(0.99), "max": values[-1], "mean": statistics.fmean(values)}


# -- scenarios --------------------------------------------------------------------------------


async def drain_ours(url: str, bootstrap: str, topic: str, events: int, batch: int) -> dict:
    stop = asyncio.Event()
    sink = KafkaSink(bootstrap, topic)
    relay = Relay(url, sink, stop, options=RelayOptions(batch_size=batch))
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    task = asyncio.create_task(relay.run())
    while relay.published < events:
        await asyncio.sleep(0.01)
        if task.done():
            task.result()
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0  # the relay's process, librdkafka's threads included
    stop.set()
    await task
    sink.close()
    return {"events": relay.published, "seconds": elapsed, "per_second": relay.published / elapsed,
            "relay_cpu_seconds": cpu, "relay_cpu_us_per_event": 1e6 * cpu / max(relay.published, 1)}


def drain_seed(url: str, bootstrap: str, topic: str, seconds: float) -> dict:
    import threading

    stop = threading.Event()
    relay = SeedRelay(url, bootstrap, topic)
    thread = threading.Thread(target=relay.run, args=(stop,))
    t0 = time.perf_counter()
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()
    elapsed = time.perf_counter() - t0
    return {"events": relay.published, "seconds": elapsed, "per_second": relay.published / elapsed}


async def steady_ours(url: str, bootstrap: str, topic: str, rate: float, duration: float, writers: int) -> dict:
    stop = asyncio.Event()
    sink = TimingSink(KafkaSink(bootstrap, topic))
    relay = Relay(url, sink, stop)
    task = asyncio.create_task(relay.run())
    while not relay.active:
        await asyncio.sleep(0.01)
    await warm_up(url, lambda: relay.published)
    procs, out, _ = await asyncio.to_thread(steady, url, rate, duration, writers)
    commits: dict[int, float] = {}
    for _ in procs:
        commits.update(await asyncio.to_thread(out.get))
    for p in procs:
        await asyncio.to_thread(p.join)  # never block the relay's event loop
    deadline = time.time() + 30
    while sum(1 for n in commits if n in sink.acks) < len(commits) and time.time() < deadline:
        await asyncio.sleep(0.05)
    stop.set()
    await task
    sink.close()
    return summarize(commits, sink.acks, duration)


def steady_seed(url: str, bootstrap: str, topic: str, rate: float, duration: float, writers: int) -> dict:
    import threading

    acks: dict[int, float] = {}
    stop = threading.Event()
    relay = SeedRelay(url, bootstrap, topic, on_ack=lambda value: acks.__setitem__(bench_seq(value), time.time()))
    thread = threading.Thread(target=relay.run, args=(stop,))
    thread.start()
    asyncio.run(warm_up(url, lambda: relay.published))
    procs, out, _ = steady(url, rate, duration, writers)
    commits: dict[int, float] = {}
    for _ in procs:
        commits.update(out.get())
    for p in procs:
        p.join()
    # Give it a few seconds past the writers; what is left then is its backlog.
    time.sleep(3)
    stop.set()
    thread.join()
    return summarize(commits, acks, duration)


def summarize(commits: dict[int, float], acks: dict[int, float], duration: float) -> dict:
    latencies = [(acks[n] - t) * 1000 for n, t in commits.items() if n in acks]
    return {"written": len(commits), "achieved_rate": len(commits) / duration, "acked": len(latencies),
            "unpublished": len(commits) - len(latencies), **percentiles(latencies)}


# -- report -----------------------------------------------------------------------------------


def fmt_ms(v) -> str:
    return "-" if v is None else (f"{v:.1f}" if v < 100 else f"{v:,.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database-url", default=os.environ.get("BILLING_TEST_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:55432/postgres"))
    ap.add_argument("--bootstrap", default=os.environ.get("BILLING_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:59092"))
    ap.add_argument("--events", type=int, default=200_000, help="backlog to drain")
    ap.add_argument("--aggregates", type=int, default=100_000, help="distinct aggregates in the backlog")
    ap.add_argument("--batch", type=int, default=5000, help="our relay's claim size")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rates", default="200,2000", help="steady rates, events per second")
    ap.add_argument("--duration", type=float, default=20, help="seconds of steady writing per rate")
    ap.add_argument("--writers", type=int, default=2, help="writer processes for the steady rates")
    ap.add_argument("--seed-drain-seconds", type=float, default=30, help="time box for the seed relay's drain")
    ap.add_argument("--skip-seed", action="store_true", help="only our relay")
    # The claim rewrite once proposed here (bench/relay/proposed_outbox.sql) now ships in
    # db/functions/60_outbox.sql and migration 0004; only the shipped SQL is measured.
    ap.add_argument("--sql", choices=["shipped"], default="shipped", help="kept for old command lines")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r]
    variants = ["shipped"]
    results: dict = {"load_average": os.getloadavg(), "cpu_pressure": cpu_pressure(), "cpus": os.cpu_count(),
                     "drain": {}, "steady": {}}

    for variant in variants:
        dbs = Databases(args.database_url)
        ours = f"ours, {variant} SQL"
        try:
            url = dbs.fresh()
            took = write_backlog(url, args.events, args.aggregates)
            print(f"backlog of {args.events:,} events written in {took:.1f}s", file=sys.stderr)
            topic = fresh_topic(args.bootstrap, args.partitions)
            r = asyncio.run(drain_ours(url, args.bootstrap, topic, args.events, args.batch))
            r["in_kafka"] = topic_count(args.bootstrap, topic)
            r["left_in_outbox"] = pending(url)
            results["drain"][ours] = r
            print(f"{ours}: drained {r['events']:,} in {r['seconds']:.2f}s = {r['per_second']:,.0f}/s "
                  f"(kafka holds {r['in_kafka']:,})", file=sys.stderr)

            seed = not args.skip_seed and variant == variants[0]
            if seed:
                url = dbs.fresh()
                write_backlog(url, args.events, args.aggregates)
                topic = fresh_topic(args.bootstrap, args.partitions)
                r = drain_seed(url, args.bootstrap, topic, args.seed_drain_seconds)
                r["projected_seconds_for_backlog"] = args.events / r["per_second"] if r["per_second"] else None
                results["drain"]["seed article"] = r
                print(f"seed: {r['events']:,} in {r['seconds']:.1f}s = {r['per_second']:,.0f}/s", file=sys.stderr)

            for rate in rates:
                for who in ([ours, "seed article"] if seed else [ours]):
                    url = dbs.fresh()
                    topic = fresh_topic(args.bootstrap, args.partitions)
                    if who == ours:
                        r = asyncio.run(steady_ours(url, args.bootstrap, topic, rate, args.duration, args.writers))
                    else:
                        r = steady_seed(url, args.bootstrap, topic, rate, args.duration, args.writers)
                    results["steady"].setdefault(str(int(rate)), {})[who] = r
                    print(f"{who} @ {rate:.0f}/s: p50 {fmt_ms(r['p50'])} ms, p99 {fmt_ms(r['p99'])} ms, "
                          f"max {fmt_ms(r['max'])} ms, unpublished {r['unpublished']}", file=sys.stderr)
        finally:
            dbs.drop_all()

    print(report(results, args))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def cpu_pressure() -> str | None:
    """The kernel's CPU pressure (share of time some task waited for a CPU), when it has it."""
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    return some.split()[2].split("=")[1] + "%"  # avg60


def report(results: dict, args) -> str:
    load = ", ".join(f"{x:.1f}" for x in results["load_average"])
    pressure = f", CPU pressure (some, avg60) {results['cpu_pressure']}" if results.get("cpu_pressure") else ""
    lines = [f"Machine: {results['cpus']} CPUs, load average at the start {load}{pressure}.", "",
             f"Drain of a {args.events:,}-event backlog ({args.aggregates:,} aggregates, {args.partitions} partitions, "
             f"our batch {args.batch}):", "",
             "| relay | events | seconds | events/s | relay CPU per event |", "|---|---:|---:|---:|---:|"]
    for who, r in results["drain"].items():
        note = f" (time-boxed; {r['projected_seconds_for_backlog'] / 60:,.0f} min projected)" if who == "seed article" else ""
        cpu = f"{r['relay_cpu_us_per_event']:.0f} µs" if "relay_cpu_us_per_event" in r else "-"
        lines.append(f"| {who} | {r['events']:,} | {r['seconds']:.1f}{note} | {r['per_second']:,.0f} | {cpu} |")
    lines += ["", f"Steady rate, commit -> Kafka acknowledgement, {args.duration:.0f} s per run:", "",
              "| rate | relay | events | p50 ms | p99 ms | max ms | unpublished at the end |",
              "|---:|---|---:|---:|---:|---:|---:|"]
    for rate, by in results["steady"].items():
        for who, r in by.items():
            lines.append(f"| {rate}/s | {who} | {r['written']:,} | {fmt_ms(r['p50'])} | {fmt_ms(r['p99'])} | "
                         f"{fmt_ms(r['max'])} | {r['unpublished']:,} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
