"""Operating the event stream: `billing events replay` (same ids, order per aggregate, filters),
`billing events retry-dead` (order kept), and retention while the relay runs."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import psycopg
from click.testing import CliRunner
from confluent_kafka import Consumer
from psycopg.rows import dict_row

from billing.cli import main as cli
from billing.worker.relay import Relay, RelayOptions
from billing.worker.retention import purge_once
from billing.worker.sinks import JsonlSink

from .synthetic import invoice_paid_data


def rows(db_url: str, where: str = "TRUE") -> list[dict]:
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(f"SELECT id, event_id::text, event_type, aggregate_type, aggregate_id, status, created_at "
                            f"FROM billing.outbox_event WHERE {where} ORDER BY id").fetchall()


def emit(conn, aggregate: int, seq: int, at: datetime) -> int:
    return conn.execute("SELECT billing._emit_event('invoice', %s, 'InvoicePaid', %s::jsonb, %s)",
                        (aggregate, json.dumps(invoice_paid_data(aggregate, seq=seq)), at)).fetchone()[0]


def relay_until_drained(db_url: str, sink, timeout: float = 30) -> None:
    async def run():
        stop = asyncio.Event()
        relay = Relay(db_url, sink, stop, options=RelayOptions(poll_interval=0.1, batch_size=50))
        task = asyncio.create_task(relay.run())
        for _ in range(int(timeout * 10)):
            if not rows(db_url, "status = 'PENDING'"):
                break
            await asyncio.sleep(0.1)
        stop.set()
        await task

    asyncio.run(run())
    assert not rows(db_url, "status = 'PENDING'")


def read_jsonl(path) -> list[dict]:
    return [json.loads(line)["value"] for line in path.read_text().splitlines() if line.strip()]


def in_order_per_aggregate(received: list[dict], expected: list[dict]) -> bool:
    order = [e["id"] for e in received]
    by_aggregate = defaultdict(list)
    for r in expected:
        by_aggregate[(r["aggregate_type"], r["aggregate_id"])].append(order.index(r["event_id"]))
    return all(v == sorted(v) for v in by_aggregate.values())


def consume(bootstrap: str, topic: str, n: int, timeout: float = 30) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    out = []
    end = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < end:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            out.append(m)
    consumer.close()
    return out


def test_replay_republishes_the_same_ids_in_order_with_filters(db_url, kafka_bootstrap, kafka_topic, tmp_path):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('R_BASIC', 1000, 'USD', 'MONTH', 1)")
        conn.execute("SELECT billing.upsert_plan('R_PRO', 2000, 'USD', 'MONTH', 1)")
        t0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
        for i in range(8):
            sid = conn.execute("SELECT id FROM billing.create_subscription(%s, %s, 'R_BASIC', %s)",
                               (f"r-{i}", 100 + i, t0 + timedelta(hours=i))).fetchone()[0]
            conn.execute("SELECT billing.change_plan(%s, 'R_PRO', %s)", (sid, t0 + timedelta(hours=i, minutes=30)))
            conn.execute("SELECT billing.cancel_subscription(%s, false, %s)", (sid, t0 + timedelta(hours=i, minutes=40)))
    relay_until_drained(db_url, JsonlSink(tmp_path / "first.jsonl"))
    published = rows(db_url)
    env = {"BILLING_DATABASE_URL": db_url, "BILLING_KAFKA_BOOTSTRAP": kafka_bootstrap, "BILLING_KAFKA_TOPIC": kafka_topic}
    result = CliRunner().invoke(cli, ["events", "replay", "--from", str(published[0]["id"])], env=env)
    assert result.exit_code == 0, result.output
    assert f"replayed {len(published)} events" in result.output
    messages = consume(kafka_bootstrap, kafka_topic, len(published))
    envelopes = [json.loads(m.value()) for m in messages]
    assert sorted(e["id"] for e in envelopes) == sorted(r["event_id"] for r in published)  # the same ids
    assert all(m.key().decode() == json.loads(m.value())["subject"].split("/")[1] for m in messages)
    by_partition = defaultdict(list)
    for m in messages:
        by_partition[m.partition()].append(json.loads(m.value()))
    for part in by_partition.values():
        keys = {(e["subject"]) for e in part}
        assert in_order_per_aggregate(part, [r for r in published if f"{r['aggregate_type']}/{r['aggregate_id']}" in keys])

    # From a time, one type only: what was created from the fifth hour on.
    since = t0 + timedelta(hours=5)
    result = CliRunner().invoke(cli, ["events", "replay", "--from", since.isoformat(), "--type", "SubscriptionUpdated"],
                                env=env)
    assert result.exit_code == 0, result.output
    want = [r for r in published if r["event_type"] == "SubscriptionUpdated" and r["created_at"] >= since]
    assert len(want) == 3 and f"replayed {len(want)} events" in result.output
    bad = CliRunner().invoke(cli, ["events", "replay", "--from", "yesterday"], env=env)
    assert bad.exit_code != 0 and "outbox id or an ISO 8601 time" in bad.output


def test_retry_dead_requeues_in_order_ahead_of_later_events(db_url, tmp_path):
    at = datetime(2026, 4, 1, tzinfo=timezone.utc)
    with psycopg.connect(db_url, autocommit=True) as conn:
        first = [emit(conn, 7, 0, at), emit(conn, 7, 1, at), emit(conn, 8, 0, at)]
        for id_ in first[:2]:  # e0 and e1 of aggregate 7 die (ten failed publishes each)
            for n in range(10):
                conn.execute("SELECT billing.mark_outbox_failed(%s, 'refused', %s)", (id_, at + timedelta(hours=n)))
        later = emit(conn, 7, 2, at + timedelta(hours=20))  # a later event of the same aggregate, PENDING
    assert [r["status"] for r in rows(db_url, "aggregate_id = 7")] == ["DEAD", "DEAD", "PENDING"]
    result = CliRunner().invoke(cli, ["events", "retry-dead"], env={"BILLING_DATABASE_URL": db_url})
    assert result.exit_code == 0 and "requeued 2 DEAD events" in result.output, result.output
    sink_path = tmp_path / "events.jsonl"
    relay_until_drained(db_url, JsonlSink(sink_path))
    sent = [e for e in read_jsonl(sink_path) if e["subject"] == "invoice/7"]
    assert [e["data"]["attemptCount"] for e in sent] == [0, 1, 2]  # commit order, the requeued first
    assert rows(db_url, f"id = {later}")[0]["status"] == "PUBLISHED"
    again = CliRunner().invoke(cli, ["events", "retry-dead"], env={"BILLING_DATABASE_URL": db_url})
    assert "requeued 0 DEAD events" in again.output


def test_retention_deletes_in_batches_while_the_relay_runs(db_url, tmp_path):
    now = datetime.now(timezone.utc)
    old = now - timedelta(days=40)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.create_webhook_endpoint('https://hooks.example.com/x', '{InvoicePaid}', %s, %s)",
                     ("k" * 20, old - timedelta(days=1)))
        for g in range(1, 601):
            emit(conn, g % 50 + 1, g, old)
        conn.execute("SELECT billing.mark_outbox_published(array_agg(id), %s) FROM billing.outbox_event", (old,))
        # One old published event still owed to the webhook endpoint: kept until delivered.
        owed = emit(conn, 999, 0, old)
        conn.execute("SELECT billing.mark_outbox_published(ARRAY[%s]::bigint[], %s)", (owed, old))
        conn.execute("UPDATE billing.webhook_delivery SET status = 'DELIVERED', finished_at = %s WHERE outbox_id <> %s",
                     (old, owed))
        conn.execute("INSERT INTO billing.gateway_webhook (event_id, idempotency_key, outcome, payload, received_at, customer_id) "
                     "SELECT 'old-' || g, 'k', 'SUCCEEDED', '{}'::jsonb, %s, 0 FROM generate_series(1, 300) g "
                     "UNION ALL SELECT 'new-' || g, 'k', 'SUCCEEDED', '{}'::jsonb, %s, 0 FROM generate_series(1, 5) g",
                     (old, now))
    old_ids = {r["id"] for r in rows(db_url)}

    with psycopg.connect(db_url, autocommit=True) as conn:  # live traffic is for Kafka only
        conn.execute("UPDATE billing.webhook_endpoint SET status = 'DISABLED', disabled_at = %s", (old,))
    written: list[int] = []
    done = threading.Event()

    def writer():  # live traffic while retention runs
        with psycopg.connect(db_url, autocommit=True) as conn:
            n = 0
            while not done.is_set() and n < 400:
                written.append(emit(conn, 2000 + n % 20, n, datetime.now(timezone.utc)))
                n += 1

    async def run():
        stop = asyncio.Event()
        sink = JsonlSink(tmp_path / "events.jsonl")
        relay = Relay(db_url, sink, stop, options=RelayOptions(poll_interval=0.1, batch_size=50))
        task = asyncio.create_task(relay.run())
        thread = threading.Thread(target=writer)
        thread.start()
        totals = {"outbox_events": 0, "webhook_deliveries": 0, "gateway_webhooks": 0}
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            for _ in range(3):
                got = await purge_once(conn, timedelta(days=30), datetime.now(timezone.utc), batch=64, pause=0.01)
                totals = {k: totals[k] + got[k] for k in totals}
                await asyncio.sleep(0.2)
        done.set()
        await asyncio.to_thread(thread.join)
        for _ in range(200):
            if not rows(db_url, "status = 'PENDING'"):
                break
            await asyncio.sleep(0.1)
        stop.set()
        await task
        sink.close()
        return totals

    totals = asyncio.run(run())
    left = rows(db_url)
    left_ids = {r["id"] for r in left}
    assert totals["outbox_events"] == 600 and totals["webhook_deliveries"] == 600 and totals["gateway_webhooks"] == 300
    assert old_ids & left_ids == {owed}  # the old ones are gone, but for the one a webhook still needs
    assert set(written) <= left_ids and all(r["status"] == "PUBLISHED" for r in left)  # live traffic untouched
    sent = read_jsonl(tmp_path / "events.jsonl")
    assert {r["event_id"] for r in left if r["id"] in set(written)} <= {e["id"] for e in sent}
    assert in_order_per_aggregate(sent, [r for r in left if r["id"] in set(written)])
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM billing.gateway_webhook").fetchone()[0] == 5
        try:
            conn.execute("SELECT billing.purge_expired('10 minutes', 10, now())")
            raise AssertionError("a retention under an hour must be refused")
        except psycopg.Error as exc:
            assert exc.sqlstate == "BL422" and "at least 1 hour" in str(exc)
