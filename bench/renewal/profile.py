"""Where the renewal's server CPU goes, per invoice: the renewal statement on copies of one database,
each copy with one part taken away, side by side (an experiment: no copy is the product).

    python -m bench.renewal.profile                          # 200,000 subscriptions, 40,000 due, 3 rounds
    python -m bench.renewal.profile --total 1000000 --due 200000 --rounds 2

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
* no invoice_unfinalized_idx: the numbering's queue (issue 15).

Environment: BILLING_TEST_DATABASE_URL as `make services` writes it; --database-url overrides.
"""

from __future__ import annotations

import argparse
import os
import time

import psycopg
from psycopg import sql

from bench.renewal import run as renewal

VARIANTS: dict[str, list[str]] = {
    "as shipped": [],
    "event data constant": [
        "CREATE OR REPLACE FUNCTION billing._invoice_data(p_invoice billing.invoice) RETURNS jsonb "
        "LANGUAGE sql STABLE AS $$ SELECT '{\"invoiceId\": 1}'::jsonb $$"],
    "no outbox row": [
        "CREATE FUNCTION billing._bench_drop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$",
        "CREATE TRIGGER bench_drop BEFORE INSERT ON billing.outbox_event FOR EACH ROW EXECUTE FUNCTION billing._bench_drop()"],
    "no FKs invoice -> plan / attempt": [
        "ALTER TABLE billing.invoice DROP CONSTRAINT invoice_plan_fkey",
        "ALTER TABLE billing.invoice DROP CONSTRAINT invoice_from_plan_fkey",
        "ALTER TABLE billing.invoice DROP CONSTRAINT invoice_paid_attempt_fkey"],
    "no event_id unique index": ["ALTER TABLE billing.outbox_event DROP CONSTRAINT outbox_event_event_id_key"],
    "no invoice_unfinalized_idx": ["DROP INDEX billing.invoice_unfinalized_idx"],
    "no plan FK on invoice": ["ALTER TABLE billing.invoice DROP CONSTRAINT invoice_plan_fkey"],
    "no event_id index (event_id alone)": ["DROP INDEX billing.outbox_event_event_id_idx"],
    "no outbox id index (id alone)": ["DROP INDEX billing.outbox_event_id_idx"],
    "no invoice_subscription_idx": ["DROP INDEX billing.invoice_subscription_idx"],
    "no overview counters": ["ALTER TABLE billing.invoice DISABLE TRIGGER invoice_overview_count_added",
                             "ALTER TABLE billing.subscription DISABLE TRIGGER subscription_overview_count_changed"],
    # (subscription_id_idx stays: the invoices' statement check reads subscriptions by id alone)
    "subscription update: 3 of its 6 indexes dropped": [
        "DROP INDEX billing.subscription_created_idx", "DROP INDEX billing.subscription_plan_idx",
        "DROP INDEX billing.subscription_status_idx"],
    "invoice: pkey and one_per_period only (6 of 8 dropped)": [
        "DROP INDEX billing.invoice_chargeable_idx", "DROP INDEX billing.invoice_id_idx",
        "DROP INDEX billing.invoice_period_idx", "DROP INDEX billing.invoice_status_idx",
        "DROP INDEX billing.invoice_subscription_idx", "DROP INDEX billing.invoice_unfinalized_idx"],
    "no service line": [
        "CREATE FUNCTION billing._bench_drop_line() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$",
        "CREATE TRIGGER bench_drop_line BEFORE INSERT ON billing.service_line FOR EACH ROW EXECUTE FUNCTION billing._bench_drop_line()"],
}


def run_variant(server: str, template: str, statements: list[str]) -> tuple[int, float]:
    copy = renewal.Copy(server, template, "profile")
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
    args = ap.parse_args()
    names = [n for n in args.variants.split(",") if n]
    template = renewal.build_template(args.database_url, args.total, args.due, "bands", False)
    print(f"renewal profile: {args.due:,} due among {args.total:,}, {args.rounds} rounds; {renewal.host_load()}")
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for rnd in range(args.rounds):
        for name in names:
            renewed, seconds = run_variant(args.database_url, template, VARIANTS[name])
            cpu[name].append(1e6 * seconds / renewed)
            print(f"  round {rnd + 1}: {name}: {cpu[name][-1]:.1f} us per invoice ({renewal.host_load()})", flush=True)
    base = min(cpu["as shipped"]) if "as shipped" in cpu else None
    print()
    print("| variant | server CPU per invoice (min of rounds) | all rounds | the part taken away costs |")
    print("|---|---:|---|---:|")
    for name in names:
        best = min(cpu[name])
        part = "-" if base is None or name == "as shipped" else f"{base - best:.1f} us"
        print(f"| {name} | {best:.1f} us | {' / '.join(f'{v:.1f}' for v in cpu[name])} | {part} |")


if __name__ == "__main__":
    main()
