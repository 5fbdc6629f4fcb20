"""The renewal statement of a baseline revision against this tree's, batch by batch in one database:
the two statements take turns (A B B A ...) on the same due rows, one connection, and each batch's
server CPU per invoice is read from /proc/<pid>/schedstat (nanoseconds: the /proc/<pid>/stat ticks
of bench/renewal/profile are 10 ms, 4 us an invoice at 2,500 a batch).

    python -m bench.renewal.ab --baseline 103e888 --copies 4

On a shared host the rounds of bench/renewal/profile (a whole copy per side, a minute apart) move
by +-10%; here both sides meet the same neighbours, the same pages and the same table sizes within
seconds, so the pairs' median and the count of pairs each side won say more. Only for revisions
whose migrations are this tree's (the baseline's _renew_batch runs on this tree's schema): the copy
is made with the baseline's function files, its _renew_batch renamed _renew_batch_a, then this
tree's function files applied. Each batch calls _renew_batch itself (not create_due_invoices: the
lifecycle step is the same on both sides and the bench's rows have none).
"""

from __future__ import annotations

import argparse
import os
import statistics

import psycopg

from bench.renewal import run as renewal


def cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database-url", default=os.environ.get("BILLING_TEST_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:25432/postgres"))
    ap.add_argument("--baseline", required=True, metavar="REF")
    ap.add_argument("--total", type=int, default=200_000)
    ap.add_argument("--due", type=int, default=40_000)
    ap.add_argument("--batch", type=int, default=2_500)
    ap.add_argument("--copies", type=int, default=2, help="fresh copies of the template, one after the other")
    args = ap.parse_args()
    base_dir = renewal.baseline_db(args.baseline)
    if renewal.fingerprint(1, 1, "x", base_dir).rsplit("_", 1)[1] != renewal.fingerprint(1, 1, "x").rsplit("_", 1)[1]:
        raise SystemExit(f"{args.baseline}'s migrations differ from this tree's: use bench.renewal.profile --baseline")
    template = renewal.build_template(args.database_url, args.total, args.due, "bands", False)
    print(f"renewal A/B: A = {args.baseline[:7]}'s statement, B = this tree's; {args.due:,} due among {args.total:,}, "
          f"batches of {args.batch:,}; {renewal.host_load()}")
    cpu: dict[str, list[float]] = {"A": [], "B": []}
    pairs: list[float] = []
    for c in range(args.copies):
        copy = renewal.Copy(args.database_url, template, "ab", base_dir)
        try:
            with psycopg.connect(copy.url, autocommit=True) as conn:
                conn.execute("ALTER FUNCTION billing._renew_batch(integer, timestamptz) RENAME TO _renew_batch_a")
            renewal.migrate(copy.url, renewal.REPO / "db", simulation=True)
            with psycopg.connect(copy.url, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
                conn.execute("CHECKPOINT")
                pid = conn.info.backend_pid
                i, last = 0, None
                while True:
                    # A B B A, and B A A B in every other copy
                    side = "A" if (i % 4 in (0, 3)) == (c % 2 == 0) else "B"
                    fn = "billing._renew_batch_a" if side == "A" else "billing._renew_batch"
                    before = cpu_ns(pid)
                    n = conn.execute(f"SELECT handled FROM {fn}(%s, %s)", (args.batch, renewal.NOW)).fetchone()[0]
                    spent = cpu_ns(pid) - before
                    if n < args.batch // 2:  # the last few rows: too few to weigh
                        break
                    us = spent / 1e3 / n
                    cpu[side].append(us)
                    if i % 2:
                        pairs.append(us - last if side == "B" else last - us)
                    last = us
                    print(f"  copy {c + 1} batch {i + 1}: {side} {us:.1f} us per invoice ({renewal.host_load()})", flush=True)
                    i += 1
        finally:
            copy.drop()
    print()
    print("| side | batches | median | mean | min |")
    print("|---|---:|---:|---:|---:|")
    for side, label in (("A", args.baseline[:7]), ("B", "this tree")):
        v = cpu[side]
        print(f"| {label} | {len(v)} | {statistics.median(v):.1f} | {statistics.mean(v):.1f} | {min(v):.1f} |")
    print(f"\nthis tree - {args.baseline[:7]}, batch pairs in order: {' '.join(f'{d:+.1f}' for d in pairs)}")
    print(f"median {statistics.median(pairs):+.1f} us per invoice; this tree lower in {sum(d < 0 for d in pairs)} "
          f"of {len(pairs)} pairs; {renewal.host_load()}")


if __name__ == "__main__":
    main()
