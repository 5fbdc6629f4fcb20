"""Renewal benchmark: billing.create_due_invoices next to the seed article's renewal (section 6.1).

    python bench/renewal/run.py                                # 1,000,000 due among 5,000,000
    python bench/renewal/run.py --total 500000 --due 100000    # smaller
    make bench-renewal BENCH_ARGS="--total 500000 --due 100000"

Data (bench/renewal/generate.sql, set-based): --total subscriptions, one customer each in five
zones, every one with a PAID INITIAL invoice, --due of them due at the bench clock (2026-03-01
00:00Z). --layout bands (default): ids in signup order over 23 months, the due rows being each
month's first signups (23 bands of consecutive ids), as production data looks; --layout random:
every (total/due)-th row due, period ends random (worst case for the cache). The data is built once
into a template database (reused while the migrations, the generator and the parameters are
unchanged; --rebuild forces it); every run gets a fresh copy with the current functions applied.

Runs, each on its own copy:
1. ours: --workers connections call `SELECT billing.create_due_invoices(--batch, now)` in a loop
   until it returns 0; invoices per second from start to drained. Also the time taken to drain the
   first --scale-due rows.
2. seed: the seed's section 6.1 on the same data, --workers connections: in one transaction,
   `SELECT ... FOR UPDATE SKIP LOCKED LIMIT 500`, then for each row one INSERT of the invoice and
   one UPDATE of the subscription (one round trip each, the next period computed in Python as
   the application does), COMMIT; run until --seed-rows are renewed (the rate is steady).
3. scale: --scale-due rows (200,000) drained with run 1's settings from a fresh copy of the big
   table and from a table of --scale-total subscriptions (1,000,000) of which exactly those are
   due: the table size should not matter (goal: at most 20% slower at 5M). Wall time and server
   CPU per invoice are both compared (the latter is immune to other load on the machine).

Server CPU per invoice (the backends' user+system time, read from /proc when the server runs on
this machine) is printed too: it does not depend on what else the machine is doing.

--baseline REF runs ours also with the db/ of git revision REF (its migrations build its own
template from the same generator when they differ from this tree's, and its function files are
applied to its copies), alternating baseline and current --rounds times, so a change to the
renewal, indexes included, is measured beside what it replaces in one run.

Environment: BILLING_TEST_DATABASE_URL (a superuser URL of the server, as `make services` writes
it) or BILLING_DATABASE_URL; --database-url overrides. Needs psql on PATH. --taxes adds a run of
ours with a tax rate applying to every customer (invoices with tax lines, docs/invoices.md).
"""

from __future__ import annotations

import argparse
import calendar
import hashlib
import json
import os
import subprocess
import tarfile
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import psycopg
from psycopg import sql

from billing.migrate import migrate

REPO = Path(__file__).resolve().parents[2]

NOW = datetime(2026, 3, 1, tzinfo=timezone.utc)
GENERATE = Path(__file__).with_name("generate.sql")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def url_for_db(server_url: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(server_url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**info)


def admin(server_url: str, *statements: sql.Composable) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def fingerprint(total: int, due: int, layout: str, db_dir: Path | None = None) -> str:
    """Template name: changes when a migration or the generator changes (functions are re-applied
    to every copy, so editing them needs no rebuild). A baseline whose migrations differ gets its
    own template, built from its own db/schema."""
    h = hashlib.sha256()
    for path in sorted(((db_dir or REPO / "db") / "schema").glob("*.sql")) + [GENERATE]:
        h.update(path.read_bytes())
    kind = "bench_renewal" if db_dir is None else "bench_renewal_base"
    return f"{kind}_{total}_{due}_{layout}_{h.hexdigest()[:8]}"


def build_template(server_url: str, total: int, due: int, layout: str, rebuild: bool, db_dir: Path | None = None) -> str:
    if total % due:
        raise SystemExit("--total must be a multiple of --due")
    name = fingerprint(total, due, layout, db_dir)
    with psycopg.connect(server_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        # (not this template's copies, name[:40] + "_" + tag: another run's databases in use, see Copy)
        stale = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s AND left(datname, 41) <> %s",
            (name.rsplit("_", 1)[0] + "_%", name, name[:40] + "_"),
        ).fetchall()
    for (old,) in stale:  # an older build of the same size and kind: replaced
        admin(server_url, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(old)))
    if exists and not rebuild:
        print(f"  template {name}: reused")
        return name
    admin(
        server_url,
        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)),
        sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)),
    )
    url = url_for_db(server_url, name)
    migrate(url, db_dir or REPO / "db", simulation=True)
    started = time.perf_counter()
    out = subprocess.run(
        ["psql", "-XqAt", "-d", url, "-v", f"total={total}", "-v", f"due={due}", "-v", f"layout={layout}", "-v", f"now={NOW.isoformat()}",
         "-f", str(GENERATE)],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    print(f"  template {name}: {total:,} subscriptions, {out[-1].split('|')[0]} due, built in {time.perf_counter() - started:.0f} s")
    return name


class Copy:
    """A fresh database copied from the template (file copy: no WAL for the copy)."""

    def __init__(self, server_url: str, template: str, tag: str, db_dir: Path | None = None) -> None:
        self.server_url = server_url
        self.name = f"{template[:40]}_{tag}"
        admin(
            server_url,
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name)),
            sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(sql.Identifier(self.name), sql.Identifier(template)),
        )
        self.url = url_for_db(server_url, self.name)
        migrate(self.url, db_dir or REPO / "db", simulation=True)  # the functions as they are now (or a baseline's)
        admin(self.url, sql.SQL("VACUUM ANALYZE"), sql.SQL("CHECKPOINT"))

    def drop(self) -> None:
        admin(self.server_url, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name)))


def backend_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None  # server not on this machine


def add_size_args(ap) -> None:
    """The server and the template's size, as every renewal bench takes them (--database-url, --total, --due)."""
    ap.add_argument("--database-url", default=os.environ.get("BILLING_TEST_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:25432/postgres"))
    ap.add_argument("--total", type=int, default=200_000)
    ap.add_argument("--due", type=int, default=40_000)


def host_load() -> str:
    """The load average and the kernel's CPU pressure (share of time a task waited for a CPU)."""
    text = f"load {os.getloadavg()[0]:.1f}"
    try:
        some = Path("/proc/pressure/cpu").read_text().split("\n")[0]
        text += f", cpu pressure {float(some.split('avg10=')[1].split()[0]):.0f}%"
    except (OSError, IndexError, ValueError):
        pass
    return text


class Workers:
    """n connections, each running body(conn, state) until it returns False; shared counters."""

    def __init__(self, url: str, n: int) -> None:
        self.url, self.n = url, n
        self.lock = threading.Lock()
        self.done = 0
        self.marks: dict[int, float] = {}
        self.cpu = 0.0
        self.cpu_known = True

    def count(self, k: int, marks: list[int], started: float) -> int:
        with self.lock:
            self.done += k
            for m in marks:
                if m not in self.marks and self.done >= m:
                    self.marks[m] = time.perf_counter() - started
            return self.done

    def run(self, body) -> float:
        barrier = threading.Barrier(self.n + 1)
        failures: list[BaseException] = []

        def target() -> None:
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    pid = conn.info.backend_pid
                    barrier.wait()
                    before = backend_cpu(pid)
                    while body(conn):
                        pass
                    after = backend_cpu(pid)
                    with self.lock:
                        if before is None or after is None:
                            self.cpu_known = False
                        else:
                            self.cpu += after - before
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)
                raise

        threads = [threading.Thread(target=target) for _ in range(self.n)]
        for t in threads:
            t.start()
        barrier.wait()
        started = time.perf_counter()
        self.started = started
        for t in threads:
            t.join()
        if failures:
            raise failures[0]
        return time.perf_counter() - started


def baseline_db(ref: str) -> Path:
    """db/ of git revision ref, extracted into a temporary directory (or ref itself: a db/ directory)."""
    if (Path(ref) / "functions").is_dir():
        return Path(ref)
    out = Path(tempfile.mkdtemp(prefix="bench_renewal_baseline_"))
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "db"], check=True, capture_output=True).stdout
    tar = out / "db.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as f:
        f.extractall(out, filter="data")
    return out / "db"


def run_ours(url: str, workers: int, batch: int, marks: list[int], limit: int | None = None) -> dict:
    """Drains every due row (or stops once `limit` are renewed) with create_due_invoices."""
    w = Workers(url, workers)

    def body(conn: psycopg.Connection) -> bool:
        if limit is not None and w.done >= limit:
            return False
        n = conn.execute("SELECT billing.create_due_invoices(%s, %s)", (batch, NOW)).fetchone()[0]
        w.count(n, marks, w.started)
        return n > 0

    elapsed = w.run(body)
    with psycopg.connect(url) as conn:
        invoices = conn.execute("SELECT count(*) FROM billing.invoice WHERE kind = 'RENEWAL'").fetchone()[0]
        left = conn.execute("SELECT count(*) FROM billing.subscription WHERE current_period_end <= %s", (NOW,)).fetchone()[0]
    assert invoices == w.done and (limit is not None or left == 0), (invoices, w.done, left)
    return {"rows": w.done, "seconds": elapsed, "rate": w.done / elapsed, "marks": w.marks,
            "cpu_us": w.cpu / w.done * 1e6 if w.cpu_known and w.done else None}


def _next_end(anchor: datetime, months: int, periods: int, zone: str) -> datetime:
    """The application's calendar (what the seed's Plan.nextPeriodEnd does, from the anchor)."""
    z = ZoneInfo(zone)
    wall = anchor.astimezone(z)
    y, m = divmod(wall.month - 1 + months * periods, 12)
    year, month = wall.year + y, m + 1
    wall = wall.replace(year=year, month=month, day=min(wall.day, calendar.monthrange(year, month)[1]))
    return wall.astimezone(timezone.utc)


SEED_LOCK = """
SELECT s.id, s.customer_id, s.current_period_end, s.cancel_at_period_end, s.billing_anchor, s.period_number,
       s.timezone, p.price_amount, p.currency, p.interval_count, p.id, p.billing_interval
  FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id
 WHERE s.status = 'ACTIVE' AND s.current_period_end <= %s
 ORDER BY s.current_period_end
 LIMIT 500
   FOR UPDATE OF s SKIP LOCKED
"""
SEED_INSERT = """
INSERT INTO billing.invoice (subscription_id, customer_id, kind, period_start, period_end, subtotal, amount, currency,
                             status, due_at, next_attempt_at, created_at, plan_id, plan_price, billing_interval,
                             interval_count)
VALUES (%s, %s, 'RENEWAL', %s, %s, %s, %s, %s, 'OPEN', %s, %s, %s, %s, %s, %s, %s)
"""
SEED_UPDATE = """
UPDATE billing.subscription
   SET current_period_start = %s, current_period_end = %s, period_number = %s, period_price = %s,
       version = version + 1, updated_at = %s
 WHERE id = %s
"""


def run_seed(url: str, workers: int, limit: int) -> dict:
    w = Workers(url, workers)

    def body(conn: psycopg.Connection) -> bool:
        if w.done >= limit:
            return False
        with conn.transaction():
            rows = conn.execute(SEED_LOCK, (NOW,)).fetchall()
            for sid, cid, start, cancel, anchor, number, zone, price, currency, months, plan_id, unit in rows:
                if cancel:
                    continue  # none in the bench data
                end = _next_end(anchor, months, number + 1, zone)
                conn.execute(SEED_INSERT, (sid, cid, start, end, price, price, currency, NOW, NOW, NOW,
                                           plan_id, price, unit, months))
                conn.execute(SEED_UPDATE, (start, end, number + 1, price, NOW, sid))
        w.count(len(rows), [], w.started)
        return bool(rows)

    elapsed = w.run(body)
    return {"rows": w.done, "seconds": elapsed, "rate": w.done / elapsed,
            "cpu_us": w.cpu / w.done * 1e6 if w.cpu_known and w.done else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database-url", default=os.environ.get("BILLING_TEST_DATABASE_URL") or os.environ.get("BILLING_DATABASE_URL")
                    or "postgresql://postgres@127.0.0.1:25432/postgres", help="superuser URL of the server")
    ap.add_argument("--total", type=int, default=5_000_000, help="subscriptions in the table")
    ap.add_argument("--due", type=int, default=1_000_000, help="how many of them are due")
    ap.add_argument("--layout", choices=["bands", "random"], default="bands",
                    help="bands: ids in signup order, due rows in monthly bands (production-like); random: worst case")
    ap.add_argument("--workers", type=int, default=2, help="connections draining at once")
    ap.add_argument("--batch", type=int, default=5000, help="p_batch_size of create_due_invoices")
    ap.add_argument("--seed-rows", type=int, default=100_000, help="rows the seed's renewal runs for")
    ap.add_argument("--scale-total", type=int, default=1_000_000, help="table size of the scale comparison")
    ap.add_argument("--scale-due", type=int, default=200_000, help="due rows drained in the scale comparison")
    ap.add_argument("--skip-seed", action="store_true")
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the template databases")
    ap.add_argument("--drop-templates", action="store_true", help="drop the template databases at the end")
    ap.add_argument("--taxes", action="store_true",
                    help="also run ours with a tax rate applying to every customer (docs/invoices.md)")
    ap.add_argument("--json", type=Path, help="also write the figures there")
    ap.add_argument("--baseline", metavar="REF", help="also run ours with the function files of git revision REF, alternating")
    ap.add_argument("--rounds", type=int, default=1, help="with --baseline: how many baseline/current pairs")
    args = ap.parse_args()
    server = args.database_url
    scale_due = min(args.scale_due, args.due)

    with psycopg.connect(server) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
    print(f"renewal bench: PostgreSQL {version}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    templates = [build_template(server, args.total, args.due, args.layout, args.rebuild)]
    results: dict = {"total": args.total, "due": args.due, "layout": args.layout, "workers": args.workers, "batch": args.batch,
                     "load_average": os.getloadavg()}

    if args.baseline:
        base_dir = baseline_db(args.baseline)
        # The baseline runs on its own schema (its migrations: an index this tree dropped is there).
        base_template = build_template(server, args.total, args.due, args.layout, args.rebuild, base_dir)
        if base_template != templates[0]:
            templates.append(base_template)
        pairs: list[dict] = []
        for rnd in range(args.rounds):
            pair = {}
            for label, db_dir in (("baseline", base_dir), ("current", None)):
                for taxed in ((False, True) if args.taxes else (False,)):
                    copy = Copy(server, base_template if db_dir else templates[0], f"{label[:4]}{'_tax' if taxed else ''}", db_dir)
                    try:
                        if taxed:
                            admin(copy.url, sql.SQL("SELECT billing.upsert_tax_rate('BENCH_VAT', 'FR', NULL, 'VAT', 2000, false)"),
                                  sql.SQL("UPDATE billing.customer SET country = 'FR'"), sql.SQL("VACUUM ANALYZE billing.customer"))
                        r = run_ours(copy.url, args.workers, args.batch, [scale_due])
                    finally:
                        copy.drop()
                    key = label + ("_taxes" if taxed else "")
                    pair[key] = r
                    cpu = f", server CPU {r['cpu_us']:.1f} us/invoice" if r["cpu_us"] else ""
                    print(f"  round {rnd + 1} {key:>16}: {r['rows']:,} invoices in {r['seconds']:.1f} s = {r['rate']:,.0f} invoices/s{cpu} ({host_load()})")
            pairs.append(pair)
        results["baseline"] = {"ref": args.baseline, "rounds": pairs}
        for key in pairs[0]:
            rates = [p[key]["rate"] for p in pairs]
            cpus = [p[key]["cpu_us"] for p in pairs if p[key]["cpu_us"]]
            print(f"  {key:>16}: best {max(rates):,.0f} invoices/s" + (f", min CPU {min(cpus):.1f} us/invoice" if cpus else ""))

    copy = Copy(server, templates[0], "ours")
    try:
        ours = run_ours(copy.url, args.workers, args.batch, [scale_due])
    finally:
        copy.drop()
    results["ours"] = ours
    cpu = f", server CPU {ours['cpu_us']:.1f} us/invoice" if ours["cpu_us"] else ""
    print(f"  ours: {ours['rows']:,} invoices in {ours['seconds']:.1f} s = {ours['rate']:,.0f} invoices/s{cpu} ({host_load()})")

    if args.taxes:
        # Every customer in a country with an exclusive 20% VAT: the renewal statement's tax join
        # (14_tax, inlined) then finds a rate for each row.
        copy = Copy(server, templates[0], "taxes")
        try:
            admin(copy.url, sql.SQL("SELECT billing.upsert_tax_rate('BENCH_VAT', 'FR', NULL, 'VAT', 2000, false)"),
                  sql.SQL("UPDATE billing.customer SET country = 'FR'"), sql.SQL("VACUUM ANALYZE billing.customer"))
            taxed = run_ours(copy.url, args.workers, args.batch, [scale_due])
        finally:
            copy.drop()
        results["ours_taxes"] = taxed
        cpu = f", server CPU {taxed['cpu_us']:.1f} us/invoice" if taxed["cpu_us"] else ""
        print(f"  ours, every customer taxed: {taxed['rows']:,} invoices in {taxed['seconds']:.1f} s = "
              f"{taxed['rate']:,.0f} invoices/s{cpu} ({host_load()})")

    if not args.skip_seed:
        copy = Copy(server, templates[0], "seed")
        try:
            seed = run_seed(copy.url, args.workers, min(args.seed_rows, args.due))
        finally:
            copy.drop()
        results["seed"] = seed
        cpu = f", server CPU {seed['cpu_us']:.1f} us/invoice" if seed["cpu_us"] else ""
        print(f"  seed (6.1, batch 500, a round trip per row): {seed['rows']:,} invoices in {seed['seconds']:.1f} s"
              f" = {seed['rate']:,.0f} invoices/s{cpu} ({host_load()})")
        results["speedup"] = ours["rate"] / seed["rate"]
        print(f"  ours / seed: {results['speedup']:.1f}x")

    if not args.skip_scale and args.scale_total < args.total:
        # The same number of due rows drained from a big and from a small table, each on a fresh copy.
        small = build_template(server, args.scale_total, scale_due, args.layout, args.rebuild)
        templates.append(small)
        runs = {}
        for label, template, size in (("small", small, args.scale_total), ("big", templates[0], args.total)):
            copy = Copy(server, template, "scale")
            try:
                runs[label] = run_ours(copy.url, args.workers, args.batch, [scale_due], limit=scale_due)
            finally:
                copy.drop()
            r = runs[label]
            cpu = f", server CPU {r['cpu_us']:.1f} us/invoice" if r["cpu_us"] else ""
            print(f"  drain {scale_due:,} due rows of a {size:,}-row table: {r['marks'][scale_due]:.2f} s{cpu} ({host_load()})")
        big_t, small_t = runs["big"]["marks"][scale_due], runs["small"]["marks"][scale_due]
        results["scale"] = {"rows": scale_due, "big_table": args.total, "big_seconds": big_t, "big_cpu_us": runs["big"]["cpu_us"],
                            "small_table": args.scale_total, "small_seconds": small_t, "small_cpu_us": runs["small"]["cpu_us"],
                            "ratio": big_t / small_t}
        line = f"  {args.total:,} rows vs {args.scale_total:,}: time {big_t / small_t:.2f}x"
        if runs["big"]["cpu_us"] and runs["small"]["cpu_us"]:
            results["scale"]["cpu_ratio"] = runs["big"]["cpu_us"] / runs["small"]["cpu_us"]
            line += f", server CPU per invoice {results['scale']['cpu_ratio']:.2f}x"
        print(line)

    if args.drop_templates:
        for name in templates:
            admin(server, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
