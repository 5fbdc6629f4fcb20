"""The PostgreSQL failover fault of the chaos run (issue 31): the primary is SIGKILLed during the
peak, the standby promoted as Patroni would; then what the promoted standby had, what the lost
primary had committed, and how long each part of the engine took to come back.

Used by `scenario.run_chaos(..., failover="sync"|"async")`. The fault runs in the schedule's thread:

* async only: the primary's walsender is SIGSTOPped for `stall` seconds first (a replication
  stall: the primary runs on and acknowledges commits the standby never receives);
* the primary's postmaster and every backend are SIGKILLed (the machine is lost);
* after `detect` seconds (the HA manager noticing: Patroni's TTL, here short) the standby is
  promoted (`postgres-ha.sh promote`: pg_promote, then no synchronous standby to wait for);
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

from billing.checks import Check

from .harness import FaultLog, HaServices, RELAY_LOCK_OBJID

RESULTS = ("SELECT idempotency_key, outcome FROM billing.payment_attempt "
           "WHERE outcome IN ('SUCCEEDED', 'DECLINED')")
ATTEMPTS = "SELECT idempotency_key FROM billing.payment_attempt"
EVENTS = "SELECT event_id::text, status FROM billing.outbox_event"
SUBSCRIPTIONS = "SELECT id FROM billing.subscription"
LEDGER_OUTCOME = {"succeeded": "SUCCEEDED", "declined": "DECLINED"}


@dataclass
class FailoverRecord:
    mode: str
    old_primary: str = ""
    new_primary: str = ""
    stall_seconds: float = 0.0
    unstreamed_bytes: int | None = None  # primary's WAL the standby had not received at the kill (async)
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
        try:
            with psycopg.connect(services.node_url(services.primary), autocommit=True, connect_timeout=2) as p, \
                    psycopg.connect(services.node_url(services.standby), autocommit=True, connect_timeout=2) as s:
                head = p.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
                rec.unstreamed_bytes = int(s.execute("SELECT pg_wal_lsn_diff(%s, pg_last_wal_receive_lsn())",
                                                     (head,)).fetchone()[0])
        except psycopg.Error:
            pass
    rec.t_kill = time.time()
    services.kill_primary()
    faults.add("postgres primary SIGKILL", f"{rec.old_primary} ({services.mode} standby)")
    time.sleep(detect)
    services.promote_standby()
    rec.promoted_after = round(time.time() - rec.t_kill, 2)
    faults.add("standby promoted", f"{rec.new_primary} after {rec.promoted_after} s")
    url = services.node_url(rec.new_primary, "billing")
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.transaction():  # one snapshot of the four
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            rec.promoted_at = conn.execute("SELECT now()").fetchone()[0]
            rec.snapshot_results = dict(conn.execute(RESULTS).fetchall())
            rec.snapshot_attempts = {r[0] for r in conn.execute(ATTEMPTS)}
            rec.snapshot_events = {r[0] for r in conn.execute(EVENTS)}
            rec.snapshot_subscriptions = {r[0] for r in conn.execute(SUBSCRIPTIONS)}
    watch = _Watch(url, rec)
    watch.start()
    return rec, watch


def failover_checks(services: HaServices, rec: FailoverRecord, db_url: str, ledger: dict,
                    messages: list) -> tuple[list[Check], dict]:
    """What the lost primary had committed against the promoted standby's snapshot, the recovery of
    each lost result, and the recovery times. Call after the workers stopped."""
    old_results_rows, old_attempts_rows, old_events_rows, old_subs_rows = services.read_lost_primary(
        rec.old_primary, "billing", [RESULTS, ATTEMPTS, EVENTS, SUBSCRIPTIONS])
    old_results = dict(old_results_rows)
    lost_results = {k: v for k, v in old_results.items() if rec.snapshot_results.get(k) != v}
    lost_attempts = {r[0] for r in old_attempts_rows} - rec.snapshot_attempts
    old_events = dict(old_events_rows)
    lost_events = {e: s for e, s in old_events.items() if e not in rec.snapshot_events}
    lost_subscriptions = {r[0] for r in old_subs_rows} - rec.snapshot_subscriptions
    on_kafka = {str(m.value["id"]) for m in messages if isinstance(m.value, dict) and "id" in m.value}
    with psycopg.connect(db_url, autocommit=True) as conn:
        final = dict(conn.execute("SELECT idempotency_key, outcome FROM billing.payment_attempt").fetchall())
    by_key = {c["idempotencyKey"]: c for c in ledger.get("charges", [])}
    # A lost result whose attempt the standby had: the lease lapses, the key is looked up, the
    # gateway's answer recorded. Must equal the gateway's ledger.
    kept_attempt = {k: v for k, v in lost_results.items() if k in rec.snapshot_attempts}
    unrecovered = [(k, v, final.get(k), by_key.get(k, {}).get("status")) for k, v in kept_attempt.items()
                   if final.get(k) != LEDGER_OUTCOME.get(by_key.get(k, {}).get("status"))]
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
        "failover_lost_results": len(lost_results),
        "failover_lost_results_by_outcome": _count(lost_results.values()),
        "failover_lost_attempts": len(lost_attempts),
        "failover_lost_attempts_final": _count(str(v) for v in reclaimed.values()),
        "failover_lost_events": len(lost_events),
        "failover_lost_events_already_on_kafka": len(set(lost_events) & on_kafka),
        "failover_lost_subscriptions": len(lost_subscriptions),
        "failover_recovered_from_gateway": len(kept_attempt) - len(unrecovered),
    }
    checks: list[Check] = []
    if rec.mode == "sync":
        checks.append(Check(
            "synchronous standby: every committed payment result, event and subscription of the lost primary "
            "is on the promoted standby",
            not lost_results and not lost_attempts and not lost_events and not lost_subscriptions,
            f"lost primary had {len(old_results)} results, {len(old_attempts_rows)} attempts, {len(old_events)} events,"
            f" {len(old_subs_rows)} subscriptions; missing on the standby: {len(lost_results)} results, "
            f"{len(lost_attempts)} attempts, {len(lost_events)} events, {len(lost_subscriptions)} subscriptions",
            _first(lost_results.items()) + _first(lost_attempts) + _first(lost_events) + _first(lost_subscriptions)))
    else:
        checks.append(Check(
            "asynchronous standby: the failover lost committed work (shown, as documented)",
            bool(lost_results or lost_attempts or lost_events),
            f"{rec.unstreamed_bytes} bytes of WAL not streamed; lost {len(lost_results)} payment results "
            f"({_count(lost_results.values())}), {len(lost_attempts)} claims, {len(lost_events)} events "
            f"({len(set(lost_events) & on_kafka)} already on Kafka), {len(lost_subscriptions)} subscriptions"))
    checks.append(Check(
        "each lost payment result whose attempt survived was recovered from the gateway (key look-up)",
        not unrecovered, f"{len(kept_attempt)} such results, {len(kept_attempt) - len(unrecovered)} recovered; "
        f"lost claims re-made under the same key: {len(lost_attempts)} (final outcomes {figures['failover_lost_attempts_final']})",
        _first(unrecovered)))
    back = [rec.first_result_after, rec.first_publish_after, rec.relay_lock_after]
    checks.append(Check(
        "every part back on the new primary within 30 s of the kill (charging, relay lock, publishing)",
        not rec.error and all(b is not None and b <= 30 for b in back),
        f"promoted after {rec.promoted_after} s; first payment result after {rec.first_result_after} s, relay lock "
        f"after {rec.relay_lock_after} s, first event published after {rec.first_publish_after} s {rec.error}"))
    return checks, figures


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
