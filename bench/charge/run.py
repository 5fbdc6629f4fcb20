"""Charging at the gateway's limit: three real `billing worker` processes sharing one Redis limit.

For each rate (default 200 and 1,000 calls/s), the workers of the baseline commit (`--baseline`,
default: main when issue 17 was filed; bench/baseline.py) and the current tree's, one after the
other in the same run, each on a database prepared from its own tree's db/ with enough OPEN
invoices (and, with `--limiters gcra,fixed-window`, the seed article's fixed-window INCR counter):

* the simulator (`billing gateway-sim`, its own process) answers in 50 ms - 1 s;
* three `billing worker --no-renew --no-relay` processes charge through it;
* after a warm-up we measure accepted calls per second over `--duration` seconds, and over the
  whole run the simulator's worst sliding one-second window and the calls over the limit;
* CPU per charge (accepted call) of every process on the charge path, read from /proc: the
  workers, the database's PostgreSQL backends, Redis (the limiter); the simulator's own is shown
  apart (it stands for the gateway, not for us).

Modes: GCRA runs against the strict simulator (a call over the limit gets a 429: we want zero);
the fixed-window counter runs against the simulator in `observe` mode, which accepts everything and
counts each call that a strict gateway would have refused (`excess`), so its boundary bursts are
measured without the 429 feedback changing them. `--modes` runs other combinations.

    python -m bench.charge.run [--rates 200,1000] [--duration 30] [--workers 3] [--baseline REF|none]
                               [--limiters gcra,fixed-window] [--latency-ms 50-1000]

Needs PostgreSQL and Redis: BILLING_TEST_DATABASE_URL / BILLING_TEST_REDIS_URL (what `make services`
writes to .cache/services.env), else the loopback defaults.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import redis
from psycopg import sql

from billing.migrate import migrate

ROOT = Path(__file__).resolve().parents[2]
from bench.baseline import DEFAULT_BASELINE, baseline_tree, tree_env

PG = os.environ.get("BILLING_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:25432/postgres")
REDIS = os.environ.get("BILLING_TEST_REDIS_URL", "redis://127.0.0.1:26379/0").rsplit("/", 1)[0] + "/63"
BILLING = [sys.executable, "-m", "billing.cli"]
# The worker per limiter: the one that ships (`billing worker`, which chooses its own), and the
# seed's fixed-window counter, which only the benchmark can run (bench/charge/fixed_window.py).
WORKER = {"gcra": BILLING + ["--log-level", "WARNING", "worker", "--no-renew", "--no-relay"],
          "fixed-window": [sys.executable, str(Path(__file__).with_name("fixed_window.py")), "--log-level", "WARNING"]}


def url_for_db(server_url: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def admin(statement: sql.Composable) -> None:
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(statement)


def prepare_template(name: str, subscriptions: int, db_dir: Path = ROOT / "db", history: int | None = None) -> None:
    """A database migrated from `db_dir` with `subscriptions` OPEN invoices, all due, built through the SQL API.

    First `history` (default: as many, at most 10,000) other invoices are charged and paid, as in
    a database that has run before: the statistics then describe tables with rows. Taken over
    empty payment_attempt and outbox tables, they made every worker session plan its look-ups by
    idempotency key as sequential scans for its whole life (EXPLAIN of record_payment_result:
    0.2-0.4 ms per scan, four scans per result), a cost of the benchmark, not of production."""
    admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    admin(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = url_for_db(PG, name)
    migrate(url, db_dir, simulation=True)
    started = time.monotonic()
    history = min(subscriptions, 10_000) if history is None else history
    due = datetime.now(timezone.utc) - timedelta(minutes=1)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO_MONTHLY', 2990, 'BRL', 'MONTH', 1)")
        if history:
            conn.execute("SELECT count(billing.create_subscription('history-' || g, 1000000 + g, 'PRO_MONTHLY', %s)) "
                         "FROM generate_series(1, %s) g", (due - timedelta(minutes=1), history))
            # Each side's own SQL API: claim_charges and record_payment_result exist in both.
            conn.execute("SELECT count(billing.record_payment_result(c.idempotency_key, 'SUCCEEDED', "
                         "'ch_history_' || c.invoice_id, NULL, now())) "
                         "FROM billing.claim_charges('history', %s, interval '5 minutes', now()) c", (history,))
        conn.execute("SELECT count(billing.create_subscription('bench-' || g, g, 'PRO_MONTHLY', %s)) "
                     "FROM generate_series(1, %s) g", (due, subscriptions))
        conn.execute("VACUUM ANALYZE")
    print(f"  prepared {subscriptions} OPEN invoices (after {history} paid) in {time.monotonic() - started:.1f} s",
          flush=True)


def host_load() -> str:
    """How busy the host was: the numbers behave only on a host that is not starved of CPU."""
    parts = [f"loadavg {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"]
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0].split()[1]
        parts.append(f"CPU pressure {some.split('=')[1]}% (some, avg10)")
    except (OSError, IndexError):
        pass
    return ", ".join(parts)


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used, from /proc (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def backend_pids(dbname: str) -> list[int]:
    with psycopg.connect(PG, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (dbname,))]


def redis_pid() -> int:
    return int(redis.Redis.from_url(REDIS).info("server")["process_id"])


def cpu_snapshot(sim_pid: int, worker_pids: list[int], dbname: str) -> dict:
    return {"workers": sum(proc_cpu(p) for p in worker_pids), "simulator": proc_cpu(sim_pid),
            "postgres": sum(proc_cpu(p) for p in backend_pids(dbname)), "redis": proc_cpu(redis_pid())}


def get(url: str) -> dict:
    return json.load(urllib.request.urlopen(url, timeout=10))


def wait_port(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


WATCHED = ("billing_charges_total", "billing_charges_in_flight", "billing_limiter_late_drops_total",
           "billing_limiter_refusals_total", "billing_limiter_wait_seconds_sum", "billing_limiter_wait_seconds_count",
           "billing_gateway_latency_seconds_sum", "billing_gateway_latency_seconds_count",
           "billing_charges_abandoned_total", "billing_limiter_pauses_total", "process_cpu_seconds_total")


def scrape(ports: list[int]) -> dict:
    """The workers' own metrics, summed: what the limiter and the charge tasks were doing."""
    total: dict[str, float] = {}
    for port in ports:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith(WATCHED):
                name, value = line.rsplit(" ", 1)
                total[name] = round(total.get(name, 0.0) + float(value), 3)
    return total


def run_one(template: str, *, rate: int, limiter: str, mode: str, workers: int, duration: float, warmup: float,
            latency: str, logs: Path, concurrency: int | None = None, who: str = "ours",
            tree: Path | None = None) -> dict:
    dbname = f"{template}_run"
    admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
    admin(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(dbname), sql.Identifier(template)))
    redis.Redis.from_url(REDIS).flushdb()
    port = free_port()
    sim_url = f"http://127.0.0.1:{port}"
    tag = f"{rate}-{who.split()[0]}-{limiter}-{mode}"
    sim = subprocess.Popen(BILLING + ["--log-level", "WARNING", "gateway-sim", "--port", str(port), "--rate", str(rate),
                                      "--latency-ms", latency, "--mode", mode, "--seed", "1"],
                           stdout=subprocess.DEVNULL, stderr=open(logs / f"sim-{tag}.log", "w"))
    procs: list[subprocess.Popen] = []
    try:
        wait_port(port)
        env = {**tree_env(tree), "BILLING_DATABASE_URL": url_for_db(PG, dbname), "BILLING_REDIS_URL": REDIS,
               "BILLING_GATEWAY_URL": sim_url, "BILLING_GATEWAY_RATE": str(rate)}
        metric_ports = [free_port() for _ in range(workers)]
        for i in range(workers):
            extra = ["--concurrency", str(concurrency)] if concurrency else []
            procs.append(subprocess.Popen(WORKER[limiter] + extra,
                                          env={**env, "BILLING_WORKER_METRICS_PORT": str(metric_ports[i])},
                                          stdout=subprocess.DEVNULL, cwd=str(tree or ROOT),
                                          stderr=open(logs / f"worker{i}-{tag}.log", "w")))
        deadline = time.monotonic() + 60
        while get(f"{sim_url}/v1/stats")["accepted"] == 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no call reached the simulator; see {logs}")
            time.sleep(0.05)
        time.sleep(warmup)
        first, t0 = get(f"{sim_url}/v1/stats"), time.monotonic()
        cpu0 = cpu_snapshot(sim.pid, [p.pid for p in procs], dbname)
        time.sleep(duration)
        last, t1 = get(f"{sim_url}/v1/stats"), time.monotonic()
        cpu1 = cpu_snapshot(sim.pid, [p.pid for p in procs], dbname)
        internals = scrape(metric_ports)
        load = host_load()
        cycles = slot_cycles(get(f"{sim_url}/v1/accepted")["accepted"], rate, warmup)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(60) for p in procs]
        final = get(f"{sim_url}/v1/stats")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        sim.terminate()
        sim.wait(30)
        admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
    achieved = (last["accepted"] - first["accepted"]) / (t1 - t0)
    calls = max(1, last["accepted"] - first["accepted"])
    cpu_ms_per_call = {k: round((cpu1[k] - cpu0[k]) / calls * 1000, 3) for k in cpu0}
    cpu_ms_per_call["charge path"] = round(sum(cpu_ms_per_call[k] for k in ("workers", "postgres", "redis")), 3)
    over = final["rateLimited"] if mode == "strict" else final["excess"]
    return {"who": who, "rate": rate, "concurrency_per_worker": concurrency, "limiter": limiter, "simulator": mode, "workers": workers,
            "achieved_per_s": round(achieved, 1), "of_limit": round(achieved / rate, 4),
            "max_calls_in_1s_window": final["maxWindow"], "calls_over_limit": over,
            "accepted": final["accepted"], "worker_exit_codes": codes, "host": load, "cpu_ms_per_call": cpu_ms_per_call, "workers_internals": internals,
            "slot_cycle_ms": cycles}


def slot_cycles(times: list[float], rate: int, skip: float) -> dict:
    """Where the slots go, from the gateway's own arrival stamps: at the limit, call i + rate can
    arrive no sooner than a second after call i, so each slot's cycle past that second (a[i + rate]
    - a[i] - 1 s) is capacity lost, and achieved = rate / (1 s + the mean of it). Percentiles in
    ms, over the calls after the first `skip` seconds (the warm-up)."""
    times = sorted(times)
    start = next((i for i, t in enumerate(times) if t >= times[0] + skip), len(times)) if times else 0
    extra = sorted((times[i + rate] - times[i] - 1.0) * 1000 for i in range(start, len(times) - rate))
    if not extra:
        return {}
    pick = lambda q: round(extra[min(len(extra) - 1, int(q * len(extra)))], 2)
    return {"n": len(extra), "mean": round(sum(extra) / len(extra), 2), "p10": pick(0.10), "p50": pick(0.5),
            "p90": pick(0.9), "p99": pick(0.99), "max": round(extra[-1], 1),
            "over_20ms": sum(1 for x in extra if x > 20), "over_100ms": sum(1 for x in extra if x > 100)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="200,1000")
    ap.add_argument("--limiters", default="gcra")
    ap.add_argument("--baseline", default=DEFAULT_BASELINE,
                    help="the commit whose workers run first (default: main when issue 17 was filed); 'none' to skip")
    ap.add_argument("--modes", default=None,
                    help="limiter:mode pairs, e.g. gcra:strict,fixed-window:strict (default: gcra strict, "
                         "fixed-window observe)")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--latency-ms", default="50-1000")
    ap.add_argument("--concurrency", default="shared",
                    help="charge tasks per worker: a number, 'shared' (default: 1.5 x rate x the slowest "
                         "answer, shared by the workers) or 'worker-default' (the worker's own: 1.5 x rate each)")
    ap.add_argument("--guard-ms", type=float, default=None, help="BILLING_LIMITER_GUARD_MS for the workers")
    ap.add_argument("--max-late-ms", type=float, default=None, help="BILLING_LIMITER_MAX_LATE_MS for the workers")
    args = ap.parse_args()
    if args.guard_ms is not None:
        os.environ["BILLING_LIMITER_GUARD_MS"] = str(args.guard_ms)
    if args.max_late_ms is not None:
        os.environ["BILLING_LIMITER_MAX_LATE_MS"] = str(args.max_late_ms)

    default_mode = {"gcra": "strict", "fixed-window": "observe"}
    if args.modes:
        runs = [tuple(pair.split(":")) for pair in args.modes.split(",")]
    else:
        runs = [(lim, default_mode[lim]) for lim in args.limiters.split(",")]
    logs = Path(tempfile.mkdtemp(prefix="bench-charge-"))
    results = []
    trees: list[tuple[str, Path | None]] = []
    if args.baseline != "none":
        tree = baseline_tree(args.baseline)
        trees.append((f"baseline {tree.name[:7]}", tree))
    trees.append(("ours", None))
    slowest = float(args.latency_ms.split("-")[-1]) / 1000
    for rate in (int(r) for r in args.rates.split(",")):
        if args.concurrency == "shared":
            # Enough calls in flight for the limit when every answer is the slowest, split among
            # the workers: what an operator configures (--concurrency) when running several.
            concurrency = max(20, math.ceil(1.5 * rate * slowest / args.workers))
        elif args.concurrency == "worker-default":
            concurrency = None
        else:
            concurrency = int(args.concurrency)
        # Enough for the run plus what the workers hold claimed (up to 1.5 x rate each).
        subscriptions = int(rate * (args.warmup + args.duration + 15) + 1.5 * rate * args.workers)
        print(f"rate {rate}/s:", flush=True)
        for who, tree in trees:
            template = f"bench_charge_{rate}_{who.split()[0]}"
            prepare_template(template, subscriptions, (tree or ROOT) / "db")
            try:
                for limiter, mode in runs:
                    if limiter != "gcra" and tree is not None:
                        continue  # the seed's counter is the same code on both sides
                    row = run_one(template, rate=rate, limiter=limiter, mode=mode, workers=args.workers,
                                  duration=args.duration, warmup=args.warmup, latency=args.latency_ms, logs=logs,
                                  concurrency=concurrency, who=who, tree=tree)
                    results.append(row)
                    print("  " + json.dumps(row), flush=True)
            finally:
                admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(template)))
    print(f"\nworker and simulator logs: {logs}")
    print(f"\n{args.workers} worker processes ({args.concurrency} concurrency), latency {args.latency_ms} ms, "
          f"{args.duration:g} s measured after {args.warmup:g} s warm-up\n")
    print("| limit/s | code | limiter | simulator | achieved/s | of limit | max in any 1 s window | calls over the limit "
          "| CPU ms/charge: workers + PostgreSQL + Redis = total | simulator | host during the run |")
    print("|---:|---|---|---|---:|---:|---:|---:|---|---:|---|")
    for r in results:
        c = r["cpu_ms_per_call"]
        print(f"| {r['rate']} | {r['who']} | {r['limiter']} | {r['simulator']} | {r['achieved_per_s']} | {r['of_limit']:.1%} | "
              f"{r['max_calls_in_1s_window']} | {r['calls_over_limit']} | {c['workers']:.2f} + {c['postgres']:.2f} + "
              f"{c['redis']:.2f} = **{c['charge path']:.2f}** | {c['simulator']:.2f} | {r['host']} |")

if __name__ == "__main__":
    main()
