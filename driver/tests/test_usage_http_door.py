"""POST /usage-events answers, keys and stores exactly what the Kafka doors do for the same events
(review6). The route used to parse the body with Python's json and send it back re-serialized, so a
number was a float: `"id": 1e3` was the key "1000.0" over HTTP and "1000" through Kafka (the same
event counted twice when a producer sends it through both), `"subject": 1e0` was an unknown customer
over HTTP and customer 1 through Kafka, a sum meter's 12345678901234567890.5 was billed as
12345678901234567000, and one event PostgreSQL cannot hold (1e400, NaN, a \\u0000 escape, a lone
surrogate) failed the whole batch with 422 where Kafka rejects that event alone. Now each event's
own text goes to billing.ingest_usage_batch, the JSON-text door (test_usage_columns shows the
consumer's parsed door answers as that door does)."""

from __future__ import annotations

import asyncio
import json

import httpx
import psycopg

from billing.api import create_app
from billing.api.routes.usage import event_texts
from billing.clock import SimulatedClock
from billing.config import Settings
from billing.usage import ingest_texts, message_text

from .conftest import create_test_key
from .test_usage_columns import AT, MESSAGES, T0, _state, _world


def _msg(event_id: str, **raw: str) -> bytes:
    """A message whose attributes and data are written as raw JSON (numbers exactly as given)."""
    attrs = {"specversion": '"1.0"', "id": json.dumps(event_id), "source": '"gw"', "type": '"api.request"',
             "time": json.dumps(AT), "subject": '"1"', "data": '{"tokens": 1, "user": "u"}', **raw}
    return ("{" + ", ".join(f'"{k}": {v}' for k, v in attrs.items()) + "}").encode()


# numbers as attributes and in data, values no float holds, and what PostgreSQL cannot hold
NUMBERS = [
    _msg("", id="1e3"), _msg("", id="1000"), _msg("", id="12345678901234567890.0"), _msg("", id="-0"),
    _msg("n1", subject="1e0"), _msg("n2", subject="0.1e1"), _msg("n3", subject="1"),
    _msg("n4", data='{"tokens": 12345678901234567890.5, "user": "u"}'),
    _msg("n5", data='{"tokens": 1e400, "user": "u"}'), _msg("n6", data='{"tokens": 1E-3, "user": "u"}'),
    _msg("n7", data='{"tokens": NaN, "user": "u"}'), _msg("n8", data='{"tokens": -Infinity, "user": "u"}'),
    _msg("n9", data='{"tokens": 2, "user": "a\\u0000b"}'), _msg("n10", data='{"tokens": 2, "user": "\\udc00"}'),
    _msg("n11", data='{"tokens": 3, "user": "tab\there"}'), _msg("n12", data='{"tokens": 1e1000000, "user": "u"}'),
    _msg("n13", id='"dup"', data='{"tokens": 1, "tokens": 5, "user": "u"}'),
]


def _array_member(value: bytes | None) -> bool:
    """A Kafka message that can also be an element of a JSON array body (Python's parse, as the route)."""
    text = message_text(value)
    if text is None:
        return False
    try:
        body = ("[" + text.strip(" \t\r\n") + "]").encode()
        return len(event_texts(body)[0]) == 1
    except Exception:  # noqa: BLE001 - a syntax error, a byte order mark: no array holds it
        return False


def _post(db_url: str, key: str, bodies: list[bytes]) -> list[httpx.Response]:
    async def go():
        app = create_app(Settings(database_url=db_url), clock=SimulatedClock(T0))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        try:
            async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test") as client:
                return [await client.post("/usage-events", content=b, headers={
                    "Authorization": f"Bearer {key}", "Content-Type": "application/json"}) for b in bodies]
        finally:
            await app.state.database.close()
    return asyncio.run(go())


def test_http_door_answers_keys_and_stores_as_the_kafka_door(db_url):
    messages = [m for m in MESSAGES + NUMBERS if _array_member(m)]
    assert len(messages) >= 55
    texts = [message_text(m).strip(" \t\r\n") for m in messages]
    key = create_test_key(db_url, "usage:write")
    settings = Settings(database_url=db_url)
    with psycopg.connect(db_url) as conn:
        _world(conn)
        conn.commit()
        with conn.transaction(force_rollback=True):
            by_kafka = [(s, r) for _, s, r in ingest_texts(conn, texts, T0, settings)]
            stored_kafka = _state(conn)
    # one batch holding every kind of event, then the same batch again (the {"events": ...} form)
    first, again = _post(db_url, key, [("[" + ",\n ".join(texts) + "]").encode(),
                                       ('{"events": [' + ",".join(texts) + "]}").encode()])
    assert first.status_code == 200, first.text
    by_http = [(x["status"], x.get("reason")) for x in first.json()["results"]]
    assert by_http == by_kafka
    with psycopg.connect(db_url) as conn:
        assert _state(conn) == stored_kafka
        keys = {r[2] for r in stored_kafka[0]}
    # the cases the test means: the number attributes' keys as PostgreSQL reads them, each once
    assert {"1000", "12345678901234567890.0", "0", "n1", "n2", "n4", "n5", "n6", "dup"} <= keys
    assert "1000.0" not in keys and "12345678901234567000" not in keys
    answer = dict(zip((m for m in messages), by_http))
    assert answer[_msg("", id="1e3")] == ("accepted", None) and answer[_msg("", id="1000")] == ("duplicate", None)
    assert answer[_msg("n3", subject="1")] == ("accepted", None)
    for poison in ("n7", "n8", "n9", "n10", "n11", "n12"):  # that event alone, not the batch
        (m,) = [m for m in messages if f'"id": "{poison}"'.encode() in m]
        assert answer[m] == ("rejected", "invalid_json"), poison
    events = {row[3]: row[5] for row in stored_kafka[1]}
    assert "12345678901234567890.5" in events["n4"] and '"tokens": 5' in events["dup"]
    assert again.status_code == 200, again.text
    assert all(x["status"] != "accepted" for x in again.json()["results"])
    assert [x["status"] for x in again.json()["results"]].count("duplicate") == sum(s != "rejected" for s, _ in by_kafka)


def test_http_door_bodies_that_are_not_an_array_of_events(db_url):
    key = create_test_key(db_url, "usage:write")
    bodies = [b"", b"{", b"[1,]", b"[1 2]", b"[1] x", b'{"events": [1], "x": 2}', b'{"other": []}', b"5",
              b'{"events": 5}', b"\xff[]", b"[" * 100_000 + b"]" * 100_000, b"[]", b'{"events": []}', b"\xef\xbb\xbf[]"]
    answers = [(r.status_code, r.json()["error"]["code"]) for r in _post(db_url, key, bodies)]
    assert answers == [(400, "invalid_json")] * len(bodies)
    # whitespace anywhere JSON allows it, the wrapper's too; an answer's id as the event gave it
    texts = [' {"specversion": "1.0", "id": "w1", "source": "gw", "type": "x", "time": "%s", "subject": "1"} ' % AT,
             '{"id": NaN}', '{"id": 7}', "[]"]
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_customer(1)")
    (r,) = _post(db_url, key, [('\r\n{ "events" :\t[' + ",\n".join(texts) + "] }\n").encode()])
    assert r.status_code == 200, r.text
    assert [(x["id"], x["status"], x.get("reason")) for x in r.json()["results"]] == [
        ("w1", "accepted", None), (None, "rejected", "invalid_json"), (7, "rejected", "invalid_event"),
        (None, "rejected", "invalid_event")]


def test_who_may_read_usage_and_the_upcoming_invoice(db_url):
    """Current usage and the upcoming invoice (review6): a customer token reads its own customer's only
    (another's: 404 as if it did not exist), and may not report usage; a key needs subscriptions:read
    to read them and usage:write to report (neither implies the other); the /v1 paths are the same."""
    from billing.api_keys import create_key

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('U_PLAN', 1000, 'USD', 'MONTH', 1, %s)", (T0,))
        subs = {c: conn.execute("SELECT id FROM billing.create_subscription(%s, %s, 'U_PLAN', %s)",
                                (f"u-{c}", c, T0)).fetchone()[0] for c in (51, 52)}
    server = create_key(db_url, "portal", ["customer-sessions:write", "subscriptions:read"]).key
    writer = create_key(db_url, "ingest", ["usage:write"]).key

    async def go():
        app = create_app(Settings(database_url=db_url), clock=SimulatedClock(T0))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        try:
            async with httpx.AsyncClient(timeout=30, transport=transport, base_url="http://billing.test") as client:
                auth = lambda key: {"Authorization": f"Bearer {key}"}  # noqa: E731
                r = await client.post("/customer-sessions", json={"customerId": 51, "ttlSeconds": 600}, headers=auth(server))
                assert r.status_code == 201, r.text
                token = r.json()["token"]
                out = {}
                for prefix in ("", "/v1"):
                    for who, key in (("token", token), ("reader", server), ("writer", writer)):
                        for what, path in (("own usage", "/customers/51/usage"), ("other usage", "/customers/52/usage"),
                                           ("own upcoming", f"/subscriptions/{subs[51]}/upcoming-invoice"),
                                           ("other upcoming", f"/subscriptions/{subs[52]}/upcoming-invoice"),
                                           ("no upcoming", f"/subscriptions/{subs[52] + 1000}/upcoming-invoice")):
                            r = await client.get(prefix + path, headers=auth(key))
                            out[f"{prefix} {who} {what}"] = (r.status_code, r.json().get("error", {}).get("message")
                                                             if r.status_code != 200 else r.json().get("customerId"))
                        r = await client.post(prefix + "/usage-events", json=[{"id": "x"}], headers=auth(key))
                        out[f"{prefix} {who} report"] = (r.status_code, None)
                return out
        finally:
            await app.state.database.close()

    out = asyncio.run(go())
    hidden = (404, "no such resource")
    for prefix in ("", "/v1"):
        got = {k.split(" ", 1)[1]: v for k, v in out.items() if k.split(" ", 1)[0] == prefix}
        assert got["token own usage"] == (200, 51) and got["token own upcoming"][0] == 200, got
        assert got["token other usage"] == got["token other upcoming"] == hidden, got
        assert got["token no upcoming"][0] == 404, got
        assert got["token report"][0] == 403 and got["reader report"][0] == 403 and got["writer report"][0] == 200
        assert got["reader other usage"] == (200, 52) and got["reader other upcoming"][0] == 200
        assert got["reader no upcoming"][0] == 404
        assert all(got[f"writer {w}"][0] == 403 for w in ("own usage", "other usage", "own upcoming", "no upcoming")), got
