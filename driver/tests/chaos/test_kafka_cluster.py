"""Issue 31: a three-broker Kafka (KRaft) loses a partition leader mid-relay and no event is lost or
reordered (docs/operations.md).

Private PostgreSQL (postgres.sh) and a private three-node Kafka (kafka-cluster.sh), the topic at
replication factor 3 with min.insync.replicas=2, two `billing worker --no-renew --no-charge` relays
(the producer is acks=all and idempotent: billing.worker.sinks.KafkaSink). While subscriptions are
created, re-planned and canceled (each writes events of its aggregates to the outbox), the broker
leading partition 0 is SIGKILLed, later started again, then the leader of partition 1 is SIGKILLed.
After the drain, the whole topic is read from offset 0: every outbox event on Kafka with its payload
intact and keyed by its aggregate, each aggregate's events in commit order (first deliveries), no
event unknown to the outbox; the relay kept publishing with a broker down.
"""

from __future__ import annotations

import os
import random
import threading
import time
from datetime import datetime, timezone

import psycopg
import pytest
from psycopg import sql

from billing.checks import Check, read_topic
from billing.config import REPO_ROOT
from billing.migrate import migrate

from .harness import BILLING, FaultLog, PrivateServices, Proc, free_ports, port_open

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

TOPIC = "billing.events"
WARMUP = "warm-up"
PLANS = {"DAILY_BASIC": 1000, "DAILY_PRO": 3000, "DAILY_MAX": 4500}
RUN_SECONDS = 20.0


class KafkaCluster:
    """kafka-cluster.sh on free ports under the run's state directory."""

    def __init__(self, services: PrivateServices) -> None:
        self.services = services
        ports = free_ports(6)
        self.ports, self.cports = ports[:3], ports[3:]
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def _run(self, *args: str) -> str:
        import subprocess

        env = self.services.env()
        env.update(BILLING_KAFKA_CLUSTER_PORTS=",".join(map(str, self.ports)),
                   BILLING_KAFKA_CLUSTER_CONTROLLER_PORTS=",".join(map(str, self.cports)))
        env.setdefault("BILLING_KAFKA_LIBS", str(REPO_ROOT / ".cache" / "kafka" / "libs"))
        out = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "services" / "kafka-cluster.sh"), *args], env=env,
                             capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise RuntimeError(f"kafka-cluster.sh {' '.join(args)}: {out.stderr[-2000:]}")
        return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""

    def start(self) -> None:
        assert self._run() == self.bootstrap

    def kill(self, node: int) -> None:
        self._run("kill", str(node))

    def start_node(self, node: int) -> None:
        self._run("start", str(node))

    def stop(self) -> None:
        self._run("stop")

    def wait_in_sync(self, seconds: float = 90) -> float:
        """Until every partition of the topic has its three replicas in sync; the seconds waited."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            try:
                md = admin.list_topics(TOPIC, timeout=10)
                parts = md.topics[TOPIC].partitions.values()
                if parts and all(len(p.isrs) == 3 and p.leader >= 0 for p in parts):
                    return round(time.monotonic() - t0, 1)
            except Exception:  # noqa: BLE001 - the cluster is settling: ask again
                pass
            time.sleep(0.5)
        raise RuntimeError("the topic's replicas did not all come in sync")

    def warm_up(self) -> None:
        """An idempotent acks=all produce that succeeds: producer ids are handed out, leaders known."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all"})
        producer.produce(WARMUP, b"warm-up")
        assert producer.flush(120) == 0, "the warm-up message was not delivered"

    def leader(self, partition: int) -> int:
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(TOPIC, timeout=20)
        return md.topics[TOPIC].partitions[partition].leader


class Traffic(threading.Thread):
    """Writes events through the SQL API (as superuser): sign-ups, plan changes, cancels."""

    def __init__(self, db_url: str, rng: random.Random) -> None:
        super().__init__(daemon=True, name="traffic")
        self.db_url, self.rng = db_url, rng
        self.stop_event = threading.Event()
        self.errors: list[BaseException] = []
        self.calls = 0

    def run(self) -> None:
        try:
            with psycopg.connect(self.db_url, autocommit=True) as conn:
                subs: list[int] = []
                n = 0
                while not self.stop_event.wait(0.05):
                    # The real clock: an event is claimable from its p_now on (available_at).
                    now = datetime.now(timezone.utc)
                    for _ in range(3):
                        n += 1
                        subs.append(conn.execute("SELECT id FROM billing.create_subscription(%s, %s, %s, %s)",
                                                 (f"k-{n}", 1000 + n % 400, self.rng.choice(list(PLANS)), now)
                                                 ).fetchone()[0])
                    for sub in self.rng.sample(subs, min(3, len(subs))):
                        try:
                            conn.execute("SELECT billing.change_plan(%s, %s, %s)",
                                         (sub, self.rng.choice(list(PLANS)), now))
                        except psycopg.Error:
                            pass  # canceled already, or the same plan: refused, nothing written
                    if self.rng.random() < 0.3:
                        sub = subs.pop(self.rng.randrange(len(subs)))
                        conn.execute("SELECT billing.cancel_subscription(%s, false, %s)", (sub, now))
                    self.calls += 1
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.errors.append(exc)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)


def _pending(db_url: str) -> int:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM billing.outbox_event WHERE status = 'PENDING'").fetchone()[0]


def test_partition_leader_killed_mid_relay_loses_and_reorders_nothing(capsys):
    seed = int(os.environ.get("BILLING_CHAOS_SEED", random.randrange(1_000_000)))
    rng = random.Random(seed)
    services = PrivateServices()
    kafka = KafkaCluster(services)
    faults = FaultLog()
    relays: list[Proc] = []
    traffic = None
    ok = False
    started = time.monotonic()
    figures: dict = {"seed": seed}
    checks: list[Check] = []
    try:
        boot = threading.Thread(target=kafka.start, daemon=True)
        boot.start()
        services.start_postgres()
        db_url = services.database_url("billing")
        with psycopg.connect(services.pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE billing"))
        migrate(db_url, REPO_ROOT / "db", simulation=True)
        with psycopg.connect(db_url, autocommit=True) as conn:
            for code, price in PLANS.items():
                conn.execute("SELECT billing.upsert_plan(%s, %s, 'USD', 'DAY', 1)", (code, price))
        boot.join(timeout=300)
        assert all(port_open(p) for p in kafka.ports), "the three Kafka nodes did not start"
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        for name, fs in admin.create_topics([NewTopic(t, num_partitions=3, replication_factor=3,
                                                      config={"min.insync.replicas": "2"})
                                             for t in (TOPIC, WARMUP)]).items():
            fs.result(timeout=60)
        kafka.warm_up()
        kafka.wait_in_sync()
        admin = None  # noqa: F841 - its connections close with it
        figures["setup_seconds"] = round(time.monotonic() - started, 1)

        logs = services.base / "logs"
        logs.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("BILLING_")}
        env.update(BILLING_DATABASE_URL=db_url, BILLING_KAFKA_BOOTSTRAP=kafka.bootstrap, BILLING_KAFKA_TOPIC=TOPIC,
                   BILLING_LOG_LEVEL="INFO", PYTHONUNBUFFERED="1")
        for i in range(2):
            relay = Proc(f"relay-{i}", [BILLING, "worker", "--no-renew", "--no-charge", "--no-webhooks",
                                        "--no-retention"], {**env, "PGAPPNAME": f"chaos-relay-{i}"}, logs)
            relay.start()
            relays.append(relay)
        traffic = Traffic(db_url, random.Random(rng.random()))
        traffic.start()
        faults.t0 = t0 = time.monotonic()
        down_published = 0

        def at(share: float) -> None:
            delay = t0 + RUN_SECONDS * share - time.monotonic()
            if delay > 0:
                time.sleep(delay)

        def published(conn) -> int:
            return conn.execute("SELECT count(*) FROM billing.outbox_event WHERE status = 'PUBLISHED'").fetchone()[0]

        with psycopg.connect(db_url, autocommit=True) as conn:
            # 1: the leader of partition 0 dies at 15%; it is started again at 35% (in the background:
            # a JVM start takes seconds), while the traffic goes on.
            at(0.15)
            node = kafka.leader(0)
            before = published(conn)
            kafka.kill(node)
            faults.add("kafka broker SIGKILL", f"node {node} (leader of partition 0), {before} events published so far")
            at(0.35)
            down_published += published(conn) - before
            faults.add("published with the broker down", str(published(conn) - before), injected=False)
            restart = threading.Thread(target=kafka.start_node, args=(node,), daemon=True)
            restart.start()
            faults.add("kafka broker starting again", f"node {node}", injected=False)
            # 2: once every replica is in sync again, the leader of partition 1 dies; it stays down
            # through the end of the traffic and the drain.
            restart.join(timeout=120)
            waited = kafka.wait_in_sync()
            faults.add("all replicas in sync again", f"{waited} s after the node's port opened", injected=False)
            at(0.6)
            node = kafka.leader(1)
            before = published(conn)
            kafka.kill(node)
            faults.add("kafka broker SIGKILL", f"node {node} (leader of partition 1), {before} events published so far")
            at(1.0)
            traffic.stop()
            faults.add("traffic stopped", f"{traffic.calls} rounds", injected=False)
            t_stop = time.monotonic()
            deadline = time.monotonic() + 60
            while _pending(db_url) and time.monotonic() < deadline:
                time.sleep(0.5)
            down_published += published(conn) - before
            faults.add("drained with the broker down", f"{published(conn) - before} published since the kill",
                       injected=False)
        figures["drain_seconds"] = round(time.monotonic() - t_stop, 1)
        exits = {r.name: r.stop(timeout=30) for r in relays}

        messages = read_topic(kafka.bootstrap, TOPIC, group_prefix="kafka-cluster-check")
        with psycopg.connect(db_url, autocommit=True) as conn:
            outbox = conn.execute("SELECT id, event_id::text, aggregate_type, aggregate_id, payload, status "
                                  "FROM billing.outbox_event ORDER BY id").fetchall()
        first: dict[str, object] = {}
        for m in messages:
            if isinstance(m.value, dict) and m.value.get("id") not in first:
                first[m.value["id"]] = m
        missing, damaged, order_bad = [], [], []
        by_agg: dict[tuple, list] = {}
        for row in outbox:
            eid = row[1]
            m = first.get(eid)
            if m is None:
                missing.append((row[0], row[5]))
                continue
            if m.value != row[4] or m.key != str(row[3]):
                damaged.append(row[0])
            by_agg.setdefault((row[2], row[3]), []).append((m.partition, m.offset, row[0]))
        for agg, seen in by_agg.items():
            if len({p for p, _, _ in seen}) > 1 or [o for _, o, _ in seen] != sorted(o for _, o, _ in seen):
                order_bad.append((agg, [i for _, _, i in seen]))
        strangers = [eid for eid in first if eid not in {r[1] for r in outbox}]
        pending = sum(1 for r in outbox if r[5] != "PUBLISHED")
        checks += [
            Check("outbox drained (every event PUBLISHED)", pending == 0, f"{pending} not published"),
            Check("every outbox event on Kafka, intact and keyed by its aggregate", not missing and not damaged,
                  f"{len(outbox)} events, {len(first)} distinct on Kafka, {len(messages) - len(first)} redeliveries; "
                  f"{len(missing)} missing, {len(damaged)} damaged", (missing + damaged)[:10]),
            Check("no event on Kafka unknown to the outbox", not strangers, f"{len(strangers)} unknown", strangers[:10]),
            Check("events of one aggregate reach Kafka in commit order", not order_bad,
                  f"{len(by_agg)} aggregates; {len(order_bad)} out of order", order_bad[:10]),
            Check("the relay kept publishing with a broker down (min.insync.replicas=2 of 3)", down_published > 0,
                  f"{down_published} events published while a broker was down"),
            Check("relays stop cleanly on SIGTERM (exit 0)", all(c == 0 for c in exits.values()), str(exits)),
            Check("traffic ran without error", not traffic.errors, repr(traffic.errors[:3])),
        ]
        figures.update(events=len(outbox), kafka_messages=len(messages), aggregates=len(by_agg),
                       total_seconds=round(time.monotonic() - started, 1))
        ok = all(c.ok for c in checks)
    finally:
        if traffic is not None and traffic.is_alive():
            traffic.stop()
        for r in relays:
            r.stop(timeout=10)
        try:
            kafka.stop()
        except Exception:  # noqa: BLE001 - teardown is best effort
            pass
        services.stop_all()
        with capsys.disabled():
            print(f"\nkafka cluster run (seed {seed}): {'ALL INVARIANTS HOLD' if ok else 'BROKEN PROMISES'}")
            print(f"  figures: {figures}")
            print("  invariants:\n" + "\n".join(c.line() for c in checks))
            print("  fault timeline: " + "; ".join(f"{t}s {what}" for t, what in faults.timeline))
        if ok:
            services.remove()
    assert ok, f"broken promises (state kept in {services.base})"
