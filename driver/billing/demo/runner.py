"""`billing demo`: the engine's real work on a simulated clock, then the report and the invariants.

What runs, each piece the production code:
* PostgreSQL: a fresh database (dropped and created again at every run), migrated;
* the gateway simulator (`billing.gateway.simulator`, in a process of its own so that its HTTP
  work has a core of its own) on a free port, with declines, timeouts after charging, 5xx,
  latency, and signed webhooks (late, out of order, some duplicated) sent to
* the HTTP API (`billing.api.create_app`, served by uvicorn on a free port in this process) whose
  `/webhooks/payments` checks each signature and applies it through `apply_gateway_webhook`;
* the worker's parts, in this process: the renewal pass (`renew_due`), the charge workers
  (`Charger.run`) with the GCRA limiter (Redis when BILLING_REDIS_URL is set, else the same GCRA
  in process) and the outbox relay (`run_relay`) into Kafka when BILLING_KAFKA_BOOTSTRAP is set,
  else a JSON-lines file.

Time. The SQL API gets `p_now` from a simulated clock that moves in steps (one simulated hour on
the peak days, six on the others, by default). At each step the customers' actions of that hour are applied at their own instants, the
renewal pass invoices what fell due, and the charge workers charge in real time through the real
limiter. A step ends when every invoice due has reached the gateway, or after its share of real time,
`--hour-seconds` per simulated hour: then the clock moves on and what is left waits in the queue.
So the gateway's limit of R calls per real second allows at most R x hour-seconds charges per
simulated hour; quiet hours take only the time their work needs.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets as _secrets
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
from psycopg import sql

from billing import db
from billing.clock import SimulatedClock
from billing.config import Settings
from billing.demo import invariants, report as report_mod, scenario as scenario_mod
from billing.demo.progress import Progress
from billing.gateway.simulator import DECLINE_CODES, Charge, GatewaySimulator
from billing.migrate import migrate

log = logging.getLogger("billing.demo")

UTC = timezone.utc

# Claims stay with their worker for this long on the simulated clock: several steps, so that a
# call still on the wire when the clock moves on is never re-claimed (its key would be, harmlessly).
CHARGE_LEASE = timedelta(days=2)
RELAY_LEASE = timedelta(days=1)
GATEWAY_TIMEOUT_SECONDS = 1.0
# How often an idle charge worker looks for work (real time); each look is one claim_charges call.
CHARGE_POLL_SECONDS = 0.02
# At the end, how long the late webhooks and the relay may take to finish.
FINISH_SECONDS = 300


@dataclass
class Options:
    subscriptions: int = 20000
    rate: int = 250
    seed: int = 1
    report: str = "demo-report.html"
    hour_seconds: float | None = None  # None: sized so that the cap is subscriptions / 40 per hour
    step_minutes: int = 60
    days: int | None = None
    quiet_step_hours: int = 6
    decline_rate: float = 0.06
    timeout_rate: float = 0.01
    error_rate: float = 0.01
    webhook_duplicate_rate: float = 0.10
    latency_ms: tuple[int, int] = (2, 20)
    concurrency: int | None = None
    events: str | None = None
    quiet: bool = False


@dataclass
class Sample:
    """The state at the end of one step."""

    at: datetime  # simulated
    real: float  # seconds since the simulation started
    backlog: int  # invoices due and not yet sent to the gateway (chargeable, or claimed and waiting)
    calls: int  # gateway calls made so far (accepted by the simulator)
    renewals: int  # subscriptions handled by the renewal pass so far
    published: int  # events published so far


@dataclass
class RunResult:
    options: Options
    database_url: str
    events_source: str
    started: datetime
    ended: datetime
    real_seconds: float
    setup_seconds: float
    simulate_seconds: float
    samples: list[Sample]
    action_counts: dict[str, int]
    action_rejections: dict[str, int]
    simulator_stats: dict
    checks: list[invariants.Check] = field(default_factory=list)
    limiter: str = ""
    stats: dict = field(default_factory=dict)
    ledger: dict = field(default_factory=dict)  # the simulator's GET /v1/ledger at the end
    accepted_times: list[float] = field(default_factory=list)  # monotonic instants of accepted calls
    events_path: Path | None = None  # the JSON-lines file, when no Kafka


# -- the gateway's customers -------------------------------------------------------------------

class DemoGateway(GatewaySimulator):
    """The simulator, with two demo-specific behaviours; everything else (the limit and its 429s,
    faults, latency, duplicate and late webhooks, signatures, the ledger) is the simulator's.

    * Cards behave like customers' cards: most are fine, a few are dead (every charge declined:
      dunning ends in cancellation), some are flaky (about half declined: dunning usually recovers).
      `decline_rate` is the target share of first attempts declined.
    * Webhooks (one per charge, as the simulator sends them) are delivered at most `webhook_slots`
      at a time, as a real gateway paces its calls to one endpoint, rather than all at once: the
      HTTP API answers 503 when its connection pool is exhausted, and the retries would pile up.
    """

    def __init__(self, *, decline_rate: float, webhook_slots: int = 16, **kwargs) -> None:
        super().__init__(decline_rate=decline_rate, **kwargs)
        # Split the target: a third from dead cards, a third from flaky cards, a third at random.
        self.dead_share = decline_rate / 3
        self.flaky_share = 2 * decline_rate / 3  # declined half the time
        self.random_decline = decline_rate / 3
        self._webhook_slots = asyncio.Semaphore(webhook_slots)
        self._webhooks_waiting = 0

    def _new_charge(self, key: str, customer_id: int, amount: int, currency: str) -> Charge:
        card = self._chance(customer_id, "card")
        if card < self.dead_share:
            declined, code = True, "expired_card"
        elif card < self.dead_share + self.flaky_share:
            declined, code = self._chance(key, "decline") < 0.5, "insufficient_funds"
        else:
            declined = self._chance(key, "decline") < self.random_decline
            code = DECLINE_CODES[int(self._chance(key, "code") * len(DECLINE_CODES))]
        charge_id = "ch_" + hashlib.sha256(f"{self.seed}:{key}".encode()).hexdigest()[:20]
        return Charge(key, customer_id, amount, currency, "declined" if declined else "succeeded", charge_id,
                      code if declined else None, datetime.now(UTC).isoformat().replace("+00:00", "Z"))

    async def _deliver(self, event: dict, delay: float) -> None:
        self._webhooks_waiting += 1
        try:
            await asyncio.sleep(delay)
            async with self._webhook_slots:
                await super()._deliver(event, 0)
        finally:
            self._webhooks_waiting -= 1

    def pending_webhooks(self) -> int:
        return self._webhooks_waiting

    def app(self):
        from aiohttp import web

        app = super().app()
        app.router.add_get("/v1/demo/pending", lambda request: web.json_response(
            {"pending": self.pending_webhooks()}))
        app.router.add_get("/v1/demo/accepted", lambda request: web.json_response(
            {"accepted": self.accepted_times()}))
        return app


class GatewayProcess:
    """The DemoGateway in a process of its own, so that its HTTP work (answering the charges,
    sending the webhooks) runs on another core than the worker's. Read over HTTP like any gateway:
    `GET /v1/ledger`, `GET /v1/stats`, and two demo routes (webhooks not yet delivered, the
    instants of accepted calls on the machine's monotonic clock)."""

    def __init__(self, **options) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_gateway_main, args=(options, child), daemon=True, name="demo-gateway")
        self.url: str | None = None

    async def start(self) -> str:
        self._proc.start()
        answer = await asyncio.to_thread(self._conn.recv)
        if isinstance(answer, BaseException):
            raise answer
        self.url = answer
        return answer

    async def _get(self, path: str) -> dict:
        import aiohttp

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            async with session.get(f"{self.url}{path}") as resp:
                resp.raise_for_status()
                return await resp.json()

    async def pending_webhooks(self) -> int:
        return (await self._get("/v1/demo/pending"))["pending"]

    async def ledger(self) -> dict:
        return await self._get("/v1/ledger")

    async def stats(self) -> dict:
        return await self._get("/v1/stats")

    async def accepted_times(self) -> list[float]:
        return (await self._get("/v1/demo/accepted"))["accepted"]

    async def close(self) -> None:
        try:
            self._conn.send("stop")
        except (OSError, EOFError):
            pass
        await asyncio.to_thread(self._proc.join, 15)
        if self._proc.is_alive():
            self._proc.terminate()
            await asyncio.to_thread(self._proc.join, 5)


def _gateway_main(options: dict, conn) -> None:
    asyncio.run(_gateway_serve(options, conn))


async def _gateway_serve(options: dict, conn) -> None:
    gateway = DemoGateway(**options)
    try:
        url = await gateway.start()
    except Exception as exc:  # noqa: BLE001 - handed to the parent, which raises it
        conn.send(exc)
        return
    conn.send(url)
    try:
        await asyncio.to_thread(conn.recv)  # "stop", or EOFError when the parent is gone
    except (EOFError, OSError):
        pass
    finally:
        await gateway.close()


# -- database ----------------------------------------------------------------------------------

def demo_database_url(url: str) -> str:
    """The demo drops and recreates its database: a name without "demo" gets "_demo" appended."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    name = info.get("dbname") or "billing"
    if "demo" not in name:
        info["dbname"] = f"{name}_demo"
    return psycopg.conninfo.make_conninfo(**info)


def recreate_database(url: str) -> None:
    info = psycopg.conninfo.conninfo_to_dict(url)
    name = info["dbname"]
    admin = psycopg.conninfo.make_conninfo(**{**info, "dbname": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _display_url(url: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    info.pop("password", None)
    return f"postgresql://{info.get('user', '')}@{info.get('host', '')}:{info.get('port', '')}/{info.get('dbname', '')}"


# -- the run -----------------------------------------------------------------------------------

def run(settings: Settings, **kwargs) -> int:
    """Run the demo; the process exit status (0 when every invariant holds)."""
    options = Options(**{k: v for k, v in kwargs.items() if v is not None})
    result = asyncio.run(simulate(settings, options))
    report_path = Path(options.report)
    report_mod.write_html(result, report_path)
    out = sys.stdout
    out.write(report_mod.terminal_summary(result))
    out.write(f"\nreport: {report_path.resolve()}\n")
    return exit_status(result.checks)


def exit_status(checks: list[invariants.Check]) -> int:
    """0 when every invariant holds (and there was at least one to check), else 1."""
    return 0 if checks and all(c.ok for c in checks) else 1


def _quiet_logs() -> None:
    root = logging.getLogger()
    if root.level > logging.DEBUG:
        for name in ("billing", "uvicorn", "uvicorn.error", "aiohttp"):
            logging.getLogger(name).setLevel(logging.WARNING)


def _gauge(metric) -> int:
    return int(sum(sample.value for family in metric.collect() for sample in family.samples))


def _counter(metric) -> int:
    """A prometheus Counter's total (all label sets), without collecting the whole registry."""
    return int(sum(sample.value for family in metric.collect() for sample in family.samples
                   if sample.name.endswith("_total")))


async def _start_api(settings: Settings, clock) -> tuple[object, asyncio.Task, str]:
    import uvicorn

    from billing.api import create_app

    app = create_app(settings, clock=clock)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # older uvicorn; newer ones restore handlers on exit
    task = asyncio.create_task(server.serve(sockets=[sock]), name="api")
    for _ in range(500):
        if server.started:
            break
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    return server, task, f"http://127.0.0.1:{port}"


# The step's signups in two statements, each calling the SQL API once per row: the customer
# (with the time zone) first, then the subscription at its own instant.
SIGNUP_CUSTOMERS = (
    "SELECT count(billing.upsert_customer(u.customer_id, u.timezone)) AS n "
    "FROM unnest(%(customer_ids)s::bigint[], %(timezones)s::text[]) AS u(customer_id, timezone)"
)
SIGNUP_SUBSCRIPTIONS = (
    "SELECT u.customer_id, (billing.create_subscription(u.key, u.customer_id, u.plan_code, u.at)).id AS id "
    "FROM unnest(%(keys)s::text[], %(customer_ids)s::bigint[], %(plan_codes)s::text[], %(ats)s::timestamptz[]) "
    "WITH ORDINALITY AS u(key, customer_id, plan_code, at, n) ORDER BY u.n"
)


async def _apply_signups(conn: psycopg.AsyncConnection, actions, sub_ids: dict[int, int]) -> None:
    customer_ids = [a.customer_id for a in actions]
    await conn.execute(SIGNUP_CUSTOMERS, {"customer_ids": customer_ids, "timezones": [a.timezone for a in actions]})
    cur = await conn.execute(SIGNUP_SUBSCRIPTIONS, {
        "keys": [f"demo-signup-{a.customer_id}" for a in actions], "customer_ids": customer_ids,
        "plan_codes": [a.plan_code for a in actions], "ats": [a.at for a in actions]})
    for row in await cur.fetchall():
        sub_ids[row["customer_id"]] = row["id"]


async def _apply_change(conn, a, sub_id: int) -> None:
    if a.kind in ("upgrade", "downgrade"):
        await conn.execute(db.CHANGE_PLAN, {"id": sub_id, "plan_code": a.plan_code, "now": a.at,
                                            "expected_version": None})
    elif a.kind in ("cancel_now", "cancel_at_end"):
        await conn.execute(db.CANCEL_SUBSCRIPTION, {"id": sub_id, "at_period_end": a.kind == "cancel_at_end",
                                                    "now": a.at, "expected_version": None})
    else:  # pragma: no cover - the scenario makes no other kind
        raise ValueError(a.kind)


def _estimate_renewals(sc: scenario_mod.Scenario) -> int:
    """About how many renewals the window holds if nobody cancels (for the progress bar only)."""
    per_plan = {p.code: p for p in sc.plans}
    end = sc.end
    total = 0
    for a in sc.actions:
        if a.kind != "signup" or a.at >= end:
            continue
        interval, at = per_plan[a.plan_code].interval, a.at
        if interval == "WEEK":
            total += (end - at).days // 7
        elif interval in ("MONTH", "YEAR"):
            months = (end.year - at.year) * 12 + end.month - at.month
            if (end.day, end.hour, end.minute) < (at.day, at.hour, at.minute):
                months -= 1
            total += max(0, months if interval == "MONTH" else months // 12)
        else:
            total += (end - at).days
    return total


async def simulate(settings: Settings, options: Options) -> RunResult:
    from billing.db import async_pool
    from billing.gateway.client import GatewayClient
    from billing.limiter import LocalGcraLimiter, RedisGcraLimiter
    from billing.worker.charging import Charger
    from billing.worker.relay import JsonlSink, KafkaSink, RelayOptions, run_relay
    from billing.metrics import CHARGES, CHARGES_IN_FLIGHT, OUTBOX_PUBLISHED
    from billing.worker.renewal import renew_due

    if not options.quiet:
        _quiet_logs()
    t0 = time.monotonic()
    say = (lambda *a, **k: None) if options.quiet else (lambda text: print(text, flush=True))
    rate = options.rate
    if options.hour_seconds is None:
        options.hour_seconds = max(options.subscriptions / 40, 1) / rate
    if rate < 1 or options.subscriptions < 1 or options.hour_seconds <= 0 or not 1 <= options.step_minutes <= 1440 \
            or not 1 <= options.quiet_step_hours <= 24:
        raise ValueError("rate and subscriptions must be positive, hour-seconds > 0, step 1..1440 minutes, "
                         "quiet step 1..24 hours")
    run_id = datetime.now(UTC).strftime("%Y%m%d%H%M%S")

    # 1. A fresh database.
    url = demo_database_url(settings.database_url)
    say(f"database   {_display_url(url)} (dropped and created again)")
    await asyncio.to_thread(recreate_database, url)
    await asyncio.to_thread(migrate, url, settings.db_dir)

    # 2. The world.
    sc = await asyncio.to_thread(scenario_mod.build, options.subscriptions, options.seed)
    if options.days:
        sc.end = min(sc.end, sc.start + timedelta(days=options.days))
    counts = sc.counts()
    say(f"scenario   {options.subscriptions:,} subscriptions on {len(sc.plans)} plans in "
        f"{len(scenario_mod.REGIONS)} currencies; {sum(counts.values()) - counts.get('signup', 0):,} plan changes "
        f"and cancellations; {sc.start:%Y-%m-%d %H:%M} .. {sc.end:%Y-%m-%d %H:%M} UTC")

    clock = SimulatedClock(sc.start)
    secret = _secrets.token_hex(16)
    settings = settings.with_overrides(
        database_url=url, gateway_rate=rate, webhook_secret=secret,
        charge_lease_seconds=CHARGE_LEASE.total_seconds(), gateway_timeout_seconds=GATEWAY_TIMEOUT_SECONDS)

    async with await psycopg.AsyncConnection.connect(url, autocommit=True,
                                                      row_factory=psycopg.rows.dict_row) as conn:
        for p in sc.plans:
            await conn.execute(db.UPSERT_PLAN, {"code": p.code, "price": p.price, "currency": p.currency,
                                                "interval": p.interval, "count": p.count})

    # 3. The HTTP API (webhooks), the gateway, the limiter, the event sink.
    server, api_task, api_url = await _start_api(settings, clock)
    gateway = GatewayProcess(
        rate=rate, decline_rate=options.decline_rate, timeout_rate=options.timeout_rate,
        error_rate=options.error_rate, latency_ms=options.latency_ms,
        webhook_url=f"{api_url}/webhooks/payments", webhook_secret=secret,
        webhook_duplicate_rate=options.webhook_duplicate_rate, webhook_delay_ms=(0, 1500),
        seed=options.seed, timeout_hold_seconds=GATEWAY_TIMEOUT_SECONDS * 2)
    gateway_url = await gateway.start()
    settings = settings.with_overrides(gateway_url=gateway_url)
    if settings.redis_url:
        limiter = RedisGcraLimiter(settings.redis_url, rate, key=f"billing:demo:{run_id}")
        limiter_name = f"Redis GCRA ({settings.redis_url})"
    else:
        limiter = LocalGcraLimiter(rate)
        limiter_name = "in-process GCRA (no BILLING_REDIS_URL)"
    if settings.kafka_bootstrap:
        topic = f"{settings.kafka_topic}.demo-{run_id}"
        await asyncio.to_thread(_create_topic, settings.kafka_bootstrap, topic)
        sink = KafkaSink(settings.kafka_bootstrap, topic)
        events_source = f"Kafka topic {topic} at {settings.kafka_bootstrap}"
    else:
        events_path = Path(options.events or Path(options.report).with_suffix(".events.jsonl"))
        events_path.unlink(missing_ok=True)
        sink = JsonlSink(events_path)
        events_source = f"JSON-lines file {events_path}"
    say(f"gateway    simulator at {gateway_url}: limit {rate}/s, declines ~{options.decline_rate:.0%}, "
        f"timeouts after charging {options.timeout_rate:.0%}, 5xx {options.error_rate:.0%}, "
        f"webhooks to {api_url} ({options.webhook_duplicate_rate:.0%} sent twice)")
    say(f"limiter    {limiter_name}")
    say(f"events     {events_source}")
    cap = round(rate * options.hour_seconds)
    say(f"clock      steps of {options.step_minutes} simulated minutes on the peak days, "
        f"{options.quiet_step_hours} h on the others; at most {options.hour_seconds:.3g} s of "
        f"real time per simulated hour, so at most {cap:,} charges per simulated hour at {rate}/s")

    # 4. The worker's parts, as `billing worker` composes them.
    pool = await async_pool(url, min_size=2, max_size=12, name="billing-demo-worker")
    client = GatewayClient(gateway_url, timeout=GATEWAY_TIMEOUT_SECONDS)
    concurrency = options.concurrency or max(16, min(512, rate // 12))
    charger = Charger(pool, client, limiter, rate=rate, clock=clock, concurrency=concurrency,
                      lease_seconds=CHARGE_LEASE.total_seconds(), poll_seconds=CHARGE_POLL_SECONDS)
    stop = asyncio.Event()
    charge_task = asyncio.create_task(charger.run(stop), name="charging")
    relay_task = asyncio.create_task(
        run_relay(settings, stop, sink=sink, clock=clock, options=RelayOptions(lease=RELAY_LEASE, poll_interval=0.2)),
        name="relay")
    setup_seconds = time.monotonic() - t0

    progress = Progress(["simulated time", "renewals created", "charges resolved", "events published"])
    if options.quiet:
        progress.stream = open(os.devnull, "w")  # noqa: SIM115
        progress.tty = False
    expected_renewals = max(1, await asyncio.to_thread(_estimate_renewals, sc))
    say("")
    samples: list[Sample] = []
    rejections: dict[str, int] = {}
    renewals = 0
    sub_ids: dict[int, int] = {}
    actions = sc.actions
    next_action = 0
    fine = timedelta(minutes=options.step_minutes)
    coarse = timedelta(hours=options.quiet_step_hours)
    sim_started = time.monotonic()
    window = (sc.end - sc.start).total_seconds()

    actions_conn = await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row)
    probe = await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row)

    async def chargeable(now: datetime) -> int:
        cur = await probe.execute(
            "SELECT count(*) AS n FROM billing.invoice WHERE status = 'OPEN' AND next_attempt_at <= %(now)s",
            {"now": now})
        return (await cur.fetchone())["n"]

    def calls() -> int:
        return _counter(CHARGES)  # gateway calls made, as the charge workers counted them

    def refresh(now: datetime, backlog: int, force: bool = False) -> None:
        if not force and time.monotonic() - progress._last < progress.interval:
            return
        done = int((now - sc.start).total_seconds())
        progress.update("simulated time", done, int(window), f"{now:%a %d %b %H:%M} UTC")
        progress.update("renewals created", renewals, max(expected_renewals, renewals), f"{renewals:,}")
        resolved = charger.counts["recorded"]
        progress.update("charges resolved", resolved, resolved + backlog,
                        f"{resolved:,} gateway calls, queue {backlog:,}")
        published = _counter(OUTBOX_PUBLISHED)
        progress.update("events published", published, max(published, _written[0]), f"{published:,}")
        progress.draw(force)

    _written = [0]

    async def outbox_written() -> int:
        cur = await probe.execute("SELECT count(*) AS n FROM billing.outbox_event")
        return (await cur.fetchone())["n"]

    try:
        now = sc.start
        while now < sc.end:
            previous = now
            now = next_step(now, fine, coarse, sc.peaks, sc.end)
            budget = options.hour_seconds * (now - previous).total_seconds() / 3600
            clock.set(now)
            # Customer actions of this step, each at its own instant.
            batch = []
            while next_action < len(actions) and actions[next_action].at <= now:
                batch.append(actions[next_action])
                next_action += 1
            signups = [a for a in batch if a.kind == "signup"]
            if signups:
                await _apply_signups(actions_conn, signups, sub_ids)
            for a in batch:
                if a.kind == "signup":
                    continue
                try:
                    await _apply_change(actions_conn, a, sub_ids[a.customer_id])
                except psycopg.Error as exc:
                    err = db.contract_error(exc)
                    if err is None:
                        raise
                    # e.g. a customer canceling a subscription that dunning already canceled
                    rejections[f"{a.kind} {err.code}"] = rejections.get(f"{a.kind} {err.code}", 0) + 1
            # The renewal pass, then the charge workers have until the budget is spent.
            renewals += await renew_due(pool, clock)
            step_started = time.monotonic()
            while True:
                # The step is done when every due invoice has at least reached the gateway: a call
                # on the wire (a timeout takes a second) finishes during the next step. Claimed work
                # still waiting in this process needs no query; only an idle charger needs the table.
                waiting = charger.held() - _gauge(CHARGES_IN_FLIGHT)
                backlog = waiting or await chargeable(now)
                if backlog == 0 or time.monotonic() - step_started >= budget:
                    break
                refresh(now, backlog)
                await asyncio.sleep(0.004)
            # The queue at the end of the step: due, and not yet sent to the gateway.
            backlog = await chargeable(now) + max(0, charger.held() - _gauge(CHARGES_IN_FLIGHT))
            if time.monotonic() - progress._last > progress.interval:
                _written[0] = await outbox_written()
            samples.append(Sample(now, time.monotonic() - sim_started, backlog, calls(), renewals,
                                  _counter(OUTBOX_PUBLISHED)))
            refresh(now, backlog)

        # 5. The end of the window: let the queue, the webhooks and the relay finish.
        while True:
            renewals += await renew_due(pool, clock)
            backlog = await chargeable(now) + charger.held()
            if backlog == 0:
                break
            refresh(now, backlog)
            await asyncio.sleep(0.01)
        # Bounded, so that a stuck piece ends the run (and the invariants then say what is missing).
        deadline = time.monotonic() + FINISH_SECONDS
        while await gateway.pending_webhooks() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        while time.monotonic() < deadline:
            _written[0] = await outbox_written()
            cur = await probe.execute("SELECT count(*) AS n FROM billing.outbox_event WHERE status = 'PENDING'")
            if (await cur.fetchone())["n"] == 0 and charger.held() == 0:
                break
            refresh(now, 0)
            await asyncio.sleep(0.05)
        samples.append(Sample(now, time.monotonic() - sim_started, 0, calls(), renewals,
                              _counter(OUTBOX_PUBLISHED)))
        refresh(now, 0, force=True)
        progress.close()
        simulate_seconds = time.monotonic() - sim_started
    finally:
        stop.set()
        await asyncio.gather(charge_task, relay_task, return_exceptions=True)
        await actions_conn.close()
        await probe.close()
        await pool.close()
        await client.close()
        close = getattr(limiter, "close", None)
        if close is not None:
            await close()
        if not settings.kafka_bootstrap:
            sink.close()
        try:
            ledger = await gateway.ledger()
            accepted = await gateway.accepted_times()
            stats = await gateway.stats()
        finally:
            await gateway.close()
        server.should_exit = True
        await asyncio.gather(api_task, return_exceptions=True)

    # 6. The invariants, from the database, the ledger and the event stream.
    say("\nchecking the invariants (database, gateway ledger, event stream)...")
    if settings.kafka_bootstrap:
        events = await asyncio.to_thread(invariants.load_kafka_events, settings.kafka_bootstrap, topic)
    else:
        events = invariants.load_jsonl_events(events_path)
    checks = await asyncio.to_thread(
        invariants.check_all, url, ledger=ledger, events=events, rate=rate, now=sc.end,
        accepted_times=accepted, reported_max_window=stats.get("maxWindow"))
    result = RunResult(
        options=options, database_url=url, events_source=events_source, started=sc.start, ended=sc.end,
        real_seconds=time.monotonic() - t0, setup_seconds=setup_seconds, simulate_seconds=simulate_seconds,
        samples=samples, action_counts=counts, action_rejections=rejections,
        simulator_stats={k: v for k, v in stats.items() if k != "perSecond"}, checks=checks, limiter=limiter_name,
        ledger=ledger, accepted_times=accepted, events_path=None if settings.kafka_bootstrap else events_path)
    result.stats = await asyncio.to_thread(report_mod.collect, url, result)
    return result


def next_step(now: datetime, fine: timedelta, coarse: timedelta, peaks, end: datetime) -> datetime:
    """The next instant of the clock: `fine` steps within a peak window, `coarse` ones elsewhere
    (aligned on multiples of `coarse` from midnight UTC, never stepping over a peak's start)."""
    for a, b in peaks:
        if a <= now < b:
            return min(now + fine, b, end)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    n = int((now - midnight) / coarse) + 1
    target = midnight + n * coarse
    for a, _ in peaks:
        if now < a < target:
            target = a
    return min(target, end)


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    futures[topic].result(timeout=60)
