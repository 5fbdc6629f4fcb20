"""Usage ingestion through the Kafka door, end to end (issue 29, docs/usage.md "Figures measured").

    python -m bench.usage.ingest                       # 200,000 events + 10% duplicates, 2 partitions, 2 consumers
    python -m bench.usage.ingest --events 500000 --consumers 1 --baseline none

Each path gets a fresh database (migrated from its own db/), N customers and the 3 meters of
bench/usage/run.py (count, sum, unique_count), and consumes a topic of its own holding the same kind
of stream: events of the last 10 minutes (a live stream: most of a customer's events of a batch fall
in one hour's rollup), spread over the customers at random, 10% of them sent twice, shuffled, keyed
by customer. The topic is filled before the consumers start; the time runs from the first batch
committed to the last (the group's join is not counted), polled every 0.25 s (the events stored
read from the count meter's hourly rollups, a few thousand rows: --progress; the bench's watcher's
own server CPU is printed apart).

- ours: `billing usage consume` of this tree (batches of up to 10,000: the envelopes parsed by the
  consumer, billing.ingest_usage_columns);
- baseline: `billing usage consume` of the baseline commit (its own consumer and functions: at
  605dd63, the JSON texts as they came through billing.ingest_usage_batch), a stream of the same size;
- naive: a consumer that makes one database call (billing.ingest_usage of one event, its own
  transaction) per message, this tree's functions, on a small stream.

Measured: events/s of the stream (duplicates included), the server CPU per event (the consumers'
PostgreSQL backends, /proc/<pid>/schedstat), the consumers' own CPU per event, the broker's, the
server's other processes' (autovacuum, walwriter, checkpointer, background writer: the postmaster's
children and reaped children), the whole host's busy CPU (/proc/stat: other sessions' too), the
consumers' batches, and the load average.

Environment: BILLING_TEST_DATABASE_URL (a superuser URL of the server) and
BILLING_TEST_KAFKA_BOOTSTRAP, as `make services` writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

from bench.baseline import baseline_tree, host_load, proc_cpu, tree_env

REPO = Path(__file__).resolve().parents[2]
BASELINE = "a018aa0"  # main before issue 29's fifth ingestion pass (605dd63: before the fourth, 230cbe5: the third, 423794e: the ingestion work)
METERS = [("requests", "count", None), ("tokens", "sum", "{tokens}"), ("users", "unique_count", "{user}")]


def url_for_db(server_url: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


def fresh_db(server_url: str, name: str, tree: Path | None, customers: int) -> str:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = url_for_db(server_url, name)
    # migrated by the tree's own code (its db/ and its driver)
    subprocess.run([sys.executable, "-m", "billing.cli", "--log-level", "WARNING", "db", "migrate", "--simulation",
                    "--database-url", url], check=True, env=tree_env(tree), stdout=subprocess.DEVNULL)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with psycopg.connect(url, autocommit=True) as conn:
        for code, agg, prop in METERS:
            conn.execute("SELECT billing.upsert_meter(%s, 'api.request', %s, %s::text[], '{}', %s)", (code, agg, prop, start))
        conn.execute("SELECT billing.upsert_customer(c) FROM generate_series(1, %s) c", (customers,))
        conn.execute("VACUUM ANALYZE")
    return url


def stream(prefix: str, events: int, customers: int, rnd: random.Random) -> list[tuple[bytes, bytes]]:
    now = datetime.now(timezone.utc)
    out = []
    for n in range(events):
        c = rnd.randint(1, customers)
        at = now - timedelta(seconds=rnd.uniform(0, 600))
        e = {"specversion": "1.0", "id": f"{prefix}{n}", "source": "bench", "type": "api.request",
             "time": at.isoformat().replace("+00:00", "Z"), "subject": str(c),
             "data": {"tokens": n % 97, "user": f"u{n % 13}", "kind": n % 3}}
        out.append((str(c).encode(), json.dumps(e).encode()))
    out += rnd.sample(out, events // 10)  # 10% sent twice
    rnd.shuffle(out)
    return out


def fill_topic(bootstrap: str, topic: str, partitions: int, messages: list[tuple[bytes, bytes]]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 2_000_000, "enable.idempotence": True})
    for key, value in messages:
        producer.produce(topic, key=key, value=value)
        producer.poll(0)
    assert producer.flush(120) == 0


def _cpu(pid: int) -> float:
    """CPU seconds of a process, nanosecond resolution (/proc/<pid>/schedstat; 0 when gone)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _want(pid: int) -> float:
    """Seconds a process ran or waited on a run queue (/proc/<pid>/schedstat fields 1 and 2): the time
    it wanted a core; over a window's wall clock, the share of it that process was busy or ready (not
    waiting on its peer: a backend for its consumer, a consumer for its statement). 0 when gone."""
    try:
        f = Path(f"/proc/{pid}/schedstat").read_text().split()
        return (int(f[0]) + int(f[1])) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _tree_want(pid: int) -> float:
    """_want of a process's every thread alive now (librdkafka's and a database thread's too)."""
    try:
        return sum(_want(int(t)) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0.0


def _proc_tree_cpu(pid: int) -> float:
    """CPU seconds of a process, its threads (librdkafka's) included, those that ended too
    (/proc/<pid>/stat: clock ticks; the sum of /proc/<pid>/task/* would drop when a thread ends)."""
    return proc_cpu(pid)


# How the watcher reads the events stored, every 0.25 s, while the consumers run (--progress):
# "rollups": the count meter's hourly rollups (every event of the stream is an api.request, which the
# 'requests' meter counts once when it is stored): a few thousand rows, ~1 ms; "keys": count(*) of
# the exactly-once keys, as the bench did until ingest6: a scan of every key stored so far at each
# poll (~150 ms and a parallel worker at 360,000 keys, load 4), CPU the consumers and the database
# then lack, which no column counted (here run without its parallel worker, so the watcher's column
# holds all of it).
PROGRESS = {"rollups": "SELECT coalesce(sum(events), 0)::bigint FROM billing.usage_rollup WHERE meter_code = 'requests'",
            "keys": "SELECT count(*) FROM billing.usage_dedup"}


def consume(name: str, url: str, argv: list[str], env: dict, consumers: int, distinct: int, stream_len: int,
            timeout: float, before: int = 0, progress: str = "rollups") -> dict:
    """Runs `consumers` processes of argv until every distinct event is stored; the figures between
    the first batch committed and the last (the watcher's own server CPU apart: watcher_us)."""
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in range(consumers)]
    watch = psycopg.connect(url, autocommit=True)
    watch.execute("SET max_parallel_workers_per_gather = 0")  # (its CPU all in its own backend)
    me = watch.info.backend_pid
    postmaster = int(Path(f"/proc/{me}/stat").read_text().rsplit(")", 1)[1].split()[1])
    first = None  # (t, count, server cpu per pid, consumer cpu per pid, the server's other processes, host busy)
    # Each process's CPU as last read while it ran: a consumer whose partitions are done exits after
    # its idle seconds, maybe before the others finish, and its backend then reads 0 (so did the
    # consumer once reaped): until ingest6 such a round lost both from the window's CPU (a round read
    # 23.1 + 3.1 us an event beside 39.4 + 6.3 for the same code, load 10).
    backends: dict[int, float] = {}
    ended: set[int] = set()
    consumers_cpu: dict[int, float] = {}
    wants: dict[int, float] = {}  # each backend's and consumer's _want (running or runnable), last read
    deadline = time.monotonic() + timeout
    try:
        while True:
            for (pid,) in watch.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                        "AND backend_type = 'client backend' AND pid <> %s", (me,)).fetchall():
                backends.setdefault(pid, 0.0)
            for pid in backends:
                backends[pid] = max(backends[pid], _cpu(pid))
                if pid not in ended and not Path(f"/proc/{pid}").exists():
                    ended.add(pid)
            for p in procs:
                consumers_cpu[p.pid] = max(consumers_cpu.get(p.pid, 0.0), _proc_tree_cpu(p.pid))
            for pid in backends:
                wants[pid] = max(wants.get(pid, 0.0), _want(pid))
            for p in procs:
                wants[-p.pid] = max(wants.get(-p.pid, 0.0), _tree_want(p.pid))
            want = dict(wants)
            server = dict(backends)
            client = dict(consumers_cpu)
            client[-1] = _broker_cpu()  # the Kafka broker's (its JVM, every thread)
            client[-2] = _cpu(me)  # the watcher's backend
            rest, busy = _server_rest(postmaster, set(backends) | {me}), _host_busy()
            # a consumer's backend that ended is in the postmaster's reaped children too: not autovacuum's
            rest["autovacuum"] -= sum(backends[pid] for pid in ended)
            count = watch.execute(PROGRESS[progress]).fetchone()[0]
            now = time.monotonic()
            if first is None and count > before:
                first = (now, count, server, client, rest, busy, want)
            if count >= distinct:
                last = (now, count, server, client, rest, busy, want)
                break
            if now > deadline or all(p.poll() is not None for p in procs):
                raise RuntimeError(f"{name}: {count} of {distinct} events stored; consumers: "
                                   + " | ".join((p.stdout.read() or b"").decode()[-500:] for p in procs if p.poll() is not None))
            time.sleep(0.25)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        watch.close()
    # each consumer's last line: "usage: A accepted, D duplicate, ... in B batches" (the whole stream's)
    outs = [(p.stdout.read() or b"").decode(errors="replace") for p in procs]
    batches = sum(int(m.group(1)) for m in (re.search(r"in (\d+) batches", o) for o in outs) if m)
    seconds = last[0] - first[0]
    done = last[1] - first[1]  # distinct events stored in the window
    messages = done * stream_len / distinct  # the stream's messages they stand for (duplicates included)
    server_cpu = sum(last[2].get(pid, 0.0) - first[2].get(pid, 0.0) for pid in last[2] if pid in first[2])
    client_cpu = sum(last[3][pid] - first[3][pid] for pid in last[3] if pid >= 0)
    broker_cpu = last[3][-1] - first[3][-1]
    watcher_cpu = last[3][-2] - first[3][-2]
    rest = {k: (last[4][k] - first[4][k]) / messages * 1e6 for k in last[4]}
    host_us = (last[5] - first[5]) / messages * 1e6  # every process of the host, other sessions' too
    # the share of the window the backends (each) were running or runnable, and the consumers' (each,
    # every thread: above 100% when two of its threads want a core at once)
    busy_db = [last[6][k] - first[6][k] for k in last[6] if k > 0 and k in first[6]]
    busy_client = [last[6][k] - first[6][k] for k in last[6] if k < 0 and k in first[6]]
    return {"name": name, "messages": messages, "seconds": seconds, "rate": messages / seconds,
            "server_us": server_cpu / messages * 1e6, "client_us": client_cpu / messages * 1e6,
            "broker_us": broker_cpu / messages * 1e6, "watcher_us": watcher_cpu / messages * 1e6,
            "rest_us": rest, "batches": batches, "host_us": host_us, "host_cores": (last[5] - first[5]) / seconds,
            "load": os.getloadavg()[0],
            "backend_busy": sum(busy_db) / max(len(busy_db), 1) / seconds,
            "consumer_busy": sum(busy_client) / max(len(busy_client), 1) / seconds}


def _host_busy() -> float:
    """CPU seconds the whole host has been busy (/proc/stat: every state but idle and iowait), all cores."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")


def _server_rest(postmaster: int, skip: set[int]) -> dict[str, float]:
    """CPU seconds of the server's own processes, the bench's backends (skip) apart, by kind: autovacuum
    (its launcher, its workers, and the postmaster's reaped children: a worker that ended; the caller
    takes out the bench's backends that ended), walwriter, checkpointer, background writer, other (the postmaster,
    the stats, other backends). The postmaster's children from /proc/<pid>/task/<pid>/children: no scan
    of every process of the host (~20 ms at load 10, four times a second)."""
    out = {"autovacuum": 0.0, "walwriter": 0.0, "checkpointer": 0.0, "background writer": 0.0, "other": 0.0}
    hz = os.sysconf("SC_CLK_TCK")
    try:
        children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
        f = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return out
    out["other"] += (int(f[11]) + int(f[12])) / hz
    out["autovacuum"] += (int(f[13]) + int(f[14])) / hz  # reaped children: mostly autovacuum workers
    for pid in map(int, children):
        if pid in skip:
            continue
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        out[next((k for k in out if k in title), "other")] += (int(f[11]) + int(f[12])) / hz
    return out


def _broker_cpu() -> float:
    """CPU seconds of this worktree's Kafka broker (scripts/services/kafka.sh's pid file; 0 if none)."""
    try:
        return proc_cpu(int((REPO / ".cache" / "kafka" / "kafka.pid").read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return 0.0


def http_door(name: str, url: str, tree: Path | None, port: int, events: int, customers: int, rnd: random.Random,
              clients: int) -> dict:
    """POST /usage-events, batches of 1,000 (10% of the events sent twice), from `clients` threads, to
    `billing serve` of the tree on its database: events/s, the server's CPU (the API's PostgreSQL
    backends) and the API process's CPU per event."""
    import threading

    import httpx

    env = {**tree_env(tree), "BILLING_DATABASE_URL": url, "BILLING_LOG_LEVEL": "WARNING"}
    out = subprocess.run([sys.executable, "-m", "billing.cli", "api-key", "create", "--name", "bench",
                          "--scope", "usage:write"], env=env, check=True, capture_output=True, text=True).stdout
    key = out.strip().splitlines()[-1]
    api = subprocess.Popen([sys.executable, "-m", "billing.cli", "serve", "--port", str(port)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/healthz", timeout=1)
                break
            except httpx.TransportError:
                if api.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: billing serve did not start: {api.stdout.read().decode()[-800:]}")
                time.sleep(0.2)
        msgs = [json.loads(v) for _, v in stream(f"http{uuid.uuid4().hex[:6]}-", events, customers, rnd)]
        bodies = [json.dumps(msgs[i:i + 1000]).encode() for i in range(0, len(msgs), 1000)]
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        # warm up: one small batch (the key's and the pool's first use)
        with httpx.Client(timeout=120) as c:
            c.post(f"{base}/usage-events", content=json.dumps(msgs[:1]).encode(), headers=headers).raise_for_status()
        with psycopg.connect(url, autocommit=True) as watch:
            pids = [r[0] for r in watch.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()")]
        server0, api0 = {p: _cpu(p) for p in pids}, _proc_tree_cpu(api.pid)
        queue = list(bodies)
        lock = threading.Lock()
        failures = []

        def client() -> None:
            with httpx.Client(timeout=300) as c:
                while True:
                    with lock:
                        if not queue:
                            return
                        body = queue.pop()
                    r = c.post(f"{base}/usage-events", content=body, headers=headers)
                    if r.status_code != 200:
                        failures.append(r.text[:200])

        t0 = time.monotonic()
        threads = [threading.Thread(target=client) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.monotonic() - t0
        with psycopg.connect(url, autocommit=True) as watch:
            pids = [r[0] for r in watch.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()")]
        server = sum(_cpu(p) - server0.get(p, 0.0) for p in pids)  # a connection the pool opened meanwhile: all of it
        api_cpu = _proc_tree_cpu(api.pid) - api0
        if failures:
            raise RuntimeError(f"{name}: {len(failures)} requests failed: {failures[0]}")
    finally:
        api.terminate()
        try:
            api.wait(20)
        except subprocess.TimeoutExpired:
            api.kill()
    n = len(msgs)
    return {"name": name, "messages": n, "seconds": seconds, "rate": n / seconds, "server_us": server / n * 1e6,
            "client_us": api_cpu / n * 1e6, "load": os.getloadavg()[0]}


def naive_consumer(url: str, bootstrap: str, topic: str, group: str, idle: float) -> None:
    """One database call per message (billing.ingest_usage of that one event, its own transaction);
    offsets committed every 500 messages, after their calls."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    idle_since, handled = time.monotonic(), 0
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() - idle_since < idle:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            idle_since = time.monotonic()
            conn.execute("SELECT count(*) FROM billing.ingest_usage(jsonb_build_array(%s::jsonb), %s)",
                         (msg.value().decode(), datetime.now(timezone.utc)))
            handled += 1
            if handled % 500 == 0:
                consumer.commit(asynchronous=False)
    consumer.commit(asynchronous=False)
    consumer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-url", default=os.environ.get("BILLING_TEST_DATABASE_URL"))
    ap.add_argument("--bootstrap", default=os.environ.get("BILLING_TEST_KAFKA_BOOTSTRAP"))
    ap.add_argument("--customers", type=int, default=1000)
    ap.add_argument("--events", type=int, default=200_000, help="distinct events of our stream (+10%% duplicates)")
    ap.add_argument("--baseline-events", type=int, default=200_000, help="distinct events of the baseline's stream")
    ap.add_argument("--naive", type=int, default=3000, help="distinct events of the naive consumer's stream")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--baseline", default=BASELINE, help="git revision of the baseline ('none': skip)")
    ap.add_argument("--http", type=int, default=40_000, help="distinct events POSTed to /usage-events (0: skip)")
    ap.add_argument("--http-clients", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1,
                    help="each side this many times, the order swapped every round (a fresh database and topic each time)")
    ap.add_argument("--progress", choices=sorted(PROGRESS), default="rollups",
                    help="how the watcher counts the events stored (keys: count(*) of the keys, the bench before ingest6)")
    ap.add_argument("--http-port", type=int, default=int(os.environ.get("BILLING_WT_SPARE_PORT_BASE", "30100")) + 50)
    ap.add_argument("--ours-args", default="", help="more arguments of ours' `billing usage consume` (e.g. --no-pipeline)")
    ap.add_argument("--naive-consumer", nargs=4, metavar=("URL", "TOPIC", "GROUP", "IDLE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.naive_consumer:
        url, topic, group, idle = args.naive_consumer
        naive_consumer(url, args.bootstrap, topic, group, float(idle))
        return
    rnd = random.Random(29)
    run = uuid.uuid4().hex[:8]
    print(f"start: {host_load()}", flush=True)
    results, http = [], []

    def kafka_env(url: str, topic: str, tree: Path | None) -> dict:
        return {**tree_env(tree), "BILLING_DATABASE_URL": url, "BILLING_KAFKA_BOOTSTRAP": args.bootstrap,
                "BILLING_USAGE_TOPIC": topic, "BILLING_USAGE_DEAD_LETTER_TOPIC": f"bench-dead-{run}",
                "BILLING_USAGE_GROUP": f"bench-{topic}", "BILLING_LOG_LEVEL": "WARNING"}

    sides = [("ours" + (f" {args.ours_args}" if args.ours_args else ""), None, args.events,
              ["usage", "consume", "--exit-when-idle", "5"] + args.ours_args.split())]
    if args.baseline != "none":
        sides.append((f"baseline {args.baseline}", baseline_tree(args.baseline), args.baseline_events,
                      ["usage", "consume", "--exit-when-idle", "5"]))  # its own default batch (10,000 since 9785096)
    rounds = [(k, side) for k in range(args.rounds) for side in (sides if k % 2 == 0 else sides[::-1])]
    for k, (name, tree, events, cli) in rounds:
        tag = "base" if tree else "ours"
        url = fresh_db(args.server_url, f"bench_ingest_{tag}", tree, args.customers)
        topic = f"bench-usage-{tag}-{run}-{k}"
        messages = stream(f"{tag}{run}-", events, args.customers, rnd)
        fill_topic(args.bootstrap, topic, args.partitions, messages)
        argv = [sys.executable, "-m", "billing.cli"] + cli
        r = consume(name, url, argv, kafka_env(url, topic, tree), args.consumers, events, len(messages), 900,
                    progress=args.progress)
        results.append(r)
        print(f"{name}: {r['rate']:,.0f} events/s ({r['messages']:,.0f} in {r['seconds']:.1f} s), server CPU "
              f"{r['server_us']:.1f} us/event, consumers {r['client_us']:.1f} us/event, broker {r['broker_us']:.1f} us/event, "
              f"the bench's watcher {r['watcher_us']:.2f} us/event ({args.progress}), load {r['load']:.1f}; the server's "
              f"other processes " + ", ".join(f"{k} {v:.2f}" for k, v in r["rest_us"].items()) + " us/event; the host "
              f"busy {r['host_us']:.1f} us/event ({r['host_cores']:.2f} of its cores); {r['batches']} batches; a backend running "
              f"or runnable {r['backend_busy']:.0%} of the time, a consumer {r['consumer_busy']:.0%}", flush=True)
        if args.http:
            h = http_door(f"{name}, HTTP", url, tree, args.http_port, args.http if not tree else max(args.http // 4, 4000),
                          args.customers, rnd, args.http_clients)
            http.append(h)
            print(f"{h['name']}: {h['rate']:,.0f} events/s ({h['messages']:,} in {h['seconds']:.1f} s), server CPU "
                  f"{h['server_us']:.1f} us/event, API process {h['client_us']:.1f} us/event, load {h['load']:.1f}", flush=True)
    if args.naive:
        url = url_for_db(args.server_url, "bench_ingest_ours")
        topic = f"bench-usage-naive-{run}"
        messages = stream(f"naive{run}-", args.naive, args.customers, rnd)
        fill_topic(args.bootstrap, topic, args.partitions, messages)
        with psycopg.connect(url, autocommit=True) as conn:
            before = conn.execute(PROGRESS[args.progress]).fetchone()[0]
        argv = [sys.executable, "-m", "bench.usage.ingest", "--bootstrap", args.bootstrap,
                "--naive-consumer", url, topic, f"bench-{topic}", "5"]
        r = consume("naive (one call per event)", url, argv, {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + str(REPO / "driver")},
                    1, before + args.naive, len(messages) * (before + args.naive) / args.naive, 900, before, args.progress)
        results.append(r)
        print(f"{r['name']}: {r['rate']:,.0f} events/s, server CPU {r['server_us']:.1f} us/event, "
              f"consumer {r['client_us']:.1f} us/event, load {r['load']:.1f}", flush=True)
    print(f"end: {host_load()}")
    print()
    print(f"| Kafka door, {args.customers:,} customers, 10% duplicates, {args.partitions} partitions | consumers | "
          "events (stream) | events/s | server CPU µs/event | consumer CPU µs/event | broker CPU µs/event | "
          f"all three: events/s on 2 idle cores | the bench's watcher ({args.progress}) µs/event | "
          "the server's other processes µs/event (autovacuum) | the host busy µs/event | batches | "
          "a backend / a consumer running or runnable | load (1 min) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        n = 1 if r["name"].startswith("naive") else args.consumers
        total = r["server_us"] + r["client_us"] + r["broker_us"]
        print(f"| {r['name']} | {n} | {r['messages']:,.0f} | {r['rate']:,.0f} | {r['server_us']:.1f} | "
              f"{r['client_us']:.1f} | {r['broker_us']:.1f} | {2e6 / total:,.0f} | {r['watcher_us']:.2f} | "
              f"{sum(r['rest_us'].values()):.2f} ({r['rest_us']['autovacuum']:.2f}) | {r['host_us']:.1f} | {r['batches']} | "
              f"{r['backend_busy']:.0%} / {r['consumer_busy']:.0%} | {r['load']:.1f} |")
    if http:
        print()
        print(f"| HTTP door, POST /usage-events, batches of 1,000, {args.http_clients} clients | events | events/s | "
              "server CPU µs/event | API process CPU µs/event | load (1 min) |")
        print("|---|---:|---:|---:|---:|---:|")
        for h in http:
            print(f"| {h['name']} | {h['messages']:,} | {h['rate']:,.0f} | {h['server_us']:.1f} | {h['client_us']:.1f} | "
                  f"{h['load']:.1f} |")


if __name__ == "__main__":
    main()
