"""The relay per shard group on Citus next to the single-node relay, on the same host, in one run.

    make bench-relay-citus                                   # defaults below
    make bench-relay-citus BENCH_ARGS="--shards 8,64 --events 100000 --rounds 2"

Each round, for every side: a fresh database (a Citus database of `--shards` shard groups on the
cluster of scripts/services/citus.sh, `billing db migrate --citus`; or one PostgreSQL of `make
services`), a backlog of `--events` InvoicePaid events over `--aggregates` aggregates of as many
customers (one INSERT ... SELECT on the coordinator, then VACUUM ANALYZE), then one relay process
(bench/relay/shard_proc.py: `ShardRelay` on the cluster, `Relay` on one PostgreSQL) draining it to
the same sink (the JSON-lines sink on tmpfs by default, `--kafka` for the broker of `make
services`); events per second from the relay's presence (its advisory lock) to no PENDING row left,
and the CPU per event of the relay process and of every PostgreSQL backend of the database (on all
three nodes for the cluster: the relay's own connections and Citus' connections between nodes).
The relay process itself says when it is up and when it has marked the whole backlog published
(bench/relay/shard_proc.py), so nothing polls the database meanwhile.

Sides: `single` (this tree's Relay on one PostgreSQL), `citus` (this tree's ShardRelay),
`citus-baseline` (the baseline commit's ShardRelay and SQL, `--baseline`, extracted by
bench/baseline.py and migrated from its own db/). They alternate within a round, so they see the
same host; compare the ratios of one round.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from bench.baseline import baseline_tree, host_load, proc_cpu, tree_env

REPO = Path(__file__).resolve().parents[2]
PROC = Path(__file__).with_name("shard_proc.py")

MIGRATE = ("import sys; from billing.migrate import migrate; from billing.config import REPO_ROOT; "
           "migrate(sys.argv[1], REPO_ROOT / 'db', simulation=True, citus=sys.argv[2] == 'citus')")


def db_url(server_url: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


def fresh(side: str, tree: Path | None, single_url: str, shards: int) -> tuple[str, list[str]]:
    """A database migrated from `tree`'s db/ (None: this tree's); returns its URL and every node's URL."""
    name = "bench_relay_" + side.replace("-", "_")
    if side == "single":
        with psycopg.connect(single_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        url = db_url(single_url, name)
        nodes = [url]
    else:
        url = subprocess.run(["bash", str(REPO / "scripts/services/citus.sh"), "createdb", name],
                             check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {name} SET citus.shard_count = {int(shards)}")
            nodes = [url] + [psycopg.conninfo.make_conninfo(url, host=h, port=p) for h, p in conn.execute(
                "SELECT nodename, nodeport FROM pg_dist_node WHERE noderole = 'primary' AND groupid > 0")]
    subprocess.run([sys.executable, "-c", MIGRATE, url, "single" if side == "single" else "citus"],
                   check=True, env=tree_env(tree), cwd=str(tree or REPO))
    return url, nodes


def write_backlog(url: str, events: int, aggregates: int) -> float:
    """`events` InvoicePaid events over `aggregates` invoices, one customer each (spread over every group)."""
    t = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO billing.customer (id) SELECT g FROM generate_series(1, %s) g", (aggregates,))
        conn.execute("""
            INSERT INTO billing.outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload,
                                              created_at, available_at, customer_id)
            SELECT e.id, 'invoice', e.agg, 'InvoicePaid',
                   billing._cloud_event(e.id, 'InvoicePaid', 'invoice', e.agg, now(),
                       jsonb_build_object('invoiceId', e.agg, 'subscriptionId', e.agg, 'amount', 2990,
                                          'currency', 'BRL', 'paidAt', billing._utc_text(now()))),
                   now(), now(), e.agg
            FROM (SELECT gen_random_uuid() AS id, (g * 7919) %% %s + 1 AS agg
                  FROM generate_series(1, %s) g) e""", (aggregates, events))
        conn.execute("VACUUM ANALYZE billing.outbox_event")
        conn.execute("VACUUM ANALYZE billing.audit_log")
    return time.perf_counter() - t


def backends(nodes: list[str], name: str) -> dict[tuple[int, int], float]:
    """CPU seconds so far of every backend of database `name` on each node (all on this host)."""
    out = {}
    for i, node in enumerate(nodes):
        with psycopg.connect(node, autocommit=True) as conn:
            for (pid,) in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                                       (name,)):
                out[(i, pid)] = proc_cpu(pid)
    return out


def drain(side: str, tree: Path | None, url: str, nodes: list[str], sink: str, events: int, batch: int) -> dict:
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    proc = subprocess.Popen([sys.executable, str(PROC), url, sink, str(batch), "single" if side == "single" else "shard",
                             str(events)], env=tree_env(tree), cwd=str(tree or REPO), stdout=subprocess.PIPE, text=True)
    try:
        # The relay says when it is up and when it has marked every event (no poll of the database).
        line = proc.stdout.readline().split()
        if not line or line[0] != "up":
            raise RuntimeError(f"the relay did not start ({proc.poll()})")
        cpu0, pg0 = proc_cpu(proc.pid), backends(nodes, name)
        t0 = float(line[1])
        line = proc.stdout.readline().split()
        if not line or line[0] != "drained":
            raise RuntimeError(f"the relay stopped before the end ({proc.poll()})")
        cpu, pg1 = proc_cpu(proc.pid) - cpu0, backends(nodes, name)
        elapsed = float(line[1]) - t0
        with psycopg.connect(url, autocommit=True) as conn:
            published = conn.execute("SELECT count(*) FROM billing.outbox_event WHERE status = 'PUBLISHED'").fetchone()[0]
            audit = conn.execute("SELECT count(*) FROM billing.audit_log WHERE function LIKE '%%outbox%%'").fetchone()[0]
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if published != events:
        raise RuntimeError(f"{side}: {published} of {events} events published")
    pg_cpu = sum(v - pg0.get(k, 0.0) for k, v in pg1.items())
    return {"side": side, "events": events, "seconds": elapsed, "per_second": events / elapsed,
            "relay_us": 1e6 * cpu / events, "pg_us": 1e6 * pg_cpu / events, "audit_rows": audit, "host": host_load()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--single-url", default=os.environ.get("BILLING_TEST_DATABASE_URL"))
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--aggregates", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--shards", default="8", help="shard counts of the cluster, e.g. 8,64")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline", default="none", help="a commit whose ShardRelay runs too (none: skip)")
    ap.add_argument("--sides", default="single,citus", help="of single, citus (and citus-baseline with --baseline)")
    ap.add_argument("--kafka", default=None, help="BOOTSTRAP: publish to a fresh topic there instead of a file")
    a = ap.parse_args()
    sides = a.sides.split(",")
    base = None
    if a.baseline != "none":
        base = baseline_tree(a.baseline)
        if "citus-baseline" not in sides:
            sides.append("citus-baseline")
    print(f"host at the start: {host_load()}", flush=True)
    results = []
    tmp = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    for rnd in range(1, a.rounds + 1):
        for shards in [int(s) for s in a.shards.split(",")]:
            for side in sides:
                if side == "single" and shards != int(a.shards.split(",")[0]):
                    continue  # one single-node run per round
                tree = base if side == "citus-baseline" else None
                url, nodes = fresh(side, tree, a.single_url, shards)
                written = write_backlog(url, a.events, a.aggregates)
                if a.kafka:
                    sink = f"kafka:{a.kafka}/bench-relay-citus-{os.getpid()}-{rnd}-{side}-{shards}"
                else:
                    path = tmp / f"bench-relay-citus-{os.getpid()}.jsonl"
                    path.unlink(missing_ok=True)
                    sink = str(path)
                r = drain(side, tree, url, nodes, sink, a.events, a.batch)
                if not a.kafka:
                    Path(sink).unlink(missing_ok=True)
                r.update(round=rnd, groups=1 if side == "single" else shards, written=written)
                results.append(r)
                print(f"round {rnd} {side:15s} groups={r['groups']:3d}: {r['events']:,} events in {r['seconds']:.1f} s "
                      f"= {r['per_second']:,.0f}/s; relay {r['relay_us']:.0f} us/event, PostgreSQL {r['pg_us']:.0f} "
                      f"us/event; {r['audit_rows']} audit rows; {r['host']}", flush=True)
    print(f"\nhost at the end: {host_load()}\n")
    print(f"{a.events:,} events over {a.aggregates:,} aggregates, batch {a.batch}, sink "
          f"{'Kafka' if a.kafka else 'JSON lines on tmpfs'}:\n")
    print("| round | side | shard groups | events/s | of single node | relay CPU µs/event | PostgreSQL CPU µs/event "
          "| relay audit rows | host |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        single = next((s for s in results if s["side"] == "single" and s["round"] == r["round"]), None)
        ratio = f"{r['per_second'] / single['per_second']:.0%}" if single else "-"
        print(f"| {r['round']} | {r['side']} | {r['groups']} | {r['per_second']:,.0f} | {ratio} | {r['relay_us']:.0f} | "
              f"{r['pg_us']:.0f} | {r['audit_rows']:,} | {r['host']} |")


if __name__ == "__main__":
    main()
