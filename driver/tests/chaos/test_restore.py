"""Issue 31: a backup restored to a point in time, then the workers (docs/operations.md, section 5).

pgBackRest (scripts/services/pgbackrest.sh) archives a private cluster's WAL and takes a full backup;
the engine signs up 20 subscriptions and charges them (the gateway simulator), then a month later
renews and charges them again. The database is restored into a fresh cluster to an instant between
the two renewals: the restored engine knows the first charges, not the second, while the gateway
remembers both. `billing db after-restore` runs, then the workers renew and charge on the restored
database. Checked: the restore holds exactly what was committed before the instant; no key is sent
for two invoices (the gateway refused none) and none is charged twice; every charge of the lost
future is found by `unmatched_charges` (the gap), each with the period the restored engine charged
a second time. The fault timeline and the figures are printed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest

from billing.after_restore import after_restore, unmatched_charges
from billing.clock import SimulatedClock
from billing.config import REPO_ROOT, Settings
from billing.gateway.simulator import GatewaySimulator
from billing.limiter import LocalGcraLimiter
from billing.migrate import migrate

from ..test_charging import T0, seed_subscriptions
from .harness import free_ports

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]

SCRIPT = REPO_ROOT / "scripts" / "services" / "pgbackrest.sh"
NOV = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)
N = 20


class Pitr:
    """pgbackrest.sh on a private folder and two free ports (the archived cluster, the restored one)."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="billing-pitr-"))
        os.chmod(self.base, 0o755)  # the postgres user reaches its folders when we are root
        self.port, self.restore_port = free_ports(2)

    def run(self, *args: str, timeout: float = 180) -> str:
        env = {**os.environ, "BILLING_CACHE_DIR": str(self.base), "BILLING_PITR_PORT": str(self.port),
               "BILLING_PITR_RESTORE_PORT": str(self.restore_port)}
        out = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"pgbackrest.sh {' '.join(args)} failed ({out.returncode}): {out.stderr[-3000:]}")
        lines = out.stdout.strip().splitlines()
        return lines[-1] if lines else ""

    def close(self) -> None:
        try:
            self.run("stop", timeout=90)
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


def _db(server_url: str, name: str) -> str:
    return server_url.rsplit("/", 1)[0] + "/" + name


def _rows(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


async def _work(url: str, sim_url: str, clock: SimulatedClock, paid: int, timeout: float = 40) -> None:
    """The worker (renewal and charging, no relay) on `url` until `paid` invoices are PAID."""
    from billing.worker import worker_main

    settings = Settings(database_url=url, gateway_url=sim_url, gateway_rate=100, charge_lease_seconds=60,
                        gateway_timeout_seconds=5)
    stop = asyncio.Event()
    run = asyncio.create_task(worker_main(settings, relay=False, clock=clock, limiter=LocalGcraLimiter(100),
                                          stop=stop))
    try:
        async def done() -> None:
            while _rows(url, "SELECT count(*) FROM billing.invoice WHERE status = 'PAID'")[0][0] < paid:
                if run.done():
                    raise RuntimeError(f"the worker stopped: {run.result()}")
                await asyncio.sleep(0.1)

        await asyncio.wait_for(done(), timeout)
    finally:
        stop.set()
        assert await asyncio.wait_for(run, 30) == 0


def test_a_restore_between_two_renewals_then_the_workers_charge_no_key_twice(capsys):
    pitr = Pitr()
    t_start = time.monotonic()
    timeline: list[str] = []

    def mark(what: str) -> None:
        timeline.append(f"{time.monotonic() - t_start:6.1f} s  {what}")

    try:
        server = pitr.run()
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute("CREATE DATABASE billing")
        url = _db(server, "billing")
        migrate(url, REPO_ROOT / "db", simulation=True)
        seed_subscriptions(url, N, T0)
        mark("archived cluster up, migrated, 20 subscriptions signed up")
        t0 = time.monotonic()
        pitr.run("backup")
        backup_s = time.monotonic() - t0
        mark(f"full backup ({backup_s:.1f} s)")
        clock = SimulatedClock(T0)

        async def scenario():
            async with GatewaySimulator(rate=0, latency_ms=(1, 5)) as sim:
                await _work(url, sim.url, clock, N)
                mark("first invoices charged (20)")
                await asyncio.sleep(1.2)  # commits before the instant are at least a second before it
                instant = _rows(url, "SELECT clock_timestamp()")[0][0]
                await asyncio.sleep(1.2)
                mark(f"restore instant {instant.isoformat()}")
                clock.set(NOV)
                await _work(url, sim.url, clock, 2 * N)
                mark("the lost future: 20 renewals charged")
                lost_future = {c["idempotencyKey"] for c in sim.ledger()["charges"]}
                lost_future -= {r[0] for r in _rows(url, "SELECT idempotency_key FROM billing.payment_attempt a "
                                                         "JOIN billing.invoice i ON i.id = a.invoice_id "
                                                         "WHERE i.kind = 'INITIAL'")}
                t1 = time.monotonic()
                await asyncio.to_thread(pitr.run, "check")  # the last WAL archived
                restored_server = await asyncio.to_thread(pitr.run, "restore", instant.isoformat(sep=" "))
                restore_s = time.monotonic() - t1
                mark(f"restored into a fresh cluster to the instant ({restore_s:.1f} s)")
                restored = _db(restored_server, "billing")
                before = Counter(_rows(restored, "SELECT kind || '/' || status FROM billing.invoice"))
                report = after_restore(restored, now=NOV)
                mark("billing db after-restore: " + report.summary())
                gap_before = unmatched_charges(restored, sim.ledger()["charges"])
                await _work(restored, sim.url, clock, 2 * N)
                mark("workers on the restored database: 20 renewals charged")
                gap_after = unmatched_charges(restored, sim.ledger()["charges"],
                                              since_invoice_id=report.first_new_invoice_id)
                return (before, report, lost_future, gap_before, gap_after, sim.ledger(), sim.stats(),
                        _rows(restored, "SELECT a.idempotency_key, i.id, i.kind FROM billing.payment_attempt a "
                                        "JOIN billing.invoice i ON i.id = a.invoice_id"))

        before, report, lost_future, gap_before, gap_after, ledger, stats, attempts = asyncio.run(scenario())
        with capsys.disabled():
            print("\nrestore drill (pgBackRest, point in time)\n  " + "\n  ".join(timeline), flush=True)
            print(f"  gateway: {stats['accepted']} charges accepted, {stats['conflicts']} key conflicts; "
                  f"charges the restored engine did not make: {len(gap_after)} "
                  f"({Counter(u.kind for u in gap_after)}), each period charged again: "
                  f"{sum(len(u.charged_again) == 1 for u in gap_after)}", flush=True)
    finally:
        pitr.close()

    # The restore holds exactly the past: the first invoices paid, no renewal.
    assert before == Counter({("INITIAL/PAID",): N}), before
    assert report.old_namespace != report.new_namespace
    assert report.first_new_invoice_id > 2 * N
    # The gateway: each key once, never sent for two invoices (a conflict would be the key of a lost
    # invoice sent again for another), each invoice key paid once.
    keys = [c["idempotencyKey"] for c in ledger["charges"]]
    assert len(keys) == len(set(keys)) == 3 * N
    assert stats["conflicts"] == 0
    paid_keys = Counter(k.split("-try-")[0] for k, c in zip(keys, ledger["charges"]) if c["status"] == "succeeded")
    assert max(paid_keys.values()) == 1
    renewals = [(key, inv) for key, inv, kind in attempts if kind == "RENEWAL"]
    assert len(renewals) == N and all(key.startswith(report.new_namespace + "-") for key, _ in renewals)
    assert all(inv >= report.first_new_invoice_id for _, inv in renewals)
    # The gap, found: every charge of the lost future, before and after the workers ran, and for each
    # the one period the restored engine charged again (same customer, same amount).
    assert {u.key for u in gap_before} == lost_future and len(lost_future) == N
    assert {u.key for u in gap_after} == lost_future
    assert all(u.kind == "LOST_INVOICE" for u in gap_after)
    assert all(len(u.charged_again) == 1 and u.charged_again[0]["kind"] == "RENEWAL"
               and u.charged_again[0]["status"] == "PAID" for u in gap_after)
    assert len({u.charged_again[0]["id"] for u in gap_after}) == N
