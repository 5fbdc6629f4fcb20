"""The PostgreSQL failover fault of the chaos run (issue 31): the primary is SIGKILLed during the
peak, the standby promoted as Patroni would; then what the promoted standby had, what the lost
primary had committed, and how long each part of the engine took to come back.

Used by `scenario.run_chaos(..., failover="sync"|"async")`. The fault runs in the schedule's thread:

* async only: the primary's walsender is SIGSTOPped for `stall` seconds first (a replication
  stall: the primary runs on and acknowledges commits the standby never receives);
* the primary's postmaster and every backend are SIGKILLed (the machine is lost);
* after `detect` seconds (the HA manager noticing: Patroni's TTL, here short) the standby is
  promoted (`postgres-ha.sh promote`: pg_promote, then no synchronous standby to wait for);
* `billing db after-failover` on it (every sequence moved past what the lost primary may have
  issued), as the failover manager's callback would;
* at once, on the new primary: which payment results, events and subscriptions it has (the
  snapshot: later writes by the workers come after it);
* a watcher notes when the workers record their first payment result on the new primary, when the
  relay publishes its first event there, and when a relay holds its lock there again.

After the run (workers stopped), the lost primary's data directory is started alone on a spare port
and read: what it had committed that the snapshot lacks is what the failover lost. With a
synchronous standby that must be nothing; with an asynchronous one it is listed, and each lost
payment result whose attempt the standby had must be back, recovered from the gateway by the key
look-up (the attempt's lease lapses, the claim finds its key already sent and asks the gateway).
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

import psycopg

from billing.after_failover import advance_sequences
from billing.checks import Check

from .harness import FaultLog, HaServices, RELAY_LOCK_OBJID

RESULTS = ("SELECT idempotency_key, outcome FROM billing.payment_attempt "
           "WHERE outcome IN ('SUCCEEDED', 'DECLINED')")
ATTEMPTS = "SELECT idempotency_key FROM billing.payment_attempt"
EVENTS = "SELECT event_id::text, status FROM billing.outbox_event"
SUBSCRIPTIONS = "SELECT id FROM billing.subscription"
LEDGER_OUTCOME = {"succeeded": "SUCCEEDED", "declined": "DECLINED"}
# The same, read on the lost primary, with the transaction that wrote each row version.
OLD_RESULTS = ("SELECT idempotency_key, outcome, xmin::text FROM billing.payment_attempt "
               "WHERE outcome IN ('SUCCEEDED', 'DECLINED')")
OLD_ATTEMPTS = "SELECT idempotency_key, xmin::text FROM billing.payment_attempt"
OLD_EVENTS = "SELECT event_id::text, status, xmin::text FROM billing.outbox_event"
OLD_SUBSCRIPTIONS = "SELECT id, xmin::text FROM billing.subscription"


@dataclass
class FailoverRecord:
    mode: str
    old_primary: str = ""
    new_primary: str = ""
    stall_seconds: float = 0.0
    unstreamed_bytes: int | None = None  # primary's WAL the standby had not received at the kill (async)
    standby_lsn: str | None = None  # the standby's last WAL received and flushed, before its promotion
    t_kill: float = 0.0  # time.time()
    promoted_after: float | None = None  # seconds from the kill
    promoted_at: datetime | None = None  # the new primary's clock, just after promotion
    snapshot_results: dict[str, str] = field(default_factory=dict)
    snapshot_attempts: set[str] = field(default_factory=set)
    snapshot_events: set[str] = field(default_factory=set)
    snapshot_subscriptions: set[int] = field(default_factory=set)
    first_result_after: float | None = None  # kill -> a worker's first payment result on the new primary
    first_publish_after: float | None = None  # kill -> the relay's first event published on the new primary
    relay_lock_after: float | None = None  # kill -> a relay holds its advisory lock on the new primary
    error: str = ""


class _Watch(threading.Thread):
    """Polls the new primary until the workers, the relay and its lock are back (or 90 s)."""

    def __init__(self, url: str, rec: FailoverRecord) -> None:
        super().__init__(daemon=True, name="failover-watch")
        self.url, self.rec = url, rec

    def run(self) -> None:
        rec = self.rec
        deadline = time.monotonic() + 90
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=3) as conn:
                while time.monotonic() < deadline:
                    results, published, lock = conn.execute(
                        "SELECT (SELECT count(*) FROM billing.payment_attempt WHERE result_at > %(t)s),"
                        " (SELECT count(*) FROM billing.outbox_event WHERE published_at > %(t)s),"
                        " EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                        "          WHERE l.locktype = 'advisory' AND l.objid = %(lock)s AND l.granted"
                        "            AND a.application_name LIKE 'chaos-worker-%%')",
                        {"t": rec.promoted_at, "lock": RELAY_LOCK_OBJID}).fetchone()
                    now = round(time.time() - rec.t_kill, 2)
                    if results and rec.first_result_after is None:
                        rec.first_result_after = now
                    if published and rec.first_publish_after is None:
                        rec.first_publish_after = now
                    if lock and rec.relay_lock_after is None:
                        rec.relay_lock_after = now
                    if None not in (rec.first_result_after, rec.first_publish_after, rec.relay_lock_after):
                        return
                    time.sleep(0.1)
        except psycopg.Error as exc:
            rec.error = f"watch: {exc}"


def inject_failover(services: HaServices, faults: FaultLog, *, stall: float = 2.0,
                    detect: float = 1.0) -> tuple[FailoverRecord, threading.Thread]:
    """Kill the primary, promote the standby; the record and the watcher (running)."""
    rec = FailoverRecord(mode=services.mode, old_primary=services.primary, new_primary=services.standby)
    if services.mode == "async":
        pid = services.stall_replication()
        faults.add("replication stalled", f"walsender {pid} SIGSTOP, {stall} s")
        rec.stall_seconds = stall
        time.sleep(stall)
    try:  # how far the standby is behind, just before the kill
        with psycopg.connect(services.node_url(services.primary), autocommit=True, connect_timeout=2) as p, \
                psycopg.connect(services.node_url(services.standby), autocommit=True, connect_timeout=2) as s:
            head = p.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            rec.unstreamed_bytes = max(0, int(s.execute("SELECT pg_wal_lsn_diff(%s, pg_last_wal_receive_lsn())",
                                                 (head,)).fetchone()[0]))
    except psycopg.Error:
        pass
    rec.t_kill = time.time()
    services.kill_primary()
    faults.add("postgres primary SIGKILL", f"{rec.old_primary} ({services.mode} standby)")
    try:
        with psycopg.connect(services.node_url(services.standby), autocommit=True, connect_timeout=2) as s:
            rec.standby_lsn = s.execute("SELECT pg_last_wal_receive_lsn()::text").fetchone()[0]
    except psycopg.Error:
        pass
    time.sleep(detect)
    # Promoted read-only, `billing db after-failover` (every sequence past what the lost primary may
    # have issued), then open to the writers: no id is issued twice, even by the workers that
    # reconnect within milliseconds (a run where it ran 0.3 s after an open promotion saw 30
    # invoices created meanwhile, their reused ids refused by the gateway).
    services.promote_standby(hold=True)
    url = services.node_url(rec.new_primary, "billing")
    moved = advance_sequences(url + "?options=-c%20default_transaction_read_only%3Doff")
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.transaction():  # one snapshot of the four
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            rec.promoted_at = conn.execute("SELECT now()").fetchone()[0]
            rec.snapshot_results = dict(conn.execute(RESULTS).fetchall())
            rec.snapshot_attempts = {r[0] for r in conn.execute(ATTEMPTS)}
            rec.snapshot_events = {r[0] for r in conn.execute(EVENTS)}
            rec.snapshot_subscriptions = {r[0] for r in conn.execute(SUBSCRIPTIONS)}
    services.open_primary()
    rec.promoted_after = round(time.time() - rec.t_kill, 2)
    faults.add("standby promoted", f"{rec.new_primary} after {rec.promoted_after} s, read-only until "
                                   f"billing db after-failover advanced {len(moved)} sequences")
    watch = _Watch(url, rec)
    watch.start()
    return rec, watch


def failover_checks(services: HaServices, rec: FailoverRecord, db_url: str, ledger: dict,
                    messages: list) -> tuple[list[Check], dict]:
    """What the lost primary had committed against the promoted standby's snapshot, the recovery of
    each lost result, and the recovery times. Call after the workers stopped."""
    unsent = _commits_after(services, rec.old_primary, rec.standby_lsn)  # read before it is started again
    old_results_rows, old_attempts_rows, old_events_rows, old_subs_rows = services.read_lost_primary(
        rec.old_primary, "billing", [OLD_RESULTS, OLD_ATTEMPTS, OLD_EVENTS, OLD_SUBSCRIPTIONS])
    old_results = {r[0]: r[1] for r in old_results_rows}
    lost_results = {k: v for k, v in old_results.items() if rec.snapshot_results.get(k) != v}
    lost_attempts = {r[0] for r in old_attempts_rows} - rec.snapshot_attempts
    old_events = {r[0]: r[1] for r in old_events_rows}
    lost_events = {e: s for e, s in old_events.items() if e not in rec.snapshot_events}
    lost_subscriptions = {r[0] for r in old_subs_rows} - rec.snapshot_subscriptions
    # Which transactions wrote what the standby lacks: each must have committed past the standby's
    # last flushed WAL. With a synchronous standby such a commit was never acknowledged to its client
    # (the primary answers only after the standby's flush): it was in flight at the kill.
    lost_xids = ({r[2] for r in old_results_rows if r[0] in lost_results}
                 | {r[1] for r in old_attempts_rows if r[0] in lost_attempts}
                 | {r[2] for r in old_events_rows if r[0] in lost_events}
                 | {r[1] for r in old_subs_rows if r[0] in lost_subscriptions})
    unexplained = sorted(lost_xids - unsent) if unsent is not None else sorted(lost_xids)
    on_kafka = {str(m.value["id"]) for m in messages if isinstance(m.value, dict) and "id" in m.value}
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT a.idempotency_key, a.outcome, i.status "
                            "FROM billing.payment_attempt a JOIN billing.invoice i "
                            "ON i.customer_id = a.customer_id AND i.id = a.invoice_id").fetchall()
    final = {r[0]: r[1] for r in rows}
    invoice_status = {r[0]: r[2] for r in rows}
    by_key = {c["idempotencyKey"]: c for c in ledger.get("charges", [])}
    # A lost result whose attempt the standby had: the lease lapses, the invoice is claimed again and
    # the same key sent (or looked up); the gateway's answer is recorded. Must equal its ledger.
    kept_attempt = {k: v for k, v in lost_results.items() if k in rec.snapshot_attempts}
    wrong = [(k, v, final.get(k), by_key.get(k, {}).get("status"), invoice_status.get(k))
             for k, v in kept_attempt.items() if final.get(k) != LEDGER_OUTCOME.get(by_key.get(k, {}).get("status"))]
    # Left without a result on an invoice that was closed (a cancel voided it) before a claim could
    # resend the key (its lease had not lapsed, or the worker holding it was killed too): then only
    # the gateway's webhook told the engine, and that webhook had been acknowledged by the lost
    # primary. The charge is known to the gateway alone (printed, docs/operations.md section 2).
    # Any other difference (a wrong outcome, an open or paid invoice without it) is a failure.
    closed_unknown = [w for w in wrong if w[2] is None and w[4] in ("VOID", "FAILED")]
    unrecovered = [w for w in wrong if w not in closed_unknown]
    # A lost claim (the attempt itself): the standby never knew the key was sent. Its invoice, if
    # the standby had it, claims the same key again (<namespace>-inv-<id>-try-<n>): the gateway
    # answers the stored result, so nothing is charged twice.
    reclaimed = {k: final.get(k) for k in lost_attempts}
    figures = {
        "failover_mode": rec.mode,
        "failover_stall_seconds": rec.stall_seconds,
        "failover_unstreamed_bytes": rec.unstreamed_bytes,
        "failover_promoted_after_s": rec.promoted_after,
        "failover_first_result_after_s": rec.first_result_after,
        "failover_first_publish_after_s": rec.first_publish_after,
        "failover_relay_lock_after_s": rec.relay_lock_after,
        "failover_old_primary_results": len(old_results),
        "failover_commits_not_on_standby": None if unsent is None else len(unsent),
        "failover_lost_transactions": len(lost_xids),
        "failover_lost_results": len(lost_results),
        "failover_lost_results_by_outcome": _count(lost_results.values()),
        "failover_lost_attempts": len(lost_attempts),
        "failover_lost_attempts_final": _count(str(v) for v in reclaimed.values()),
        "failover_lost_events": len(lost_events),
        "failover_lost_events_already_on_kafka": len(set(lost_events) & on_kafka),
        "failover_lost_subscriptions": len(lost_subscriptions),
        "failover_recovered_from_gateway": len(kept_attempt) - len(wrong),
        "failover_lost_results_on_closed_invoices": len(closed_unknown),
    }
    checks: list[Check] = []
    if rec.mode == "sync":
        checks.append(Check(
            "synchronous standby: nothing acknowledged was lost (what the promoted standby lacks was written only by "
            "commits past its last flushed WAL, in flight at the kill)",
            unsent is not None and not unexplained,
            f"lost primary had {len(old_results)} results, {len(old_attempts_rows)} attempts, {len(old_events)} events,"
            f" {len(old_subs_rows)} subscriptions; {len(unsent or ())} commits past the standby's WAL {rec.standby_lsn};"
            f" missing on the standby: {len(lost_results)} results, {len(lost_attempts)} attempts, "
            f"{len(lost_events)} events, {len(lost_subscriptions)} subscriptions, from {len(lost_xids)} transactions, "
            f"{len(unexplained)} of them not past the standby's WAL",
            _first(unexplained)))
    else:
        checks.append(Check(
            "asynchronous standby: the failover lost committed work (shown, as documented)",
            bool(lost_results or lost_attempts or lost_events),
            f"{rec.unstreamed_bytes} bytes of WAL not streamed; lost {len(lost_results)} payment results "
            f"({_count(lost_results.values())}), {len(lost_attempts)} claims, {len(lost_events)} events "
            f"({len(set(lost_events) & on_kafka)} already on Kafka), {len(lost_subscriptions)} subscriptions"))
    checks.append(Check(
        "each lost payment result whose attempt survived was recovered from the gateway (key look-up)",
        not unrecovered, f"{len(kept_attempt)} such results, {len(kept_attempt) - len(wrong)} recovered, "
        f"{len(closed_unknown)} left unknown on invoices closed before the key was sent again (their webhook lost "
        f"with the primary); lost claims re-made under the same key: {len(lost_attempts)} "
        f"(final outcomes {figures['failover_lost_attempts_final']})",
        _first(unrecovered) + _first(closed_unknown)))
    back = [rec.first_result_after, rec.first_publish_after, rec.relay_lock_after]
    checks.append(Check(
        "every part back on the new primary within 30 s of the kill (charging, relay lock, publishing)",
        not rec.error and all(b is not None and b <= 30 for b in back),
        f"promoted after {rec.promoted_after} s; first payment result after {rec.first_result_after} s, relay lock "
        f"after {rec.relay_lock_after} s, first event published after {rec.first_publish_after} s {rec.error}"))
    return checks, figures


def _commits_after(services: HaServices, node: str, lsn: str | None) -> set[str] | None:
    """The transaction ids (and their subtransactions) whose COMMIT record in `node`'s WAL lies
    past `lsn`, read with pg_waldump; None when unknown."""
    import re
    import subprocess

    from .harness import PGBIN

    if lsn is None:
        return None
    out = subprocess.run([str(PGBIN / "pg_waldump"), "-p", str(services.base / "pg-ha" / node / "pg_wal"),
                          "-s", lsn, "-r", "Transaction"], capture_output=True, text=True, timeout=60)
    xids: set[str] = set()
    for line in out.stdout.splitlines():
        m = re.search(r"tx:\s+(\d+),.*desc: COMMIT", line)
        if not m:
            continue
        xids.add(m.group(1))
        sub = re.search(r"subxacts:([\d ]+)", line)
        if sub:
            xids.update(sub.group(1).split())
    return xids


def publish_latency(db_url: str, after: datetime) -> float | None:
    """Median seconds from an event's commit to its publication, for events made `after` (the relay
    listens again: NOTIFY, not its 1 s fallback poll)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT extract(epoch FROM published_at - created_at)::float FROM billing.outbox_event "
                            "WHERE created_at > %s AND published_at IS NOT NULL", (after,)).fetchall()
    return round(statistics.median(r[0] for r in rows), 3) if rows else None


def _count(values) -> dict:
    out: dict = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def _first(items, n: int = 5) -> list:
    return list(items)[:n]
