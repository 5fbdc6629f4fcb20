"""The chaos run: the whole system on private services, faults on a schedule, then the checker.

`run_chaos(size)` is what the test calls; `python -m tests.chaos.scenario [small|large]` (from
driver/) runs it by hand and prints the same figures.

Time. The worker runs on the real clock, so the run makes work due *now*: subscriptions are
created (as superuser, through billing.create_subscription) with `p_now` days in the past, so
several periods are due at once and the renewal loop must catch up; others end their first
period during the fault phase. The dunning schedule (a configuration table) is shortened to
seconds without jitter so declines walk it to cancellation within the run. An UNKNOWN result
(gateway timeout or 5xx) is retried by the SQL API after 15 minutes; the run fast-forwards
those (and only those: rows whose next_attempt_at is further out than any lease) every second,
which is what the passing of 15 minutes would do.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import httpx
import psycopg
from psycopg import sql

from billing.config import REPO_ROOT
from billing.api.security import key_id_of
from billing.api_keys import create_key
from billing.migrate import migrate

from billing.checks import Check, read_topic

from .checker import check_all
from .harness import BILLING, FaultLog, HaServices, PrivateServices, Proc, WorkerKiller, free_ports, wait_port

TOPIC = "billing.events"
PLANS = {"DAILY_BASIC": 1000, "DAILY_PRO": 3000, "DAILY_MAX": 4500}


@dataclass(frozen=True)
class Size:
    name: str
    catchup_subscriptions: int      # created days ago: several periods due at once
    live_subscriptions: int         # first period ends during the fault phase
    workers: int
    fault_seconds: float
    drain_seconds: float
    gateway_rate: int
    api_ops_per_second: float
    kill_every: tuple[float, float]
    redis_outages: int
    kafka_restarts: int
    serve_kills: int
    postgres_at: float = 0.6  # when PostgreSQL is restarted (or, with failover, its primary killed): share of the fault phase


SIZES = {
    "small": Size("small", catchup_subscriptions=45, live_subscriptions=30, workers=3, fault_seconds=40,
                  drain_seconds=100, gateway_rate=25, api_ops_per_second=4, kill_every=(1.0, 2.5),
                  redis_outages=1, kafka_restarts=1, serve_kills=1),
    "large": Size("large", catchup_subscriptions=900, live_subscriptions=400, workers=4, fault_seconds=240,
                  drain_seconds=420, gateway_rate=60, api_ops_per_second=8, kill_every=(1.0, 3.0),
                  redis_outages=4, kafka_restarts=3, serve_kills=3),
    # Issue 31: the primary is lost during a peak (several periods of every subscription due at once),
    # early in the fault phase, while charging runs at the gateway's limit; workers still SIGKILLed.
    "failover": Size("failover", catchup_subscriptions=100, live_subscriptions=20, workers=3, fault_seconds=18,
                     drain_seconds=90, gateway_rate=40, api_ops_per_second=4, kill_every=(2.0, 4.0),
                     redis_outages=0, kafka_restarts=0, serve_kills=0, postgres_at=0.35),
}


def chaos_size() -> Size:
    return SIZES[os.environ.get("BILLING_CHAOS_SIZE", "small")]


# -- the HTTP traffic during the faults ---------------------------------------------------------


@dataclass(eq=False)
class ApiTraffic(threading.Thread):
    """Creates, cancels and re-plans subscriptions through `billing serve` while faults happen.

    Retries what failed for want of a database (503, connection errors) with the same
    Idempotency-Key, replays some creates on purpose, and remembers every id the API answered
    for each key, for the checker.
    """

    base_url: str
    rate: float
    rng: random.Random
    known_ids: list[int]
    run_id: str
    api_key: str = ""  # a subscriptions:read+write and refunds:write key the run made for itself
    db_url: str = ""  # where the traffic finds PAID invoices to ask refunds of
    refunds: dict[str, int] = field(default_factory=dict)  # refund answers by status
    created: dict[str, set[int]] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    server_errors: list[str] = field(default_factory=list)
    stop_event: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True, name="api-traffic")
        self._seq = 0

    def _count(self, label: str) -> None:
        self.statuses[label] = self.statuses.get(label, 0) + 1

    def _call(self, client: httpx.Client, method: str, path: str, **kw) -> httpx.Response | None:
        """One request, retried while the system is away (503, no connection), up to 40 s."""
        deadline = time.monotonic() + 40
        while True:
            try:
                resp = client.request(method, path, **kw)
            except httpx.HTTPError:
                self._count("connection error")
                resp = None
            if resp is not None:
                self._count(str(resp.status_code))
                if resp.status_code >= 500 and resp.status_code != 503:
                    self.server_errors.append(f"{method} {path} -> {resp.status_code} {resp.text[:200]}")
                if resp.status_code != 503 and resp.status_code < 500:
                    return resp
            if time.monotonic() > deadline or self.stop_event.is_set():
                return resp
            time.sleep(0.3)

    def _create(self, client: httpx.Client) -> None:
        self._seq += 1
        key = f"api-{self.run_id}-{self._seq}"
        body = {"customerId": 50_000 + self.rng.randrange(2000), "planCode": self.rng.choice(list(PLANS))}
        for replay in range(2 if self.rng.random() < 0.15 else 1):
            resp = self._call(client, "POST", "/subscriptions", json=body, headers={"Idempotency-Key": key})
            if resp is not None and resp.status_code in (200, 201):
                sub = resp.json()
                # Idempotency keys are per API key: the database stores "<key id>/<key>".
                self.created.setdefault(f"{key_id_of(self.api_key)}/{key}", set()).add(sub["id"])
                self.known_ids.append(sub["id"])
                if replay and resp.status_code != 200:
                    self.server_errors.append(f"replayed key {key} answered {resp.status_code}, not 200")

    def _cancel(self, client: httpx.Client) -> None:
        sub_id = self.rng.choice(self.known_ids)
        at_end = self.rng.random() < 0.5
        self._call(client, "POST", f"/subscriptions/{sub_id}/cancel", json={"atPeriodEnd": at_end})

    def _change_plan(self, client: httpx.Client) -> None:
        sub_id = self.rng.choice(self.known_ids)
        got = self._call(client, "GET", f"/subscriptions/{sub_id}")
        headers = {}
        if got is not None and got.status_code == 200 and self.rng.random() < 0.5:
            headers["If-Match"] = got.headers.get("ETag", "")
        self._call(client, "POST", f"/subscriptions/{sub_id}/change-plan",
                   json={"planCode": self.rng.choice(list(PLANS))}, headers=headers)

    def _refund(self, client: httpx.Client) -> None:
        """A customer asks for money back: part of a PAID invoice, all of it, or more than was paid
        (refused); sometimes the same request twice (the same refund answers)."""
        try:
            with psycopg.connect(self.db_url, autocommit=True, connect_timeout=3) as conn:
                row = conn.execute("SELECT id, amount FROM billing.invoice WHERE status = 'PAID' AND amount > 0 "
                                   "ORDER BY random() LIMIT 1").fetchone()
        except psycopg.Error:
            return
        if row is None:
            return
        invoice_id, amount = row
        self._seq += 1
        key = f"refund-{self.run_id}-{self._seq}"
        ask = self.rng.choice([max(1, amount // 3), amount, amount + 1])
        for _ in range(2 if self.rng.random() < 0.2 else 1):
            resp = self._call(client, "POST", f"/invoices/{invoice_id}/refunds", json={"amount": ask},
                              headers={"Idempotency-Key": key})
            if resp is not None:
                label = str(resp.status_code)
                self.refunds[label] = self.refunds.get(label, 0) + 1
                if ask > amount and resp.status_code == 200:
                    self.server_errors.append(f"refund of {ask} for invoice {invoice_id} of {amount} accepted")

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.base_url, timeout=5.0,
                              headers={"Authorization": f"Bearer {self.api_key}"}) as client:
                while not self.stop_event.wait(self.rng.expovariate(self.rate)):
                    r = self.rng.random()
                    if r < 0.55 or not self.known_ids:
                        self._create(client)
                    elif r < 0.70:
                        self._cancel(client)
                    elif r < 0.85:
                        self._change_plan(client)
                    elif r < 0.93:
                        self._refund(client)
                    else:
                        self._call(client, "GET", f"/subscriptions/{self.rng.choice(self.known_ids)}")
        except BaseException as exc:  # noqa: BLE001 - surfaced by the run
            self.errors.append(exc)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=60)


class LateWebhooks(threading.Thread):
    """Re-sends webhooks the engine already stored, seconds to minutes late, correctly signed:
    the same delivery again (a replay: must be acknowledged as a duplicate) or the same result
    under a new event id (a re-announcement: stored, nothing else may change). The checker's
    invariants (each decline counted once, each payment announced once...) catch any effect."""

    def __init__(self, db_url: str, api_url: str, secret: str, rng: random.Random) -> None:
        super().__init__(daemon=True, name="late-webhooks")
        self.db_url, self.api_url, self.secret, self.rng = db_url, api_url, secret, rng
        self.stop_event = threading.Event()
        self.sent = {"replayed": 0, "re-announced": 0}
        self.statuses: dict[str, int] = {}
        self.unexpected: list[str] = []

    def _send(self, client: httpx.Client, doc: dict) -> httpx.Response | None:
        from billing.signing import signature_header

        body = json.dumps(doc, separators=(",", ":")).encode()
        try:
            return client.post("/webhooks/payments", content=body, headers={
                "Content-Type": "application/json", "Billing-Signature": signature_header(self.secret, body)})
        except httpx.HTTPError:
            return None

    def run(self) -> None:
        n = 0
        with httpx.Client(base_url=self.api_url, timeout=5.0) as client:
            while not self.stop_event.wait(self.rng.uniform(0.3, 1.0)):
                try:
                    with psycopg.connect(self.db_url, autocommit=True, connect_timeout=3) as conn:
                        row = conn.execute("SELECT payload FROM billing.gateway_webhook "
                                           "ORDER BY random() LIMIT 1").fetchone()
                except psycopg.Error:
                    continue
                if row is None:
                    continue
                doc = dict(row[0])
                replay = self.rng.random() < 0.5
                if not replay:
                    n += 1
                    doc["eventId"] = f"{doc['eventId']}-late-{n}"
                r = self._send(client, doc)
                label = "connection error" if r is None else str(r.status_code)
                self.statuses[label] = self.statuses.get(label, 0) + 1
                if r is None or r.status_code == 503:
                    continue
                self.sent["replayed" if replay else "re-announced"] += 1
                if r.status_code != 200 or (replay and r.json().get("applied") is not False):
                    self.unexpected.append(f"{'replay' if replay else 're-announcement'} of {doc['eventId']}: "
                                           f"{r.status_code} {r.text[:200]}")

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=10)


class GatewayWatch(threading.Thread):
    """Polls the simulator's counters and puts every 429 on the fault timeline, to correlate."""

    def __init__(self, sim_url: str, faults: FaultLog) -> None:
        super().__init__(daemon=True, name="gateway-watch")
        self.sim_url, self.faults = sim_url, faults
        self.stop_event = threading.Event()
        self.last = 0

    def run(self) -> None:
        with httpx.Client(timeout=2.0) as client:
            while not self.stop_event.wait(0.2):
                try:
                    limited = client.get(f"{self.sim_url}/v1/stats").json()["rateLimited"]
                except (httpx.HTTPError, ValueError, KeyError):
                    continue
                if limited > self.last:
                    self.faults.add("gateway answered 429", f"x{limited - self.last}", injected=False)
                    self.last = limited

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=5)


class TimeWarp(threading.Thread):
    """Every second, brings UNKNOWN retries (15 minutes out) forward to now; leases are untouched."""

    def __init__(self, db_url: str, lease_seconds: float) -> None:
        super().__init__(daemon=True, name="time-warp")
        self.db_url, self.horizon = db_url, lease_seconds + 30
        self.stop_event = threading.Event()
        self.warped = 0

    def run(self) -> None:
        while not self.stop_event.wait(1.0):
            try:
                with psycopg.connect(self.db_url, autocommit=True, connect_timeout=3) as conn:
                    cur = conn.execute(
                        "UPDATE billing.invoice SET next_attempt_at = now() "
                        "WHERE status = 'OPEN' AND next_attempt_at > now() + make_interval(secs => %s)",
                        (self.horizon,))
                    self.warped += cur.rowcount
                    cur = conn.execute(  # refunds whose outcome was UNKNOWN likewise
                        "UPDATE billing.refund SET next_attempt_at = now() "
                        "WHERE status = 'REQUESTED' AND next_attempt_at > now() + make_interval(secs => %s)",
                        (self.horizon,))
                    self.warped += cur.rowcount
            except psycopg.Error:
                pass  # PostgreSQL restarting: next second

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=10)


# -- setup ------------------------------------------------------------------------------------


def _create_topic(bootstrap: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=1)])[TOPIC].result(timeout=60)


def _seed(db_url: str, size: Size, rng: random.Random) -> dict:
    """Plans, a seconds-long dunning schedule, and subscriptions whose periods are due (or soon)."""
    figures = {"seeded_catchup": 0, "seeded_live": 0, "seeded_plan_changes": 0, "seeded_cancels": 0}
    with psycopg.connect(db_url, autocommit=True) as conn:
        for code, price in PLANS.items():
            conn.execute("SELECT billing.upsert_plan(%s, %s, 'USD', 'DAY', 1)", (code, price))
        conn.execute("UPDATE billing.dunning_step SET delay = make_interval(secs => 2 * failed_attempts), "
                     "max_jitter = interval '0'")
        now = conn.execute("SELECT now()").fetchone()[0]
        with conn.transaction():
            for i in range(size.catchup_subscriptions):
                days = rng.choice([1, 2, 3, 3, 5, 8])
                t0 = now - timedelta(days=days, seconds=rng.uniform(60, 7200))
                customer = 10_000 + i // 2 if i % 3 == 0 else 20_000 + i  # some customers have two
                sub_id = conn.execute(
                    "SELECT id FROM billing.create_subscription(%s, %s, %s, %s)",
                    (f"seed-{i}", customer, rng.choice(list(PLANS)), t0)).fetchone()[0]
                figures["seeded_catchup"] += 1
                r = rng.random()
                if r < 0.30:  # up- or downgrade during the first period: proration invoice or credit
                    conn.execute("SELECT billing.change_plan(%s, %s, %s)",
                                 (sub_id, rng.choice(list(PLANS)), t0 + timedelta(hours=rng.uniform(1, 20))))
                    figures["seeded_plan_changes"] += 1
                elif r < 0.38:
                    conn.execute("SELECT billing.cancel_subscription(%s, true, %s)",
                                 (sub_id, t0 + timedelta(hours=rng.uniform(1, 20))))
                    figures["seeded_cancels"] += 1
            for j in range(size.live_subscriptions):
                t0 = now - timedelta(days=1) + timedelta(seconds=rng.uniform(3, size.fault_seconds * 0.8))
                conn.execute("SELECT billing.create_subscription(%s, %s, %s, %s)",
                             (f"live-{j}", 30_000 + j, rng.choice(list(PLANS)), t0))
                figures["seeded_live"] += 1
    return figures


# -- the run ----------------------------------------------------------------------------------


@dataclass
class ChaosResult:
    ok: bool
    report: str
    figures: dict
    base: Path
    checks: list = field(default_factory=list)


def _drain_state(db_url: str) -> dict | None:
    try:
        with psycopg.connect(db_url, autocommit=True, connect_timeout=3) as conn:
            row = conn.execute("""
                SELECT (SELECT count(*) FROM billing.invoice WHERE status = 'OPEN') AS open_invoices,
                       (SELECT count(*) FROM billing.subscription
                         WHERE status <> 'CANCELED' AND current_period_end <= now()) AS due_subscriptions,
                       (SELECT count(*) FROM billing.outbox_event WHERE status = 'PENDING') AS pending_events,
                       (SELECT count(*) FROM billing.outbox_event) AS events,
                       (SELECT count(*) FROM billing.gateway_webhook) AS webhooks,
                       (SELECT count(*) FROM billing.payment_attempt) AS attempts,
                       (SELECT count(*) FROM billing.refund WHERE status = 'REQUESTED') AS pending_refunds
            """).fetchone()
            return dict(zip(("open_invoices", "due_subscriptions", "pending_events", "events", "webhooks",
                             "attempts", "pending_refunds"), row))
    except psycopg.Error:
        return None


def run_chaos(size: Size, *, seed: int | None = None, keep: bool = False, log=print,
              failover: str | None = None) -> ChaosResult:
    """`failover` "sync" or "async": PostgreSQL is a primary and a streaming standby (of that
    kind), every process connects through the multi-host URL, and instead of the restart in place
    the primary is SIGKILLed and the standby promoted (chaos/failover.py)."""
    seed = seed if seed is not None else int(os.environ.get("BILLING_CHAOS_SEED", random.randrange(1_000_000)))
    rng = random.Random(seed)
    run_id = uuid.uuid4().hex[:8]
    services = HaServices(failover) if failover else PrivateServices()
    failover_record = failover_watch = None
    base = services.base
    logs = base / "logs"
    logs.mkdir()
    faults = FaultLog()
    procs: list[Proc] = []
    workers: list[Proc] = []
    killer = traffic = warp = late = watch = None
    figures: dict = {"size": size.name, "seed": seed, "gateway_rate": size.gateway_rate}
    started = time.monotonic()
    ok = False
    report_lines: list[str] = []
    try:
        log(f"[chaos] size={size.name} seed={seed} state={base}")
        services.start_all()
        _create_topic(services.kafka_bootstrap)
        db_url = services.database_url("billing")
        with psycopg.connect(services.pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE billing"))
        migrate(db_url, REPO_ROOT / "db", simulation=True)
        figures.update(_seed(db_url, size, rng))
        figures["setup_seconds"] = round(time.monotonic() - started, 1)

        api_port, sim_port = free_ports(2)
        secret = secrets.token_hex(16)
        lease = 6.0
        env = {k: v for k, v in os.environ.items() if not k.startswith("BILLING_")}
        env.update(
            BILLING_DATABASE_URL=db_url, BILLING_REDIS_URL=services.redis_url,
            BILLING_KAFKA_BOOTSTRAP=services.kafka_bootstrap, BILLING_KAFKA_TOPIC=TOPIC,
            BILLING_GATEWAY_URL=f"http://127.0.0.1:{sim_port}", BILLING_GATEWAY_RATE=str(size.gateway_rate),
            BILLING_WEBHOOK_SECRET=secret, BILLING_CHARGE_LEASE_SECONDS=str(lease),
            BILLING_GATEWAY_TIMEOUT_SECONDS="1.5", BILLING_LOG_LEVEL="INFO", PYTHONUNBUFFERED="1",
            # The limiter runs on its defaults (0 or empty); BILLING_CHAOS_LIMITER_GUARD_MS sets
            # another guard (ms from a grant to the call reaching the gateway): see docs/testing.md.
            BILLING_LIMITER_GUARD_MS=os.environ.get("BILLING_CHAOS_LIMITER_GUARD_MS", "0"),
            # The gateway's webhooks, the API traffic and the late webhooks all come from 127.0.0.1
            # here (in production each has its own addresses): the per-address guards of the API
            # (docs/security.md) would answer them 429 while the database is away and connections pile up.
            BILLING_API_MAX_CONNECTIONS_PER_ADDRESS="1000", BILLING_API_UNAUTHENTICATED_RATE_PER_ADDRESS="10000",
            BILLING_API_UNAUTHENTICATED_BURST_PER_ADDRESS="10000",
        )
        if not env["BILLING_LIMITER_GUARD_MS"] or env["BILLING_LIMITER_GUARD_MS"] == "0":
            del env["BILLING_LIMITER_GUARD_MS"]
        figures["limiter_guard_ms"] = env.get("BILLING_LIMITER_GUARD_MS", "default")
        sim = Proc("gateway-sim", [BILLING, "gateway-sim", "--port", str(sim_port), "--rate", str(size.gateway_rate),
                                   "--decline-rate", "0.35", "--timeout-rate", "0.05", "--error-rate", "0.05",
                                   "--latency-ms", "5-150", "--webhook-url",
                                   f"http://127.0.0.1:{api_port}/webhooks/payments", "--webhook-secret", secret,
                                   "--webhook-duplicate-rate", "0.3", "--seed", str(seed)], env, logs)
        serve = Proc("serve", [BILLING, "serve", "--port", str(api_port)], env, logs)
        for p in (sim, serve):
            p.start()
            procs.append(p)
        for port, p in ((sim_port, sim), (api_port, serve)):
            if not wait_port(port, 30):
                raise RuntimeError(f"{p.name} did not listen on {port}:\n{p.tail()}")
        for i in range(size.workers):
            w = Proc(f"worker-{i}", [BILLING, "worker"], {**env, "PGAPPNAME": f"chaos-worker-{i}"}, logs)
            w.start()
            workers.append(w)
            procs.append(w)

        with psycopg.connect(db_url, autocommit=True) as conn:
            known = [r[0] for r in conn.execute("SELECT id FROM billing.subscription ORDER BY id")]
        killer = WorkerKiller(workers, faults, random.Random(rng.random()), db_url=db_url, every=size.kill_every)
        api_key = create_key(db_url, "chaos traffic", ["subscriptions:read", "subscriptions:write", "refunds:write"],
                             actor="chaos").key
        traffic = ApiTraffic(f"http://127.0.0.1:{api_port}", size.api_ops_per_second, random.Random(rng.random()),
                             known, run_id, api_key, db_url=db_url)
        warp = TimeWarp(db_url, lease)
        late = LateWebhooks(db_url, f"http://127.0.0.1:{api_port}", secret, random.Random(rng.random()))
        watch = GatewayWatch(f"http://127.0.0.1:{sim_port}", faults)
        for t in (killer, traffic, warp, late, watch):
            t.start()

        # -- the fault schedule -----------------------------------------------------------------
        schedule: list[tuple[float, str]] = []
        span = size.fault_seconds
        for k in range(size.redis_outages):
            schedule.append((span * (k + 0.15) / size.redis_outages, "redis"))
        for k in range(size.kafka_restarts):
            schedule.append((span * (k + 0.35) / size.kafka_restarts, "kafka"))
        for k in range(size.serve_kills):
            schedule.append((span * (k + 0.8) / size.serve_kills, "serve"))
        schedule.append((span * size.postgres_at, "postgres"))
        schedule.sort()
        t_faults = time.monotonic()
        faults.t0 = t_faults
        for at, what in schedule:
            delay = t_faults + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if what == "redis":
                services.stop_redis()
                faults.add("redis stopped")
                time.sleep(rng.uniform(3, 6))
                services.start_redis()
                faults.add("redis back", injected=False)
            elif what == "kafka":
                faults.add("kafka restarted")
                services.restart_kafka()
                faults.add("kafka back", injected=False)
            elif what == "postgres" and failover:
                from .failover import inject_failover

                failover_record, failover_watch = inject_failover(services, faults)
            elif what == "postgres":
                faults.add("postgres restarted (fast)")
                services.restart_postgres()
                faults.add("postgres back", injected=False)
            elif what == "serve":
                serve.kill()
                faults.add("serve SIGKILL")
                time.sleep(rng.uniform(0.5, 2))
                serve.start()
        delay = t_faults + span - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        killer.stop()
        traffic.stop()
        late.stop()
        figures["fault_phase_seconds"] = round(time.monotonic() - t_faults, 1)
        log(f"[chaos] faults over after {figures['fault_phase_seconds']} s: {faults.counts}")

        # -- drain ------------------------------------------------------------------------------
        t_drain = time.monotonic()
        stable, last = 0, None
        while time.monotonic() - t_drain < size.drain_seconds:
            state = _drain_state(db_url)
            quiet = (state is not None and state["open_invoices"] == 0 and state["due_subscriptions"] == 0
                     and state["pending_events"] == 0 and state["pending_refunds"] == 0)
            stable = stable + 1 if quiet and state == last else 0
            last = state
            if stable >= 4:  # nothing moved for 4 s (late webhooks arrive within ~3 s)
                break
            time.sleep(1)
        warp.stop()
        watch.stop()
        figures["drain_seconds"] = round(time.monotonic() - t_drain, 1)
        figures["drained"] = stable >= 4
        figures["last_state"] = last
        log(f"[chaos] drain {'done' if figures['drained'] else 'NOT done'} in {figures['drain_seconds']} s: {last}")

        # A clean stop: SIGTERM, every worker exits 0.
        exits = {w.name: w.stop(timeout=40) for w in workers}
        ledger = httpx.get(f"http://127.0.0.1:{sim_port}/v1/ledger", timeout=30).json()
        sim_stats = httpx.get(f"http://127.0.0.1:{sim_port}/v1/stats", timeout=30).json()
        messages = read_topic(services.kafka_bootstrap, TOPIC, group_prefix="chaos-checker")
        checks, check_figures = check_all(db_url, ledger, messages, created_keys=traffic.created,
                                          gateway_rate=size.gateway_rate)
        figures.update(check_figures)
        if failover_record is not None:
            from .failover import failover_checks, publish_latency

            failover_watch.join(timeout=5)
            more, more_figures = failover_checks(services, failover_record, db_url, ledger, messages)
            checks += more
            figures.update(more_figures)
            figures["failover_publish_latency_median_s"] = publish_latency(
                db_url, failover_record.promoted_at + timedelta(seconds=10))
        checks.insert(0, Check("system drained after the faults (no OPEN invoice, nothing due, outbox empty, "
                               "no refund pending)",
                               figures["drained"], f"last state {last}"))
        checks.append(Check("workers stop cleanly on SIGTERM (exit 0)", all(c == 0 for c in exits.values()),
                            f"exit codes {exits}"))
        checks.append(Check("the API never answered 500 (503 while the database was away is fine)",
                            not traffic.server_errors,
                            f"{len(traffic.server_errors)} server errors; statuses {dict(sorted(traffic.statuses.items()))}",
                            traffic.server_errors[:10]))
        checks.append(Check("late webhooks (replayed, re-announced) acknowledged without effect",
                            not late.unexpected,
                            f"{late.sent}; statuses {dict(sorted(late.statuses.items()))}", late.unexpected[:10]))
        errors = (killer.errors if killer else []) + (traffic.errors if traffic else [])
        checks.append(Check("harness threads ran without error", not errors, repr(errors[:3])))
        figures.update(
            processes_killed=sum(w.kills for w in workers) + serve.kills,
            worker_sigkills=sum(w.kills for w in workers),
            worker_sigkills_by_moment=dict(killer.by_mode),
            worker_starts=sum(w.starts for w in workers),
            faults_injected=dict(faults.counts),
            unknown_retries_fast_forwarded=warp.warped,
            late_webhooks=dict(late.sent),
            api_creates=len(traffic.created),
            api_refunds=dict(sorted(traffic.refunds.items())),
            api_statuses=dict(sorted(traffic.statuses.items())),
            simulator={k: sim_stats.get(k) for k in ("accepted", "rateLimited", "replays", "errors", "timeouts",
                                                       "webhooksDelivered", "webhooksFailed", "webhookAttempts",
                                                       "maxWindow", "charged", "refunded", "refundsRefused")},
            total_seconds=round(time.monotonic() - started, 1),
        )
        ok = all(c.ok for c in checks)
        report_lines = _report(figures, checks, faults)
        return ChaosResult(ok, "\n".join(report_lines), figures, base, checks)
    except BaseException:
        for p in procs:
            if p.logs:
                log(f"--- {p.name} (last lines) ---\n{p.tail(30)}")
        raise
    finally:
        for t in (killer, traffic, warp, late, watch):
            if t is not None and t.is_alive():
                t.stop()
        for p in procs:
            try:
                p.stop(timeout=10)
            except Exception:  # noqa: BLE001 - teardown is best effort
                pass
        services.stop_all()
        if ok and not keep:
            services.remove()


def _report(figures: dict, checks, faults: FaultLog) -> list[str]:
    f = figures
    sim = f.get("simulator", {})
    lines = [
        f"chaos run ({f['size']}, seed {f['seed']}): {'ALL INVARIANTS HOLD' if all(c.ok for c in checks) else 'BROKEN PROMISES'}",
        f"  time: setup {f.get('setup_seconds')} s, faults {f.get('fault_phase_seconds')} s, "
        f"drain {f.get('drain_seconds')} s, total {f.get('total_seconds')} s",
        f"  processes killed: {f.get('processes_killed')} (workers SIGKILLed {f.get('worker_sigkills')} times: "
        f"{f.get('worker_sigkills_by_moment')}; {f.get('worker_starts')} worker starts; serve SIGKILLed too)",
        f"  faults injected: {f.get('faults_injected')}; gateway: {sim.get('errors')} 5xx, {sim.get('timeouts')} "
        f"timeouts after charging, {f.get('gateway_charges_by_status', {}).get('declined', 0)} declines; "
        f"webhooks: {sim.get('webhookAttempts')} deliveries tried, {f.get('webhooks_stored')} distinct stored, "
        f"late ones sent by the harness {f.get('late_webhooks')}; "
        f"UNKNOWN retries fast-forwarded: {f.get('unknown_retries_fast_forwarded')}",
        f"  subscriptions: {f.get('subscriptions')} {f.get('subscriptions_by_status')} "
        f"(cancel reasons {f.get('cancel_reasons')}); API creates {f.get('api_creates')}, statuses {f.get('api_statuses')}",
        f"  invoices: {f.get('invoices')} {f.get('invoices_by_status')} {f.get('invoices_by_kind')}; "
        f"periods invoiced {f.get('periods_invoiced')}",
        f"  charges: {f.get('gateway_charges')} at the gateway {f.get('gateway_charges_by_status')}; "
        f"{f.get('payment_attempts')} attempts {f.get('attempt_outcomes')}, {f.get('reclaimed_attempts')} re-claimed; "
        f"gateway max calls in a sliding second {sim.get('maxWindow')} (limit {f.get('gateway_rate', '')}), "
        f"429s {sim.get('rateLimited')}, limiter guard {f.get('limiter_guard_ms')} ms",
        f"  events: {f.get('outbox_events')} in the outbox {f.get('outbox_by_type')}; {f.get('kafka_messages')} Kafka "
        f"messages, {f.get('kafka_distinct_events')} distinct, {f.get('kafka_redeliveries')} redeliveries; "
        f"refunds due {f.get('refunds_due')}",
        f"  refunds: {f.get('refund_rows')} rows {f.get('refunds_by_status')} {f.get('refunds_by_reason')}; "
        f"{f.get('gateway_refunds')} executed at the gateway; API answers to refund requests {f.get('api_refunds')}",
        "  invariants:",
        *[c.line() for c in checks],
    ]
    for c in checks:
        if not c.ok and c.examples:
            lines.append(f"  first offenders of '{c.name}':")
            lines += [f"    {o!r}"[:400] for o in c.examples]
    if "failover_mode" in f:
        lines.insert(lines.index("  invariants:"), (
            f"  failover ({f['failover_mode']} standby): promoted {f['failover_promoted_after_s']} s after the kill; "
            f"back on the new primary: first payment result {f['failover_first_result_after_s']} s, relay lock "
            f"{f['failover_relay_lock_after_s']} s, first event published {f['failover_first_publish_after_s']} s; "
            f"publish latency after (median) {f.get('failover_publish_latency_median_s')} s; WAL not streamed at the "
            f"kill {f['failover_unstreamed_bytes']} bytes, commits past the standby's WAL {f['failover_commits_not_on_standby']}; "
            f"lost ({f['failover_lost_transactions']} transactions): {f['failover_lost_results']} results "
            f"{f['failover_lost_results_by_outcome']}, {f['failover_lost_attempts']} claims, "
            f"{f['failover_lost_events']} events ({f['failover_lost_events_already_on_kafka']} already on Kafka), "
            f"{f['failover_lost_subscriptions']} subscriptions; recovered from the gateway "
            f"{f['failover_recovered_from_gateway']}, left unknown on invoices closed meanwhile "
            f"{f['failover_lost_results_on_closed_invoices']}"))
    lines.append("  fault timeline: " + "; ".join(f"{t}s {what}" for t, what in faults.timeline[:400]))
    return lines


if __name__ == "__main__":
    result = run_chaos(SIZES[sys.argv[1] if len(sys.argv) > 1 else "small"], keep="--keep" in sys.argv)
    print(result.report)
    print(json.dumps(result.figures, default=str, indent=1))
    sys.exit(0 if result.ok else 1)
