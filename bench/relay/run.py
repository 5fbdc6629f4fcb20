"""Outbox relay benchmark: the relay as it ships next to the baseline's (and, optionally, the seed's).

    python -m bench.relay.run                       # everything, figures as a Markdown table
    python -m bench.relay.run --events 50000 --duration 10 --baseline main

Each relay runs in its own process (bench/relay/relay_proc.py), `billing` imported from its own
tree: the current one ("ours") and the baseline commit's (`--baseline`, default: main when issue 17
was filed, extracted by bench/baseline.py), each on a fresh database migrated from its own db/ and
a fresh Kafka topic. The two alternate within one run, so both see the same host.

1. drain: a backlog of --events outbox rows (written before the relay starts) published to
   Kafka; events per second from the relay's go (its process is up and connected) to the last
   row marked published; CPU per event of the relay process and of its PostgreSQL backends.
2. steady rate: writer processes commit one event per transaction at 200 and 2,000 events per
   second (paced on a schedule, so a slow relay cannot slow the writers down); latency from each
   COMMIT's return to the moment a Kafka consumer reading the topic receives that event.
With --with-seed, the seed article's relay too (every second, claim 200 rows in one transaction,
send each and wait for its acknowledgement before the next, mark it).

Environment: BILLING_TEST_DATABASE_URL (a superuser URL of the server) and
BILLING_TEST_KAFKA_BOOTSTRAP, as `make services` writes them; flags override.
The outbox rows are written by the SQL API's own private emitter (billing._emit_event, same
envelope and NOTIFY as production) or, for the backlog, one INSERT ... SELECT: the bench is not
the driver.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.baseline import DEFAULT_BASELINE, baseline_tree, host_load, proc_cpu, proc_rss_kb, tree_env

from billing import db as sqlapi  # noqa: E402
from billing.migrate import migrate  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RELAY_PROC = Path(__file__).with_name("relay_proc.py")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def url_for_db(server_url: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


class Databases:
    """A template migrated from `db_dir` (one tree's migrations and functions), fresh copies of it."""

    def __init__(self, server_url: str, db_dir: Path) -> None:
        self.server_url = server_url
        self.template = f"bench_relay_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.created: list[str] = []
        self._admin(f"DROP DATABASE IF EXISTS {self.template} WITH (FORCE)", f"CREATE DATABASE {self.template}")
        migrate(url_for_db(server_url, self.template), db_dir, simulation=True)

    def _admin(self, *statements: str) -> None:
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)

    def fresh(self) -> tuple[str, str]:
        name = f"bench_relay_{uuid.uuid4().hex[:10]}"
        self._admin(f"CREATE DATABASE {name} TEMPLATE {self.template}")
        self.created.append(name)
        return url_for_db(self.server_url, name), name

    def drop_all(self) -> None:
        self._admin(*[f"DROP DATABASE IF EXISTS {n} WITH (FORCE)" for n in [*self.created, self.template]])


def fresh_topic(bootstrap: str, partitions: int) -> str:
    name = f"bench.relay.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=60)
    return name


def topic_count(bootstrap: str, topic: str) -> int:
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
        # The baseline's outbox has no customer_id (migration 0082 added it): the column only where it exists.
        keyed = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'billing.outbox_event'::regclass "
                             "AND attname = 'customer_id' AND NOT attisdropped)").fetchone()[0]
        conn.execute(f"""
            INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload,
                                              created_at, available_at{', customer_id' if keyed else ''})
            SELECT e.id, 'invoice', e.agg, 'InvoicePaid',
                   billing._cloud_event(e.id, 'InvoicePaid', 'invoice', e.agg, now(),
                       jsonb_build_object('invoiceId', e.agg, 'subscriptionId', e.agg, 'amount', 2990,
                                          'currency', 'BRL', 'paidAt', billing._utc_text(now()))),
                   now(), now(){', e.agg' if keyed else ''}
            FROM (SELECT gen_random_uuid() AS id, (g * 7919) %% %s + 1 AS agg
                  FROM generate_series(1, %s) g) e""", (aggregates, events))
        conn.execute("VACUUM ANALYZE billing.outbox_event")
    return time.perf_counter() - t


def pending(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM billing.outbox_event WHERE status = 'PENDING'").fetchone()[0]


def backend_cpu(server_url: str, dbname: str) -> float:
    """CPU seconds used so far by the backends connected to `dbname` (the relay's, here)."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        pids = [r[0] for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,))]
    return sum(proc_cpu(p) for p in pids)


# -- a relay in its own process ------------------------------------------------------------------


class RelayProcess:
    """bench/relay/relay_proc.py with `billing` imported from `tree` (None: the current tree)."""

    def __init__(self, tree: Path | None, url: str, bootstrap: str, topic: str, batch: int,
                 trace: Path | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, str(RELAY_PROC), url, bootstrap, topic, str(batch),
                                      *([str(trace)] if trace else [])],
                                     env=tree_env(tree), cwd=str(tree or REPO))

    def cpu(self) -> float:
        return proc_cpu(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wait_published(url: str, at_least: int, timeout: float, proc: RelayProcess, poll: float = 0.02) -> float:
    """Until `at_least` events are PUBLISHED; returns the time.perf_counter() when seen."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            n = conn.execute("SELECT count(*) FROM billing.outbox_event WHERE status = 'PUBLISHED'").fetchone()[0] \
                if at_least < 1000 else None
            if n is None:
                n = at_least if not conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM billing.outbox_event WHERE status = 'PENDING')").fetchone()[0] else 0
            if n >= at_least:
                return time.perf_counter()
            if proc.proc.poll() is not None:
                raise RuntimeError(f"the relay exited with {proc.proc.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {at_least} events published after {timeout:.0f} s")
            time.sleep(poll)


def broker_gc() -> tuple[int, float] | None:
    """(collections, total pause ms) of the local Kafka broker's JVM so far (jstat), when the broker
    is this checkout's (scripts/services/kafka.sh keeps its pid) and jstat is installed."""
    try:
        pid = int((REPO / ".cache" / "kafka" / "kafka.pid").read_text().split()[0])
        out = subprocess.run(["jstat", "-gc", str(pid)], capture_output=True, text=True, timeout=10).stdout.split("\n")
        row = dict(zip(out[0].split(), out[1].split()))
        return (int(row["YGC"]) + int(row["FGC"]) + int(row.get("CGC", 0)),
                1000 * (float(row["YGCT"]) + float(row["FGCT"]) + float(row.get("CGCT", 0))))
    except (OSError, ValueError, IndexError, KeyError, subprocess.SubprocessError):
        return None


# -- the consumer that times each event's arrival -------------------------------------------------


class TopicReader(threading.Thread):
    """A Kafka consumer assigned every partition from the beginning: the wall time at which each
    event (by its data.benchSeq) first arrives."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.received: dict[int, float] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                # poll() returns as soon as a message is there (consume(n, t) would wait for n
                # messages or t seconds, and add up to t to every figure).
                msg = self.consumer.poll(0.05)
                if msg is not None and msg.error() is None:
                    now = time.time()
                    seq = bench_seq(msg.value())
                    if seq is not None and seq not in self.received:
                        self.received[seq] = now
        finally:
            self.consumer.close()


# -- the seed article's relay ------------------------------------------------------------------


class SeedRelay:
    """@Scheduled(fixedDelay = 1_000) @Transactional publishOutbox(): lock 200 unpublished rows,
    for each `kafka.send(...).join()` then markPublished, commit; wait a second; repeat."""

    def __init__(self, url: str, bootstrap: str, topic: str) -> None:
        self.url, self.topic = url, topic
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
                    for id_, _type, agg, payload, _place in rows:
                        done = []
                        self.producer.produce(self.topic, key=str(agg).encode(), value=payload.encode(),
                                              on_delivery=lambda err, msg: done.append(err))
                        while not done:  # .join()
                            self.producer.poll(0.05)
                        if done[0] is not None:
                            raise RuntimeError(done[0])
                        conn.execute(sqlapi.MARK_OUTBOX_PUBLISHED, {"ids": [id_], "now": utcnow()})
                        self.published += 1
                stop.wait(1.0)


def bench_seq(value: bytes) -> int | None:
    return json.loads(value)["data"].get("benchSeq")


def warm_up(url: str, events: int = 20) -> None:
    """A few events first, so that connections (PostgreSQL, Kafka, the idempotent producer's id)
    are established before the measured run: it measures the steady state, not the start."""
    with psycopg.connect(url, autocommit=True) as conn:
        for n in range(events):
            conn.execute("SELECT billing._emit_event('invoice', %s, 'InvoicePaid', %s::jsonb, now())",
                         (n + 1, json.dumps({"benchSeq": -1 - n})))


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


def steady_writers(url: str, rate: float, duration: float, writers: int) -> dict[int, float]:
    """Writer processes on one schedule (paced by the clock, not by their own progress: a stall
    shows up as latency, not as fewer events); returns each event's commit time."""
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
    commits: dict[int, float] = {}
    for _ in procs:
        commits.update(out.get())
    for p in procs:
        p.join()
    return commits


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return {"p50": pick(0.50), "p99": pick(0.99), "max": values[-1], "mean": statistics.fmean(values)}


# -- scenarios --------------------------------------------------------------------------------


def drain(tree: Path | None, server_url: str, url: str, dbname: str, bootstrap: str, topic: str,
          events: int, batch: int) -> dict:
    relay = RelayProcess(tree, url, bootstrap, topic, batch)
    try:
        # Up when its lock session exists (imports done, connected): from then on, the clock runs.
        deadline = time.monotonic() + 60
        with psycopg.connect(url, autocommit=True) as conn:
            while not conn.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' "
                                   "AND granted)").fetchone()[0]:
                if time.monotonic() > deadline or relay.proc.poll() is not None:
                    raise RuntimeError("the relay did not start")
                time.sleep(0.005)
        t0 = time.perf_counter()
        cpu0 = relay.cpu()
        done = wait_published(url, events, 600, relay)
        elapsed = done - t0
        cpu = relay.cpu() - cpu0
        pg_cpu = backend_cpu(server_url, dbname)
    finally:
        relay.stop()
    return {"events": events, "seconds": elapsed, "per_second": events / elapsed,
            "relay_cpu_us_per_event": 1e6 * cpu / events, "pg_cpu_us_per_event": 1e6 * pg_cpu / events}


def drain_seed(url: str, bootstrap: str, topic: str, seconds: float) -> dict:
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


def stages(trace: list, commits: dict[int, float], received: dict[int, float]) -> dict:
    """Each event's latency split at the relay's stamps: commit -> the claim that returned it
    starts ("wait": NOTIFY, wake-up, the cycle in progress), the claim, claim -> produce, produce ->
    the consumer receives it ("kafka"); and produce -> the broker's acknowledgement. Percentiles
    of each, and the mean of each over the slowest 1% of events (where the p99 comes from)."""
    claim: dict[int, tuple[float, float]] = {}
    publish: dict[int, tuple[float, float]] = {}
    claims = empty = 0
    for kind, t0, t1, seqs in trace:
        target = claim if kind == "claim" else publish
        if kind == "claim":
            claims += 1
            empty += not seqs
        for n in seqs:
            if n is not None and n >= 0 and n not in target:
                target[n] = (t0, t1)
    rows = []
    for n, c in commits.items():
        if n in received and n in claim and n in publish:
            (c0, c1), (p0, p1), a = claim[n], publish[n], received[n]
            rows.append({"total": a - c, "wait": c0 - c, "claim": c1 - c0, "to_produce": p0 - c1,
                         "kafka": a - p0, "ack": p1 - p0})
    if not rows:
        return {}
    out = {"claims": claims, "empty_claims": empty, "events_per_claim": len(rows) / max(claims - empty, 1)}
    for key in ("total", "wait", "claim", "to_produce", "kafka", "ack"):
        out[key] = {k: (v * 1000 if v is not None else None)
                    for k, v in percentiles([r[key] for r in rows]).items()}
    slow = sorted(rows, key=lambda r: r["total"])[int(0.99 * len(rows)):]
    out["slowest_1pct_mean_ms"] = {key: 1000 * statistics.fmean(r[key] for r in slow)
                                   for key in ("total", "wait", "claim", "to_produce", "kafka", "ack")}
    return out


def steady(tree: Path | None, url: str, bootstrap: str, topic: str, partitions: int, rate: float,
           duration: float, writers: int, seed: bool = False, trace: Path | None = None) -> dict:
    reader = TopicReader(bootstrap, topic, partitions)
    reader.start()
    stop_seed = threading.Event()
    relay = seed_thread = None
    if seed:
        seed_thread = threading.Thread(target=SeedRelay(url, bootstrap, topic).run, args=(stop_seed,))
        seed_thread.start()
    else:
        relay = RelayProcess(tree, url, bootstrap, topic, 5000, trace)
    try:
        warm_up(url)
        deadline = time.monotonic() + 60
        while sum(1 for n in reader.received if n < 0) < 20 and time.monotonic() < deadline:
            time.sleep(0.02)
        cpu0 = relay.cpu() if relay else 0.0
        gc0 = broker_gc()
        commits = steady_writers(url, rate, duration, writers)
        # A few seconds past the writers for the stragglers; what is left then is the backlog.
        deadline = time.monotonic() + 5
        while sum(1 for n in commits if n in reader.received) < len(commits) and time.monotonic() < deadline:
            time.sleep(0.05)
        cpu = (relay.cpu() - cpu0) if relay else None
        rss = proc_rss_kb(relay.proc.pid) if relay else None
        gc1 = broker_gc()
    finally:
        if relay:
            relay.stop()
        stop_seed.set()
        if seed_thread:
            seed_thread.join()
        reader.halt.set()
        reader.join()
    latencies = [(reader.received[n] - t) * 1000 for n, t in commits.items() if n in reader.received]
    out = {"written": len(commits), "achieved_rate": len(commits) / duration, "received": len(latencies),
           "unpublished": len(commits) - len(latencies), **percentiles(latencies)}
    if cpu is not None:
        out["relay_cpu_us_per_event"] = 1e6 * cpu / max(len(commits), 1)
    if rss:
        out["relay_rss_kb"], out["relay_peak_rss_kb"] = rss
    if gc0 and gc1:
        out["broker_gc"] = {"pauses": gc1[0] - gc0[0], "ms": gc1[1] - gc0[1]}
    if trace is not None and trace.exists():
        out["stages"] = stages(json.loads(trace.read_text()), commits, reader.received)
        trace.unlink()
    return out


# -- report -----------------------------------------------------------------------------------


def fmt_ms(v) -> str:
    return "-" if v is None else (f"{v:.1f}" if v < 100 else f"{v:,.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database-url", default=os.environ.get("BILLING_TEST_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:25432/postgres"))
    ap.add_argument("--bootstrap", default=os.environ.get("BILLING_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:29092"))
    ap.add_argument("--events", type=int, default=200_000, help="backlog to drain")
    ap.add_argument("--aggregates", type=int, default=100_000, help="distinct aggregates in the backlog")
    ap.add_argument("--batch", type=int, default=5000, help="the relays' claim size for the drain")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rates", default="200,2000", help="steady rates, events per second")
    ap.add_argument("--duration", type=float, default=20, help="seconds of steady writing per rate")
    ap.add_argument("--writers", type=int, default=2, help="writer processes for the steady rates")
    ap.add_argument("--baseline", default=DEFAULT_BASELINE,
                    help="the commit to compare with (default: main when issue 17 was filed); 'none' to skip")
    ap.add_argument("--with-seed", action="store_true", help="also the seed article's relay")
    ap.add_argument("--seed-drain-seconds", type=float, default=30, help="time box for the seed relay's drain")
    ap.add_argument("--skip-drain", action="store_true")
    ap.add_argument("--trace", action="store_true",
                    help="stamp the relays' claims and publishes: split each event's latency into stages")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r]
    who: list[tuple[str, Path | None]] = []
    if args.baseline != "none":
        tree = baseline_tree(args.baseline)
        who.append((f"baseline {tree.name[:7]}", tree))
    who.append(("ours", None))
    results: dict = {"load_start": host_load(), "drain": {}, "steady": {}, "load": {}}
    dbs = {name: Databases(args.database_url, (tree or REPO) / "db") for name, tree in who}
    try:
        if not args.skip_drain:
            for name, tree in who:
                url, dbname = dbs[name].fresh()
                took = write_backlog(url, args.events, args.aggregates)
                print(f"backlog of {args.events:,} events written in {took:.1f}s", file=sys.stderr)
                topic = fresh_topic(args.bootstrap, args.partitions)
                load = host_load()
                r = drain(tree, args.database_url, url, dbname, args.bootstrap, topic, args.events, args.batch)
                r["in_kafka"] = topic_count(args.bootstrap, topic)
                r["load"] = load
                results["drain"][name] = r
                print(f"{name}: drained {r['events']:,} in {r['seconds']:.2f}s = {r['per_second']:,.0f}/s "
                      f"(kafka holds {r['in_kafka']:,}; {load})", file=sys.stderr)
            if args.with_seed:
                url, _ = dbs[who[-1][0]].fresh()
                write_backlog(url, args.events, args.aggregates)
                topic = fresh_topic(args.bootstrap, args.partitions)
                r = drain_seed(url, args.bootstrap, topic, args.seed_drain_seconds)
                r["load"] = host_load()
                results["drain"]["seed article"] = r
                print(f"seed: {r['events']:,} in {r['seconds']:.1f}s = {r['per_second']:,.0f}/s", file=sys.stderr)
        for rate in rates:
            runs = [*who, *([("seed article", None)] if args.with_seed else [])]
            for name, tree in runs:
                url, _ = dbs[name if name in dbs else who[-1][0]].fresh()
                topic = fresh_topic(args.bootstrap, args.partitions)
                load = host_load()
                trace = (Path(tempfile.gettempdir()) / f"relay-trace-{uuid.uuid4().hex[:8]}.json"
                         if args.trace and name != "seed article" else None)
                r = steady(tree, url, args.bootstrap, topic, args.partitions, rate, args.duration, args.writers,
                           seed=name == "seed article", trace=trace)
                r["load"] = load
                results["steady"].setdefault(str(int(rate)), {})[name] = r
                print(f"{name} @ {rate:.0f}/s: p50 {fmt_ms(r['p50'])} ms, p99 {fmt_ms(r['p99'])} ms, "
                      f"max {fmt_ms(r['max'])} ms, unpublished {r['unpublished']}, broker GC {r.get('broker_gc')} "
                      f"({load})", file=sys.stderr)
    finally:
        for d in dbs.values():
            d.drop_all()
    results["load_end"] = host_load()
    print(report(results, args))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def report(results: dict, args) -> str:
    lines = [f"Host at the start: {results['load_start']}; at the end: {results['load_end']}.", ""]
    if results["drain"]:
        lines += [f"Drain of a {args.events:,}-event backlog ({args.aggregates:,} aggregates, {args.partitions} "
                  f"partitions, batch {args.batch}):", "",
                  "| relay | events | seconds | events/s | relay CPU / event | PostgreSQL CPU / event | host |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for who, r in results["drain"].items():
            cpu = f"{r['relay_cpu_us_per_event']:.0f} µs" if "relay_cpu_us_per_event" in r else "-"
            pg = f"{r['pg_cpu_us_per_event']:.0f} µs" if "pg_cpu_us_per_event" in r else "-"
            lines.append(f"| {who} | {r['events']:,} | {r['seconds']:.1f} | {r['per_second']:,.0f} | {cpu} | {pg} "
                         f"| {r['load']} |")
    lines += ["", f"Steady rate, COMMIT -> a Kafka consumer receives the event, {args.duration:.0f} s per run:", "",
              "| rate | relay | events | p50 ms | p99 ms | max ms | not received | relay CPU / event | relay RSS at the "
              "end | broker GC pauses (total) | host |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for rate, by in results["steady"].items():
        for who, r in by.items():
            cpu = f"{r['relay_cpu_us_per_event']:.0f} µs" if "relay_cpu_us_per_event" in r else "-"
            gc = (f"{r['broker_gc']['pauses']} ({r['broker_gc']['ms']:.0f} ms)" if r.get("broker_gc") else "-")
            rss = f"{r['relay_rss_kb'] / 1024:.0f} MB" if r.get("relay_rss_kb") else "-"
            lines.append(f"| {rate}/s | {who} | {r['written']:,} | {fmt_ms(r['p50'])} | {fmt_ms(r['p99'])} | "
                         f"{fmt_ms(r['max'])} | {r['unpublished']:,} | {cpu} | {rss} | {gc} | {r['load']} |")
    traced = [(rate, who, r["stages"]) for rate, by in results["steady"].items() for who, r in by.items()
              if r.get("stages")]
    if traced:
        lines += ["", "Where the time goes (--trace), ms: p50 / p99 of each stage, and its mean over the slowest 1% "
                  "of events. wait = COMMIT -> the claim that returned the event starts; kafka = produce -> the "
                  "consumer has it; ack = produce -> the broker's acknowledgement (not on the consumer's path).", "",
                  "| rate | relay | claims (empty) | events/claim | wait | claim | to produce | kafka | ack | "
                  "slowest 1%: total = wait + claim + to produce + kafka |",
                  "|---:|---|---:|---:|---|---|---|---|---|---|"]
        for rate, who, st in traced:
            cell = lambda k: f"{fmt_ms(st[k]['p50'])} / {fmt_ms(st[k]['p99'])}"  # noqa: E731
            sl = st["slowest_1pct_mean_ms"]
            lines.append(f"| {rate}/s | {who} | {st['claims']:,} ({st['empty_claims']:,}) | "
                         f"{st['events_per_claim']:.1f} | {cell('wait')} | {cell('claim')} | {cell('to_produce')} | "
                         f"{cell('kafka')} | {cell('ack')} | {fmt_ms(sl['total'])} = {fmt_ms(sl['wait'])} + "
                         f"{fmt_ms(sl['claim'])} + {fmt_ms(sl['to_produce'])} + {fmt_ms(sl['kafka'])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
