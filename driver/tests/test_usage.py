"""Usage-based billing (issue 29, docs/usage.md) through its two doors against the real PostgreSQL
and Kafka: POST /usage-events, `billing usage consume` (a consumer SIGKILLed mid-stream, then
another: nothing lost, nothing counted twice, rejected events dead-lettered with their reason),
and the current usage read from the rollups (its plans use the indexes; its latency)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import time
import uuid
from datetime import datetime, timedelta, timezone

import httpx
import psycopg
import pytest

from billing.api import create_app
from billing.clock import SimulatedClock
from billing.config import Settings

from .chaos.harness import BILLING
from .conftest import create_test_key

T0 = datetime(2026, 10, 10, 12, 30, tzinfo=timezone.utc)


def event(i, customer, *, source="gw", etype="api.request", at=None, data=None):
    return {"specversion": "1.0", "id": f"e{i}", "source": source, "type": etype,
            "time": (at or T0 - timedelta(minutes=5)).isoformat().replace("+00:00", "Z"),
            "subject": str(customer), "data": {"tokens": i % 7, "user": f"u{i % 5}"} if data is None else data}


def setup_meters(conn, now):
    conn.execute("SELECT billing.upsert_meter('requests', 'api.request', 'count', NULL, '{}', %s)", (now,))
    conn.execute("SELECT billing.upsert_meter('tokens', 'api.request', 'sum', '{tokens}', '{}', %s)", (now,))
    conn.execute("SELECT billing.upsert_meter('users', 'api.request', 'unique_count', '{user}', '{}', %s)", (now,))


def test_http_door_answers_each_event_and_counts_each_once(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        for c in (1, 2):
            conn.execute("SELECT billing.upsert_customer(%s)", (c,))
        setup_meters(conn, T0)
    writer = create_test_key(db_url, "usage:write", name="ingest")
    reader = create_test_key(db_url, "subscriptions:read", name="reader")

    async def body():
        app = create_app(Settings(database_url=db_url), clock=SimulatedClock(T0))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        try:
            async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test") as client:
                post = lambda doc, key=writer: client.post(  # noqa: E731
                    "/usage-events", json=doc, headers={"Authorization": f"Bearer {key}"})
                batch = [event(1, 1), event(1, 1), event(2, 2), event(3, 999),
                         event(4, 1, at=T0 + timedelta(hours=1)), event(5, 1, data={"user": "x", "tokens": "7"}),
                         event(6, 1, at=T0 - timedelta(days=200)), {"id": "nope"}]
                r = await post(batch)
                assert r.status_code == 200, r.text
                doc = r.json()
                assert [(x["status"], x.get("reason")) for x in doc["results"]] == [
                    ("accepted", None), ("duplicate", None), ("accepted", None), ("rejected", "unknown_customer"),
                    ("rejected", "in_future"), ("rejected", "not_numeric"), ("rejected", "too_old"),
                    ("rejected", "invalid_event")]
                assert (doc["accepted"], doc["duplicate"], doc["rejected"]) == (2, 1, 5)
                assert [x["index"] for x in doc["results"]] == list(range(8))
                # the client retries the whole batch (a lost answer): every accepted one is a duplicate now
                again = (await post(batch)).json()
                assert (again["accepted"], again["duplicate"], again["rejected"]) == (0, 3, 5)
                # the {"events": [...]} form is the same door
                assert (await post({"events": [event(7, 1)]})).json()["accepted"] == 1
                # above the batch limit: 413, nothing stored
                r = await post([event(10_000 + i, 1) for i in range(1001)])
                assert r.status_code == 413 and r.json()["error"]["code"] == "batch_too_large"
                # a key without usage:write may not ingest; usage:write does not read
                assert (await post([event(8, 1)], reader)).status_code == 403
                usage = await client.get("/customers/1/usage", headers={"Authorization": f"Bearer {reader}"})
                assert usage.status_code == 200, usage.text
                meters = {m["code"]: m for m in usage.json()["meters"]}
                assert {k: (m["value"], m["events"]) for k, m in meters.items()} == {
                    "requests": (2, 2), "tokens": (1 + 0, 2), "users": (2, 2)}
                assert usage.json()["periodStart"] == "2026-10-01T00:00:00Z"
                missing = await client.get("/customers/404/usage", headers={"Authorization": f"Bearer {reader}"})
                assert missing.status_code == 404
                assert (await client.get("/customers/1/usage",
                                         headers={"Authorization": f"Bearer {writer}"})).status_code == 403
        finally:
            await app.state.database.close()

    asyncio.run(body())
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM billing.usage_event").fetchone()[0] == 3
        assert conn.execute("SELECT count(*) FROM billing.usage_event WHERE event_id LIKE 'e1____'").fetchone()[0] == 0


def test_upcoming_invoice_over_http(db_url):
    """GET /subscriptions/{id}/upcoming-invoice: the next period's fixed price and the usage so far,
    priced by the plan's charge; 404 unknown, 403 without subscriptions:read."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_customer(31)")
        setup_meters(conn, T0 - timedelta(days=30))
        conn.execute("SELECT billing.upsert_plan('UP_API', 500, 'USD', 'MONTH', 1, %s)", (T0 - timedelta(days=30),))
        conn.execute("SELECT billing.upsert_plan_charge('UP_API', 'requests', 'per_unit', 3, NULL, '[]', 1, NULL, NULL, %s)",
                     (T0 - timedelta(days=30),))
        sub = conn.execute("SELECT id FROM billing.create_subscription('up-1', 31, 'UP_API', %s)",
                           (T0 - timedelta(days=2),)).fetchone()[0]
        answers = conn.execute("SELECT status FROM billing.ingest_usage(%s::jsonb, %s)",
                               (json.dumps([event(i, 31) for i in range(5)]), T0)).fetchall()
        assert [a[0] for a in answers] == ["accepted"] * 5
    reader = create_test_key(db_url, "subscriptions:read", name="up-reader")
    writer = create_test_key(db_url, "usage:write", name="up-writer")

    async def body():
        app = create_app(Settings(database_url=db_url), clock=SimulatedClock(T0))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        try:
            async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test") as client:
                get = lambda path, key=reader: client.get(path, headers={"Authorization": f"Bearer {key}"})  # noqa: E731
                r = await get(f"/subscriptions/{sub}/upcoming-invoice")
                assert r.status_code == 200, r.text
                doc = r.json()
                assert doc["object"] == "upcoming_invoice" and doc["subscriptionId"] == sub
                assert [(x["kind"], x["amount"]) for x in doc["lines"]] == [("PLAN", 500), ("USAGE", (5 - 1) * 3)]
                usage = doc["lines"][1]
                assert (usage["meterCode"], usage["quantity"], usage["late"]) == ("requests", 5, False)
                assert usage["periodStart"] == "2026-10-08T12:30:00Z" and usage["periodEnd"] == "2026-10-10T12:30:00Z"
                assert (doc["subtotal"], doc["total"], doc["invoicedAt"]) == (512, 512, "2026-11-08T12:30:00Z")
                assert (await get("/subscriptions/999999/upcoming-invoice")).status_code == 404
                assert (await get(f"/subscriptions/{sub}/upcoming-invoice", writer)).status_code == 403
        finally:
            await app.state.database.close()

    asyncio.run(body())


def _topic(admin, name, partitions=3):
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=60)


@pytest.mark.parametrize("flags", [[], ["--no-pipeline"]], ids=["pipelined", "serial"])
def test_kafka_door_exactly_once_across_a_sigkill(db_url, kafka_bootstrap, tmp_path, flags):
    """6,000 events (10% sent twice, 40 unacceptable) through the consumer group; the first
    consumer is SIGKILLed mid-stream, a second one finishes: every good event counted once, every
    bad one dead-lettered with its reason."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    customers = 40
    now = datetime.now(timezone.utc)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_customer(c) FROM generate_series(1, %s) c", (customers,))
        setup_meters(conn, now)
    topic, dead = f"usage.{uuid.uuid4().hex[:10]}", f"usage-dead.{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    _topic(admin, topic)
    _topic(admin, dead, 1)

    good = 6_000
    at = now - timedelta(seconds=30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20, "enable.idempotence": True})
    sent = []
    for i in range(good):
        sent.append(event(i, 1 + i % customers, at=at))
        if i % 10 == 0:
            sent.append(event(i, 1 + i % customers, at=at))  # a duplicate
    bad = [event(f"bad{i}", 10_000 + i, at=at, data={"tokens": 1, "user": "u"}) for i in range(20)]  # unknown customers
    bad += [event(f"neg{i}", 1, at=at, data={"tokens": "many", "user": "u"}) for i in range(19)]
    for e in sent[:len(sent) // 2] + bad + sent[len(sent) // 2:]:
        producer.produce(topic, key=e["subject"].encode(), value=json.dumps(e).encode())
    producer.produce(topic, key=b"x", value=b"{not json")
    assert producer.flush(30) == 0

    env = {**os.environ, "BILLING_DATABASE_URL": db_url, "BILLING_KAFKA_BOOTSTRAP": kafka_bootstrap,
           "BILLING_USAGE_TOPIC": topic, "BILLING_USAGE_DEAD_LETTER_TOPIC": dead,
           "BILLING_USAGE_GROUP": f"g-{topic}", "BILLING_LOG_LEVEL": "WARNING"}
    argv = [BILLING, "usage", "consume", "--batch", "200", "--exit-when-idle", "4", *flags]
    first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    count = lambda: psycopg.connect(db_url, autocommit=True).execute(  # noqa: E731
        "SELECT count(*) FROM billing.usage_event").fetchone()[0]
    deadline = time.monotonic() + 60
    while count() < 1500 and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.05)
    assert first.poll() is None, first.stdout.read().decode()
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    killed_at = count()
    assert 0 < killed_at < good, killed_at

    t = time.monotonic()
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t - 4  # less the idle wait
    assert second.returncode == 0, second.stdout + second.stderr
    print(f"\nconsumer after the kill: {second.stdout.strip()} in {elapsed:.1f}s")

    with psycopg.connect(db_url) as conn:
        n, keys = conn.execute("SELECT count(*), count(DISTINCT (customer_id, source, event_id)) "
                               "FROM billing.usage_event").fetchone()
        assert n == keys == good
        assert conn.execute("SELECT count(*) FROM billing.usage_dedup").fetchone()[0] == good
        # the rollups equal an independent count of the raw events (and of what was sent)
        rolled = dict(conn.execute("SELECT meter_code, sum(events) FROM billing.usage_rollup GROUP BY 1").fetchall())
        assert rolled["requests"] == good and rolled["tokens"] == good
        tokens = conn.execute("SELECT sum(total) FROM billing.usage_rollup WHERE meter_code = 'tokens'").fetchone()[0]
        assert tokens == sum(i % 7 for i in range(good))
        per_customer = dict(conn.execute("SELECT customer_id, sum(events) FROM billing.usage_rollup "
                                         "WHERE meter_code = 'requests' GROUP BY 1").fetchall())
        assert per_customer == {c: good // customers for c in range(1, customers + 1)}

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"check-{dead}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([dead])
    letters = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(letters) < len(bad) + 1:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        headers = dict(msg.headers() or [])
        try:
            ident = json.loads(msg.value())["id"]
        except ValueError:
            ident = "<not json>"
        letters[ident] = headers["billing-reason"].decode()
    consumer.close()
    expected = {e["id"]: "unknown_customer" for e in bad[:20]}
    expected.update({e["id"]: "not_numeric" for e in bad[20:]})
    expected["<not json>"] = "invalid_json"
    assert letters == expected


@pytest.fixture
def loaded(db_url):
    """200 customers on a monthly plan (periods from 07:20:13 on the 10th), 3 meters, a month of
    hourly rollups each (437,400 rows) and raw events every 20 minutes for two days."""
    customers = 200
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_customer(c) FROM generate_series(1, %s) c", (customers,))
        setup_meters(conn, T0)
        conn.execute("SELECT billing.upsert_plan('USAGE_M', 0, 'USD', 'MONTH', 1, %s)", (T0 - timedelta(days=40),))
        conn.execute("SELECT billing.create_subscription('s' || c, c, 'USAGE_M', %s) FROM generate_series(1, %s) c",
                     (datetime(2026, 9, 10, 7, 20, 13, tzinfo=timezone.utc), customers))
        conn.execute("SELECT billing.create_due_invoices(5000, %s)", (datetime(2026, 10, 10, 7, 20, 14, tzinfo=timezone.utc),))
        conn.execute("""
            INSERT INTO billing.usage_rollup (customer_id, meter_code, bucket, events, total, max_value, latest_time, latest_value)
            SELECT c, m, h, 3, 6, 3, h + interval '10 minutes', 2
              FROM generate_series(1, %(n)s) c, unnest(ARRAY['requests', 'tokens', 'users']) m,
                   generate_series(timestamptz '2026-09-10 00:00Z', timestamptz '2026-10-10 11:00Z', interval '1 hour') h""",
                     {"n": customers})
        conn.execute("SELECT billing._usage_partition(timestamptz '2026-09-15Z')")
        conn.execute("SELECT billing._usage_partition(timestamptz '2026-10-15Z')")
        conn.execute("""
            INSERT INTO billing.usage_event (customer_id, event_time, source, event_id, event_type, data, received_at)
            SELECT c, t, 'gw', c || '-' || extract(epoch FROM t), 'api.request', '{"tokens": 1, "user": "u1"}', t
              FROM generate_series(1, %(n)s) c,
                   generate_series(timestamptz '2026-10-08 12:00Z', timestamptz '2026-10-10 12:29Z', interval '20 minutes') t""",
                     {"n": customers})
        conn.execute("ANALYZE billing.usage_rollup")
        conn.execute("ANALYZE billing.usage_event")
    return customers


def test_current_usage_reads_indexes_not_scans(db_url, loaded):
    plans = []
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_min_duration = 0")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET auto_explain.log_level = 'notice'")
        conn.execute("SET client_min_messages = notice")
        rows = conn.execute("SELECT meter_code, value, events, period_start FROM billing.current_usage(77, %s)",
                            (T0,)).fetchall()
        conn.execute("SET auto_explain.log_min_duration = -1")
        # the open period is [2026-10-10 07:20:13, 2026-11-10 07:20:13): the whole hours 08:00..11:00
        # from the rollups (4 x 3 events, 4 x 6 tokens), the partial hour from 07:20:13 from the
        # events (07:40: 1 event, 1 token)
        got = {r[0]: (r[1], r[2]) for r in rows}
        assert got == {"requests": (13, 13), "tokens": (25, 13), "users": (1, 13)}, got
        assert rows[0][3] == datetime(2026, 10, 10, 7, 20, 13, tzinfo=timezone.utc)
        times = []
        for i in range(300):
            t = time.perf_counter()
            conn.execute("SELECT * FROM billing.current_usage(%s, %s)", (1 + (i * 37) % loaded, T0)).fetchall()
            times.append(time.perf_counter() - t)
    text = "\n".join(plans)
    assert "usage_rollup" in text and "usage_event" in text, text[:2000]
    assert "Seq Scan on usage_rollup" not in text and "Seq Scan on usage_event" not in text, text
    times.sort()
    p50, p99 = statistics.median(times) * 1000, times[int(len(times) * 0.99) - 1] * 1000
    print(f"\ncurrent_usage over {loaded * 3 * 729:,} rollup rows: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    assert p99 < 50  # the 10 ms is a bench figure (bench/README.md); a shared 2-core CI box gets slack


# -- pricing: each model against a Python oracle --------------------------------------------------

def oracle(model, unit, package, tiers, included, minimum, maximum, quantity) -> int:
    """docs/usage.md, "Pricing", in exact fractions: included units off, the model, rounded up once."""
    from fractions import Fraction as F
    import math

    q = max(F(quantity) - F(included), F(0))
    amount = F(0)
    if model == "per_unit":
        amount = q * F(unit)
    elif model == "package":
        amount = math.ceil(q / package) * F(unit)
    elif q > 0 and model == "graduated":
        prev = F(0)
        for t in tiers:
            top = q if t["upTo"] is None else min(q, F(t["upTo"]))
            if top - prev <= 0:
                break
            amount += (top - prev) * F(t["unitAmount"]) + t.get("flatAmount", 0)
            prev = top
    elif q > 0 and model == "volume":
        t = next(t for t in tiers if t["upTo"] is None or q <= t["upTo"])
        amount = q * F(t["unitAmount"]) + t.get("flatAmount", 0)
    amount = math.ceil(amount)
    if minimum is not None:
        amount = max(amount, minimum)
    if maximum is not None:
        amount = min(amount, maximum)
    return amount


def test_pricing_models_match_the_oracle(db_url):
    from decimal import Decimal

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    units = st.decimals(min_value=0, max_value=500, places=3).map(Decimal)

    @st.composite
    def tier_lists(draw):
        bounds = sorted(set(draw(st.lists(st.integers(1, 5000), min_size=0, max_size=4))))
        return [{"upTo": b, "unitAmount": str(draw(units)), "flatAmount": draw(st.integers(0, 1000))}
                for b in bounds] + [{"upTo": None, "unitAmount": str(draw(units)), "flatAmount": draw(st.integers(0, 1000))}]

    @st.composite
    def charges(draw):
        model = draw(st.sampled_from(["per_unit", "graduated", "volume", "package"]))
        tiers = draw(tier_lists()) if model in ("graduated", "volume") else []
        unit = draw(units) if model in ("per_unit", "package") else None
        package = draw(st.integers(1, 1000)) if model == "package" else None
        minimum = draw(st.one_of(st.none(), st.integers(0, 10_000)))
        maximum = draw(st.one_of(st.none(), st.integers(minimum or 0, 10_000_000)))
        # quantities on and around the tier boundaries and the included units, and anywhere
        included = draw(st.integers(0, 2000))
        edges = [t["upTo"] for t in tiers if t["upTo"]] + [included, 0]
        quantity = draw(st.one_of(st.sampled_from(edges).flatmap(lambda e: st.integers(max(e - 1, 0), e + 1)),
                                  st.integers(0, 20_000),
                                  st.decimals(min_value=0, max_value=20_000, places=4).map(Decimal)))
        return model, unit, package, tiers, included, minimum, maximum, quantity

    with psycopg.connect(db_url, autocommit=True) as conn:
        @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
        @given(charges())
        def check(case):
            model, unit, package, tiers, included, minimum, maximum, quantity = case
            got = conn.execute(
                "SELECT billing._usage_amount(ROW(1, 'm', %s, %s, %s, %s::jsonb, %s, %s, %s, now(), now())"
                "::billing.plan_charge, %s)",
                (model, unit, package, json.dumps(tiers), included, minimum, maximum, quantity)).fetchone()[0]
            assert got == oracle(model, unit, package, tiers, included, minimum, maximum, quantity), case

        check()


def test_plan_charges_are_checked(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('API_M', 0, 'USD', 'MONTH', 1, %s)", (T0,))
        setup_meters(conn, T0)
        row = conn.execute("SELECT model, tiers FROM billing.upsert_plan_charge('API_M', 'requests', 'graduated', NULL, "
                           "NULL, %s::jsonb, 1000, 0, 500000, %s)",
                           (json.dumps([{"upTo": 10000, "unitAmount": 0.5}, {"upTo": None, "unitAmount": 0.2}]), T0)
                           ).fetchone()
        assert row[0] == "graduated"
        bad = [("per_unit", None, None, "[]"), ("package", 100, None, "[]"), ("graduated", None, None, "[]"),
               ("volume", None, None, json.dumps([{"upTo": 10, "unitAmount": 1}])),  # the last tier must be unbounded
               ("volume", None, None, json.dumps([{"upTo": 10, "unitAmount": 1}, {"upTo": 5, "unitAmount": 1},
                                                  {"upTo": None, "unitAmount": 1}])),  # not ascending
               ("graduated", None, None, json.dumps([{"upTo": None, "unitAmount": -1}])),
               ("median", 1, None, "[]")]
        for model, unit, package, tiers in bad:
            with pytest.raises(psycopg.Error) as err:
                conn.execute("SELECT billing.upsert_plan_charge('API_M', 'tokens', %s, %s, %s, %s::jsonb, 0, NULL, "
                             "NULL, %s)", (model, unit, package, tiers, T0))
            assert err.value.sqlstate == "BL422", (model, err.value)
        for plan, meter in (("NOPE", "tokens"), ("API_M", "nope")):
            with pytest.raises(psycopg.Error) as err:
                conn.execute("SELECT billing.upsert_plan_charge(%s, %s, 'per_unit', 1, NULL, '[]', 0, NULL, NULL, %s)",
                             (plan, meter, T0))
            assert err.value.sqlstate == "BL404"
