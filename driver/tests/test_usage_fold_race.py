"""The daily rollups under concurrent batches (review6; docs/usage.md "Current usage"): two
connections ingest one customer's events at once, out of order over three UTC days (late events into
hours already folded, folds brought by either batch, the same keys sent by both), through the
JSON-text door. Afterwards every figure the reads use is checked against an independent count of the
raw events stored and of the test's own accepted events: the hourly rows, each day's row (its folded
hours added up), the days' distinct values, and usage_between over whole days, hours and arbitrary
spans. A fold that raced a batch (an hour folded while another batch added to it) would lose or double
the other batch's events in the day's row."""

from __future__ import annotations

import json
import random
import threading
from datetime import datetime, timedelta, timezone

import psycopg
from psycopg import errors

from billing.config import Settings
from billing.usage import ingest_texts

NOW = datetime(2026, 10, 10, 0, 0, tzinfo=timezone.utc)
START = NOW - timedelta(days=3)
METERS = (("r_count", "count", None), ("r_sum", "sum", "{n}"), ("r_max", "max", "{n}"), ("r_users", "unique_count", "{u}"))


def _event(customer: int, key: str, at: datetime, n: int, user: str) -> str:
    return json.dumps({"specversion": "1.0", "id": key, "source": "race", "type": "race.request", "subject": str(customer),
                       "time": at.isoformat().replace("+00:00", "Z"), "data": {"n": n, "u": user}})


def test_concurrent_batches_fold_days_without_losing_or_doubling(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_customer(c) FROM generate_series(1, 2) c")
        for code, agg, prop in METERS:
            conn.execute("SELECT billing.upsert_meter(%s, 'race.request', %s, %s::text[], '{}', %s)",
                         (code, agg, prop, START - timedelta(days=1)))
    settings = Settings(database_url=db_url)
    accepted: list[tuple[int, str]] = []
    retried = [0]
    lock = threading.Lock()
    errors_seen: list[BaseException] = []

    def worker(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            with psycopg.connect(db_url) as conn:
                for b in range(30):
                    # mostly the recent hours, some late ones anywhere in the three days; a third of
                    # the keys shared with the other connection (the same events sent twice)
                    texts = []
                    for i in range(150):
                        at = NOW - timedelta(seconds=rnd.randint(0, 3 * 3600) if rnd.random() < 0.6
                                             else rnd.randint(0, 3 * 86400 - 1))
                        key = f"s{b}-{i}" if rnd.random() < 0.33 else f"w{seed}-{b}-{i}"
                        customer = 1 + (i % 2)
                        # a shared key is the same event from both (same time and data: one producer)
                        if key.startswith("s"):
                            at = NOW - timedelta(seconds=(hash(key) % (3 * 86400)))
                        texts.append(_event(customer, key, at, 1 + len(key) % 5, f"u{len(key) % 7}"))
                    while True:
                        try:
                            with conn.transaction():
                                got = ingest_texts(conn, texts, NOW, settings)
                            break
                        except errors.DeadlockDetected:  # the consumer redelivers such a batch
                            retried[0] += 1
                    with lock:
                        accepted.extend((json.loads(texts[o - 1])["subject"], json.loads(texts[o - 1])["id"])
                                        for o, status, _ in got if status == "accepted")
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread below
            errors_seen.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors_seen, errors_seen
    assert len(accepted) == len(set(accepted)), "a key accepted twice"

    with psycopg.connect(db_url, autocommit=True) as conn:
        one = lambda q, *p: conn.execute(q, p).fetchall()  # noqa: E731
        assert one("SELECT count(*) FROM billing.usage_event")[0][0] == len(accepted)
        assert one("SELECT count(*) FROM billing.usage_rollup WHERE folded")[0][0] > 10, "the test folded nothing"
        # the hourly rows = the raw events
        assert one("""SELECT customer_id, meter_code, bucket, events, total, max_value FROM billing.usage_rollup
                       WHERE meter_code <> 'r_users' ORDER BY 1, 2, 3""") == one("""
            SELECT e.customer_id, m.code, date_trunc('hour', e.event_time AT TIME ZONE 'UTC') AT TIME ZONE 'UTC',
                   count(*), CASE WHEN m.aggregation IN ('sum', 'max') THEN sum((e.data ->> 'n')::numeric) ELSE 0 END,
                   CASE WHEN m.aggregation IN ('sum', 'max') THEN max((e.data ->> 'n')::numeric) END
              FROM billing.usage_event e CROSS JOIN billing.meter m WHERE m.code <> 'r_users'
             GROUP BY 1, 2, 3, m.aggregation ORDER BY 1, 2, 3""")
        # each day's row = its folded hours added up (a raced fold: a day short or doubled)
        assert one("""SELECT customer_id, meter_code, day, events, total, max_value FROM billing.usage_rollup_day
                       ORDER BY 1, 2, 3""") == one("""
            SELECT customer_id, meter_code, date_trunc('day', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', sum(events),
                   sum(total), max(max_value)
              FROM billing.usage_rollup WHERE folded GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""")
        # the days' distinct values = the raw events'
        assert one("SELECT customer_id, day, value FROM billing.usage_unique_day ORDER BY 1, 2, 3") == one("""
            SELECT DISTINCT customer_id, date_trunc('day', event_time AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', data ->> 'u'
              FROM billing.usage_event ORDER BY 1, 2, 3""")
        # the reads over whole days, hours and arbitrary spans = the raw events counted
        rnd = random.Random(7)
        spans = [(START, NOW + timedelta(hours=1)), (START + timedelta(days=1), START + timedelta(days=2))]
        spans += [(START + timedelta(hours=h), START + timedelta(hours=h + d)) for h, d in ((5, 1), (23, 2), (30, 26))]
        for _ in range(8):
            a = START + timedelta(seconds=rnd.randint(0, 3 * 86400))
            spans.append((a, a + timedelta(seconds=rnd.randint(60, 2 * 86400))))
        for customer in (1, 2):
            for a, b in spans:
                got = {r[0]: (r[2], r[3]) for r in one("SELECT * FROM billing.usage_between(%s, %s, %s)", customer, a, b)}
                raw = one("""SELECT count(*), coalesce(sum((data ->> 'n')::numeric), 0), max((data ->> 'n')::numeric),
                                    count(DISTINCT data ->> 'u')
                               FROM billing.usage_event WHERE customer_id = %s AND event_time >= %s AND event_time < %s""",
                          customer, a, b)[0]
                want = {"r_count": (raw[0], raw[0]), "r_sum": (raw[1], raw[0]), "r_max": (raw[2], raw[0]),
                        "r_users": (raw[3], raw[0])}
                assert {k: (v, n) for k, (v, n) in got.items() if n} == {k: v for k, v in want.items() if v[1]}, (
                    customer, a, b, got, want)


def test_two_first_batches_of_a_month_both_stored(db_url):
    """The month's partition made by one ingestion while another waits for it: both batches are stored
    (the second failed with duplicate_table: its catalog cache still said the month had no table)."""
    _two_first_batches(db_url)


def test_two_first_batches_of_a_month_both_stored_on_citus(citus_db_url):
    """The same on Citus (the partition of a distributed table, made on the coordinator)."""
    _two_first_batches(citus_db_url)


def _two_first_batches(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_customer(1)")
        month = NOW + timedelta(days=40)  # a month no partition holds yet
        assert conn.execute("SELECT to_regclass('billing.usage_event_p202611')").fetchone()[0] is None
    settings = Settings(database_url=db_url)
    first, second = psycopg.connect(db_url), psycopg.connect(db_url)
    try:
        # each one looks the month up first (its cache says: none), then the first makes it
        for conn in (first, second):
            conn.execute("SELECT to_regclass('billing.usage_event_p202611')")
            conn.commit()
        got_first = ingest_texts(first, [_event(1, "m1", month, 1, "a")], month, settings)
        done: list = []
        waiter = threading.Thread(target=lambda: done.append(
            _commit(second, ingest_texts(second, [_event(1, "m2", month, 1, "b")], month, settings))))
        waiter.start()
        with psycopg.connect(db_url, autocommit=True) as watch:  # the second waits for the first's lock
            for _ in range(600):
                if watch.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchone()[0]:
                    break
                threading.Event().wait(0.05)
            else:
                raise AssertionError("the second ingestion never waited for the partition's lock")
        first.commit()
        waiter.join(60)
        assert [s for _, s, _ in got_first] == ["accepted"]
        assert done and not isinstance(done[0], BaseException), done
        assert [s for _, s, _ in done[0]] == ["accepted"]
    finally:
        first.close()
        second.close()
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM billing.usage_event_p202611").fetchone()[0] == 2


def _commit(conn, result):
    conn.commit()
    return result
