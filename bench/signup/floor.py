"""A signup's floor with this schema (issue 32): what the rows of a bulk signup cost to write, without
the function that makes them.

    python -m bench.signup.floor                       # 8 rounds of 5,000, after 40,000 signups
    python -m bench.signup.floor --rounds 12 --pre 100000

One template database (migrated with --simulation, one monthly plan, --pre signups made in bulk),
copied once per side; on each copy one connection, and every round one batch of 5,000 each, the
order rotated every round:
- fn: `billing.create_subscriptions` (as bench/signup/run.py);
- raw: the rows that very call writes (customer, subscription, request, invoice, line, two events),
  made by a call that is rolled back and copied out, then inserted as they are (`INSERT ... SELECT *`
  from a temporary table, one statement a table, one transaction): every index entry, CHECK, trigger
  and foreign key of today's schema, and nothing else: no checks of the batch, no terms, no ids drawn,
  no event text built;
- bare: the same on a copy without the six tables' CHECKs, foreign keys and triggers;
- pkonly: bare without their secondary indexes (the primary and unique keys kept).
Prints each round, each side's median of the backends' CPU (schedstat) a signup and its ratio to fn,
and for the raw sides the CPU of each table's insert.

Environment: BILLING_TEST_DATABASE_URL (a superuser URL, as `make services` writes it); --database-url
overrides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import psycopg
from psycopg import sql

from bench.signup.profile import schedstat_ns
from bench.signup.run import NOW, fresh, url_for_db

TABLES = ("customer", "subscription", "subscription_request", "invoice", "service_line", "outbox_event")


def bare_sql(tables: tuple[str, ...]) -> str:
    """A DO block dropping the tables' CHECKs, foreign keys and user triggers (bare; bench/renewal/floor too)."""
    names = ", ".join(f"'billing.{t}'::regclass" for t in tables)
    return f"""DO $$ DECLARE r record; BEGIN
FOR r IN SELECT conrelid::regclass AS t, conname FROM pg_constraint WHERE contype IN ('c', 'f') AND conrelid IN ({names}) LOOP
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.t, r.conname); END LOOP;
FOR r IN SELECT tgrelid::regclass AS t, tgname FROM pg_trigger WHERE NOT tgisinternal AND tgrelid IN ({names}) LOOP
    EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.t); END LOOP;
END $$"""


def drop_secondary_sql(tables: tuple[str, ...]) -> str:
    """A DO block dropping the tables' secondary indexes, the primary and unique keys kept (pkonly, after bare)."""
    names = ", ".join(f"'billing.{t}'::regclass" for t in tables)
    return f"""DO $$ DECLARE r record; BEGIN
FOR r IN SELECT indexrelid::regclass AS ix FROM pg_index WHERE NOT indisunique AND indrelid IN ({names}) LOOP
    EXECUTE format('DROP INDEX %s', r.ix); END LOOP;
END $$"""


# Run on a copy: the six tables' CHECKs, foreign keys and user triggers dropped (bare), and then
# their secondary indexes too (pkonly).
BARE = bare_sql(TABLES)
PKONLY = BARE + ";\n" + drop_secondary_sql(TABLES)
SIDES = {"fn": None, "raw": "", "bare": BARE, "pkonly": PKONLY}


def stage_and_roll_back(conn: psycopg.Connection, queries: dict[str, str]) -> None:
    """Copies each query's rows out (binary), rolls the open transaction back, and loads them into the
    temporary table st_<name> (emptied first): a function's own rows, kept past their undoing."""
    rows = {}
    for t, query in queries.items():
        with conn.cursor().copy(f"COPY ({query}) TO STDOUT (FORMAT binary)") as cp:
            rows[t] = b"".join(bytes(x) for x in cp)
    conn.execute("ROLLBACK")
    for t, data in rows.items():
        conn.execute(f"TRUNCATE st_{t}")
        with conn.cursor().copy(f"COPY st_{t} FROM STDIN (FORMAT binary)") as cp:
            cp.write(data)


def batch(first: int, n: int) -> str:
    return json.dumps([{"idempotency_key": f"floor-{i}", "customer_id": i, "plan_code": "BENCH_M"}
                       for i in range(first, first + n)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--pre", type=int, default=40_000, help="signups made before the rounds (the tables' size)")
    ap.add_argument("--sides", default="fn,raw,bare,pkonly")
    ap.add_argument("--database-url", default=os.environ.get("BILLING_TEST_DATABASE_URL") or os.environ.get("BILLING_DATABASE_URL"))
    args = ap.parse_args()
    names = args.sides.split(",")
    b = args.batch
    template = fresh(args.database_url, "bench_signup_floor")
    with psycopg.connect(template, autocommit=True) as conn:
        for first in range(1_000_000, 1_000_000 + args.pre, b):
            conn.execute("SELECT count(*) FROM billing.create_subscriptions(%s::jsonb, %s)", (batch(first, b), NOW))
        conn.execute("VACUUM ANALYZE")
    conns, pids = {}, {}
    with psycopg.connect(args.database_url, autocommit=True) as admin:
        for name in names:
            db = f"bench_signup_floor_{name}"
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
            admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE bench_signup_floor").format(sql.Identifier(db)))
            conn = psycopg.connect(url_for_db(args.database_url, db), autocommit=True)
            if SIDES[name] is not None:
                for t in TABLES:
                    conn.execute(f"CREATE TEMP TABLE st_{t} (LIKE billing.{t})")
                if SIDES[name]:
                    conn.execute(SIDES[name])
            conn.execute("VACUUM ANALYZE")
            conns[name], pids[name] = conn, conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    cpu: dict[str, list[float]] = {n: [] for n in names}
    per: dict[str, dict[str, list[float]]] = {n: {t: [] for t in TABLES} for n in names if SIDES[n] is not None}
    first = 20_000_000
    for r in range(-1, args.rounds):  # (round -1 warms each side up, not counted)
        for name in (names[r % len(names):] + names[:r % len(names)] if r >= 0 else names):
            conn, pid, lo = conns[name], pids[name], first
            first += b
            if SIDES[name] is None:
                t0 = schedstat_ns(pid)
                with conn.transaction():
                    conn.execute("SELECT count(*) FROM billing.create_subscriptions(%s::jsonb, %s)", (batch(lo, b), NOW))
                spent = schedstat_ns(pid) - t0
            else:
                conn.execute("BEGIN")  # the function's own rows for this batch, then undone
                conn.execute("SELECT count(*) FROM billing.create_subscriptions(%s::jsonb, %s)", (batch(lo, b), NOW))
                stage_and_roll_back(conn, {t: f"SELECT * FROM billing.{t} WHERE {'id' if t == 'customer' else 'customer_id'}"
                                              f" >= {lo} AND {'id' if t == 'customer' else 'customer_id'} < {lo + b}"
                                           for t in TABLES})
                spent = 0
                with conn.transaction():
                    for t in TABLES:
                        t0 = schedstat_ns(pid)
                        conn.execute(f"INSERT INTO billing.{t} SELECT * FROM st_{t}")
                        took = schedstat_ns(pid) - t0
                        spent += took
                        if r >= 0:
                            per[name][t].append(took / b / 1000)
            if r >= 0:
                cpu[name].append(spent / b / 1000)
        if r >= 0:
            print(f"round {r + 1} (load {os.getloadavg()[0]:.1f}): "
                  + ", ".join(f"{n} {cpu[n][-1]:.1f}" for n in names) + " µs a signup", flush=True)
    print(f"\n{args.rounds} rounds of {b:,} a side (load {os.getloadavg()[0]:.1f} at the end); µs of server CPU a signup:\n")
    print("| side | median | against fn (median of the rounds' ratios) | rounds below fn |")
    print("|---|---:|---:|---:|")
    for n in names:
        ratios = [x / y for x, y in zip(cpu[n], cpu[names[0]])]
        print(f"| {n} | {statistics.median(cpu[n]):.1f} | {statistics.median(ratios):.3f} | {sum(x < 1 for x in ratios)}/{len(ratios)} |")
    if per:
        print("\n| side | " + " | ".join(TABLES) + " |")
        print("|---|" + "---:|" * len(TABLES))
        for n, d in per.items():
            print(f"| {n} | " + " | ".join(f"{statistics.median(v):.1f}" for v in d.values()) + " |")
    for conn in conns.values():
        conn.close()


if __name__ == "__main__":
    main()
