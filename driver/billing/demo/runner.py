"""`billing demo`: the engine's real work on a simulated clock, then the report and the invariants.

What runs, each piece the production code:
* PostgreSQL: a fresh database (dropped and created again at every run), migrated;
* the gateway simulator (`billing.demo.gateway`: the simulator in a process of its own, so that
  its HTTP work has a core of its own) on a free port, with declines, timeouts after charging,
  5xx, latency, and signed webhooks (late, out of order, some duplicated) sent to
* the HTTP API (`billing.api.create_app`, served by uvicorn on a free port in this process) whose
  `/webhooks/payments` checks each signature and applies it through `apply_gateway_webhook`;
* the worker's parts, in this process: the renewal pass (`renew_due`), the charge workers
  (`Charger.run`) with the GCRA limiter (Redis when BILLING_REDIS_URL is set, else the same GCRA
  in process) and the outbox relay (`run_relay`) into Kafka when BILLING_KAFKA_BOOTSTRAP is set,
  else a JSON-lines file.

Time. The SQL API gets `p_now` from a simulated clock that moves in steps (one simulated hour on
the peak days, six on the others, by default). At each step the customers' actions of that hour
are applied at their own instants, the renewal pass invoices what fell due, and the charge workers
charge in real time through the real limiter. A step ends when every invoice due has reached the
gateway, or after its share of real time, `--hour-seconds` per simulated hour: then the clock
moves on and what is left waits in the queue. So the gateway's limit of R calls per real second
allows at most R x hour-seconds charges per simulated hour; quiet hours take only the time their
work needs.

`simulate` is a `Simulation` taken through its steps: prepare the database, build the world,
start the parts, run the window step by step, drain, stop the parts, check the invariants.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

from billing import db
from billing.clock import SimulatedClock
from billing.config import Settings
from billing.demo import documents, figures, invariants, report, scenario as scenario_mod
from billing.demo import usage as usage_mod
from billing.demo.actions import apply_actions, estimate_renewals, next_step
from billing.demo.gateway import GatewayProcess
from billing.demo.model import Options, Phases, RunResult, Sample, exit_status
from billing.demo.progress import Progress
from billing.demo.services import (
    demo_database_url, display_url, event_target, recreate_database, start_api)
from billing.demo.worker import CHARGE_LEASE, DemoWorker, start_worker
from billing.metrics import CHARGES, OUTBOX_PUBLISHED
from billing.migrate import migrate
from billing.worker.renewal import finalize_waiting, rate_due_usage, renew_due

__all__ = ["Options", "RunResult", "Sample", "exit_status", "run", "simulate"]

log = logging.getLogger("billing.demo")

UTC = timezone.utc

GATEWAY_TIMEOUT_SECONDS = 1.0
# At the end, how long the late webhooks and the relay may take to finish.
FINISH_SECONDS = 300


def run(settings: Settings, *, serve: bool = False, serve_host: str = "127.0.0.1", serve_port: int = 8080,
        **kwargs) -> int:
    """Run the demo; the process exit status (0 when every invariant holds). `serve`: afterwards,
    keep the HTTP API and its console running on the demo's data until interrupted."""
    options = Options(**{k: v for k, v in kwargs.items() if v is not None})
    result = asyncio.run(simulate(settings, options))
    report_path = Path(options.report)
    with result.phases("sample invoices"):
        result.stats["sample_invoices"] = documents.write_samples(result.database_url, settings, report_path)
    with result.phases("report"):
        report.write_html(result, report_path)
    out = sys.stdout
    out.write(report.terminal_summary(result))
    out.write(f"\nreport: {report_path.resolve()}\n")
    status = exit_status(result.checks)
    if serve:
        serve_console(settings, result, host=serve_host, port=serve_port, out=out)
    return status


def serve_console(settings: Settings, result: RunResult, *, host: str, port: int, out=sys.stdout) -> None:
    """`billing demo --serve`: the console on the demo's database, its clock stopped at the end of
    the simulated window (so its figures and actions are those of that moment), until Ctrl-C.
    Prints the console's URL and a key of the subscriptions:read scope made for it."""
    from billing.api.serving import serve_app
    from billing.api_keys import create_key

    key = create_key(result.database_url, "demo console (read)", ["subscriptions:read"], actor="demo")
    out.write(f"\nconsole: http://{host}:{port}/console/  (the clock stands at {result.ended:%Y-%m-%d %H:%M} UTC, "
              f"the end of the simulation)\nread key: {key.key}\n"
              f"to act as well: billing api-key create --name me --scope admin --database-url <the demo database>\n"
              f"Ctrl-C stops it.\n")
    out.flush()
    serve_app(settings.with_overrides(database_url=result.database_url), host=host, port=port,
              clock=SimulatedClock(result.ended))


async def simulate(settings: Settings, options: Options) -> RunResult:
    options.validate()
    if not options.quiet:
        _quiet_logs()
    sim = Simulation(settings, options)
    await sim.prepare_database()
    await sim.build_world()
    await sim.start_parts()
    try:
        await sim.run_window()
        await sim.drain()
        await sim.send_emails()
    finally:
        await sim.stop_parts()
    return await sim.check()


def _quiet_logs() -> None:
    root = logging.getLogger()
    if root.level > logging.DEBUG:
        for name in ("billing", "uvicorn", "uvicorn.error", "aiohttp", "httpx"):
            logging.getLogger(name).setLevel(logging.WARNING)


def _counter(metric) -> int:
    """A prometheus Counter's total (all label sets), without collecting the whole registry."""
    return int(sum(sample.value for family in metric.collect() for sample in family.samples
                   if sample.name.endswith("_total")))


class Simulation:
    """One run of the demo; each method is one step of `simulate`, in order."""

    def __init__(self, settings: Settings, options: Options) -> None:
        self.settings = settings
        self.options = options
        self.t0 = time.monotonic()
        self.run_id = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
        self.url = demo_database_url(settings.database_url)
        self.samples: list[Sample] = []
        self.rejections: dict[str, int] = {}
        self.sub_ids: dict[int, int] = {}
        self.renewals = 0
        self.written = 0  # outbox events written so far (the progress bar's total)
        self.next_action = 0
        self.phases = Phases()  # where the wall clock goes (printed at the end, and in the report)

    def say(self, text: str) -> None:
        if not self.options.quiet:
            print(text, flush=True)

    # -- 1. a fresh database -------------------------------------------------------------------

    async def prepare_database(self) -> None:
        self.say(f"database   {display_url(self.url)} (dropped and created again)")
        with self.phases("database"):
            await asyncio.to_thread(recreate_database, self.url)
        with self.phases("migrate"):
            await asyncio.to_thread(migrate, self.url, self.settings.db_dir, simulation=True)

    # -- 2. the world --------------------------------------------------------------------------

    async def build_world(self) -> None:
        with self.phases("world"):
            await self._build_world()

    async def _build_world(self) -> None:
        o = self.options
        sc = self.sc = await asyncio.to_thread(scenario_mod.build, o.subscriptions, o.seed)
        if o.days:
            sc.end = min(sc.end, sc.start + timedelta(days=o.days))
        counts = self.counts = sc.counts()
        self.say(f"scenario   {o.subscriptions:,} subscriptions on {len(sc.plans)} plans in "
                 f"{len(scenario_mod.REGIONS)} currencies; {sum(counts.values()) - counts.get('signup', 0):,} "
                 f"plan changes and cancellations; {sc.start:%Y-%m-%d %H:%M} .. {sc.end:%Y-%m-%d %H:%M} UTC")
        self.clock = SimulatedClock(sc.start)
        self.secret = secrets.token_hex(16)
        self.settings = self.settings.with_overrides(
            database_url=self.url, gateway_rate=o.rate, webhook_secret=self.secret,
            charge_lease_seconds=CHARGE_LEASE.total_seconds(), gateway_timeout_seconds=GATEWAY_TIMEOUT_SECONDS)
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True,
                                                          row_factory=psycopg.rows.dict_row) as conn:
            for p in sc.plans:
                await conn.execute(db.UPSERT_PLAN, {"code": p.code, "price": p.price, "currency": p.currency,
                                                    "interval": p.interval, "count": p.count})
            await conn.execute(db.DEMO_CAMPAIGN_COUPON, {"code": scenario_mod.CAMPAIGN_COUPON,
                                                           "until": scenario_mod.CAMPAIGN_COUPON_UNTIL})
            for code, country, region, name, bp, inclusive in scenario_mod.TAX_RATES:
                await conn.execute(db.DEMO_TAX_RATE, {"code": code, "country": country, "region": region,
                                                      "name": name, "bp": bp, "inclusive": inclusive})
            # The API product: its meter and its plans' per-request charges (billing.demo.usage).
            self.usage = usage_mod.UsageStream(self.settings, sc, self.clock, self.run_id, self.url, self.phases)
            await self.usage.define(conn, sc.start)

    # -- 3. the HTTP API (webhooks), the gateway, the event target, the worker ------------------

    async def start_parts(self) -> None:
        o = self.options
        started = time.monotonic()
        self.api = await start_api(self.settings, self.clock)
        self.gateway = GatewayProcess(
            rate=o.rate, decline_rate=o.decline_rate, timeout_rate=o.timeout_rate, error_rate=o.error_rate,
            latency_ms=o.latency_ms, webhook_url=f"{self.api.url}/webhooks/payments", webhook_secret=self.secret,
            webhook_duplicate_rate=o.webhook_duplicate_rate, webhook_delay_ms=(0, 1500), seed=o.seed,
            timeout_hold_seconds=GATEWAY_TIMEOUT_SECONDS * 2)
        gateway_url = await self.gateway.start()
        self.settings = self.settings.with_overrides(gateway_url=gateway_url)
        self.events = await event_target(self.settings, self.run_id, o.events, o.report)
        self.worker: DemoWorker = await start_worker(self.settings, self.clock, o, self.run_id, self.events)
        self.phases.add("parts", time.monotonic() - started)
        with self.phases("usage consumer"):
            await self.usage.start()
        self.say(f"gateway    simulator at {gateway_url}: limit {o.rate}/s, declines ~{o.decline_rate:.0%}, "
                 f"timeouts after charging {o.timeout_rate:.0%}, 5xx {o.error_rate:.0%}, "
                 f"webhooks to {self.api.url} ({o.webhook_duplicate_rate:.0%} sent twice)")
        self.say(f"limiter    {self.worker.limiter_name}")
        self.say(f"events     {self.events.source}")
        self.say(f"usage      {len(self.sc.api_rates):,} customers of the API product send requests through "
                 f"{self.usage.source}")
        self.say(f"clock      steps of {o.step_minutes} simulated minutes on the peak days, "
                 f"{o.quiet_step_hours} h on the others; at most {o.hour_seconds:.3g} s of "
                 f"real time per simulated hour, so at most {o.cap:,} charges per simulated hour at {o.rate}/s")
        self.setup_seconds = time.monotonic() - self.t0
        self.actions_conn = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, row_factory=psycopg.rows.dict_row)
        self.probe = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, row_factory=psycopg.rows.dict_row)
        self.progress = Progress(["simulated time", "renewals created", "charges resolved", "events published"],
                                 stream=open(os.devnull, "w") if o.quiet else None)  # noqa: SIM115
        self.expected_renewals = max(1, await asyncio.to_thread(estimate_renewals, self.sc))
        self.say("")

    # -- 4. the window, step by step -----------------------------------------------------------

    async def run_window(self) -> None:
        o, sc = self.options, self.sc
        fine = timedelta(minutes=o.step_minutes)
        coarse = timedelta(hours=o.quiet_step_hours)
        self.sim_started = time.monotonic()
        self.now = sc.start
        while self.now < sc.end:
            previous = self.now
            self.now = next_step(self.now, fine, coarse, sc.peaks, sc.end)
            await self.step(budget=o.hour_seconds * (self.now - previous).total_seconds() / 3600)

    async def step(self, budget: float) -> None:
        """One clock step: the customers' actions, the renewal pass, then the charge workers until
        every due invoice has reached the gateway or the step's real-time budget is spent."""
        now = self.now
        self.clock.set(now)
        phases = self.phases
        with phases("actions"):
            batch = self.actions_until(now)
            await apply_actions(self.actions_conn, batch, self.sub_ids, self.rejections)
        # The API customers' requests up to now, produced to Kafka: the usage consumer answers them
        # while the step goes on. A rating that may have work waits until it has answered every one
        # (an ended month is rated whole, once its grace is over: docs/usage.md); the steps where
        # no cursor is due (most of them) neither wait nor rate.
        self.usage.signups(batch)
        await self.usage.send(now)
        with phases("renewal"):
            self.renewals += await renew_due(self.worker.pool, self.clock)
        if await self.rating_may_be_due():
            await self.usage.wait()
            with phases("rating"):
                if await self.rate_usage() is not None:
                    self.usage.unfollowed = False
        with phases("finalize"):
            await finalize_waiting(self.worker.pool, self.clock)
        step_started = time.monotonic()
        while True:
            # The step is done when every due invoice has at least reached the gateway: a call
            # on the wire (a timeout takes a second) finishes during the next step. Claimed work
            # still waiting in this process needs no query; only an idle charger needs the table.
            backlog = self.worker.waiting() or await self.chargeable()
            if backlog == 0 or time.monotonic() - step_started >= budget:
                break
            self.refresh(backlog)
            await asyncio.sleep(0.004)
        phases.add("charging", time.monotonic() - step_started)
        # The queue at the end of the step: due, and not yet sent to the gateway.
        backlog = await self.chargeable() + max(0, self.worker.waiting())
        if self.progress.due():
            self.written = await self.count(db.DEMO_OUTBOX_WRITTEN)
        self.sample(backlog)
        self.refresh(backlog)

    def actions_until(self, now: datetime) -> list:
        """The customers' actions up to `now` not applied yet, in order."""
        actions = self.sc.actions
        start = self.next_action
        while self.next_action < len(actions) and actions[self.next_action].at <= now:
            self.next_action += 1
        return actions[start:self.next_action]

    # -- 5. the end of the window: the queue, the webhooks and the relay finish -----------------

    async def rate_usage(self) -> int | None:
        """The worker's rating step (rate_due_usage). As the worker's loop does, a call that lost a
        deadlock or a serialization conflict is tried again at the next step (counted, and shown in
        the report: None); any other error stops the demo."""
        try:
            return await rate_due_usage(self.worker.pool, self.clock, grace=self.settings.usage_grace)
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as exc:
            self.usage.retries[type(exc).__name__] += 1
            return None

    async def rating_may_be_due(self) -> bool:
        """Whether the rating may have work now: an API customer signed up since the last rating
        (its cursor is made by the rating's follow step), or db.DEMO_USAGE_MAY_BE_DUE (a superset of
        the cursors rate_usage rates). A step it skips has nothing to rate; were it ever wrong, the
        month would be rated at a later step (the drain rates every one), never with requests
        missing: every rating call waits for the consumer first."""
        if self.usage.unfollowed:
            return True
        with self.phases("rating probe"):
            return bool(await self.count(db.DEMO_USAGE_MAY_BE_DUE,
                                         {"now": self.now, "grace": self.settings.usage_grace}))

    async def drain(self) -> None:
        started = time.monotonic()
        await self.usage.wait()  # nothing is sent after the window: every request answered, then rated
        while True:
            self.renewals += await renew_due(self.worker.pool, self.clock)
            await self.rate_usage()
            await finalize_waiting(self.worker.pool, self.clock)
            backlog = await self.chargeable() + self.worker.charger.held()
            if backlog == 0:
                break
            self.refresh(backlog)
            await asyncio.sleep(0.01)
        self.phases.add("drain: charges", time.monotonic() - started)
        # Bounded, so that a stuck piece ends the run (and the invariants then say what is missing).
        deadline = time.monotonic() + FINISH_SECONDS
        started = time.monotonic()
        while await self.gateway.pending_webhooks() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        self.phases.add("drain: webhooks", time.monotonic() - started)
        started = time.monotonic()
        # Refunds still to execute: an UNKNOWN answer is retried 15 simulated minutes later, so the
        # clock moves on to each retry (nothing else is due by then: charges and renewals are done).
        while time.monotonic() < deadline:
            cur = await self.probe.execute(db.DEMO_REFUNDS_PENDING)
            pending = await cur.fetchone()
            if pending["n"] == 0:
                break
            if pending["next"] is not None and pending["next"] > self.clock.now():
                self.clock.set(pending["next"])
            await asyncio.sleep(0.1)
        self.phases.add("drain: refunds", time.monotonic() - started)
        started = time.monotonic()
        while time.monotonic() < deadline:
            self.written = await self.count(db.DEMO_OUTBOX_WRITTEN)
            if await self.count(db.DEMO_OUTBOX_PENDING) == 0 and self.worker.charger.held() == 0:
                break
            self.refresh(0)
            await asyncio.sleep(0.05)
        self.phases.add("drain: relay", time.monotonic() - started)
        self.sample(0)
        self.refresh(0, force=True)
        self.progress.close()
        self.simulate_seconds = time.monotonic() - self.sim_started

    # -- 5b. the emails of a sample of customers, to a Mailpit of the demo's own ----------------

    async def send_emails(self) -> None:
        with self.phases("emails"):
            await self._send_emails()

    async def _send_emails(self) -> None:
        from billing.config import REPO_ROOT
        from billing.demo import emails

        self.emails, self.mailpit_url = [], None
        if not self.options.emails:
            return
        started = await emails.start_mailpit(REPO_ROOT)
        if started is None:
            self.say("emails     no Mailpit (scripts/services/mailpit.sh could not start one): none sent")
            return
        smtp_url, web_url, ca_file = started
        settings = self.settings.with_overrides(smtp_url=smtp_url, smtp_ca_file=ca_file,
                                                portal_url=f"{self.api.url}/portal")
        self.emails = await emails.send_sample(settings, self.clock, self.url, web_url)
        self.mailpit_url = web_url
        self.say(f"emails     {len(self.emails)} emails of {len(emails.SAMPLE_LOCALES)} customers (one per language) "
                 f"sent to Mailpit: {web_url}")

    # -- 6. stop everything, keeping what the gateway saw ---------------------------------------

    async def stop_parts(self) -> None:
        with self.phases("stop"):
            await self._stop_parts()

    async def _stop_parts(self) -> None:
        try:
            if hasattr(self, "usage"):
                await self.usage.close()
            await self.worker.close()
            for conn in (getattr(self, "actions_conn", None), getattr(self, "probe", None)):
                if conn is not None:
                    await conn.close()
            try:
                self.ledger = await self.gateway.ledger()
                self.accepted = await self.gateway.accepted_times()
                self.stats = await self.gateway.stats()
            finally:
                await self.gateway.close()
            await self.read_back_through_api()
        finally:
            await self.api.stop()

    async def read_back_through_api(self, sample: int = 25) -> None:
        """The HTTP API with a key the demo made for itself (subscriptions:read): a sample of
        subscriptions read back must equal the database's rows. A refused key stops the demo."""
        import random

        import httpx

        from billing.api_keys import create_key

        key = await asyncio.to_thread(create_key, self.url, f"demo {self.run_id}", ["subscriptions:read"],
                                      actor="demo")
        ids = random.Random(self.options.seed).sample(sorted(self.sub_ids.values()), min(sample, len(self.sub_ids)))
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True,
                                                          row_factory=psycopg.rows.dict_row) as conn:
            want = {}
            for sub_id in ids:  # the SQL API's own read (billing_readonly's get_subscription)
                cur = await conn.execute(db.API_GET_SUBSCRIPTION, {"id": sub_id})
                row = await cur.fetchone()
                want[sub_id] = (row["status"], row["version"])
        async with httpx.AsyncClient(base_url=self.api.url, timeout=10,
                                     headers={"Authorization": f"Bearer {key.key}"}) as client:
            for sub_id in ids:
                r = await client.get(f"/subscriptions/{sub_id}")
                if r.status_code != 200 or (r.json()["status"], r.json()["version"]) != want[sub_id]:
                    raise RuntimeError(f"the HTTP API answered {r.status_code} {r.text[:200]} for subscription "
                                       f"{sub_id}; the database has {want[sub_id]}")
            refused = await client.get(f"/subscriptions/{ids[0]}", headers={"Authorization": "Bearer bk_nobody"})
            if refused.status_code != 401:
                raise RuntimeError(f"the HTTP API let an unknown key in: {refused.status_code}")
        self.say(f"api        {len(ids)} subscriptions read back through the HTTP API with the demo's own key "
                 f"{key.key_id} (subscriptions:read); an unknown key: 401")

    # -- 7. the invariants, from the database, the ledger and the event stream -------------------

    async def check(self) -> RunResult:
        self.say("\nchecking the invariants (database, gateway ledger, event stream)...")
        with self.phases("check: events read"):
            if self.events.topic:
                events = await asyncio.to_thread(invariants.load_kafka_events, self.settings.kafka_bootstrap,
                                                 self.events.topic)
            else:
                events = invariants.load_jsonl_events(self.events.path)
        with self.phases("check: invariants"):
            checks = await asyncio.to_thread(
                invariants.check_all, self.url, ledger=self.ledger, events=events, rate=self.options.rate,
                now=self.sc.end, accepted_times=self.accepted, reported_max_window=self.stats.get("maxWindow"))
            checks += await asyncio.to_thread(self.check_usage)
        result = RunResult(
            options=self.options, database_url=self.url, events_source=self.events.source,
            started=self.sc.start, ended=self.sc.end, real_seconds=time.monotonic() - self.t0,
            setup_seconds=self.setup_seconds, simulate_seconds=self.simulate_seconds, samples=self.samples,
            action_counts=self.counts, action_rejections=self.rejections,
            simulator_stats={k: v for k, v in self.stats.items() if k != "perSecond"}, checks=checks,
            limiter=self.worker.limiter_name, ledger=self.ledger, accepted_times=self.accepted,
            events_path=self.events.path, emails=getattr(self, "emails", []),
            mailpit_url=getattr(self, "mailpit_url", None), usage_sent=self.usage.sent,
            usage_subscriptions=self.api_subscriptions(), phases=self.phases)
        with self.phases("figures"):
            result.stats = await asyncio.to_thread(figures.collect, self.url, result)
            result.stats["usage"] = {**self.usage.figures(),
                                     "invoices": await asyncio.to_thread(self.usage_invoices)}
        return result

    def check_usage(self) -> list:
        """The API product's two invariants (billing.demo.usage), from the database against the
        stream's own record of the requests it sent."""
        with psycopg.connect(self.url, row_factory=psycopg.rows.dict_row) as conn:
            return [usage_mod.check_counted_once(conn, self.usage.sent, self.usage.figures()),
                    usage_mod.check_rated(conn, self.usage.sent, self.api_subscriptions(), self.sc.end,
                                          timedelta(seconds=self.settings.usage_grace))]

    def api_subscriptions(self) -> dict[int, tuple[int, str]]:
        """The API product's subscriptions as the demo made them: id -> (customer, currency)."""
        currency = {a.customer_id: a.plan_code.rsplit("_", 1)[1] for a in self.sc.actions
                    if a.kind == "signup" and a.customer_id in self.sc.api_rates}
        return {self.sub_ids[c]: (c, cur) for c, cur in currency.items() if c in self.sub_ids}

    def usage_invoices(self) -> list[dict]:
        with psycopg.connect(self.url, row_factory=psycopg.rows.dict_row) as conn:
            return usage_mod.usage_figures(conn)

    # -- probes and progress --------------------------------------------------------------------

    async def count(self, query: str, params: dict | None = None) -> int:
        cur = await self.probe.execute(query, params)
        return (await cur.fetchone())["n"]

    async def chargeable(self) -> int:
        """Invoices due at the clock's instant and not yet claimed."""
        return await self.count(db.DEMO_CHARGEABLE, {"now": self.now})

    def sample(self, backlog: int) -> None:
        self.samples.append(Sample(self.now, time.monotonic() - self.sim_started, backlog, _counter(CHARGES),
                                   self.renewals, _counter(OUTBOX_PUBLISHED)))

    def refresh(self, backlog: int, force: bool = False) -> None:
        if not force and not self.progress.due():
            return
        sc, now, progress = self.sc, self.now, self.progress
        progress.update("simulated time", int((now - sc.start).total_seconds()),
                        int((sc.end - sc.start).total_seconds()), f"{now:%a %d %b %H:%M} UTC")
        progress.update("renewals created", self.renewals, max(self.expected_renewals, self.renewals),
                        f"{self.renewals:,}")
        resolved = self.worker.charger.counts["recorded"]
        progress.update("charges resolved", resolved, resolved + backlog,
                        f"{resolved:,} gateway calls, queue {backlog:,}")
        published = _counter(OUTBOX_PUBLISHED)
        progress.update("events published", published, max(published, self.written), f"{published:,}")
        progress.draw(force)
