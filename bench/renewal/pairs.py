"""Two copies of bench/renewal's template side by side, batch by batch: A (as shipped, or a baseline
revision's template) and B (this tree with a variant of bench/renewal/profile, or statements from a
file), one connection each, their batches alternating A B B A ... until both have renewed every due
subscription; each batch's server CPU per invoice from /proc/<pid>/schedstat (nanoseconds).

    python -m bench.renewal.pairs --b "no invoice_status_idx" --copies 3
    python -m bench.renewal.pairs --baseline 4899166 --b "as shipped" --copies 3 --batch 5000
    python -m bench.renewal.pairs --b "checks folded" --b-sql checks.sql   # statements separated by ';;'

Unlike bench/renewal/ab (both statements in one database), each side has its own schema, so a variant
may drop an index or a constraint, or the baseline may have other migrations. A pair of batches meets
the same neighbours within seconds; the median of the pairs' differences and the count of pairs B
won say more on a shared host than the rounds of bench/renewal/profile (a whole copy per side, a
minute apart). The last, short batch of each copy is left out.
"""

from __future__ import annotations

import argparse
import statistics

import psycopg

from bench.renewal import profile
from bench.renewal.ab import cpu_ns
from bench.renewal import run as renewal


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    renewal.add_size_args(ap)
    ap.add_argument("--a", default="as shipped", help="a variant of bench/renewal/profile for side A")
    ap.add_argument("--b", required=True, help="a variant of bench/renewal/profile for side B (or a label with --b-sql)")
    ap.add_argument("--b-sql", help="a file of statements for side B, separated by ';;'")
    ap.add_argument("--baseline", metavar="REF", help="side A on the template of git revision REF")
    ap.add_argument("--batch", type=int, default=2_500)
    ap.add_argument("--copies", type=int, default=2)
    args = ap.parse_args()
    b_statements = ([s for s in open(args.b_sql).read().split(";;") if s.strip()] if args.b_sql
                    else profile.VARIANTS[args.b])
    template = renewal.build_template(args.database_url, args.total, args.due, "bands", False)
    template_a, dir_a = template, None
    if args.baseline:
        dir_a = renewal.baseline_db(args.baseline)
        template_a = renewal.build_template(args.database_url, args.total, args.due, "bands", False, dir_a)
    print(f"renewal pairs: {args.due:,} due among {args.total:,}, batches of {args.batch:,}; {renewal.host_load()}")
    res: dict[str, list[float]] = {"A": [], "B": []}
    for copy_number in range(args.copies):
        copy_a = renewal.Copy(args.database_url, template_a, "pair_a", dir_a)
        copy_b = renewal.Copy(args.database_url, template, "pair_b")
        try:
            with psycopg.connect(copy_a.url, autocommit=True) as a, psycopg.connect(copy_b.url, autocommit=True) as b:
                for statement in profile.VARIANTS[args.a]:
                    a.execute(statement)
                for statement in b_statements:
                    b.execute(statement)
                for conn in (a, b):
                    conn.execute("VACUUM ANALYZE")
                    conn.execute("CHECKPOINT")
                conns = {"A": a, "B": b}
                done = {"A": False, "B": False}
                turn = 0
                while not all(done.values()):
                    for side in (("A", "B") if turn % 2 == 0 else ("B", "A")):
                        if done[side]:
                            continue
                        pid = conns[side].info.backend_pid
                        before = cpu_ns(pid)
                        n = conns[side].execute("SELECT billing.create_due_invoices(%s, %s)",
                                                (args.batch, renewal.NOW)).fetchone()[0]
                        if not n:
                            done[side] = True
                        elif n >= args.batch // 2:
                            res[side].append((cpu_ns(pid) - before) / 1000 / n)
                    turn += 1
        finally:
            copy_a.drop()
            copy_b.drop()
        print(f"  copy {copy_number + 1}: {renewal.host_load()}", flush=True)
    a_us, b_us = res["A"], res["B"]
    n = min(len(a_us), len(b_us))
    label_a = args.a + (f" @ {args.baseline}" if args.baseline else "")
    print(f"A ({label_a}): median {statistics.median(a_us):.1f} us an invoice ({len(a_us)} batches)")
    print(f"B ({args.b}): median {statistics.median(b_us):.1f} us an invoice ({len(b_us)} batches); lower in "
          f"{sum(1 for x, y in zip(a_us[:n], b_us[:n]) if y < x)} of {n} pairs; median of the pairs' differences "
          f"{statistics.median([y - x for x, y in zip(a_us[:n], b_us[:n])]):+.1f} us")
    print("A: " + " ".join(f"{x:.0f}" for x in a_us))
    print("B: " + " ".join(f"{x:.0f}" for x in b_us))


if __name__ == "__main__":
    main()
