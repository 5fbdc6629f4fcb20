"""The Kafka door's parse (billing.usage.event_columns -> billing.ingest_usage_columns) answers and
stores exactly what the JSON-text door (billing.ingest_usage_batch) does for the same messages: the
same status and reason per message, the same exactly-once keys, the same stored events (data
compared as jsonb) and the same rollups, for every kind of message the consumer may meet, those it
parses and those it leaves to the database as raw texts (issue 29; docs/usage.md "Ingestion, two
doors")."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone

import psycopg

from billing.config import Settings
from billing.usage import (_batch_columns, _each_columns, _joined, event_columns, ingest_columns, ingest_columns_counts,
                           ingest_texts, message_text)

T0 = datetime(2026, 10, 10, 12, 30, tzinfo=timezone.utc)
AT = "2026-10-10T12:20:00Z"


def ev(i, subject="1", **over) -> dict:
    doc = {"specversion": "1.0", "id": f"e{i}", "source": "gw", "type": "api.request", "time": AT,
           "subject": subject, "data": {"tokens": i % 7, "user": f"u{i % 3}"} if isinstance(i, int) else {}}
    doc.update(over)
    return doc


def enc(doc) -> bytes:
    return json.dumps(doc).encode()


# Every message the consumer may meet: parsed here (the common case), or left raw to the database
# (a float, a big integer, an attribute that is not a string, data not an object, a \u0000 escape,
# text that orjson refuses), or dead without asking anyone (no value, a NUL byte, not UTF-8).
MESSAGES: list = [
    enc(ev(1)), enc(ev(1)), enc(ev(2, "2")), enc(ev(3, "999")),                   # a duplicate, an unknown customer
    enc(ev(4, time="2026-10-10T13:30:00Z")), enc(ev(5, time="2026-02-01T00:00:00Z")),  # in_future, too_old
    enc(ev(6, time="10 October 2026")), enc(ev(7, time="2026-02-30T00:00:00Z")),  # invalid_time (form, date)
    enc(ev(8, data={"tokens": "7", "user": "u"})), enc(ev(9, data={"tokens": 3})),  # not_numeric, missing_property
    enc(ev(10, data={"tokens": 2.5, "user": "u"})),                                # a float: raw
    b'{"specversion":"1.0","id":"e11","source":"gw","type":"api.request","time":"' + AT.encode()
    + b'","subject":"1","data":{"tokens":0.10000000000000000001,"user":"u"}}',       # digits a float would lose: raw
    b'{"specversion":"1.0","id":"e12","source":"gw","type":"api.request","time":"' + AT.encode()
    + b'","subject":"1","data":{"tokens":123456789012345678901234567890,"user":"u"}}',  # past 64 bits: raw
    b'{"specversion":"1.0","id":"e13","source":"gw","type":"api.request","time":"' + AT.encode()
    + b'","subject":"1","data":{"tokens":1E2,"user":"u"}}',                         # an exponent: raw
    enc(ev(14, data={"tokens": 1, "user": "u", "nested": {"a": [1, {"b": 0.5}]}})),  # a float deep inside: raw
    enc(ev(15, subject=1)), enc(ev(16, id=16)), enc(ev(17, specversion=1.0)),     # attributes not strings: raw
    enc(ev(18, source=["gw"])), enc(ev(19, type=None)), enc(ev(20, subject=None)),
    enc(ev(21, type="api.ping", data=None)),                                       # data null, data absent (no
    enc({k: v for k, v in ev(22, type="api.ping").items() if k != "data"}),        # meter counts api.ping)
    enc(ev(23, data=[1, 2])), enc(ev(24, data="text")),                            # data not an object: raw
    enc(ev(25, id="e25\u0000")), enc(ev(26, id="\u00e9\u2028\U0001F600")),        # \u0000 escape: raw; unicode
    enc(ev(27, data={"tokens": 1, "user": "\u00e9"})).replace(b"\\u00e9", b"\xc3\xa9"),  # raw UTF-8 in data
    b'{"specversion":"1.0","id":"e28","id":"e28b","source":"gw","type":"api.request","time":"' + AT.encode()
    + b'","subject":"1","data":{"tokens":1,"tokens":2,"user":"u"}}',                # duplicate keys: the last wins
    b'{"specversion":"1.0","id":"e29\\ud800","source":"gw","type":"api.request","time":"' + AT.encode()
    + b'","subject":"1"}',                                                          # a lone surrogate: raw
    b'\xef\xbb\xbf' + enc(ev(30)),                                                  # a byte order mark: raw
    b' ' + enc(ev(31)) + b'\n',                                                     # whitespace around
    enc(ev(32, specversion="0.3")), enc(ev(33, id="")), enc(ev(34, id="x" * 201)),  # invalid_event
    enc({"id": "e35"}), enc([1, 2]), enc("a string"), b"null", b"NaN", b"{not json",
    enc(ev(36, data={"tokens": -0, "user": "u"})), enc(ev(37, subject="01")), enc(ev(38, subject="1" * 19)),
    enc(ev(39, time="2026-10-10T12:20:00.123456789+02:00")), enc(ev(40, source="other")),
    None, b'{"id":"nul\x00"}', b"\xff\xfe not utf-8",                               # dead before the database
]
# the consumer sends each column as one text split on \x1f (\x1e: NULL), or, when an attribute holds
# either, the batch as lists: both forms are compared to the text door
SEPARATORS = [enc(ev(41, id="a\u001fb")), enc(ev(42, source="\u001e"))]


def _world(conn) -> None:
    for c in (1, 2):
        conn.execute("SELECT billing.upsert_customer(%s)", (c,))
    conn.execute("SELECT billing.upsert_meter('requests', 'api.request', 'count', NULL, '{}', %s)", (T0,))
    conn.execute("SELECT billing.upsert_meter('tokens', 'api.request', 'sum', '{tokens}', '{}', %s)", (T0,))
    conn.execute("SELECT billing.upsert_meter('users', 'api.request', 'unique_count', '{user}', '{}', %s)", (T0,))


def _state(conn) -> tuple:
    return (conn.execute("SELECT customer_id, source, event_id, event_time FROM billing.usage_dedup ORDER BY 1, 2, 3").fetchall(),
            conn.execute("SELECT customer_id, event_time, source, event_id, event_type, data::text FROM billing.usage_event "
                         "ORDER BY 1, 2, 3, 4").fetchall(),
            conn.execute("SELECT customer_id, meter_code, bucket, events, total, max_value FROM billing.usage_rollup "
                         "ORDER BY 1, 2, 3").fetchall(),
            conn.execute("SELECT * FROM billing.usage_unique ORDER BY 1, 2, 3, 4").fetchall())


def _by_columns(conn, values: list, settings: Settings) -> list:
    columns, kept, dead = event_columns(values)
    out = {n: ("rejected", "invalid_json") for n in dead}
    if kept:
        for ord_, status, reason in ingest_columns(conn, columns, T0, settings):
            out[kept[ord_ - 1]] = (status, reason)
    return [out[n] for n in range(len(values))]


def _by_texts(conn, values: list, settings: Settings) -> list:
    texts = [message_text(v) for v in values]
    sent = [n for n, t in enumerate(texts) if t is not None]
    out = {n: ("rejected", "invalid_json") for n, t in enumerate(texts) if t is None}
    if sent:
        for ord_, status, reason in ingest_texts(conn, [texts[n] for n in sent], T0, settings):
            out[sent[ord_ - 1]] = (status, reason)
    return [out[n] for n in range(len(values))]


def _both(db_url: str, batches: list[list]) -> tuple[list, list, tuple, tuple]:
    settings = Settings(database_url=db_url)
    answers, states = [], []
    with psycopg.connect(db_url) as conn:
        _world(conn)
        conn.commit()
        for door in (_by_columns, _by_texts):
            with conn.transaction(force_rollback=True):
                answers.append([door(conn, b, settings) for b in batches])
                states.append(_state(conn))
    return answers[0], answers[1], states[0], states[1]


def test_the_parsed_door_answers_and_stores_as_the_text_door(db_url):
    by_columns, by_texts, stored_c, stored_t = _both(db_url, [MESSAGES, MESSAGES, MESSAGES + SEPARATORS])
    assert by_columns[2][-2:] == [("accepted", None)] * 2
    by_columns, by_texts = by_columns[:2], by_texts[:2]
    assert by_columns == by_texts
    first, again = by_columns
    # the cases the test means to cover are there: each reason, parsed and raw events accepted
    assert {r for _, r in first} >= {None, "unknown_customer", "in_future", "too_old", "invalid_time", "not_numeric",
                                      "missing_property", "invalid_event", "invalid_json"}
    accepted = [n for n, (s, _) in enumerate(first) if s == "accepted"]
    assert {0, 2, 10, 11, 12, 13, 14, 15, 16, 21, 22, 26, 27, 28, 31, 41, 44, 45} <= set(accepted)
    assert [first[n] for n in (29, 30, 36, 39, 40, 46, 47, 48)] == [("rejected", "invalid_json")] * 2 + [
        ("rejected", "invalid_event")] + [("rejected", "invalid_json")] * 5
    assert first[1] == ("duplicate", None)
    assert all(s != "accepted" for s, _ in again)  # the batch again: every accepted one a duplicate
    assert stored_c == stored_t
    events = {row[3]: row for row in stored_c[1]}
    assert json.loads(events["e11"][5])["tokens"] == 0.1 and "0.10000000000000000001" in events["e11"][5]
    assert events["e28b"][5] == '{"user": "u", "tokens": 2}'
    assert events["e21"][5] == "null" and events["e22"][5] is None


def test_random_streams_answer_alike(db_url):
    rnd = random.Random(29)
    pool = [m for m in MESSAGES if m is not None]
    batches = []
    for b in range(3):
        batch = []
        for i in range(400):
            if rnd.random() < 0.1:
                batch.append(rnd.choice(pool))
            else:
                doc = ev(f"r{b}-{i}", str(rnd.choice((1, 2, 3))),
                         time=(T0 - timedelta(seconds=rnd.randint(0, 3600))).isoformat().replace("+00:00", "Z"),
                         data={"tokens": rnd.choice((rnd.randint(0, 9), rnd.random())), "user": f"u{rnd.randint(0, 4)}"})
                batch.append(enc(doc))
        batch += rnd.sample(batch, 40)  # 10% sent twice
        rnd.shuffle(batch)
        batches.append(batch)
    by_columns, by_texts, stored_c, stored_t = _both(db_url, batches)
    assert by_columns == by_texts
    assert stored_c == stored_t
    assert sum(s == "duplicate" for b in by_columns for s, _ in b) >= 40


def test_event_columns_leaves_to_the_database_what_it_cannot_read_exactly():
    columns, kept, dead = event_columns([enc(ev(1)), enc(ev(2, data={"tokens": 0.5})), None, b"x\x00",
                                         enc(ev(3, subject=3)), b"{bad", enc(ev(4, id="a\u0000"))])
    spec, subject, ids, source, types, times, data, raw = columns
    assert kept == [0, 1, 4, 5, 6] and dead == [2, 3]
    assert ids[0] == "e1" and subject[0] == "1" and json.loads(data[0]) == {"tokens": 1, "user": "u1"} and raw[0] is None
    assert [r is not None for r in raw] == [False, True, True, True, True]
    assert all(c[n] is None for c in columns[:7] for n in (1, 2, 3, 4))
    # a column joined for string_to_array, or None when an element holds a separator
    assert _joined(["a", None, ""]) == "a\x1f\x1e\x1f"
    assert _joined(["a\x1fb", "c"]) is None and _joined(["\x1e", None]) is None


# the common case, read by the batch path (billing.usage._batch_columns): clean events, and the forms
# of them JSON allows (whitespace around, keys in another order or twice, unicode, escapes)
CLEAN: list = [enc(ev(50)), enc(ev(51, "2")), b" " + enc(ev(52)) + b"\n", enc(ev(53, id="\u00e9\u2028\U0001F600")),
               b'{"data":{"user":"u","tokens":1,"tokens":3},"time":"' + AT.encode()
               + b'","type":"api.request","source":"gw","subject":"1","id":"e54","id":"e54b","specversion":"1.0"}',
               enc(ev(55, data={})), enc(ev(56, data={"tokens": True, "user": None})), enc(ev(57, subject="999")),
               enc(ev(58, time="soon")), enc(ev(59, id="a\u001fb")), enc(ev(60))]


def test_the_batch_path_reads_as_the_loop():
    """The batch path gives event_columns' columns exactly as the loop does, and steps aside (None)
    for every batch holding one message the loop would read otherwise."""
    assert _batch_columns(CLEAN) is not None
    assert event_columns(CLEAN) == _each_columns(CLEAN)
    assert event_columns(CLEAN)[0][2][4] == "e54b" and event_columns(CLEAN)[0][6][4] == '{"user":"u","tokens":3}'
    for odd in [m for m in MESSAGES if m is None or _each_columns([m])[0][7] != [None]] + [
            enc(ev(70, data={"tokens": 1, "nested": {"a": 1}})), b"x\x00", "a str", enc(ev(71, id="a\u0000")),
            enc({k: v for k, v in ev(72).items() if k != "data"}), enc(ev(73, data=None))]:
        batch = CLEAN[:3] + [odd] + CLEAN[3:]
        assert _batch_columns(batch) is None, odd
        assert event_columns(batch) == _each_columns(batch)


def test_the_consumers_counts_are_the_answers(db_url):
    """ingest_columns_counts (the consumer's call: one row back) says what ingest_columns' rows say."""
    settings = Settings(database_url=db_url)
    with psycopg.connect(db_url) as conn:
        _world(conn)
        got = []
        for call in (ingest_columns, ingest_columns_counts):
            with conn.transaction(force_rollback=True):
                got.append([call(conn, event_columns(b)[0], T0, settings) for b in (MESSAGES, MESSAGES, CLEAN)])
    for rows, (accepted, duplicate, rejected) in zip(*got):
        assert accepted == sum(s == "accepted" for _, s, _ in rows)
        assert duplicate == sum(s == "duplicate" for _, s, _ in rows)
        assert rejected == [(o, r) for o, s, r in rows if s == "rejected"]
    assert got[1][0][0] > 10 and got[1][1][:2] == (0, got[1][0][0] + got[1][0][1]) and len(got[1][0][2]) > 10
    assert got[1][2][0] >= 6 and {"unknown_customer", "invalid_time"} <= {r for _, r in got[1][2][2]}
