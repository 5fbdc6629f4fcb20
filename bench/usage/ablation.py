"""The Kafka door's statement taken apart (issue 29, ingest8; bench/README.md "Issue 29's Kafka door,
eighth pass"): what each part of billing._ingest_usage_rows costs, by sending the same batches to
fresh databases whose statement lacks that part. Not a correct ingestion (the parts left out are
left out): a map of where the server's CPU goes, each part's figure beside the whole statement's in
the same run, with an A/A pair for the noise.

    python -m bench.usage.ablation                          # 24 batches of 20,000, 1,000 customers
    python -m bench.usage.ablation --batches 40 --batch 10000

Variants (each on its own database, migrated from this tree, the statement replaced after):
- as shipped, and as shipped again (the A/A pair: the noise floor);
- without counting: no hourly rollups, distinct values or daily folds (the CTEs from `counted` on);
- store only: also without the meters' matching and their reasons (`meters`, `matched`, `bad`).

Each batch goes to every database in turn, one connection each, the order rotated every batch; the
server CPU is each backend's (/proc/<pid>/schedstat) per batch, the consumer's call
(billing.usage.event_columns, then ingest_columns_counts). Printed: each variant's median µs an
event, every batch, and each one's paired difference from "as shipped" (median, lower in how many).

Environment: BILLING_TEST_DATABASE_URL (a superuser URL of the server), as `make services` writes it.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
from datetime import datetime, timezone
from pathlib import Path

import psycopg

from bench.usage.statement import _cpu, fresh_db, stream
from billing.config import Settings
from billing.usage import event_columns, ingest_columns_counts

REPO = Path(__file__).resolve().parents[2]
_COUNTING = "    ), counted AS ("  # the first of the counting CTEs
_ANSWER = "    SELECT k.ord,\n           CASE WHEN k.reason"  # the statement's final SELECT
_METERS = "    ), meters AS MATERIALIZED ("
_FIRSTS = "    ), firsts AS ("


def variants(functions: Path) -> dict[str, str | None]:
    """The statement's variants: name -> the CREATE OR REPLACE of billing._ingest_usage_rows (None: as shipped)."""
    text = functions.read_text()
    start = text.index("CREATE OR REPLACE FUNCTION billing._ingest_usage_rows(")
    body = text[start:text.index("\n$$;", start) + 4]
    for mark in (_COUNTING, _ANSWER, _METERS, _FIRSTS):
        if body.count(mark) != 1:
            raise SystemExit(f"83_usage_ingest.sql changed: {mark.strip()!r} is not found once; update bench/usage/ablation.py")
    no_counting = body[:body.index(_COUNTING)] + "    )\n" + body[body.index(_ANSWER):]
    store_only = (no_counting[:no_counting.index(_METERS)]
                  + "    ), judged AS (SELECT k.*, k.why AS reason FROM checked k\n"
                  + no_counting[no_counting.index(_FIRSTS):])
    return {"as shipped": None, "as shipped again": None, "without counting": no_counting, "store only": store_only}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-url", default=os.environ.get("BILLING_TEST_DATABASE_URL"))
    ap.add_argument("--customers", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=20_000, help="events a batch (the consumer's default)")
    ap.add_argument("--batches", type=int, default=24, help="batches measured (after 2 warm-up batches)")
    args = ap.parse_args()
    sides = []
    for k, (name, sql) in enumerate(variants(REPO / "db" / "functions" / "83_usage_ingest.sql").items()):
        url = fresh_db(args.server_url, f"bench_usage_ablation_{k}", REPO / "db", args.customers)
        conn = psycopg.connect(url, autocommit=True)
        if sql:
            conn.execute(sql)
        sides.append({"name": name, "conn": conn, "pid": conn.info.backend_pid, "settings": Settings(database_url=url),
                      "cpu": [], "answers": []})
    now = datetime.now(timezone.utc).replace(microsecond=0)
    warm = 2
    texts = stream("a-", (args.batches + warm) * args.batch * 10 // 11 + 1, args.customers, now, random.Random(8))
    batches = [[t.encode() for t in texts[i:i + args.batch]] for i in range(0, len(texts), args.batch)][:args.batches + warm]
    print(f"start: load {os.getloadavg()[0]:.1f}", flush=True)
    for b, batch in enumerate(batches):
        columns, _kept, _dead = event_columns(batch)
        order = sides[b % len(sides):] + sides[:b % len(sides)]
        for s in order[::-1] if b % 2 else order:
            cpu0 = _cpu(s["pid"])
            accepted, duplicate, _rejected = ingest_columns_counts(s["conn"], columns, now, s["settings"])
            if b >= warm:
                s["cpu"].append((_cpu(s["pid"]) - cpu0) / len(batch) * 1e6)
                s["answers"].append((accepted, duplicate))
    print(f"end: load {os.getloadavg()[0]:.1f}")
    base = sides[0]
    print(f"\n| statement, batches of {args.batch:,}, {args.customers:,} customers | server CPU µs/event (median) | "
          "against as shipped (paired median) | lower in | every batch |")
    print("|---|---:|---:|---:|---|")
    for s in sides:
        diffs = [x - y for x, y in zip(s["cpu"], base["cpu"])]
        against = "" if s is base else f"{statistics.median(diffs):+.2f}"
        lower = "" if s is base else f"{sum(d < 0 for d in diffs)} / {len(diffs)}"
        print(f"| {s['name']} | {statistics.median(s['cpu']):.1f} | {against} | {lower} | "
              + " ".join(f"{x:.1f}" for x in s["cpu"]) + " |")
        s["conn"].close()
    if any(s["answers"] != base["answers"] for s in sides):
        print("(the variants' answers differ from the statement's: expected only where a left-out part rejects events)")


if __name__ == "__main__":
    main()
