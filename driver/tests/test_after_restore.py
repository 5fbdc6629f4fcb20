"""`billing db after-restore` (billing.after_restore) on a real database and Kafka: the leases of the
past lapse, a new key namespace, and the outbox checked against the topic (docs/operations.md,
section 5). The whole drill, with pgBackRest and the gateway, is chaos/test_restore.py."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import psycopg
from click.testing import CliRunner

from billing.after_restore import after_restore, check_outbox
from billing.cli import main
from billing.worker.relay import Relay, RelayOptions
from billing.worker.sinks import KafkaSink

from .test_relay import consume_all, outbox, pending, until


def _sql(url: str, query: str, *args):
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, args)
        return cur.fetchall() if cur.description else None


def test_the_leases_of_the_past_lapse_and_keys_take_a_new_namespace(db_url):
    now = datetime(2026, 10, 1, 12, tzinfo=timezone.utc)
    _sql(db_url, "SELECT billing.upsert_plan('P', 1000, 'USD', 'MONTH', 1)")
    _sql(db_url, "SELECT billing.create_subscription('k' || g, g, 'P', %s) FROM generate_series(1, 3) g", now)
    # A worker of the lost past claimed one invoice (its charge in flight) and an outbox batch.
    claimed = _sql(db_url, "SELECT invoice_id, idempotency_key FROM billing.claim_charges('lost', 1, interval '1 hour', %s)",
                   now)
    assert len(claimed) == 1
    _sql(db_url, "UPDATE billing.outbox_event SET lease_until = %s", now + timedelta(hours=1))
    old_ns = _sql(db_url, "SELECT key_namespace FROM billing.installation")[0][0]

    report = after_restore(db_url, now=now, margin=10)
    assert report.old_namespace == old_ns != report.new_namespace
    assert report.leases_lapsed["invoice"] == 1 and report.leases_lapsed["outbox_event"] == 6
    assert report.attempts_in_doubt == 1
    assert _sql(db_url, "SELECT count(*) FROM billing.outbox_event WHERE lease_until IS NOT NULL")[0][0] == 0
    # The claimed invoice is claimable at once, with its own stored key (the gateway answers its result);
    # the others take keys of the new namespace.
    again = dict(_sql(db_url, "SELECT invoice_id, idempotency_key FROM billing.claim_charges('new', 10, "
                              "interval '1 minute', %s)", now))
    assert again[claimed[0][0]] == claimed[0][1]
    assert all(k.startswith(report.new_namespace + "-") for i, k in again.items() if i != claimed[0][0])
    assert report.first_new_invoice_id > max(again)

    result = CliRunner().invoke(main, ["db", "after-restore", "--database-url", db_url, "--margin", "5"])
    assert result.exit_code == 0, result.output
    assert "key namespace" in result.output and "sequences advanced" in result.output


def test_the_outbox_is_checked_against_kafka(db_url, kafka_bootstrap, kafka_topic):
    since = datetime.now(timezone.utc) - timedelta(minutes=1)
    _sql(db_url, "SELECT billing.upsert_plan('P', 1000, 'USD', 'MONTH', 1)")
    _sql(db_url, "SELECT billing.create_subscription('k' || g, g, 'P', now()) FROM generate_series(1, 4) g")

    async def publish():
        stop = asyncio.Event()
        sink = KafkaSink(kafka_bootstrap, kafka_topic)
        task = asyncio.create_task(Relay(db_url, sink, stop, options=RelayOptions(batch_size=50)).run())
        await until(lambda: pending(db_url) == 0, 30, "the outbox to drain")
        stop.set()
        await task
        sink.close()

    asyncio.run(publish())
    rows = outbox(db_url)
    assert len(rows) == 8 and len(consume_all(kafka_bootstrap, kafka_topic, 8)) == 8
    ids = [str(r["event_id"]) for r in rows]
    # What a restore makes of it: two events published after the instant are PENDING again, one was
    # created after the instant (gone from the outbox), one marked published that Kafka never got.
    _sql(db_url, "UPDATE billing.outbox_event SET status = 'PENDING', published_at = NULL WHERE event_id = ANY(%s::uuid[])",
         ids[5:7])
    _sql(db_url, "DELETE FROM billing.outbox_event WHERE event_id = %s::uuid", ids[7])
    ghost = _sql(db_url, "SELECT billing._emit_event(aggregate_type, aggregate_id, event_type, "
                         "coalesce(payload::jsonb->'data', payload::jsonb), now()) FROM billing.outbox_event ORDER BY id LIMIT 1")[0][0]
    _sql(db_url, "UPDATE billing.outbox_event SET status = 'PUBLISHED', published_at = now() WHERE id = %s", ghost)
    ghost_id = _sql(db_url, "SELECT event_id::text FROM billing.outbox_event WHERE id = %s", ghost)[0][0]

    check = check_outbox(db_url, kafka_bootstrap, kafka_topic, since, timeout=30)
    assert check.read == 8
    assert check.marked == sorted(ids[5:7])
    assert check.kafka_only == [ids[7]]
    assert check.not_on_kafka == [ghost_id]
    assert pending(db_url) == 0, "nothing Kafka already holds is announced again"
    assert "2 pending events already on Kafka marked published" in check.summary()
