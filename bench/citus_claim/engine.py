"""The engine's own per-shard claims on Citus, next to the same calls on one PostgreSQL.

    make bench-citus-engine                                     # defaults below
    make bench-citus-engine BENCH_ARGS="--shards 8,32 --customers 20000,80000"

`run.py` measures the claim statement on a bench schema; this one measures the engine's SQL API
(db/functions/16_shards.sql and the *_in_shard functions) on the engine's schema migrated with `billing db migrate
--citus`: `charge_claims_in_shard` (key, attempt and lease a batch of due OPEN invoices) and
`renew_in_shard` (renew a batch of due subscriptions, rolled back so each call meets the
same rows), each inside one shard group on the node that holds it, for several shard counts and
customer counts; and the same calls on one PostgreSQL (its one group, 0). The per-claim cost
should stay flat as shards and customers grow: a claim reads its group's due index only.
Then claim and work in one call, as the driver's workers call them per group: `renew_in_shard`
(renew a batch) and `charge_claims_in_shard` (key, attempt and lease a batch), each rolled back,
and on one PostgreSQL the single-node statements `create_due_invoices` and `claim_charges` beside
them, in the same run.

`charge_rows_before_32` is charge_claims_in_shard's body before issue 32 (each invoice keyed by
`_claim_charge_row`, one at a time), timed beside the set-based form on the same rows:
`make bench-citus-engine BENCH_ARGS="--shards 8 --customers 10000 --only charge_claims_in_shard,charge_rows_before_32"`.

Fixtures are written straight into the tables (customers, two due subscriptions each, one due
OPEN invoice per subscription), the same on both layouts.
The claim-and-work calls also give the server CPU per row: every backend of the database on every
node (the call's own backend and Citus' connections between nodes, all on this host) read from /proc
before and after a group's calls, while the calling connection is still open. On a shared 2-core
host the wall times are noisy: compare the CPU per row, the rows of one run, and note the load.
Per-group cost from 8 to 64 groups: `--shards 8,16,32,64 --customers 10000 --only charge_claims_in_shard`
(the same invoices spread over more groups; a call keys `--batch` of one group's).
Beside a baseline commit in the same run (`--baseline 605dd63`: its db/ extracted by bench/baseline.py and
migrated by its own driver, the fixtures and calls this file's): for each shard count the two trees'
databases are made and measured one after the other, their order alternating from one count to the next.
`make bench-citus-engine BENCH_ARGS="--shards 8,16,32,64 --customers 10000 --only renew_in_shard --baseline 605dd63"`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone

import psycopg

from bench.baseline import baseline_tree, host_load, proc_cpu, tree_env
from billing.config import REPO_ROOT
from billing.migrate import migrate

# The baseline's migration, by its own driver and db/ (tree_env puts its driver first on the path).
MIGRATE = ("import sys; from billing.migrate import migrate; from billing.config import REPO_ROOT; "
           "migrate(sys.argv[1], REPO_ROOT / 'db', simulation=True, citus=True)")

NOW = datetime(2027, 3, 1, 12, tzinfo=timezone.utc)

LOAD = """
SELECT billing.upsert_plan('BENCH_MONTH', 1000, 'USD', 'MONTH', 1, '2026-01-01Z');
INSERT INTO billing.customer (id) SELECT g FROM generate_series(1, %(n)s) g;
INSERT INTO billing.subscription (customer_id, plan_id, status, timezone, billing_anchor, current_period_start,
                                  current_period_end, period_price)
SELECT g, p.id, 'ACTIVE', 'UTC', '2027-01-01Z', '2027-01-01Z',
       timestamptz '2027-02-01Z' + ((g * 7919 + k) %% 40000) * interval '1 minute', 1000
  FROM generate_series(1, %(n)s) g, generate_series(1, 2) k, billing.plan p WHERE p.code = 'BENCH_MONTH';
INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, amount, currency,
                             status, due_at, next_attempt_at, created_at, plan_id, plan_price, billing_interval,
                             interval_count, number, finalized_at, bill_to)
SELECT s.id, s.customer_id, 'RENEWAL', s.current_period_start, s.current_period_end, 1000, 1000, 'USD', 'OPEN',
       s.current_period_start, s.current_period_end, s.current_period_start, s.plan_id, 1000, 'MONTH', 1,
       -- finalized, as the renewal job leaves them before any charge (numbered, with their bill-to)
       'B-' || s.id, s.current_period_start, '{}'
  FROM billing.subscription s;
"""


def node_url(url: str, host: str | None, port: int | None) -> str:
    if host is None:
        return url
    info = psycopg.conninfo.conninfo_to_dict(url)
    info.update(host=host, port=str(port))
    return psycopg.conninfo.make_conninfo(**info)


def fresh(server_url: str | None, name: str, *, shards: int, tree=None) -> str:
    """A database migrated from db/, loaded later: on the cluster (`citus.sh createdb`, then
    `--citus` with `shards` shards) when server_url is None, else on that PostgreSQL. `tree`: a
    baseline's extracted tree (bench/baseline.py), migrated by its own driver from its own db/."""
    if server_url is None:
        url = subprocess.run(["bash", str(REPO_ROOT / "scripts/services/citus.sh"), "createdb", name],
                             check=True, capture_output=True, text=True).stdout.strip()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {name} SET citus.shard_count = {int(shards)}")
    else:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        url = server_url.rsplit("/", 1)[0] + f"/{name}"
    if tree is not None:
        subprocess.run([sys.executable, "-c", MIGRATE, url], check=True, env=tree_env(tree), cwd=str(tree))
    else:
        migrate(url, REPO_ROOT / "db", simulation=True, citus=server_url is None)
    return url


def claims(url: str, fn: str, group: int, batch: int, count: int) -> list[float]:
    """Milliseconds per claim of `batch`, `count` claims in a row (each its own transaction)."""
    out = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET jit = off")
        for _ in range(count):
            t = time.perf_counter()
            # The claim-only calls (claim_renewals_in_shard, claim_charges_in_shard) were never called
            # by the driver and are gone (issue 25): the driver's claim-and-work calls instead.
            if fn == "renewals":  # rolled back, the next call meets the same rows
                with conn.transaction(force_rollback=True):
                    n = conn.execute("SELECT billing.renew_in_shard('bench', %s, %s, %s)", (group, batch, NOW)).fetchone()[0]
            else:  # leases: the next claim takes the next batch
                n = len(conn.execute("SELECT * FROM billing.charge_claims_in_shard('bench', %s, %s, '1 hour', %s)",
                                     (group, batch, NOW)).fetchall())
            out.append((time.perf_counter() - t) * 1000)
            if n < batch:
                break
    return out


# Claim and work in one call (what the driver's workers call per group), and on one PostgreSQL the
# single-node statements next to them. Each call rolled back: the next meets the same rows.
WORK = {
    "renew_in_shard": "SELECT billing.renew_in_shard('bench', %(group)s, %(batch)s, %(now)s)",
    "charge_claims_in_shard": "SELECT count(*) FROM billing.charge_claims_in_shard('bench', %(group)s, %(batch)s, "
                              "'1 hour', %(now)s)",
    "charge_rows_before_32": "SELECT pg_temp.charge_rows_before_32(%(group)s, %(batch)s, %(now)s)",
    "create_due_invoices": "SELECT billing.create_due_invoices(%(batch)s, %(now)s)",
    "claim_charges": "SELECT count(*) FROM billing.claim_charges('bench', %(batch)s, '1 hour', %(now)s)",
    # The usage rating per group (issue 29), as the worker calls it on the group's node: claim, then rate
    # the claimed (each customer's usage lock tried on the node; the worker also holds them on the
    # coordinator, not taken here). On bench.usage.rating's world (--usage N), rated an hour after its
    # month ended.
    "rate_usage_in_shard": "WITH c AS MATERIALIZED (SELECT * FROM billing.claim_usage_in_shard('bench', %(group)s, "
                           "%(batch)s, %(now)s)) SELECT count(*) FROM billing.rate_usage_in_shard('bench', %(group)s, "
                           "ARRAY(SELECT customer_id FROM c ORDER BY 1, subscription_id), "
                           "ARRAY(SELECT subscription_id FROM c ORDER BY customer_id, 1), %(now)s)",
}


# charge_claims_in_shard as it was before issue 32 (main f8cf591): the group's due invoices locked,
# then each keyed by billing._claim_charge_row, one row at a time; beside the set-based form in the
# same run, on the same rows (a temporary function on the node, dropped with the session).
ROW_BY_ROW = """
CREATE FUNCTION pg_temp.charge_rows_before_32(p_group integer, p_batch integer, p_now timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_cfg billing.installation;
    v_customers bigint[];
    v_ids bigint[];
    v_n integer := 0;
BEGIN
    SELECT * INTO v_cfg FROM billing.installation;
    PERFORM billing._check_shard_lease('bench', p_group, p_now);
    EXECUTE format('WITH due AS MATERIALIZED (SELECT i.customer_id, i.id FROM %s i WHERE i.status = ''OPEN''
                      AND i.next_attempt_at <= $1 ORDER BY i.next_attempt_at LIMIT $2 FOR NO KEY UPDATE SKIP LOCKED)
                    SELECT array_agg(d.customer_id ORDER BY d.id), array_agg(d.id ORDER BY d.id) FROM due d',
                   billing._shard_table('billing.invoice', p_group))
       INTO v_customers, v_ids USING p_now, p_batch;
    FOR i IN 1 .. coalesce(cardinality(v_ids), 0) LOOP
        v_n := v_n + (SELECT count(*) FROM billing._claim_charge_row(v_customers[i], v_ids[i], 'bench', '1 hour',
                                                                     p_now, 'sim', v_cfg))::integer;
    END LOOP;
    RETURN v_n;
END
$$"""


def backends(nodes: list[str], name: str) -> dict[tuple[int, int], float]:
    """CPU seconds so far of every backend of database `name` on each node (all on this host)."""
    out = {}
    for i, node in enumerate(nodes):
        with psycopg.connect(node, autocommit=True) as conn:
            for (pid,) in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                                       (name,)):
                out[(i, pid)] = proc_cpu(pid)
    return out


def work(url: str, fn: str, group: int, batch: int, count: int, nodes: list[str],
         now: datetime = NOW) -> tuple[list[float], float, int]:
    """Milliseconds per call of `fn` on `batch` rows, `count` calls, each rolled back; with the server CPU
    seconds of those calls (every backend of the database on `nodes`) and the rows they handled."""
    out = []
    rows = 0
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET jit = off")
        if fn == "charge_rows_before_32":
            conn.execute("SET citus.enable_ddl_propagation = off")  # a temporary function of this session
            conn.execute(ROW_BY_ROW)
        # One call first (not counted): the session's caches and Citus' connections between nodes.
        with conn.transaction(force_rollback=True):
            conn.execute(WORK[fn], {"group": group, "batch": batch, "now": now}).fetchall()
        cpu0 = backends(nodes, name)
        for _ in range(count):
            t = time.perf_counter()
            with conn.transaction(force_rollback=True):
                got = conn.execute(WORK[fn], {"group": group, "batch": batch, "now": now}).fetchall()
            out.append((time.perf_counter() - t) * 1000)
            rows += int(got[0][0] or 0) if got and got[0] else 0
        cpu1 = backends(nodes, name)
    return out, sum(v - cpu0.get(k, 0.0) for k, v in cpu1.items()), rows


def measure(url: str, layout: str, shards: int, customers: int, batch: int, count: int, rows: list,
            label: str | None = None) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        t = time.perf_counter()
        for stmt in LOAD.split(";"):
            if stmt.strip():
                conn.execute(stmt, {"n": customers})
        conn.execute("VACUUM ANALYZE billing.subscription")
        conn.execute("VACUUM ANALYZE billing.invoice")
        loaded = time.perf_counter() - t
        groups = conn.execute("SELECT shard_group, node_name, node_port FROM "
                              "billing.lease_shard_groups('bench', 10000, '1 day', %s)", (NOW,)).fetchall()
        nodes = [url]
        if layout == "citus":
            nodes += [node_url(url, h, p) for h, p in conn.execute(
                "SELECT nodename, nodeport FROM pg_dist_node WHERE noderole = 'primary' AND groupid > 0")]
    picked = [groups[0], groups[len(groups) // 2]] if len(groups) > 1 else groups
    per_group = 2 * customers // len(groups)
    # Claim and work first (rolled back), then the claims alone (the charges' claims lease for good).
    fns = ["renew_in_shard", "charge_claims_in_shard", "charge_rows_before_32"]
    if getattr(measure, "only", None):
        fns = [f for f in fns if f in measure.only]
    if layout == "single" and not getattr(measure, "only", None):
        fns += ["create_due_invoices", "claim_charges"]
    for fn in fns:
        times = []
        cpu = 0.0
        handled = 0
        for g, host, port in picked:
            t, c, n = work(node_url(url, host, port), fn, g, batch, count, nodes)
            times += t
            cpu += c
            handled += n
        med = statistics.median(times)
        cpu_us = 1e6 * cpu / handled if handled else float("nan")
        rows.append((label or layout, len(groups), customers, per_group, fn, med, med * 1000 / batch, cpu_us, host_load()))
        print(f"{label or layout:6s} groups={len(groups):3d} customers={customers:7d}: {fn} of {batch} = {med:.1f} ms median "
              f"({med * 1000 / batch:.0f} us/row wall, server CPU {cpu_us:.0f} us/row over {handled} rows, "
              f"{len(times)} calls); {host_load()}", flush=True)
    for fn in ("renewals", "charges") if not getattr(measure, "only", None) else ():
        times: list[float] = []
        for g, host, port in picked:
            times += claims(node_url(url, host, port), fn, g, batch, count)
        med = statistics.median(times)
        rows.append((layout, len(groups), customers, per_group, f"claim_{fn}_in_shard", med, med * 1000 / batch,
                     float("nan"), host_load()))
        print(f"{layout:6s} groups={len(groups):3d} customers={customers:7d} (~{per_group:6d} due per group, "
              f"loaded in {loaded:.1f} s): {fn} claim of {batch} = {med:.1f} ms median "
              f"({med * 1000 / batch:.0f} us/row, {len(times)} claims)", flush=True)


def measure_usage(url: str, label: str, customers: int, hours: int, batch: int, count: int, rows: list) -> None:
    """rate_usage_in_shard in two groups (each call claims and rates `batch`, rolled back)."""
    from datetime import timedelta

    from bench.usage.rating import END
    from bench.usage.rating import build as build_usage
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET citus.multi_shard_modify_mode TO 'sequential'")
        build_usage(conn, customers, hours, chunk=2000)
        groups = conn.execute("SELECT shard_group, node_name, node_port FROM "
                              "billing.lease_shard_groups('bench', 10000, '1 day', %s)", (END,)).fetchall()
        nodes = [url] + [node_url(url, h, p) for h, p in conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_node WHERE noderole = 'primary' AND groupid > 0")]
    times, cpu, handled = [], 0.0, 0
    for g, host, port in [groups[0], groups[len(groups) // 2]]:
        t, c, n = work(node_url(url, host, port), "rate_usage_in_shard", g, batch, count, nodes,
                       now=END + timedelta(hours=2))
        times += t
        cpu += c
        handled += n
    med = statistics.median(times)
    cpu_us = 1e6 * cpu / handled if handled else float("nan")
    rows.append((label, len(groups), customers, customers // len(groups), "rate_usage_in_shard", med, med * 1000 / batch,
                 cpu_us, host_load()))
    print(f"{label:6s} groups={len(groups):3d} customers={customers:7d}: rate_usage_in_shard of {batch} = {med:.1f} ms "
          f"median (server CPU {cpu_us:.0f} us a subscription over {handled} rated, {len(times)} calls); {host_load()}",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--single-url", default=os.environ.get("BILLING_SINGLE_BENCH_URL"))
    ap.add_argument("--shards", default="8,32")
    ap.add_argument("--customers", default="10000,40000")
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--claims", type=int, default=8)
    ap.add_argument("--baseline", default="none",
                    help="a commit measured beside this tree on the cluster, same fixtures and calls (none: skip)")
    ap.add_argument("--usage", type=int, default=0,
                    help="also (or with --only rate_usage_in_shard, only) the usage rating per group on "
                         "bench.usage.rating's world of this many customers (24 active hours a meter)")
    ap.add_argument("--only", default=None,
                    help="comma-separated calls to time (e.g. charge_claims_in_shard,charge_rows_before_32)")
    a = ap.parse_args()
    measure.only = a.only.split(",") if a.only else None
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min)", flush=True)
    rows: list = []
    base = baseline_tree(a.baseline) if a.baseline != "none" else None
    for customers in [int(x) for x in a.customers.split(",")]:
        for i, shards in enumerate(int(x) for x in a.shards.split(",")):
            sides = [(None, "citus")] + ([(base, f"citus@{a.baseline}")] if base else [])
            for tree, label in (sides if i % 2 == 0 else sides[::-1]):
                if not measure.only or set(measure.only) - {"rate_usage_in_shard"}:
                    url = fresh(None, "billing_bench_engine", shards=shards, tree=tree)
                    measure(url, "citus", shards, customers, a.batch, a.claims, rows, label)
                if a.usage:
                    url = fresh(None, "billing_bench_engine", shards=shards, tree=tree)
                    measure_usage(url, label, a.usage, 24, a.batch, a.claims, rows)
        if a.single_url:
            url = fresh(a.single_url, "billing_bench_engine_single", shards=0)
            measure(url, "single", 1, customers, a.batch, a.claims, rows)
    print(f"\nload after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min)")
    print(f"\n| layout | shard groups | customers | due per group | call | {a.batch} rows (median ms) | us per row "
          "(wall) | server CPU us per row | host |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:,} | {r[3]:,} | {r[4]} | {r[5]:.1f} | {r[6]:.0f} | {r[7]:.0f} | {r[8]} |")


if __name__ == "__main__":
    main()
