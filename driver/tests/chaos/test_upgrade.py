"""Issue 31: an upgrade under load (docs/operations.md, "Upgrades under load").

The previous release is the newest commit of the main line whose migrations this one extends (so
the schema really changes between the two; `previous_release`): its `driver/billing` and `db/` come
out of git (`git archive`). A database
is made by that release; subscriptions are due (several periods each, some ending during the run);
the previous release's worker renews and charges them against the gateway simulator. While it runs,
this release's `billing db migrate` upgrades the database (its migrations, then every function
file) with the lock timeout; the old worker keeps renewing and charging on the new schema, then is
stopped (SIGTERM) and this release's worker finishes. Ten subscriptions signed up right after the
migration (their first period ending seconds later) make sure the old worker charges and renews on
the new schema whatever the machine's load. Checked: the old worker worked after the
migration and exited 0 without an error in its log; the gateway charged no key and no invoice
twice; every invoice paid once; every subscription invoiced once for each period, without a gap,
up to the present.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from billing.config import REPO_ROOT
from billing.migrate import migrate

from ..conftest import url_for_db
from ..test_charging import SimulatorThread, assert_never_charged_twice, wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]

CATCHUP, LIVE, AFTER = 30, 10, 10


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO_ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


def _migrations(commit: str) -> dict[str, str]:
    """db/schema at `commit`: file name -> blob id."""
    return {line.split()[3].rsplit("/", 1)[-1]: line.split()[2]
            for line in _git("ls-tree", commit, "db/schema/").splitlines()}


def previous_release() -> str:
    """The newest commit of the main line (first parents: merges are what landed) that a database can
    be upgraded from to this one by the migrator's rules: fewer migrations, each byte for byte as
    here, every newer one numbered above them. The release before the last schema change."""
    here = _migrations("HEAD")
    for commit in _git("rev-list", "--first-parent", "--max-count=500", "HEAD").split():
        there = _migrations(commit)
        if (there and len(there) < len(here) and all(here.get(k) == v for k, v in there.items())
                and min(set(here) - set(there)) > max(there)):
            return commit
    raise AssertionError("no earlier commit of the main line can be upgraded to this one")


def _one(url: str, query: str, *args):
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, args).fetchone()[0]


def _worker(pythonpath: str | None, url: str, redis_url: str, gateway: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "BILLING_DATABASE_URL": url, "BILLING_REDIS_URL": redis_url, "BILLING_GATEWAY_URL": gateway,
           "BILLING_GATEWAY_RATE": "15", "BILLING_CHARGE_LEASE_SECONDS": "6", "BILLING_GATEWAY_TIMEOUT_SECONDS": "2",
           "PYTHONUNBUFFERED": "1"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath  # the old package first: it shadows the installed one
    return subprocess.Popen([sys.executable, "-m", "billing.cli", "--log-level", "INFO", "worker", "--no-relay",
                             "--no-webhooks"], env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            cwd=pythonpath or None)


def _stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def test_the_previous_release_worker_runs_through_the_migration_then_the_new_one_finishes(
        pg_server_url, redis_url, capsys):
    prev = previous_release()
    base = Path(tempfile.mkdtemp(prefix="billing-upgrade-"))
    name = f"u_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = url_for_db(pg_server_url, name)
    t0 = time.monotonic()
    timeline: list[str] = []

    def mark(what: str) -> None:
        timeline.append(f"{time.monotonic() - t0:6.1f} s  {what}")

    old = new = None
    try:
        archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", prev, "driver/billing", "db"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        which = subprocess.run([sys.executable, "-c", "import billing.cli; print(billing.cli.__file__)"],
                               env={**os.environ, "PYTHONPATH": str(base / "driver")}, cwd=base / "driver",
                               capture_output=True, text=True, check=True).stdout.strip()
        assert which.startswith(str(base)), f"the old worker would run this release's code ({which})"
        old_db = migrate(url, base / "db", simulation=True)
        pending = sorted({p.name for p in (REPO_ROOT / "db" / "schema").glob("*.sql")}
                         - {p.name for p in (base / "db" / "schema").glob("*.sql")})
        mark(f"database made by the previous release {prev[:10]} ({len(old_db.applied)} migrations); "
             f"this release adds {', '.join(pending)}")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT billing.upsert_plan('DAILY', 990, 'USD', 'DAY', 1)")
            now = conn.execute("SELECT now()").fetchone()[0]
            for i in range(CATCHUP):  # two to four periods due at once
                conn.execute("SELECT billing.create_subscription(%s, %s, 'DAILY', %s)",
                             (f"c-{i}", 1000 + i, now - timedelta(days=2 + i % 3, minutes=5)))
            for j in range(LIVE):  # the first period ends during the run
                conn.execute("SELECT billing.create_subscription(%s, %s, 'DAILY', %s)",
                             (f"l-{j}", 2000 + j, now - timedelta(days=1) + timedelta(seconds=6 + j)))
        with SimulatorThread(rate=15, latency_ms=(20, 80), seed=31) as sim:
            old = _worker(str(base / "driver"), url, redis_url, sim.url, base / "old.log")
            wait_for(lambda: sim.get("/v1/stats")["accepted"] >= 20, 60, "the old worker's first charges")
            mark(f"old worker charging ({sim.get('/v1/stats')['accepted']} charges)")
            m0 = time.monotonic()
            result = migrate(url, REPO_ROOT / "db", lock_timeout=2.0)
            migrated_at = _one(url, "SELECT now()")
            mark(f"migrated by this release under load in {time.monotonic() - m0:.1f} s "
                 f"({', '.join(result.applied)}; {result.attempts} attempt(s))")
            old_pid = old.pid
            with psycopg.connect(url, autocommit=True) as conn:  # work that only starts on the new schema
                for k in range(AFTER):
                    conn.execute("SELECT billing.create_subscription(%s, %s, 'DAILY', now() - interval '1 day' "
                                 "+ make_interval(secs => %s))", (f"a-{k}", 3000 + k, 3 + k))
            wait_for(lambda: _one(url, "SELECT count(*) FROM billing.payment_attempt WHERE worker LIKE %s "
                                       "AND last_claimed_at > %s", f"%:{old_pid}", migrated_at) >= AFTER,
                     60, "the old worker's charges on the new schema")
            old_code = _stop(old)  # SIGTERM: what it has in flight is recorded before it exits
            after = _one(url, "SELECT count(*) FROM billing.payment_attempt WHERE worker LIKE %s AND outcome IS NOT NULL "
                              "AND last_claimed_at > %s", f"%:{old_pid}", migrated_at)
            mark(f"old worker stopped (exit {old_code}) after {after} results recorded on the new schema")
            new = _worker(None, url, redis_url, sim.url, base / "new.log")
            # One statement, so one snapshot: checked in three, a renewal committed between the
            # first (every invoice paid) and the second (nothing due) passed for "done" with its
            # new invoices still unpaid (CI under load: 160 invoices, 158 charges).
            wait_for(lambda: _one(url, "SELECT NOT EXISTS (SELECT FROM billing.invoice WHERE status <> 'PAID') "
                                       "AND NOT EXISTS (SELECT FROM billing.subscription WHERE current_period_end <= now()) "
                                       "AND (SELECT count(*) FROM billing.subscription WHERE id IN "
                                       "(SELECT subscription_id FROM billing.invoice WHERE kind = 'RENEWAL')) >= %s",
                                  CATCHUP + LIVE + AFTER),
                     90, "every period invoiced and paid")
            new_code = _stop(new)
            mark(f"new worker finished (exit {new_code})")
            ledger = sim.get("/v1/ledger")
        with psycopg.connect(url, autocommit=True) as conn:
            invoices = conn.execute("SELECT subscription_id, period_start, period_end, status FROM billing.invoice "
                                    "ORDER BY subscription_id, period_start").fetchall()
            subs = dict(conn.execute("SELECT id, current_period_end FROM billing.subscription").fetchall())
            paid_attempts = conn.execute("SELECT invoice_id, count(*) FROM billing.payment_attempt "
                                         "WHERE outcome = 'SUCCEEDED' GROUP BY invoice_id").fetchall()
            # What an invoice without a successful attempt is, should there be one (the failure's message).
            unpaid = conn.execute(
                "SELECT i.id, i.subscription_id, i.kind, i.status, i.amount, i.credit_applied, i.created_at, "
                "i.paid_at, i.period_start, (SELECT array_agg(a.attempt_number || ':' || coalesce(a.outcome, '-') "
                "|| ':' || a.worker || ':' || a.claim_count ORDER BY a.id) FROM billing.payment_attempt a "
                "WHERE a.customer_id = i.customer_id AND a.invoice_id = i.id) "
                "FROM billing.invoice i WHERE NOT EXISTS (SELECT FROM billing.payment_attempt a "
                "WHERE a.customer_id = i.customer_id AND a.invoice_id = i.id AND a.outcome = 'SUCCEEDED')").fetchall()
        old_log = (base / "old.log").read_text(errors="replace")
        with capsys.disabled():
            print("\nupgrade under load\n  " + "\n  ".join(timeline)
                  + f"\n  invoices {len(invoices)}, gateway charges {len(ledger['charges'])}", flush=True)
    finally:
        for proc in (old, new):
            if proc is not None and proc.poll() is None:
                proc.kill()
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        shutil.rmtree(base, ignore_errors=True)

    assert old_code == 0 and new_code == 0
    problems = [line for line in old_log.splitlines() if "Traceback" in line or " ERROR " in line]
    assert not problems, "the old worker failed on the new schema:\n" + "\n".join(problems[:20])
    assert after >= 1, "the old worker recorded nothing after the migration"
    assert_never_charged_twice(ledger)
    assert all(n == 1 for _, n in paid_attempts)
    assert not unpaid, f"invoices without a successful charge: {unpaid}\n" + "\n".join(timeline)
    assert len(paid_attempts) == len(invoices) == len([c for c in ledger["charges"] if c["status"] == "succeeded"])
    # Every period of every subscription invoiced once, contiguous, up to its current period.
    by_sub: dict[int, list] = {}
    for sub, start, end, status in invoices:
        assert status == "PAID"
        by_sub.setdefault(sub, []).append((start, end))
    assert set(by_sub) == set(subs)
    for sub, periods in by_sub.items():
        assert all(a[1] == b[0] for a, b in zip(periods, periods[1:])), f"subscription {sub}: a gap or an overlap"
        assert periods[-1][1] == subs[sub], f"subscription {sub}: its current period is not invoiced"
