"""The first of the month at scale: renew --due subscriptions, then charge every renewal through
the gateway simulator at --rate calls/s, with the processes that run in production.

    python -m bench.first_of_month.run                     # 100,000 due (about 5 minutes here)
    python -m bench.first_of_month.run --due 1000000       # the full peak: 1,000,000 due
    make bench-first-of-month BENCH_ARGS="--due 1000000"

1. Data: bench/renewal's generator (set-based, kept as a template database and reused):
   --total subscriptions (default: --due, every one due: the charge path reads the OPEN invoices
   through their partial index, so subscriptions that are not due change nothing here but the
   time to generate them, five times longer at bench/renewal's 5 x due), --due of them due at
   the bench clock (2026-03-01, in the past of the wall clock, so what it renews is due for the
   workers at once). A fresh copy per run.
2. Renewal: `create_due_invoices(5000)` until it returns 0: --due OPEN RENEWAL invoices.
3. Charging: `billing gateway-sim --rate R` (strict: a call over the limit is refused and
   counted), --workers `billing worker --no-renew --no-relay` processes sharing the Redis limit,
   and one `billing worker --no-renew --no-charge` publishing the outbox (the InvoicePaid events)
   to a fresh Kafka topic (--no-relay leaves it out). Runs until every invoice is PAID.
4. Every second: the invoices PAID so far and each process's memory (RssAnon: its own
   heap, not shared buffers or mapped files; and its peak RSS, VmHWM), PostgreSQL's backends of
   the database included.

Figures: the achieved rate (the median of the per-10-second rates while charging), the drain time
(first charge to last), and their check: drain time / (due / achieved rate) should be within
10% of 1 (no slow-down as the tables grow, no long tail). Memory is flat when each process's
RssAnon at 90% of the drain is within 10% (or 16 MB) of its value at 20% (past the start, when
connections and charge tasks are still being opened).

Environment: BILLING_TEST_DATABASE_URL, BILLING_TEST_REDIS_URL, BILLING_TEST_KAFKA_BOOTSTRAP (what
`make services` writes), else the loopback defaults.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import psycopg
import redis

ROOT = Path(__file__).resolve().parents[2]
from bench.baseline import host_load, proc_cpu
from bench.renewal import run as renewal

PG = os.environ.get("BILLING_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:25432/postgres")
REDIS = os.environ.get("BILLING_TEST_REDIS_URL", "redis://127.0.0.1:26379/0").rsplit("/", 1)[0] + "/62"
KAFKA = os.environ.get("BILLING_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:29092")
BILLING = [sys.executable, "-m", "billing.cli", "--log-level", "WARNING"]


def memory(pid: int) -> tuple[int, int]:
    """(RssAnon, VmHWM) in kB; (0, 0) once the process is gone."""
    anon = hwm = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                anon = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    except OSError:
        pass
    return anon, hwm


def broker_pid() -> int | None:
    """The local Kafka broker's process (scripts/services/kafka.sh keeps its pid), if it is ours."""
    try:
        pid = int((ROOT / ".cache" / "kafka" / "kafka.pid").read_text().split()[0])
        return pid if Path(f"/proc/{pid}").exists() else None
    except (OSError, ValueError, IndexError):
        return None


def get(url: str, tries: int = 5) -> dict:
    """The simulator answers its stats between thousands of charges: a starved host may make it slow."""
    for attempt in range(tries):
        try:
            return json.load(urllib.request.urlopen(url, timeout=30))
        except TimeoutError:
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def renew(url: str) -> tuple[int, float]:
    started = time.perf_counter()
    total = 0
    with psycopg.connect(url, autocommit=True) as conn:
        while n := conn.execute("SELECT billing.create_due_invoices(5000, %s)", (renewal.NOW,)).fetchone()[0]:
            total += n
        conn.execute("VACUUM ANALYZE billing.invoice")
    return total, time.perf_counter() - started


def open_invoices(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM billing.invoice WHERE status = 'OPEN'").fetchone()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--due", type=int, default=100_000, help="renewals to create and charge")
    ap.add_argument("--total", type=int, default=None,
                    help="subscriptions in the table (default: --due, all due; a multiple of --due)")
    ap.add_argument("--rate", type=int, default=2000, help="the gateway's limit, calls per second")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--latency-ms", default="50-300", help="the simulator's answer time")
    ap.add_argument("--concurrency", type=int, default=None,
                    help="charge tasks per worker (default: 1.5 x rate x the slowest answer / workers)")
    ap.add_argument("--no-relay", action="store_true", help="leave the outbox relay out")
    ap.add_argument("--timeout", type=float, default=4 * 3600, help="give up after this many seconds of charging")
    ap.add_argument("--json", type=Path, help="also write the figures (and the samples) here")
    args = ap.parse_args()
    total = args.total or args.due
    # Calls in flight that keep the gateway at its limit when every answer is the slowest one,
    # shared by the workers. The worker's own default (1.5 x the rate, per process) is sized for
    # one process and answers of up to a second: 3 x 3,000 tasks here, which on a starved host
    # queue behind each other until their calls time out (UNKNOWN, retried 15 minutes later).
    slowest = float(args.latency_ms.split("-")[-1]) / 1000
    concurrency = args.concurrency or max(50, math.ceil(1.5 * args.rate * slowest / args.workers))
    print(f"first of the month: {args.due:,} due among {total:,}, gateway limit {args.rate}/s, "
          f"{args.workers} workers x {concurrency} charge tasks; {host_load()}", flush=True)
    built = time.perf_counter()
    template = renewal.build_template(PG, total, args.due, "bands", False)
    print(f"  data: {time.perf_counter() - built:.0f} s", flush=True)
    copy = renewal.Copy(PG, template, "fom")
    logs = Path(tempfile.mkdtemp(prefix="bench-fom-"))
    procs: dict[str, subprocess.Popen] = {}
    samples: list[dict] = []
    try:
        renewed, took = renew(copy.url)
        print(f"  renewal: {renewed:,} invoices in {took:.1f} s = {renewed / took:,.0f}/s", flush=True)
        due = open_invoices(copy.url)
        redis.Redis.from_url(REDIS).flushdb()
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        sim_url = f"http://127.0.0.1:{port}"
        procs["simulator"] = subprocess.Popen(
            BILLING + ["gateway-sim", "--port", str(port), "--rate", str(args.rate), "--latency-ms", args.latency_ms,
                       "--mode", "strict", "--seed", "1"],
            stdout=subprocess.DEVNULL, stderr=open(logs / "sim.log", "w"))
        topic = f"bench.fom.{uuid.uuid4().hex[:8]}"
        if not args.no_relay:
            from confluent_kafka.admin import AdminClient, NewTopic

            kafka_admin = AdminClient({"bootstrap.servers": KAFKA})
            kafka_admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=1)])[topic].result(timeout=60)
        env = {**os.environ, "BILLING_DATABASE_URL": copy.url, "BILLING_REDIS_URL": REDIS,
               "BILLING_GATEWAY_URL": sim_url, "BILLING_GATEWAY_RATE": str(args.rate),
               "BILLING_KAFKA_BOOTSTRAP": KAFKA, "BILLING_KAFKA_TOPIC": topic}
        env.pop("BILLING_WORKER_METRICS_PORT", None)
        deadline = time.monotonic() + 20
        while True:
            try:
                get(f"{sim_url}/v1/stats")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        for i in range(args.workers):
            procs[f"worker {i + 1}"] = subprocess.Popen(
                BILLING + ["worker", "--no-renew", "--no-relay", "--concurrency", str(concurrency)], env=env,
                stdout=subprocess.DEVNULL, stderr=open(logs / f"worker{i}.log", "w"))
        if not args.no_relay:
            procs["relay"] = subprocess.Popen(
                BILLING + ["worker", "--no-renew", "--no-charge"], env=env,
                stdout=subprocess.DEVNULL, stderr=open(logs / "relay.log", "w"))
        redis_pid = int(redis.Redis.from_url(REDIS).info("server")["process_id"])
        kafka_pid = broker_pid()
        cpu0 = {name: proc_cpu(p.pid) for name, p in procs.items()}
        cpu0["redis"] = proc_cpu(redis_pid)
        if kafka_pid:
            cpu0["kafka broker (the bench's, shared)"] = proc_cpu(kafka_pid)
        started = time.monotonic()
        first_at = last_at = None
        # Progress from the database (the simulator's own stats are read at the end only: with
        # thousands of calls in flight it may take seconds to answer one more connection).
        with psycopg.connect(PG, autocommit=True) as admin, psycopg.connect(copy.url, autocommit=True) as db:
            while True:
                time.sleep(1.0)
                now = time.monotonic()
                # Through the claim's partial index (OPEN rows only): cheap, whatever the table's size.
                paid = due - db.execute("SELECT count(*) FROM billing.invoice WHERE status = 'OPEN'").fetchone()[0]
                backends = [r[0] for r in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend' "
                    "AND pid <> %s", (copy.name, db.info.backend_pid))]
                mem = {name: memory(p.pid) for name, p in procs.items()}
                mem["redis"] = memory(redis_pid)
                if kafka_pid:
                    mem["kafka broker (the bench's, shared)"] = memory(kafka_pid)
                mem["postgres (largest backend)"] = max((memory(pid) for pid in backends), default=(0, 0))
                sample = {"t": round(now - started, 1), "paid": paid, "memory_kb": mem}
                samples.append(sample)
                if first_at is None and paid > 0:
                    first_at = now - 0.5
                for name, p in procs.items():
                    if p.poll() is not None:
                        raise RuntimeError(f"{name} exited with {p.returncode}; see {logs}")
                if paid >= due:
                    last_at = now
                    break
                if len(samples) % 30 == 0:
                    print(f"  {sample['t']:.0f} s: {paid:,} paid; {host_load()}", flush=True)
                if now - started > args.timeout:
                    raise RuntimeError("timed out")
        cpu1 = {name: proc_cpu(p.pid) for name, p in procs.items()}
        cpu1["redis"] = proc_cpu(redis_pid)
        if kafka_pid:
            cpu1["kafka broker (the bench's, shared)"] = proc_cpu(kafka_pid)
        final = get(f"{sim_url}/v1/stats", tries=10)
        load = host_load()
    finally:
        for name, p in procs.items():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        copy.drop()

    # The achieved rate: the median of the 10-second rates between the first and the last charge.
    charging = [s for s in samples if s["paid"] > 0]
    rates = [(b["paid"] - a["paid"]) / (b["t"] - a["t"])
             for a, b in zip(charging[::10], charging[10::10]) if b["t"] > a["t"]]
    achieved = statistics.median(rates) if rates else due / (last_at - first_at)
    drain = last_at - first_at
    predicted = due / achieved
    # Memory at 10% and 90% of the drain, per process, and the peak RSS.
    at = lambda share: min(charging, key=lambda s: abs(s["paid"] - share * due))  # noqa: E731
    early, late = at(0.20), at(0.90)
    memory_rows = []
    for name in samples[-1]["memory_kb"]:
        a, b = early["memory_kb"][name][0], late["memory_kb"][name][0]
        peak = max(s["memory_kb"][name][1] for s in samples)
        flat = b <= a * 1.10 or b - a <= 16 * 1024
        memory_rows.append({"process": name, "anon_at_20pct_mb": a / 1024, "anon_at_90pct_mb": b / 1024,
                            "peak_rss_mb": peak / 1024, "flat": flat})
    cpu = {k: cpu1[k] - cpu0[k] for k in cpu1}
    result = {"due": due, "rate_limit": args.rate, "workers": args.workers, "relay": not args.no_relay,
              "renewal_seconds": took, "achieved_per_s": achieved, "drain_seconds": drain,
              "predicted_seconds": predicted, "drain_over_predicted": drain / predicted,
              "calls_over_limit": final["rateLimited"], "max_in_1s_window": final["maxWindow"],
              "cpu_ms_per_charge": {k: 1000 * v / due for k, v in cpu.items()}, "memory": memory_rows,
              "host_start_end": load}
    print()
    print(f"{due:,} renewals created in {took:.1f} s, then charged at a {args.rate:,}/s gateway limit by "
          f"{args.workers} workers{'' if args.no_relay else ' (and the relay publishing every InvoicePaid)'}:")
    print()
    print("| achieved/s (median of 10 s windows) | drain | due / achieved | ratio | calls over the limit | max in any 1 s | host at the end |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    print(f"| {achieved:,.0f} | {drain:,.0f} s | {predicted:,.0f} s | {drain / predicted:.3f} | {final['rateLimited']} | "
          f"{final['maxWindow']} | {load} |")
    print()
    print("| process | RssAnon at 20% | at 90% | peak RSS | flat | CPU ms per charge |")
    print("|---|---:|---:|---:|---|---:|")
    for row in memory_rows:
        c = cpu.get(row["process"])
        print(f"| {row['process']} | {row['anon_at_20pct_mb']:.0f} MB | {row['anon_at_90pct_mb']:.0f} MB | "
              f"{row['peak_rss_mb']:.0f} MB | {'yes' if row['flat'] else '**no**'} | "
              f"{'-' if c is None else f'{1000 * c / due:.2f}'} |")
    if args.json:
        args.json.write_text(json.dumps({**result, "samples": samples}, indent=1))


if __name__ == "__main__":
    main()
