"""Each service is real: pgTAP runs in PostgreSQL, Redis answers, Kafka carries a message."""

from __future__ import annotations

import time
import uuid

import psycopg


def test_postgres_runs_pgtap(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgtap")
        version = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()[0]
        assert version >= 150000
        plan = conn.execute("SELECT plan(1)").fetchone()[0]
        assert plan == "1..1"
        ok = conn.execute("SELECT ok(2 + 2 = 4, 'arithmetic')").fetchone()[0]
        assert ok == "ok 1 - arithmetic"
        bad = conn.execute("SELECT is(1, 2, 'must fail')").fetchone()[0]
        assert bad.startswith("not ok")


def test_database_is_migrated_and_private(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        applied = conn.execute("SELECT count(*) FROM billing.schema_migration").fetchone()[0]
        assert applied >= 1
        name = conn.execute("SELECT current_database()").fetchone()[0]
        assert name.startswith("t_")


def test_redis_round_trip(redis_url):
    import redis

    client = redis.Redis.from_url(redis_url)
    key = f"smoke:{uuid.uuid4().hex}"
    assert client.set(key, "42", px=10_000)
    assert client.get(key) == b"42"
    assert client.incr(key) == 43
    info = client.info("server")
    assert info["redis_version"]


def test_kafka_produce_and_consume(kafka_bootstrap, kafka_topic):
    from confluent_kafka import Consumer, Producer

    value = uuid.uuid4().bytes
    delivered = []
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "acks": "all"})
    producer.produce(kafka_topic, key=b"smoke", value=value, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None]

    consumer = Consumer({
        "bootstrap.servers": kafka_bootstrap, "group.id": f"smoke-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })
    consumer.subscribe([kafka_topic])
    try:
        deadline = time.monotonic() + 60
        got = None
        while time.monotonic() < deadline and got is None:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got = msg
        assert got is not None, "no message came back from Kafka"
        assert got.value() == value and got.key() == b"smoke"
    finally:
        consumer.close()
