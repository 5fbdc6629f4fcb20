"""Where the renewal's server CPU goes, per invoice: the renewal statement on copies of one database,
each copy with one part taken away, side by side (an experiment: no copy is the product).

    python -m bench.renewal.profile                          # 200,000 subscriptions, 40,000 due, 3 rounds
    python -m bench.renewal.profile --total 1000000 --due 200000 --rounds 2
    python -m bench.renewal.profile --baseline 42df2b0 --variants "as shipped,no outbox row"

Each round runs every variant once, in turn, on a fresh copy of bench/renewal's template (the
current functions applied, VACUUM ANALYZE, CHECKPOINT): one connection calls
`billing.create_due_invoices(5000, now)` until nothing is due, and the backend's CPU time (from
/proc) is divided by the invoices. The difference between a variant and `as shipped` is what the
part taken away costs; the minimum over the rounds is reported (the host is shared: neighbours
only ever add time).

Variants:
* as shipped;
* event data constant: `_invoice_data` returns a constant object (the InvoiceCreated row is still
  written, with its envelope): the cost of building the event's data;
* no outbox row: a BEFORE INSERT trigger drops every outbox row (their payloads are still
  built): the row, its four indexes, its check and its statement triggers;
* no foreign keys to plan / payment attempt on invoice: the per-row RI triggers;
* no unique index on event_id: the random UUIDs' index;
* no invoice_unfinalized_idx: the numbering's queue (issue 15);
* due time in a narrow table at fillfactor 50 / 70 / 100 (emulated): the subscription's update made
  HOT by a keyed (customer_id, subscription_id) table holding the due time, see due_table_variant;
* due time in an insert-only queue at fillfactor 50 / 100 (emulated): the same with a queue of
  (due_at, customer_id, subscription_id) rows, one index and no key (claimed entries deleted by
  ctid, the next due time inserted), see due_queue_variant. Fillfactor 100 leaves no room on the
  subscription's pages, so the update stays non-HOT: what the queue itself costs. Both force the
  claim's plan (the queue's index in due order, each subscription by key): the generic plan otherwise
  joined every due row with a full walk of subscription_id_idx on each call;
* due queue kept by a trigger at fillfactor 50 / 100, due queue with entries only added by a trigger
  (stale ones skipped) at fillfactor 50 (emulated): the queue kept by a statement trigger on the
  subscription's UPDATE, as every writer would need it, see due_queue_trigger_variant and
  due_queue_lazy_variant;
* time-ordered event ids (emulated): the renewal's event ids with a millisecond prefix, so that
  outbox_event_event_id_idx takes its entries at its right end;
* no subscription MRR trigger: the statement trigger's transition table of every renewed row;
* CHECKs folded: one a table / no CHECKs on subscription, invoice, line: what a renewal's 42 CHECKs on
  those tables cost per constraint and in all (renewal8);
* 0540 cut: ...: each of migration 0540's cuts alone (run them on --baseline 230cbe5: on a tree
  with 0540 they change nothing). Variants drop with IF EXISTS, so every one runs on either tree.

--baseline REF runs every variant also on the function files of git revision REF, alternating with
this tree's in each round, the order swapped every round (the per-step profile before and after, from
one run).

Environment: BILLING_TEST_DATABASE_URL as `make services` writes it; --database-url overrides.
"""

from __future__ import annotations

import argparse
import os

import psycopg

from bench.renewal import run as renewal

def _renewal_rewritten(steps: str, check: str) -> str:
    """A DO block that rewrites the text of billing._renew_batch (steps: PL/pgSQL assignments of e, from
    its definition d) and makes the function anew, or stops when the text was not recognised (check: a
    condition on d and e that says so): a variant never measures the product's statement unchanged."""
    return (r"""DO $v$
        DECLARE
            d text := pg_get_functiondef('billing._renew_batch(integer,timestamptz)'::regprocedure);
            e text;
        BEGIN
""" + steps.strip("\n") + f"""
            IF {check} THEN
                RAISE EXCEPTION 'the renewal statement''s text was not recognised';
            END IF;
            EXECUTE e;
        END
        $v$""")


# What every variant below does around its own queue: the subscription's fillfactor (room on its page
# for the HOT update), the queue table (made, filled, indexed, given to the owner of the subscription
# table), the due indexes of the subscription dropped and the lifecycle's kept without the due time.
def _due_setup(fillfactor: int, queue: list[str]) -> list[str]:
    return [
        f"ALTER TABLE billing.subscription SET (fillfactor = {fillfactor})",
        "VACUUM FULL billing.subscription",
        *queue,
        "DO $o$ BEGIN EXECUTE format('ALTER TABLE billing.bench_due OWNER TO %I', (SELECT tableowner FROM pg_tables "
        "WHERE schemaname = 'billing' AND tablename = 'subscription')); END $o$",
        "DROP INDEX billing.subscription_due_idx",
        "DROP INDEX billing.subscription_lifecycle_due_idx",
        "CREATE INDEX subscription_lifecycle_idx ON billing.subscription (id) "
        "WHERE lifecycle_pending AND status IN ('TRIALING', 'ACTIVE', 'PAST_DUE')",
    ]


# The claim as a nested loop in due order (the queue's index, then each subscription by its key),
# stopping at the batch: without this the generic plan hash-joined every due row of the queue with
# a full walk of subscription_id_idx and sorted them, on every call (the first emulation, 13:38).
_CLAIM_IN_DUE_ORDER = ("ALTER FUNCTION billing._renew_batch(integer, timestamptz) SET enable_hashjoin = off "
                       "SET enable_mergejoin = off SET enable_bitmapscan = off SET enable_sort = off")


def due_table_variant(fillfactor: int) -> list[str]:
    """The next step's estimate (not the product): the due time kept in a narrow table of its own, so
    that the renewal's UPDATE of the subscription changes no indexed column and can be HOT (the
    subscription's six index entries per renewal no longer written) when its page has room for the new
    version (fillfactor; the due rows of one day are neighbours, so a page's rows are renewed together).
    _renew_batch is rewritten to claim through the narrow table and to move its due time; the
    lifecycle's index no longer names current_period_end either."""
    return [
        *_due_setup(fillfactor, [
            "CREATE TABLE billing.bench_due (customer_id bigint, subscription_id bigint, due_at timestamptz NOT NULL, "
            "PRIMARY KEY (customer_id, subscription_id))",
            "INSERT INTO billing.bench_due SELECT customer_id, id, current_period_end FROM billing.subscription "
            "WHERE status IN ('ACTIVE', 'PAST_DUE') AND NOT lifecycle_pending",
            "CREATE INDEX bench_due_idx ON billing.bench_due (due_at)",
        ]),
        _renewal_rewritten(r"""
            e := regexp_replace(d, 'FROM billing\.subscription s\s+WHERE (billing\._due_statement\([^)]*\))\s+ORDER BY s\.current_period_end\s+LIMIT p_batch_size\s+FOR NO KEY UPDATE SKIP LOCKED',
                                'FROM billing.bench_due q JOIN billing.subscription s ON s.customer_id = q.customer_id AND s.id = q.subscription_id
                                  WHERE q.due_at <= p_now AND \1 ORDER BY q.due_at LIMIT p_batch_size FOR NO KEY UPDATE OF s SKIP LOCKED');
            e := replace(e, '), renewed AS (',
                         '), due_moved AS (UPDATE billing.bench_due q SET due_at = p.period_end FROM priced p
                                            WHERE q.customer_id = p.customer_id AND q.subscription_id = p.id
                         ), due_gone AS (DELETE FROM billing.bench_due q USING due d
                                          WHERE d.cancel_at_period_end AND q.customer_id = d.customer_id AND q.subscription_id = d.id
                         ), renewed AS (');""",
                       "e = d OR position('due_moved' in e) = 0 OR position('bench_due q JOIN' in e) = 0"),
        _CLAIM_IN_DUE_ORDER,
    ]


def due_queue_variant(fillfactor: int) -> list[str]:
    """The due time in an insert-only queue (the next step's estimate, not the product): a
    (due_at, customer_id, subscription_id) heap with one index, on due_at, and no key. The claim walks
    it in due order and locks each subscription by its key; the statement deletes the claimed entries
    by their ctid (no index entry) and inserts each renewed subscription's next due time (one entry,
    near the index's live end), so the subscription's update changes no indexed column and is HOT
    when its page has room (fillfactor)."""
    return [
        *_due_setup(fillfactor, [
            "CREATE TABLE billing.bench_due (due_at timestamptz NOT NULL, customer_id bigint NOT NULL, subscription_id bigint NOT NULL)",
            "INSERT INTO billing.bench_due SELECT current_period_end, customer_id, id FROM billing.subscription "
            "WHERE status IN ('ACTIVE', 'PAST_DUE') AND NOT lifecycle_pending ORDER BY current_period_end",
            "CREATE INDEX bench_due_idx ON billing.bench_due (due_at)",
        ]),
        _renewal_rewritten(r"""
            e := regexp_replace(d, 'SELECT s\.ctid AS row_id,(.*?)FROM billing\.subscription s\s+WHERE (billing\._due_statement\([^)]*\))\s+ORDER BY s\.current_period_end\s+LIMIT p_batch_size\s+FOR NO KEY UPDATE SKIP LOCKED',
                                'SELECT s.ctid AS row_id, q.ctid AS due_row,\1FROM billing.bench_due q JOIN billing.subscription s ON s.customer_id = q.customer_id AND s.id = q.subscription_id
                                  WHERE q.due_at <= p_now AND s.current_period_end = q.due_at AND \2 ORDER BY q.due_at LIMIT p_batch_size FOR NO KEY UPDATE OF s SKIP LOCKED');
            e := replace(e, '), renewed AS (',
                         '), due_gone AS (DELETE FROM billing.bench_due q USING due d WHERE q.ctid = d.due_row
                         ), due_next AS (INSERT INTO billing.bench_due (due_at, customer_id, subscription_id)
                                         SELECT p.period_end, p.customer_id, p.id FROM priced p
                         ), renewed AS (');""",
                       "e = d OR position('due_next' in e) = 0 OR position('bench_due q JOIN' in e) = 0"),
        _CLAIM_IN_DUE_ORDER,
    ]


def due_queue_trigger_variant(fillfactor: int) -> list[str]:
    """The insert-only due queue kept by the database itself (the design to build, not the product): a
    statement trigger on the subscription's UPDATE (its old and new rows' transition tables) removes the
    old due entry of every row whose due time or status changed, through the queue's index on its full
    key, and adds the new one; the renewal statement only claims through the queue (its update goes
    through the trigger like every other writer's)."""
    return [
        *_due_setup(fillfactor, [
            "CREATE TABLE billing.bench_due (due_at timestamptz NOT NULL, customer_id bigint NOT NULL, subscription_id bigint NOT NULL)",
            "INSERT INTO billing.bench_due SELECT current_period_end, customer_id, id FROM billing.subscription "
            "WHERE status IN ('TRIALING', 'ACTIVE', 'PAST_DUE') ORDER BY current_period_end",
            "CREATE INDEX bench_due_idx ON billing.bench_due (due_at, customer_id, subscription_id)",
        ]),
        # (its own planner settings: it fires inside _renew_batch, whose settings below would apply)
        r"""CREATE FUNCTION billing._bench_due_moved() RETURNS trigger LANGUAGE plpgsql
        SET enable_hashjoin = on SET enable_mergejoin = on SET enable_sort = on SET enable_bitmapscan = on AS $t$
        BEGIN
            WITH moved AS MATERIALIZED (
                SELECT o.customer_id, o.id, o.current_period_end AS old_due, n.current_period_end AS new_due,
                       o.status IN ('TRIALING', 'ACTIVE', 'PAST_DUE') AS was_due, n.status IN ('TRIALING', 'ACTIVE', 'PAST_DUE') AS is_due
                  FROM old_rows o JOIN new_rows n ON n.customer_id = o.customer_id AND n.id = o.id
                 WHERE o.current_period_end IS DISTINCT FROM n.current_period_end OR o.status IS DISTINCT FROM n.status
            ), gone AS (
                DELETE FROM billing.bench_due q USING moved m
                 WHERE m.was_due AND q.due_at = m.old_due AND q.customer_id = m.customer_id AND q.subscription_id = m.id
            )
            INSERT INTO billing.bench_due (due_at, customer_id, subscription_id)
            SELECT m.new_due, m.customer_id, m.id FROM moved m WHERE m.is_due;
            RETURN NULL;
        END
        $t$""",
        "CREATE TRIGGER bench_due_moved AFTER UPDATE ON billing.subscription REFERENCING OLD TABLE AS old_rows "
        "NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION billing._bench_due_moved()",
        _renewal_rewritten(r"""
            e := regexp_replace(d, 'FROM billing\.subscription s\s+WHERE (billing\._due_statement\([^)]*\))\s+ORDER BY s\.current_period_end\s+LIMIT p_batch_size\s+FOR NO KEY UPDATE SKIP LOCKED',
                                'FROM billing.bench_due q JOIN billing.subscription s ON s.customer_id = q.customer_id AND s.id = q.subscription_id
                                  WHERE q.due_at <= p_now AND s.current_period_end = q.due_at AND \1 ORDER BY q.due_at LIMIT p_batch_size FOR NO KEY UPDATE OF s SKIP LOCKED');""",
                       "e = d OR position('bench_due q JOIN' in e) = 0"),
        _CLAIM_IN_DUE_ORDER,
    ]


def due_queue_lazy_variant(fillfactor: int) -> list[str]:
    """The due queue with a cheaper upkeep (the design to build, not the product): a statement trigger on
    the subscription's UPDATE adds an entry for the current due time of every row that can renew (its
    new rows' transition table only, no join, no probe); old entries are left stale and the claim skips
    them (its guard current_period_end = due_at; duplicates folded by DISTINCT ON); the renewal
    statement deletes the entries it claimed by their ctid."""
    return [
        *_due_setup(fillfactor, [
            "CREATE TABLE billing.bench_due (due_at timestamptz NOT NULL, customer_id bigint NOT NULL, subscription_id bigint NOT NULL)",
            "INSERT INTO billing.bench_due SELECT current_period_end, customer_id, id FROM billing.subscription "
            "WHERE status IN ('TRIALING', 'ACTIVE', 'PAST_DUE') ORDER BY current_period_end",
            "CREATE INDEX bench_due_idx ON billing.bench_due (due_at, customer_id, subscription_id)",
        ]),
        r"""CREATE FUNCTION billing._bench_due_added() RETURNS trigger LANGUAGE plpgsql
        SET enable_hashjoin = on SET enable_mergejoin = on SET enable_sort = on SET enable_bitmapscan = on AS $t$
        BEGIN
            INSERT INTO billing.bench_due (due_at, customer_id, subscription_id)
            SELECT n.current_period_end, n.customer_id, n.id FROM new_rows n WHERE n.status IN ('TRIALING', 'ACTIVE', 'PAST_DUE');
            RETURN NULL;
        END
        $t$""",
        "CREATE TRIGGER bench_due_added AFTER UPDATE ON billing.subscription REFERENCING NEW TABLE AS new_rows "
        "FOR EACH STATEMENT EXECUTE FUNCTION billing._bench_due_added()",
        _renewal_rewritten(r"""
            e := regexp_replace(d, 'SELECT s\.ctid AS row_id,(.*?)FROM billing\.subscription s\s+WHERE (billing\._due_statement\([^)]*\))\s+ORDER BY s\.current_period_end\s+LIMIT p_batch_size\s+FOR NO KEY UPDATE SKIP LOCKED',
                                'SELECT s.ctid AS row_id, q.due_row,\1FROM (SELECT DISTINCT ON (q.due_at, q.customer_id, q.subscription_id) q.ctid AS due_row, q.due_at, q.customer_id, q.subscription_id
                                        FROM billing.bench_due q WHERE q.due_at <= p_now ORDER BY q.due_at, q.customer_id, q.subscription_id) q
                                  JOIN billing.subscription s ON s.customer_id = q.customer_id AND s.id = q.subscription_id
                                  WHERE s.current_period_end = q.due_at AND \2 ORDER BY q.due_at LIMIT p_batch_size FOR NO KEY UPDATE OF s SKIP LOCKED');
            e := replace(e, '), renewed AS (',
                         '), due_gone AS (DELETE FROM billing.bench_due q USING due d WHERE q.ctid = d.due_row
                         ), renewed AS (');""",
                       "e = d OR position('due_gone' in e) = 0 OR position('DISTINCT ON' in e) = 0"),
        _CLAIM_IN_DUE_ORDER,
    ]


def _checks_folded(keep: bool) -> str:
    return ("""DO $v$
        DECLARE r record; v text; t text;
        BEGIN
            FOREACH t IN ARRAY ARRAY['invoice', 'subscription', 'service_line'] LOOP
                v := '';
                FOR r IN SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint
                          WHERE conrelid = ('billing.' || t)::regclass AND contype = 'c' LOOP
                    v := v || CASE WHEN v = '' THEN '' ELSE ' AND ' END || substr(r.def, 7);
                    EXECUTE format('ALTER TABLE billing.%I DROP CONSTRAINT %I', t, r.conname);
                END LOOP;
                IF """ + ("true" if keep else "false") + """ THEN
                    EXECUTE format('ALTER TABLE billing.%I ADD CONSTRAINT %I CHECK (%s) NOT VALID', t, t || '_checks', v);
                END IF;
            END LOOP;
        END
        $v$""")


VARIANTS: dict[str, list[str]] = {
    "as shipped": [],
    "event data constant": [
        "CREATE OR REPLACE FUNCTION billing._invoice_data(p_invoice billing.invoice) RETURNS jsonb "
        "LANGUAGE sql STABLE AS $$ SELECT '{\"invoiceId\": 1}'::jsonb $$"],
    "no outbox row": [
        "CREATE FUNCTION billing._bench_drop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$",
        "CREATE TRIGGER bench_drop BEFORE INSERT ON billing.outbox_event FOR EACH ROW EXECUTE FUNCTION billing._bench_drop()"],
    "no FKs invoice -> plan / attempt": [
        "ALTER TABLE billing.invoice DROP CONSTRAINT IF EXISTS invoice_plan_fkey",
        "ALTER TABLE billing.invoice DROP CONSTRAINT IF EXISTS invoice_from_plan_fkey",
        "ALTER TABLE billing.invoice DROP CONSTRAINT IF EXISTS invoice_paid_attempt_fkey"],
    "no event_id unique index": ["ALTER TABLE billing.outbox_event DROP CONSTRAINT IF EXISTS outbox_event_event_id_key"],
    "no invoice_unfinalized_idx": ["DROP INDEX IF EXISTS billing.invoice_unfinalized_idx"],
    "no plan FK on invoice": ["ALTER TABLE billing.invoice DROP CONSTRAINT IF EXISTS invoice_plan_fkey"],
    "no event_id index (event_id alone)": ["DROP INDEX IF EXISTS billing.outbox_event_event_id_idx"],
    "no outbox id index (id alone)": ["DROP INDEX IF EXISTS billing.outbox_event_id_idx"],
    "no invoice_subscription_idx": ["DROP INDEX IF EXISTS billing.invoice_subscription_idx"],
    "no overview counters": ["ALTER TABLE billing.invoice DISABLE TRIGGER invoice_overview_count_added",
                             "ALTER TABLE billing.subscription DISABLE TRIGGER subscription_overview_count_changed"],
    # (subscription_id_idx stays: the invoices' statement check reads subscriptions by id alone)
    "subscription update: 3 of its 6 indexes dropped": [
        "DROP INDEX IF EXISTS billing.subscription_created_idx", "DROP INDEX IF EXISTS billing.subscription_plan_idx",
        "DROP INDEX IF EXISTS billing.subscription_status_idx"],
    "invoice: pkey and one_per_period only (6 of 8 dropped)": [
        "DROP INDEX IF EXISTS billing.invoice_chargeable_idx", "DROP INDEX IF EXISTS billing.invoice_id_idx",
        "DROP INDEX IF EXISTS billing.invoice_period_idx", "DROP INDEX IF EXISTS billing.invoice_status_idx",
        "DROP INDEX IF EXISTS billing.invoice_subscription_idx", "DROP INDEX IF EXISTS billing.invoice_unfinalized_idx"],
    "due time in a narrow table at fillfactor 80 (emulated)": due_table_variant(80),
    "due time in a narrow table at fillfactor 50 (emulated)": due_table_variant(50),
    "due time in a narrow table at fillfactor 70 (emulated)": due_table_variant(70),
    "due time in a narrow table at fillfactor 100 (emulated)": due_table_variant(100),
    "due time in an insert-only queue at fillfactor 50 (emulated)": due_queue_variant(50),
    "due time in an insert-only queue at fillfactor 100 (emulated)": due_queue_variant(100),
    "due queue kept by a trigger at fillfactor 50 (emulated)": due_queue_trigger_variant(50),
    "due queue kept by a trigger at fillfactor 100 (emulated)": due_queue_trigger_variant(100),
    "due queue with entries only added by a trigger (stale ones skipped) at fillfactor 50 (emulated)": due_queue_lazy_variant(50),
    "no subscription MRR trigger": ["DROP TRIGGER subscription_mrr_changed ON billing.subscription"],
    "no invoice_period_idx": ["DROP INDEX IF EXISTS billing.invoice_period_idx"],
    "no invoice_status_idx": ["DROP INDEX IF EXISTS billing.invoice_status_idx"],
    "no invoice_id_idx": ["DROP INDEX IF EXISTS billing.invoice_id_idx"],
    "no outbox aggregate_unpublished_idx": ["DROP INDEX IF EXISTS billing.outbox_event_aggregate_unpublished_idx"],
    # migration 0540's cuts one at a time (no-ops on a tree that has 0540: run them on --baseline)
    "0540 cut: no plan FKs on invoice": [
        "ALTER TABLE billing.invoice DROP CONSTRAINT IF EXISTS invoice_plan_fkey",
        "ALTER TABLE billing.invoice DROP CONSTRAINT IF EXISTS invoice_from_plan_fkey"],
    "0540 cut: no event_id_key": ["ALTER TABLE billing.outbox_event DROP CONSTRAINT IF EXISTS outbox_event_event_id_key"],
    "0540 cut: no invoice_subscription_idx": ["DROP INDEX IF EXISTS billing.invoice_subscription_idx"],
    "0540 cut: subscription_status_idx without ACTIVE": [
        "DROP INDEX IF EXISTS billing.subscription_status_idx",
        "CREATE INDEX subscription_status_idx ON billing.subscription (status, id) WHERE status <> 'ACTIVE'"],
    # the event ids time-ordered (a millisecond prefix, then random bits): outbox_event_event_id_idx
    # takes its entries at its right end instead of at random leaves (emulated in the statement only)
    "time-ordered event ids (emulated)": [_renewal_rewritten(r"""
            e := replace(d, 'SELECT gen_random_uuid() AS event_id',
                         'SELECT encode(overlay(uuid_send(gen_random_uuid()) placing substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6), ''hex'')::uuid AS event_id');""",
                       'e = d')],
    # the CHECKs of the three tables a renewal writes with many (subscription 10, invoice 23, service_line 9)
    # folded into one expression a table (a row passes the conjunction exactly when it passes each), or none
    "CHECKs folded: one a table (subscription, invoice, line)": [_checks_folded(True)],
    "no CHECKs on subscription, invoice, line": [_checks_folded(False)],
    "no service line": [
        "CREATE FUNCTION billing._bench_drop_line() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$",
        "CREATE TRIGGER bench_drop_line BEFORE INSERT ON billing.service_line FOR EACH ROW EXECUTE FUNCTION billing._bench_drop_line()"],
}


def run_variant(server: str, template: str, statements: list[str], db_dir=None) -> tuple[int, float]:
    copy = renewal.Copy(server, template, "profile", db_dir)
    try:
        with psycopg.connect(copy.url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)
            conn.execute("VACUUM ANALYZE")
            pid = conn.info.backend_pid
            before = renewal.backend_cpu(pid)
            renewed = 0
            while n := conn.execute("SELECT billing.create_due_invoices(5000, %s)", (renewal.NOW,)).fetchone()[0]:
                renewed += n
            cpu = renewal.backend_cpu(pid) - before
    finally:
        copy.drop()
    return renewed, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database-url", default=os.environ.get("BILLING_TEST_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:25432/postgres"))
    ap.add_argument("--total", type=int, default=200_000)
    ap.add_argument("--due", type=int, default=40_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names of the variants")
    ap.add_argument("--baseline", metavar="REF",
                    help="also run every variant on the function files of git revision REF (its own template when its "
                         "migrations differ), alternating with this tree's, so both columns come from one run")
    args = ap.parse_args()
    names = [n for n in args.variants.split(",") if n]
    template = renewal.build_template(args.database_url, args.total, args.due, "bands", False)
    trees: list[tuple[str, str, object]] = []
    if args.baseline:
        base_dir = renewal.baseline_db(args.baseline)
        base_template = renewal.build_template(args.database_url, args.total, args.due, "bands", False, base_dir)
        trees.append((f"baseline {args.baseline[:7]}", base_template, base_dir))
    trees.append(("this tree", template, None))
    print(f"renewal profile: {args.due:,} due among {args.total:,}, {args.rounds} rounds; {renewal.host_load()}")
    cpu: dict[tuple[str, str], list[float]] = {(t, n): [] for t, _, _ in trees for n in names}
    for rnd in range(args.rounds):
        for name in names:
            # (the trees' order swapped every round: a neighbour's burst then falls on either side)
            for tree, tree_template, db_dir in (trees if rnd % 2 == 0 else trees[::-1]):
                renewed, seconds = run_variant(args.database_url, tree_template, VARIANTS[name], db_dir)
                cpu[tree, name].append(1e6 * seconds / renewed)
                print(f"  round {rnd + 1}: {tree}: {name}: {cpu[tree, name][-1]:.1f} us per invoice "
                      f"({renewal.host_load()})", flush=True)
    print()
    labels = [t for t, _, _ in trees]
    print("| variant | " + " | ".join(f"{t}: server CPU per invoice (min of rounds) | all rounds | the part costs"
                                       for t in labels) + " |")
    print("|---|" + "---:|---|---:|" * len(labels))
    for name in names:
        cells = []
        for t in labels:
            best = min(cpu[t, name])
            base = min(cpu[t, "as shipped"]) if "as shipped" in names else None
            part = "-" if base is None or name == "as shipped" else f"{base - best:.1f} us"
            cells.append(f"{best:.1f} us | {' / '.join(f'{v:.1f}' for v in cpu[t, name])} | {part}")
        print(f"| {name} | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
