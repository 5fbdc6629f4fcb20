"""The demo's API product (issue 29, docs/usage.md): its meter and charges, the requests its
customers send during the simulated months, streamed through Kafka into the usage consumer, and
the two invariants of usage.

* `UsageStream` makes the meter `api_requests` and the charge of each `API_MONTHLY_<currency>` plan
  (graduated per request, billing.demo.scenario.API_TIERS), then at every clock step generates the
  requests of the step's span for each API customer already signed up (a Poisson stream at the
  customer's own rate), sends 5% of them twice (a producer's retry), and produces them to the run's
  usage topic. The consumer (`billing.usage.UsageConsumer`, the production one, in a thread of this
  process on the simulated clock) ingests them in batches, one transaction each, and commits its
  offsets after the database; the step waits until every message produced was answered, so the
  rating that follows sees the span whole. Without Kafka the same texts go through the JSON-text
  door (`billing.usage.ingest_texts`, billing.ingest_usage_batch) directly, which answers as the
  consumer's parsed door does (db/tests/712, driver/tests/test_usage_columns.py).
* The stream keeps its own record of every request it sent (customer, time, source, id): the
  independent witness the invariants compare the database with (`check_counted_once`,
  `check_rated`): every request stored and counted once, and every rated quantity equal to the
  number of requests the stream sent in the rated span, at the amount the tiers give for it.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from fractions import Fraction

import psycopg

from billing import db
from billing.checks import Check
from billing.demo import scenario as scenario_mod

UTC = timezone.utc
DUPLICATE_SHARE = 0.05  # of the requests sent twice (a retry after a lost acknowledgement)
INGESTED_TIMEOUT_SECONDS = 120.0  # a step waits at most this long for the consumer to answer
MAX_EXAMPLES = 5


@dataclass
class Sent:
    """The stream's own record: what it sent, independently of the database."""

    events: dict[tuple[int, str, str], datetime] = field(default_factory=dict)  # (customer, source, id) -> time
    messages: int = 0  # messages produced, duplicates included
    duplicates: int = 0  # of which second copies

    def times_by_customer(self) -> dict[int, list[datetime]]:
        out: dict[int, list[datetime]] = defaultdict(list)
        for (customer_id, _source, _id), at in self.events.items():
            out[customer_id].append(at)
        for times in out.values():
            times.sort()
        return out


def _rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


class UsageStream:
    def __init__(self, settings, sc, clock, run_id: str, url: str, phases=None) -> None:
        from billing.demo.model import Phases

        self.settings, self.sc, self.clock, self.url = settings, sc, clock, url
        self.phases = phases if phases is not None else Phases()
        self.run_id = run_id
        self.rng = random.Random(sc.seed * 15485863 + 29)
        self.sent = Sent()
        self.signed_up: dict[int, datetime] = {}
        self.unfollowed = False  # an API customer signed up since the last rating call (runner)
        self.answers: Counter = Counter()
        self.reasons: Counter = Counter()
        self.retries: Counter = Counter()  # rating calls tried again at the next step (runner.rate_usage)
        self.seq = 0
        self.last = sc.start  # the requests before this instant are sent
        self.kafka = bool(settings.kafka_bootstrap)
        self.topic = f"{settings.usage_topic}.demo-{run_id}" if self.kafka else None
        self.ingest_seconds = 0.0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.consumer = None
        self.producer = None
        self.conn = None

    @property
    def source(self) -> str:
        return (f"Kafka topic {self.topic} into the usage consumer group" if self.kafka
                else "the usage consumer's database call (no Kafka)")

    # -- the catalogue: the meter and the plans' charges -------------------------------------------

    async def define(self, conn: psycopg.AsyncConnection, now: datetime) -> None:
        await conn.execute(db.DEMO_USAGE_METER, {"code": scenario_mod.API_METER, "type": scenario_mod.API_EVENT_TYPE,
                                          "now": now})
        for region in scenario_mod.REGIONS:
            # (the unit amounts written as the decimals they are: a JSON number, exact in numeric)
            tiers = "[" + ", ".join(
                f'{{"upTo": {"null" if t["upTo"] is None else t["upTo"]}, "unitAmount": {t["unitAmount"]}}}'
                for t in scenario_mod.api_tiers(region.currency)) + "]"
            await conn.execute(db.DEMO_USAGE_CHARGE, {
                "plan": scenario_mod.plan_code(scenario_mod.API_KIND, region.currency),
                "meter": scenario_mod.API_METER, "tiers": tiers,
                "included": scenario_mod.API_INCLUDED, "now": now})

    # -- the consumer -----------------------------------------------------------------------------

    async def start(self) -> None:
        from billing.usage import UsageConsumer

        if not self.kafka:
            self.conn = await asyncio.to_thread(psycopg.connect, self.url, autocommit=False)
            return
        from confluent_kafka import Producer

        from billing.demo.services import create_topic

        dead = f"{self.settings.usage_dead_letter_topic}.demo-{self.run_id}"
        for topic in (self.topic, dead):
            await asyncio.to_thread(create_topic, self.settings.kafka_bootstrap, topic)
        settings = self.settings.with_overrides(usage_topic=self.topic, usage_dead_letter_topic=dead,
                                                usage_group=f"{self.settings.usage_group}-demo-{self.run_id}")
        self.consumer = await asyncio.to_thread(UsageConsumer, settings, self.clock, poll_seconds=0.02)
        self.producer = Producer({"bootstrap.servers": self.settings.kafka_bootstrap, "enable.idempotence": True,
                                  "acks": "all", "linger.ms": 5})
        self._thread = threading.Thread(target=self._consume, name="demo-usage-consumer", daemon=True)
        self._thread.start()

    def _consume(self) -> None:
        c = self.consumer
        try:
            c.consumer.subscribe([c.settings.usage_topic])
            while not self._stop.is_set():
                c.step()
        except BaseException as exc:  # noqa: BLE001 - reported by the step that waits
            self._error = exc

    def _answered(self) -> int:
        if self.consumer is None:
            return sum(self.answers.values())
        s = self.consumer.stats
        return s.accepted + s.duplicate + s.rejected

    async def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 30)
            s = self.consumer.stats
            self.answers.update({"accepted": s.accepted, "duplicate": s.duplicate, "rejected": s.rejected})
            self.reasons.update(s.reasons)
            await asyncio.to_thread(self.consumer.close)
            await asyncio.to_thread(self.producer.flush, 10)
        if self.conn is not None:
            await asyncio.to_thread(self.conn.close)

    # -- one clock step ---------------------------------------------------------------------------

    def signups(self, actions) -> None:
        """Remembers when each API customer signed up (its requests start then)."""
        for a in actions:
            if a.kind == "signup" and a.customer_id in self.sc.api_rates:
                self.signed_up[a.customer_id] = a.at
                self.unfollowed = True

    def generate(self, start: datetime, end: datetime) -> list[tuple[int, str]]:
        """The requests of [start, end) of every API customer signed up: (customer, JSON text),
        duplicates included, shuffled; recorded in `self.sent`."""
        out: list[tuple[int, str]] = []
        for customer_id, since in self.signed_up.items():
            rate = self.sc.api_rates[customer_id]  # per hour
            at = max(start, since)
            source = f"api-gateway-{customer_id % 3 + 1}"
            while True:
                at = at + timedelta(hours=self.rng.expovariate(rate))
                if at >= end:
                    break
                self.seq += 1
                event_id = f"req-{self.seq}"
                text = json.dumps({"specversion": "1.0", "id": event_id, "source": source,
                                   "type": scenario_mod.API_EVENT_TYPE, "time": _rfc3339(at),
                                   "subject": str(customer_id),
                                   "data": {"path": self.rng.choice(("/v1/search", "/v1/items", "/v1/orders")),
                                            "status": 200}}, separators=(",", ":"))
                self.sent.events[(customer_id, source, event_id)] = at
                out.append((customer_id, text))
                if self.rng.random() < DUPLICATE_SHARE:
                    out.append((customer_id, text))
                    self.sent.duplicates += 1
        self.rng.shuffle(out)
        self.sent.messages += len(out)
        return out

    async def step(self, end: datetime) -> int:
        """Sends the requests from the last step's end to `end` and waits until every one was
        answered; how many messages were sent."""
        sent = await self.send(end)
        await self.wait()
        return sent

    async def send(self, end: datetime) -> int:
        """Sends the requests from the last step's end to `end`; how many messages were sent. With
        Kafka they are produced and the consumer answers them while the step goes on (`wait` waits
        for it: the runner does before any rating that may be due); without, the consumer's
        database call has answered them on return."""
        with self.phases("usage: generate"):
            batch = self.generate(self.last, end)
        self.last = end
        if not batch:
            return 0
        if self.kafka:
            with self.phases("usage: produce"):
                await asyncio.to_thread(self._produce, batch)
        else:
            started = time.monotonic()
            with self.phases("usage: ingest"):
                await asyncio.to_thread(self._ingest_directly, [text for _, text in batch])
            self.ingest_seconds += time.monotonic() - started
        return len(batch)

    def behind(self) -> int:
        """Messages sent and not answered yet by the consumer (0 without Kafka)."""
        return self.sent.messages - self._answered() if self.kafka else 0

    async def wait(self) -> None:
        """Waits until the consumer has answered every message sent so far (at once when it has)."""
        if self._error is not None:
            raise RuntimeError(f"the demo's usage consumer failed: {self._error!r}") from self._error
        if not self.kafka or self._answered() >= self.sent.messages:
            return
        started = time.monotonic()
        await asyncio.to_thread(self._flush)
        deadline = started + INGESTED_TIMEOUT_SECONDS
        while self._answered() < self.sent.messages:
            if self._error is not None:
                raise RuntimeError(f"the demo's usage consumer failed: {self._error!r}") from self._error
            if time.monotonic() > deadline:
                raise RuntimeError(f"the usage consumer answered {self._answered():,} of "
                                   f"{self.sent.messages:,} requests within {INGESTED_TIMEOUT_SECONDS:.0f} s")
            await asyncio.sleep(0.005)
        self.ingest_seconds += time.monotonic() - started
        self.phases.add("usage: consumer wait", time.monotonic() - started)

    def _produce(self, batch: list[tuple[int, str]]) -> None:
        """Hands the messages to the producer (sent within its linger); `wait` flushes them."""
        for customer_id, text in batch:
            while True:
                try:
                    self.producer.produce(self.topic, value=text.encode(), key=str(customer_id).encode(),
                                          on_delivery=self._delivered)
                    break
                except BufferError:
                    self.producer.poll(0.05)
        self.producer.poll(0)

    def _delivered(self, err, _msg) -> None:
        if err is not None and self._error is None:
            self._error = RuntimeError(f"the usage topic refused a request: {err}")

    def _flush(self) -> None:
        if self.producer.flush(60) != 0:
            raise RuntimeError("the usage topic did not take every request")

    def _ingest_directly(self, texts: list[str]) -> None:
        from billing.usage import KAFKA_MAX_BATCH, ingest_texts

        for i in range(0, len(texts), KAFKA_MAX_BATCH):
            with self.conn.transaction():
                answers = ingest_texts(self.conn, texts[i:i + KAFKA_MAX_BATCH], self.clock.now(), self.settings)
            for _ord, status, reason in answers:
                self.answers[status] += 1
                if reason:
                    self.reasons[reason] += 1

    def figures(self) -> dict:
        return {"source": self.source, "customers": len(self.sc.api_rates), "requests": len(self.sent.events),
                "messages": self.sent.messages, "duplicates": self.sent.duplicates,
                "answers": dict(self.answers), "reasons": dict(self.reasons), "rating_retries": dict(self.retries),
                "ingest_seconds": round(self.ingest_seconds, 1)}


# -- the invariants ------------------------------------------------------------------------------

def tier_amount(currency: str, quantity: int) -> int:
    """What API_MONTHLY_<currency> bills for `quantity` requests in a period, computed here in exact
    fractions from the scenario's tiers (not by the SQL under test): the included requests off, each
    tier's slice at its unit amount, rounded up to a whole minor unit once."""
    q = max(quantity - scenario_mod.API_INCLUDED, 0)
    total, low = Fraction(0), 0
    for tier in scenario_mod.api_tiers(currency):
        high = tier["upTo"]
        part = max(0, (q if high is None else min(q, high)) - low)
        total += part * Fraction(tier["unitAmount"])
        if high is None or q <= high:
            break
        low = high
    return math.ceil(total)


def check_counted_once(conn, sent: Sent, figures: dict) -> Check:
    """Every request the stream sent is stored once, its exactly-once key once, and counted once in
    the hourly rollups; the consumer answered each first copy `accepted` and each second `duplicate`."""
    examples: list[str] = []
    stored = conn.execute(db.WITNESS_USAGE_EVENTS, {"event_type": scenario_mod.API_EVENT_TYPE}).fetchall()
    keys = Counter((r["customer_id"], r["source"], r["event_id"]) for r in stored)
    twice = [k for k, n in keys.items() if n > 1]
    missing = [k for k in sent.events if k not in keys]
    phantom = [k for k in keys if k not in sent.events]
    moved = [(r["customer_id"], r["source"], r["event_id"]) for r in stored
             if sent.events.get((r["customer_id"], r["source"], r["event_id"]), r["event_time"]) != r["event_time"]]
    for k in twice[:MAX_EXAMPLES]:
        examples.append(f"request {k} stored {keys[k]} times")
    for k in missing[:MAX_EXAMPLES]:
        examples.append(f"request {k} sent but not stored")
    for k in phantom[:MAX_EXAMPLES]:
        examples.append(f"request {k} stored but never sent")
    for k in moved[:MAX_EXAMPLES]:
        examples.append(f"request {k} stored at another time than it was sent")
    counts = conn.execute(db.WITNESS_USAGE_COUNTS, {"meter": scenario_mod.API_METER}).fetchall()
    per_customer = Counter(k[0] for k in sent.events)
    # (the exactly-once keys of the API customers: only they send events in the demo)
    dedup = sum(r["keys"] for r in counts if r["customer_id"] in per_customer)
    if dedup != len(sent.events):
        examples.append(f"{dedup:,} exactly-once keys for {len(sent.events):,} requests")
    rolled = {r["customer_id"]: int(r["counted"]) for r in counts if r["counted"]}
    off = {c: (rolled.get(c, 0), n) for c, n in per_customer.items() if rolled.get(c, 0) != n}
    off.update({c: (n, 0) for c, n in rolled.items() if c not in per_customer})
    for c, (got, want) in list(off.items())[:MAX_EXAMPLES]:
        examples.append(f"customer {c}: the rollups count {got:,} requests, the stream sent {want:,}")
    answers = figures.get("answers", {})
    if (answers.get("accepted", 0), answers.get("duplicate", 0), answers.get("rejected", 0)) != \
            (len(sent.events), sent.duplicates, 0):
        examples.append(f"answers {answers}: expected {len(sent.events):,} accepted, {sent.duplicates:,} duplicate, "
                        f"0 rejected")
    ok = not examples and bool(sent.events)
    if not sent.events:
        examples.append("the stream sent no request")
    return Check(
        "every usage event counted once",
        promise="each request sent (5% of them twice) is stored once, keyed once and counted once in the rollups",
        ok=ok,
        figures=f"{len(sent.events):,} requests of {len(per_customer):,} customers sent as {sent.messages:,} messages "
        f"({sent.duplicates:,} twice) via {figures.get('source', '?')}; {len(stored):,} stored, {dedup:,} keys, "
        f"{sum(rolled.values()):,} counted in the rollups; answers {answers}",
        examples=examples,
    )


def check_rated(conn, sent: Sent, subscriptions: dict[int, tuple[int, str]], now: datetime,
                grace: timedelta) -> Check:
    """Per API subscription: each rated segment's quantity equals the number of requests the stream
    sent in it (its own record, not the database's), its amount the tiers' for that quantity
    (`tier_amount`), what its ratings billed sums to that amount and is on USAGE lines of USAGE
    invoices; the segments tile time from the first one with no gap or overlap, the first begins
    before the customer's first request, and they reach every period ended more than the grace ago
    (or the cancellation). `subscriptions`: the API subscriptions, id -> (customer, currency), as the
    demo made them."""
    times = sent.times_by_customer()
    due = now - grace
    subs = []
    for r in conn.execute(db.WITNESS_PERIODS).fetchall():
        if r["id"] not in subscriptions:
            continue
        customer_id, currency = subscriptions[r["id"]]
        ended = [e for k, e in zip(r["kinds"], r["ends"]) if k is not None and e <= due]
        subs.append({"id": r["id"], "customer_id": customer_id, "currency": currency, "status": r["status"],
                     "canceled_at": r["canceled_at"], "ended": max(ended) if ended else None})
    ratings = conn.execute(db.WITNESS_USAGE_RATINGS, {"meter": scenario_mod.API_METER}).fetchall()
    by_sub: dict[int, dict[datetime, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in ratings:
        by_sub[r["subscription_id"]][r["span_start"]].append(r)
    examples: list[str] = []
    bad: Counter = Counter()

    def fail(kind: str, text: str) -> None:
        bad[kind] += 1
        if len(examples) < MAX_EXAMPLES:
            examples.append(text)

    segments = quantity = billed = 0
    for s in subs:
        sid, cust = s["id"], s["customer_id"]
        mine = times.get(cust, [])
        segs = sorted(by_sub.get(sid, {}).items())
        frontier = None
        for span_start, rows in segs:
            last = rows[-1]  # the latest rating of the segment
            span_end = last["span_end"]
            segments += 1
            if frontier is not None and span_start != frontier:
                fail("tiling", f"subscription {sid}: a segment starts {span_start:%Y-%m-%d %H:%M}, the one before "
                               f"ended {frontier:%Y-%m-%d %H:%M}")
            elif frontier is None and mine and mine[0] < span_start:
                fail("tiling", f"subscription {sid}: a request at {mine[0]} before its first rated segment")
            frontier = span_end
            lo = _bisect(mine, span_start)
            count = _bisect(mine, span_end) - lo
            quantity += count
            if last["quantity"] != count:
                fail("quantity", f"subscription {sid} [{span_start:%Y-%m-%d %H:%M}, {span_end:%Y-%m-%d %H:%M}): rated "
                                 f"{last['quantity']} requests, the stream sent {count}")
            want = tier_amount(s["currency"], count)
            if last["amount"] != want:
                fail("amount", f"subscription {sid}: {count} requests rated at {last['amount']}, the tiers say {want}")
            total = sum(r["billed"] for r in rows)
            billed += total
            if total != last["amount"]:
                fail("billed", f"subscription {sid} [{span_start:%Y-%m-%d}): billed {total} in all, amount "
                               f"{last['amount']}")
            for r in rows:
                if r["billed"] and (r["invoice_kind"] != "USAGE" or r["line_item"] != "USAGE"
                                    or r["line_gross"] != r["billed"]):
                    fail("line", f"subscription {sid}: rating {r['id']} billed {r['billed']} on a {r['line_item']} "
                                 f"line of gross {r['line_gross']} of a {r['invoice_kind']} invoice")
        reach = s["ended"]
        if s["canceled_at"] is not None and s["canceled_at"] <= now - grace:
            reach = s["canceled_at"]  # rated to its cancellation (its periods ended before it)
        if reach is not None and (frontier is None or frontier < reach):
            fail("unrated", f"subscription {sid} ({s['status']}): rated to {frontier}, its usage up to {reach} "
                            f"is past the grace")
    rated_subs = sum(1 for s in subs if by_sub.get(s["id"]))
    ok = not bad and segments > 0
    if segments == 0:
        examples.append("no API subscription was rated")
    return Check(
        "every rated quantity equals the requests sent",
        promise="each rated span's quantity is the stream's own count of its requests, at the tiers' amount, billed "
                "once on USAGE lines; rated spans tile each subscription's time up to its ended periods",
        ok=ok,
        figures=f"{len(subs):,} API subscriptions, {rated_subs:,} rated: {segments:,} rated spans, {quantity:,} "
        f"requests, {billed:,} billed (minor units, all currencies); "
        + (", ".join(f"{k}: {v}" for k, v in sorted(bad.items())) if bad else "every span equal to the count"),
        examples=examples,
    )


def _bisect(times: list[datetime], at: datetime) -> int:
    import bisect

    return bisect.bisect_left(times, at)


def usage_figures(conn) -> list[dict]:
    """The usage billed in the run per currency (for the report): USAGE invoices, how many PAID,
    the requests and the amount (gross, before coupons and taxes) their lines billed."""
    out: dict[str, dict] = {}
    for r in conn.execute(db.WITNESS_USAGE_RATINGS, {"meter": scenario_mod.API_METER}).fetchall():
        if not r["billed"]:
            continue
        c = out.setdefault(r["currency"].strip(), {"currency": r["currency"].strip(), "ids": set(), "paid_ids": set(),
                                                    "amount": 0, "quantity": 0})
        c["ids"].add(r["invoice_id"])
        if r["invoice_status"] == "PAID":
            c["paid_ids"].add(r["invoice_id"])
        c["amount"] += r["billed"]
        c["quantity"] += int(r["quantity"])
    return [{"currency": k, "invoices": len(c["ids"]), "paid": len(c["paid_ids"]), "amount": c["amount"],
             "quantity": c["quantity"]} for k, c in sorted(out.items())]
