"""A renewal's floor with this schema (issue 32): what the rows a renewal batch writes cost to write,
without the statement that makes them (as bench/signup/floor does for a signup).

    python -m bench.renewal.floor                        # 40,000 due among 200,000, batches of 5,000
    python -m bench.renewal.floor --sides fn,raw,bare,pkonly --batch 2500

One copy of bench/renewal's template per side, one connection each; every round one batch a side,
the order rotated every round (the first round warms each side up and is not counted):
- fn: `billing.create_due_invoices` (the renewal statement, as bench/renewal/pairs);
- raw: the rows that very call writes (the subscriptions' new versions, the invoices, their lines,
  their events), made by a call that is rolled back and copied out, then written as they are, one
  statement a table in one transaction: the subscriptions updated by their key to the copied
  versions (every column), the others `INSERT ... SELECT *` from a temporary table. Every index
  entry, CHECK, trigger and foreign key of today's schema, and nothing else: no claim, no lock, no
  prices, no periods, no ids drawn, no event text built;
- bare: the same on a copy without the four tables' CHECKs, foreign keys and triggers;
- pkonly: bare without their secondary indexes (the primary and unique keys kept);
- hot (not by default): raw with the subscription's two due indexes dropped and its pages at
  fillfactor 50 (rewritten), so that its update is HOT: what that update costs without the due
  time in its row (a queue's own writes not included);
- hotq (not by default): hot, and a queue `subscription_due` (key, due time, lifecycle flag; its
  primary key and a (lifecycle, due_at) index) whose entries the batch moves in one more statement;
- hot1 (not by default): hot, and a queue with one index, its key (lifecycle, due_at, customer_id,
  subscription_id): the batch deletes the old entries by that key and inserts the new ones.
The raw sides commit what they write, so their next call renews the next batch, as fn's does.
Prints each round, each side's median of the backend's CPU (schedstat) an invoice and its ratio to
fn, and for the raw sides the CPU of each table's write.

Environment: BILLING_TEST_DATABASE_URL (a superuser URL, as `make services` writes it); --database-url
overrides.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg

from bench.renewal import run as renewal
from bench.renewal.ab import cpu_ns
from bench.signup.floor import bare_sql, drop_secondary_sql, stage_and_roll_back

TABLES = ("subscription", "invoice", "service_line", "outbox_event")
# Run on a copy: the four tables' CHECKs, foreign keys and user triggers dropped (bare), and then
# their secondary indexes too (pkonly, after BARE).
BARE = bare_sql(TABLES)
PKONLY = drop_secondary_sql(TABLES)
# raw with the subscription's update made HOT: its two due indexes gone (the due time would live in a
# queue, not written here) and room on its pages (fillfactor 50, the table rewritten).
HOT = ["DROP INDEX billing.subscription_due_idx, billing.subscription_lifecycle_due_idx",
       "ALTER TABLE billing.subscription SET (fillfactor = 50)", "VACUUM FULL billing.subscription"]
# hot, and the due time moved in a queue of its own (what an exact queue adds to a renewal: its
# entries' update, one statement; kept by the writer, no trigger).
QUEUE = ["CREATE TABLE billing.subscription_due (customer_id bigint, subscription_id bigint, due_at timestamptz NOT NULL,"
         " lifecycle boolean NOT NULL, PRIMARY KEY (customer_id, subscription_id))",
         "INSERT INTO billing.subscription_due SELECT customer_id, id, current_period_end, lifecycle_pending"
         " FROM billing.subscription WHERE status IN ('TRIALING', 'ACTIVE', 'PAST_DUE')",
         "CREATE INDEX subscription_due_at_idx ON billing.subscription_due (lifecycle, due_at)"]
QUEUE_WRITE = ("UPDATE billing.subscription_due q SET due_at = st.current_period_end FROM st_subscription st"
               " WHERE q.customer_id = st.customer_id AND q.subscription_id = st.id")
# hot, and a queue with one index, its key (lifecycle, due_at, customer_id, subscription_id): the batch
# deletes each old entry by its full key (the old due time is the new period's start) and inserts the
# new one (exact too: every writer knows the old state it changes).
QUEUE_ONE = ["CREATE TABLE billing.subscription_due (lifecycle boolean, due_at timestamptz, customer_id bigint,"
             " subscription_id bigint, PRIMARY KEY (lifecycle, due_at, customer_id, subscription_id))",
             "INSERT INTO billing.subscription_due SELECT lifecycle_pending, current_period_end, customer_id, id"
             " FROM billing.subscription WHERE status IN ('TRIALING', 'ACTIVE', 'PAST_DUE')"]
QUEUE_ONE_WRITE = ["DELETE FROM billing.subscription_due q USING st_subscription st WHERE NOT q.lifecycle"
                   " AND q.due_at = st.current_period_start AND q.customer_id = st.customer_id AND q.subscription_id = st.id",
                   "INSERT INTO billing.subscription_due SELECT false, st.current_period_end, st.customer_id, st.id"
                   " FROM st_subscription st"]
SIDES = {"fn": None, "raw": [], "bare": [BARE], "pkonly": [BARE, PKONLY], "hot": HOT, "hotq": HOT + QUEUE,
         "hot1": HOT + QUEUE_ONE}
COLUMNS = TABLES + ("queue",)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    renewal.add_size_args(ap)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--sides", default="fn,raw,bare,pkonly")
    args = ap.parse_args()
    names = args.sides.split(",")
    template = renewal.build_template(args.database_url, args.total, args.due, "bands", False)
    print(f"renewal floor: {args.due:,} due among {args.total:,}, batches of {args.batch:,}; {renewal.host_load()}")
    copies, conns, pids, columns = {}, {}, {}, []
    try:
        for name in names:
            copies[name] = renewal.Copy(args.database_url, template, f"floor_{name}")
            conn = psycopg.connect(copies[name].url, autocommit=True)
            if SIDES[name] is not None:
                for t in TABLES:
                    conn.execute(f"CREATE TEMP TABLE st_{t} (LIKE billing.{t})")
                for statement in SIDES[name]:
                    conn.execute(statement)
                columns = [r[0] for r in conn.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = 'billing.subscription'::regclass AND attnum > 0"
                    " AND NOT attisdropped AND attname NOT IN ('customer_id', 'id') ORDER BY attnum")]
            conn.execute("VACUUM ANALYZE")
            conn.execute("CHECKPOINT")
            conns[name], pids[name] = conn, conn.info.backend_pid
        update = ("UPDATE billing.subscription s SET " + ", ".join(f"{c} = st.{c}" for c in columns)
                  + " FROM st_subscription st WHERE s.customer_id = st.customer_id AND s.id = st.id")
        cpu: dict[str, list[float]] = {n: [] for n in names}
        per = {n: {t: [] for t in COLUMNS} for n in names if SIDES[n] is not None}
        r = -1
        while True:
            order = names[r % len(names):] + names[:r % len(names)] if r >= 0 else names
            done = False
            for name in order:
                conn, pid = conns[name], pids[name]
                if SIDES[name] is None:
                    t0 = cpu_ns(pid)
                    n = conn.execute("SELECT billing.create_due_invoices(%s, %s)", (args.batch, renewal.NOW)).fetchone()[0]
                    spent = cpu_ns(pid) - t0
                else:
                    conn.execute("BEGIN")  # the statement's own rows for this batch, then undone
                    tops = conn.execute("SELECT (SELECT coalesce(max(id), 0) FROM billing.invoice),"
                                        " (SELECT coalesce(max(id), 0) FROM billing.service_line),"
                                        " (SELECT coalesce(max(id), 0) FROM billing.outbox_event)").fetchone()
                    n = conn.execute("SELECT billing.create_due_invoices(%s, %s)", (args.batch, renewal.NOW)).fetchone()[0]
                    wrote = {"invoice": f"SELECT * FROM billing.invoice WHERE id > {tops[0]}",
                             "service_line": f"SELECT * FROM billing.service_line WHERE id > {tops[1]}",
                             "outbox_event": f"SELECT * FROM billing.outbox_event WHERE id > {tops[2]}",
                             "subscription": "SELECT s.* FROM billing.subscription s WHERE (s.customer_id, s.id) IN"
                                             f" (SELECT customer_id, subscription_id FROM billing.invoice WHERE id > {tops[0]})"}
                    stage_and_roll_back(conn, wrote)
                    conn.execute("ANALYZE st_subscription, st_invoice, st_service_line, st_outbox_event")
                    spent = 0
                    with conn.transaction():
                        for t in TABLES + (("queue",) if name.startswith("hot") and name != "hot" else ()):
                            t0 = cpu_ns(pid)
                            for statement in ([update] if t == "subscription" else [QUEUE_WRITE] if name == "hotq" and t == "queue"
                                              else QUEUE_ONE_WRITE if t == "queue"
                                              else [f"INSERT INTO billing.{t} SELECT * FROM st_{t}"]):
                                conn.execute(statement)
                            took = cpu_ns(pid) - t0
                            spent += took
                            if r >= 0 and n >= args.batch // 2:
                                per[name][t].append(took / n / 1000)
                if not n or n < args.batch // 2:
                    done = True
                elif r >= 0:
                    cpu[name].append(spent / n / 1000)
            if done:
                break
            if r >= 0:
                print(f"round {r + 1} ({renewal.host_load()}): "
                      + ", ".join(f"{n} {cpu[n][-1]:.1f}" for n in names) + " µs an invoice", flush=True)
            r += 1
        rounds = min(len(v) for v in cpu.values())
        print(f"\n{rounds} rounds of {args.batch:,} a side ({renewal.host_load()} at the end); µs of server CPU an invoice:\n")
        print("| side | median | against fn (median of the rounds' ratios) | rounds below fn |")
        print("|---|---:|---:|---:|")
        for n in names:
            ratios = [x / y for x, y in zip(cpu[n][:rounds], cpu[names[0]][:rounds])]
            print(f"| {n} | {statistics.median(cpu[n][:rounds]):.1f} | {statistics.median(ratios):.3f} "
                  f"| {sum(x < 1 for x in ratios)}/{len(ratios)} |")
        if per:
            print("\n| side | " + " | ".join(COLUMNS) + " |")
            print("|---|" + "---:|" * len(COLUMNS))
            for n, d in per.items():
                print(f"| {n} | " + " | ".join(f"{statistics.median(v):.1f}" if v else "-" for v in d.values()) + " |")
        time.sleep(1)  # (the statistics reach pg_stat once a second)
        for n, conn in conns.items():
            hot, upd = conn.execute("SELECT n_tup_hot_upd, n_tup_upd FROM pg_stat_user_tables"
                                    " WHERE relid = 'billing.subscription'::regclass").fetchone()
            print(f"{n}: {hot:,} of {upd:,} subscription updates HOT")
    finally:
        for conn in conns.values():
            conn.close()
        for c in copies.values():
            c.drop()


if __name__ == "__main__":
    main()
