"""The outbox relay against real PostgreSQL and Kafka.

CloudEvents with the right key, subject and id; rows marked only from delivery reports; one
active relay, a stand-by that takes over when the holder dies; a Kafka broker restart (a private
broker of this test's own, so the shared one is never disturbed) loses nothing and keeps each
aggregate's order."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from billing.config import REPO_ROOT
from billing.worker.relay import RELAY_LOCK_KEY, Relay, RelayOptions
from billing.worker.sinks import JsonlSink, KafkaSink
from .synthetic import invoice_paid_data


# -- helpers ------------------------------------------------------------------------------------


def with_app_name(url: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["application_name"] = name
    return psycopg.conninfo.make_conninfo(**info)


def emit(db_url: str, aggregates: range, per_aggregate: int, tag: str) -> None:
    """`per_aggregate` InvoicePaid-like events for each aggregate, interleaved, one transaction
    per event (as the SQL API writes them)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        for n in range(per_aggregate):
            for agg in aggregates:
                conn.execute("SELECT billing._emit_event('invoice', %s, 'InvoicePaid', %s::jsonb, now())",
                             (agg, json.dumps(invoice_paid_data(agg, seq=n, tag=tag))))


def outbox(db_url: str) -> list[dict]:
    with psycopg.connect(db_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute("SELECT id, event_id::text, aggregate_type, aggregate_id, status, attempts, payload "
                            "FROM billing.outbox_event ORDER BY id").fetchall()


def pending(db_url: str) -> int:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM billing.outbox_event WHERE status <> 'PUBLISHED'").fetchone()[0]


async def until(predicate, timeout: float, what: str, interval: float = 0.05) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
    return time.monotonic() - start


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    messages = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if len(messages) >= expected:
                    break
                continue
            if msg.error():
                continue
            messages.append(msg)
    finally:
        consumer.close()
    return messages


def check_order_and_completeness(rows: list[dict], messages: list) -> None:
    """Every row is in Kafka; per key, first deliveries follow outbox id order (commit order)."""
    by_event = {r["event_id"]: r for r in rows}
    seen: set[str] = set()
    last_id_per_key: dict[bytes, int] = {}
    for msg in messages:
        envelope = json.loads(msg.value())
        row = by_event[envelope["id"]]
        assert msg.key() == str(row["aggregate_id"]).encode()
        if envelope["id"] in seen:
            continue  # at least once: a redelivery is allowed, consumers dedupe on id
        seen.add(envelope["id"])
        assert row["id"] > last_id_per_key.get(msg.key(), 0), "an aggregate's events were reordered"
        last_id_per_key[msg.key()] = row["id"]
    assert seen == set(by_event), f"missing from Kafka: {len(set(by_event) - seen)} events"


def holder_app(db_url: str) -> str | None:
    """application_name of the session holding the relay's advisory lock."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objid = %s "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            (RELAY_LOCK_KEY,)).fetchone()
    return row[0] if row else None


# -- publishing -----------------------------------------------------------------------------------


def test_publishes_cloudevents_with_key_subject_and_id(db_url, kafka_bootstrap, kafka_topic):
    # Events written by the SQL API itself: a subscription canceled at once announces
    # SubscriptionCreated, InvoiceCreated, CreditNoteIssued (the unserved rest of its invoice taken
    # off: docs/money.md, "Unpaid is unpaid") and SubscriptionCanceled; plus invoice
    # events, several per aggregate.
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PRO_MONTHLY', 300000, 'USD', 'MONTH', 1)")
        sub = conn.execute("SELECT id FROM billing.create_subscription('k1', 1, 'PRO_MONTHLY', now())").fetchone()[0]
        conn.execute("SELECT billing.cancel_subscription(%s, false, now())", (sub,))
    emit(db_url, range(100, 110), 3, "before")

    async def run():
        stop = asyncio.Event()
        sink = KafkaSink(kafka_bootstrap, kafka_topic)
        # A long fallback poll: what gets published quickly below was woken by NOTIFY.
        relay = Relay(db_url, sink, stop, options=RelayOptions(batch_size=7, poll_interval=30))
        task = asyncio.create_task(relay.run())
        await until(lambda: pending(db_url) == 0, 20, "the backlog to drain")
        assert relay.active
        emit(db_url, range(200, 201), 1, "live")
        waited = await until(lambda: pending(db_url) == 0, 5, "a NOTIFY-woken publish")
        assert waited < 5
        stop.set()
        await task
        sink.close()
        assert not relay.active

    asyncio.run(run())
    rows = outbox(db_url)
    assert len(rows) == 4 + 30 + 1 and all(r["status"] == "PUBLISHED" for r in rows)
    messages = consume_all(kafka_bootstrap, kafka_topic, len(rows))
    check_order_and_completeness(rows, messages)
    by_event = {r["event_id"]: r for r in rows}
    for msg in messages:
        envelope = json.loads(msg.value())
        row = by_event[envelope["id"]]
        assert envelope == row["payload"]  # the stored envelope, as is
        assert envelope["specversion"] == "1.0" and envelope["source"] == "billing"
        assert envelope["subject"] == f"{row['aggregate_type']}/{row['aggregate_id']}"
        assert envelope["datacontenttype"] == "application/json" and envelope["time"].endswith("Z")
    canceled = [json.loads(m.value()) for m in messages if json.loads(m.value())["type"] == "SubscriptionCanceled"]
    assert len(canceled) == 1 and canceled[0]["subject"] == f"subscription/{sub}"
    assert {m.partition() for m in messages} > {0}  # keys spread over the partitions


class GatedSink:
    """A real KafkaSink that withholds the events of some keys (never sends them) until the
    relay gives up on the batch: the fault an unacknowledged send looks like to the relay."""

    def __init__(self, inner: KafkaSink, gated_keys: set[bytes]) -> None:
        self.inner, self.gated_keys = inner, gated_keys
        self.held: list = []

    def produce(self, key, value, on_delivery):
        if key in self.gated_keys:
            self.held.append((key, value, on_delivery))
        else:
            self.inner.produce(key, value, on_delivery)

    def poll(self, timeout):
        return self.inner.poll(timeout)

    def flush(self, timeout):
        return self.inner.flush(timeout) + len(self.held)

    def purge(self):
        self.held.clear()
        self.inner.purge()


def test_only_delivery_reported_rows_are_marked(db_url, kafka_bootstrap, kafka_topic):
    emit(db_url, range(1, 11), 2, "gated")  # keys 1..10, two events each
    gated = {b"3", b"7"}

    async def run(sink, stop_after: float | None):
        stop = asyncio.Event()
        relay = Relay(db_url, sink, stop, options=RelayOptions(stop_grace=0.5, lease=timedelta(seconds=1)))
        task = asyncio.create_task(relay.run())
        if stop_after is None:
            await until(lambda: pending(db_url) == 0, 20, "everything published")
        else:
            await asyncio.sleep(stop_after)
            assert pending(db_url) == 20, "nothing may be marked while the batch is unacknowledged"
        stop.set()
        await task

    # The batch never completes: on stop, the relay marks exactly what Kafka acknowledged.
    inner = KafkaSink(kafka_bootstrap, kafka_topic)
    asyncio.run(run(GatedSink(inner, gated), stop_after=2.0))
    inner.close()
    rows = outbox(db_url)
    published = {r["event_id"] for r in rows if r["status"] == "PUBLISHED"}
    in_kafka = {json.loads(m.value())["id"] for m in consume_all(kafka_bootstrap, kafka_topic, 16, timeout=10)}
    assert published == in_kafka and len(published) == 16
    assert {str(r["aggregate_id"]).encode() for r in rows if r["status"] == "PENDING"} == gated
    assert all(r["attempts"] == 0 for r in rows)  # withheld is not failed

    # A relay with a working sink publishes the rest once their lease lapses.
    sink = KafkaSink(kafka_bootstrap, kafka_topic)
    asyncio.run(run(sink, stop_after=None))
    sink.close()
    rows = outbox(db_url)
    check_order_and_completeness(rows, consume_all(kafka_bootstrap, kafka_topic, 20, timeout=10))


def test_jsonl_sink_through_the_same_relay(db_url, tmp_path):
    emit(db_url, range(1, 4), 3, "file")
    path = tmp_path / "events.jsonl"

    async def run():
        stop = asyncio.Event()
        sink = JsonlSink(path)
        relay = Relay(db_url, sink, stop)
        task = asyncio.create_task(relay.run())
        await until(lambda: pending(db_url) == 0, 10, "the file sink")
        stop.set()
        await task
        sink.close()

    asyncio.run(run())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    rows = outbox(db_url)
    assert sorted(line["value"]["id"] for line in lines) == sorted(r["event_id"] for r in rows)
    assert {line["value"]["id"]: line["key"] for line in lines} == {r["event_id"]: str(r["aggregate_id"]) for r in rows}
    assert_per_key_order(rows, lines)


def test_notifications_received_while_busy_wake_the_relay_once(db_url, tmp_path):
    """Notifications that arrive while the relay claims or publishes are kept by the connection;
    the next wait takes them all and returns at once, and the wait after it waits again (for a
    notification or the fallback poll), instead of one more empty claim per stale notification."""

    async def run() -> tuple[float, float]:
        relay = Relay(db_url, JsonlSink(tmp_path / "e.jsonl"), asyncio.Event(),
                      options=RelayOptions(poll_interval=0.6))
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            await conn.execute("LISTEN billing_outbox")
            emit(db_url, range(1, 6), 1, "busy")  # five commits, five notifications
            await asyncio.sleep(0.2)
            await conn.execute("SELECT 1")  # "busy": they arrive while a statement runs
            t = time.monotonic()
            await relay._wait_for_work(conn)
            first = time.monotonic() - t
            t = time.monotonic()
            await relay._wait_for_work(conn)
            return first, time.monotonic() - t

    first, second = asyncio.run(run())
    assert first < 0.3, "the notifications kept while busy must wake the relay at once"
    assert second >= 0.5, "one wake-up takes every kept notification; the next wait must wait"


def test_claim_skips_dead_index_entries_without_reading_their_rows(db_url):
    """Every published event leaves dead entries in the pending index until VACUUM. The claim
    reads that index with an index scan, which marks them dead the first time: the next claims
    read a few heap pages, not one per dead entry (a bitmap scan read them all, every claim: the
    planner chose one with statistics taken when few events were PENDING; a session without index
    scans makes it choose one here, and the claim must not care)."""
    emit(db_url, range(1, 201), 20, "dead")  # 4,000 events
    with psycopg.connect(db_url, autocommit=True) as conn:
        # Index entries are marked dead only once the deleting commit is flushed (the test
        # server runs synchronous_commit = off, which flushes within ~0.6 s): flush at commit.
        conn.execute("SET synchronous_commit = on")
        conn.execute("ALTER TABLE billing.outbox_event SET (autovacuum_enabled = off)")
        for _ in range(40):
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM billing.claim_outbox_events(500, '1 minute', now())").fetchall()]
            if not ids:
                break
            conn.execute("SELECT billing.mark_outbox_published(%s::bigint[], now())", (ids,))
        assert conn.execute("SELECT count(*) FROM billing.outbox_event WHERE status = 'PENDING'").fetchone()[0] == 0
        # Statistics of a relay that keeps up: next to nothing PENDING (autoanalyze sees that).
        conn.execute("ANALYZE billing.outbox_event")
    emit(db_url, range(1, 4), 1, "live")  # three live events behind 4,000 published ones

    def heap_blocks_read_by_a_claim(conn, hours: int) -> tuple[int, int]:
        with conn.transaction():
            before = conn.execute("SELECT pg_stat_get_xact_blocks_fetched('billing.outbox_event'::regclass)").fetchone()[0]
            n = len(conn.execute(
                "SELECT id FROM billing.claim_outbox_events(500, '1 second', now() + %s * interval '1 hour')",
                (hours,)).fetchall())
            after = conn.execute("SELECT pg_stat_get_xact_blocks_fetched('billing.outbox_event'::regclass)").fetchone()[0]
        return n, after - before

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET enable_indexscan = off")
        heap_blocks_read_by_a_claim(conn, 1)  # the first one marks the dead entries
        claimed, blocks = heap_blocks_read_by_a_claim(conn, 2)  # (the first one's lease has lapsed)
        conn.execute("ALTER TABLE billing.outbox_event RESET (autovacuum_enabled)")
    assert claimed == 3
    pages = 4000 // 8  # the dead rows span hundreds of heap pages
    assert blocks < 60, f"a claim of 3 events read {blocks} blocks of outbox_event (dead rows on ~{pages} pages)"


def test_webhook_claim_skips_dead_index_entries_without_reading_their_rows(db_url):
    """The same for the webhook deliverer's claim: delivered rows leave dead entries in
    webhook_delivery's pending index; after the first claim met them, a claim of three deliveries
    reads a few heap pages, not one per delivered row."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        endpoint = conn.execute("SELECT id FROM billing.create_webhook_endpoint("
                                "'https://hooks.example.com/x', '{InvoicePaid}', %s, now())", ("k" * 24,)).fetchone()[0]
    emit(db_url, range(1, 201), 20, "dead")  # 4,000 deliveries
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")  # see the test above
        conn.execute("ALTER TABLE billing.webhook_delivery SET (autovacuum_enabled = off)")
        for _ in range(40):
            ids = [r[0] for r in conn.execute(
                "SELECT outbox_id FROM billing.claim_webhook_deliveries(%s, 500, '1 minute', now())",
                (endpoint,)).fetchall()]
            if not ids:
                break
            n = len(ids)
            conn.execute("SELECT billing.record_webhook_attempts(%s, %s::bigint[], %s::text[], %s::int[], %s::text[], "
                         "%s::int[], now())", (endpoint, ids, ["DELIVERED"] * n, [200] * n, [None] * n, [1] * n))
        assert conn.execute("SELECT count(*) FROM billing.webhook_delivery WHERE status = 'PENDING'").fetchone()[0] == 0
        conn.execute("ANALYZE billing.webhook_delivery")
    emit(db_url, range(1, 4), 1, "live")

    def heap_blocks_read_by_a_claim(conn, hours: int) -> tuple[int, int]:
        with conn.transaction():
            fetched = "SELECT pg_stat_get_xact_blocks_fetched('billing.webhook_delivery'::regclass)"
            before = conn.execute(fetched).fetchone()[0]
            n = len(conn.execute(
                "SELECT outbox_id FROM billing.claim_webhook_deliveries(%s, 500, '1 second', now() + %s * interval '1 hour')",
                (endpoint, hours)).fetchall())
            after = conn.execute(fetched).fetchone()[0]
        return n, after - before

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET enable_indexscan = off")
        heap_blocks_read_by_a_claim(conn, 1)
        claimed, blocks = heap_blocks_read_by_a_claim(conn, 2)
        conn.execute("ALTER TABLE billing.webhook_delivery RESET (autovacuum_enabled)")
    assert claimed == 3
    assert blocks < 25, f"a claim of 3 deliveries read {blocks} blocks of webhook_delivery (4,000 delivered rows on ~50 pages)"


# -- one active relay ---------------------------------------------------------------------------

RELAY_SCRIPT = """
import asyncio, sys
from billing.worker.relay import Relay
from billing.worker.sinks import JsonlSink
asyncio.run(Relay(sys.argv[1], JsonlSink(sys.argv[2]), asyncio.Event()).run())
"""


def test_standby_takes_over_when_the_holder_dies(db_url, tmp_path):
    # The first relay runs in a process of its own, so that it can really die (SIGKILL).
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "driver")}
    first = subprocess.Popen([sys.executable, "-c", RELAY_SCRIPT, with_app_name(db_url, "relay-a"),
                              str(tmp_path / "a.jsonl")], env=env)
    try:
        async def run():
            deadline = time.monotonic() + 20
            while holder_app(db_url) != "relay-a":
                assert time.monotonic() < deadline, "the first relay never took the lock"
                await asyncio.sleep(0.1)
            stop = asyncio.Event()
            standby = Relay(with_app_name(db_url, "relay-b"), JsonlSink(tmp_path / "b.jsonl"), stop)
            task = asyncio.create_task(standby.run())
            emit(db_url, range(1, 6), 4, "first")
            await until(lambda: pending(db_url) == 0, 10, "the first relay to publish")
            await asyncio.sleep(1.5)
            assert not standby.active and standby.published == 0 and holder_app(db_url) == "relay-a"

            first.send_signal(signal.SIGKILL)
            first.wait(10)
            took = await until(lambda: standby.active, 10, "the stand-by to take over")
            assert took < 5, f"take-over took {took:.1f}s"
            assert holder_app(db_url) == "relay-b"
            emit(db_url, range(1, 6), 2, "second")
            await until(lambda: pending(db_url) == 0, 10, "the new active relay to publish")
            # The rows are PUBLISHED once mark_outbox_published commits; the relay counts them
            # when the reply reaches it, which the blocking `pending` query may have delayed.
            await until(lambda: standby.published >= 10, 5, "the new active relay to count them")
            assert standby.published == 10
            stop.set()
            await task

        asyncio.run(run())
    finally:
        first.kill()
        first.wait()
    a = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "b.jsonl").read_text().splitlines()]
    rows = outbox(db_url)
    assert sorted(x["value"]["id"] for x in a + b) == sorted(r["event_id"] for r in rows)  # each once
    assert {x["value"]["data"]["gatewayReference"] for x in a} == {"first"} and {x["value"]["data"]["gatewayReference"] for x in b} == {"second"}
    assert_per_key_order(rows, a + b)


def assert_per_key_order(rows: list[dict], lines: list[dict]) -> None:
    position = {r["event_id"]: r["id"] for r in rows}
    last: dict[str, int] = {}
    for line in lines:
        outbox_id = position[line["value"]["id"]]
        assert outbox_id > last.get(line["key"], 0), "an aggregate's events were reordered"
        last[line["key"]] = outbox_id


def test_active_relay_steps_down_when_its_lock_session_dies(db_url, tmp_path):
    async def run():
        stop = asyncio.Event()
        a = Relay(with_app_name(db_url, "relay-a"), JsonlSink(tmp_path / "a.jsonl"), stop)
        b = Relay(with_app_name(db_url, "relay-b"), JsonlSink(tmp_path / "b.jsonl"), stop)
        ta = asyncio.create_task(a.run())
        await until(lambda: a.active, 10, "relay a to become active")
        tb = asyncio.create_task(b.run())
        await asyncio.sleep(1.2)
        assert [a.active, b.active] == [True, False]

        with psycopg.connect(db_url, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND classid = 0 AND objid = %s "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                (RELAY_LOCK_KEY,)).fetchall()
        assert killed == [(True,)]
        took = await until(lambda: holder_app(db_url) is not None and (a.active or b.active), 10,
                           "a relay to hold the lock again")
        assert took < 5
        await asyncio.sleep(0.5)
        holder = holder_app(db_url)
        assert (a.active, b.active) == (holder == "relay-a", holder == "relay-b"), "exactly the holder is active"
        emit(db_url, range(1, 4), 3, "after")
        await until(lambda: pending(db_url) == 0, 10, "publishing to resume")
        stop.set()
        await asyncio.gather(ta, tb)

    asyncio.run(run())


# -- a Kafka broker restart -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateKafka:
    """A single-node KRaft broker on free ports with its own data dir, from the project's jars
    (the same invocation as scripts/services/kafka.sh)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.libs = Path(os.environ.get("BILLING_KAFKA_LIBS", REPO_ROOT / ".cache" / "kafka" / "libs"))
        self.port, self.cport = _free_port(), _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.conf = root / "server.properties"
        self.conf.write_text(f"""process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{self.cport}
listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={root / 'data'}
num.partitions=3
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
""")
        self.java = [shutil.which("java") or "java", "-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1",
                     f"-Dkafka.logs.dir={root / 'logs'}",
                     f"-Dlog4j2.configurationFile={REPO_ROOT / 'scripts' / 'kafka' / 'log4j2.properties'}",
                     "-Djava.awt.headless=true", "-cp", f"{self.libs}/*"]
        self.proc: subprocess.Popen | None = None
        cluster_id = "-"
        while cluster_id.startswith("-"):  # would read as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        subprocess.run([*self.java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.conf)],
                       check=True, capture_output=True, timeout=120)

    def start(self, timeout: float = 90) -> None:
        (self.root / "logs").mkdir(exist_ok=True)
        self.log = open(self.root / "logs" / "stdout.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen([*self.java, "kafka.Kafka", str(self.conf)], stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + timeout
        while True:
            admin = AdminClient({"bootstrap.servers": self.bootstrap})
            try:
                if admin.list_topics(timeout=2).brokers:
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"private kafka did not start; see {self.root / 'logs'}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture
def private_kafka():
    root = Path(tempfile.mkdtemp(prefix="billing-kafka-"))
    broker = None
    try:
        broker = PrivateKafka(root)
        broker.start()
        yield broker
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(root, ignore_errors=True)



# A service restart (a private broker of its own, free ports, its own database): with the chaos runs,
# in make test's chaos lane beside the parallel pass (driver/tests/conftest.py SERIAL).
@pytest.mark.chaos
def test_survives_a_broker_restart_without_losing_an_event(db_url, private_kafka):
    topic = "billing.events.restart"
    admin = AdminClient({"bootstrap.servers": private_kafka.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(timeout=30)

    async def run():
        stop = asyncio.Event()
        sink = KafkaSink(private_kafka.bootstrap, topic)
        relay = Relay(db_url, sink, stop, options=RelayOptions(batch_size=40))
        task = asyncio.create_task(relay.run())
        emit(db_url, range(1, 21), 5, "before")
        await until(lambda: pending(db_url) == 0, 30, "the first events")

        await asyncio.to_thread(private_kafka.stop)
        emit(db_url, range(1, 21), 5, "during")  # written while Kafka is down
        await asyncio.sleep(3)
        rows = outbox(db_url)
        down = [r for r in rows[100:]]
        assert all(r["status"] == "PENDING" and r["attempts"] == 0 for r in down), \
            "nothing is marked (neither published nor failed) while the broker is away"
        assert relay.active and not task.done()

        await asyncio.to_thread(private_kafka.start)
        await until(lambda: pending(db_url) == 0, 60, "publishing to resume by itself")
        emit(db_url, range(1, 21), 2, "after")
        await until(lambda: pending(db_url) == 0, 30, "the events after the restart")
        stop.set()
        await task
        sink.close()

    asyncio.run(run())
    rows = outbox(db_url)
    assert len(rows) == 240 and all(r["status"] == "PUBLISHED" for r in rows)
    check_order_and_completeness(rows, consume_all(private_kafka.bootstrap, topic, 240))
