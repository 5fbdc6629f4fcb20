"""/usage-events (ingestion, scope usage:write), /customers/{id}/usage (the open period's usage
per meter, from the rollups) and /subscriptions/{id}/upcoming-invoice (the preview of the next
invoicing: fixed price and usage so far): docs/usage.md."""

from __future__ import annotations

import json
import re

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db, usage
from billing.api.context import Api, bound_customer, require_customer, utc
from billing.api.errors import endpoint_of
from billing.api.security import LARGE_BODIES
from billing.api.validation import ApiError, path_id, read_body


def _number(value):
    if value is None:
        return None
    return int(value) if value == value.to_integral_value() else float(value)


def routes(api: Api) -> list[BaseRoute]:
    database = api.database

    @endpoint_of("/usage-events")
    async def post_usage_events(request: Request) -> Response:
        # Usage is reported by the operator's servers: a customer token (cs_...) names its subject
        # itself and could count events against any customer, so it may not report at all.
        if bound_customer(request) is not None:
            raise ApiError(403, "forbidden", "a customer token cannot report usage")
        body = await read_body(request, LARGE_BODIES["/usage-events"])
        texts, events = event_texts(body)
        if len(events) > usage.MAX_BATCH:
            raise ApiError(413, "batch_too_large", f"at most {usage.MAX_BATCH} events a request, got {len(events)}")
        if not events:
            raise ApiError(400, "invalid_json", "the batch is empty")
        pool = await database.pool()
        async with pool.connection() as conn:
            async with conn.transaction():
                # each event as its own JSON text, parsed by the database as a Kafka message is
                # (billing.ingest_usage_batch): one key, one stored value whichever door brought it
                cur = await conn.execute(db.INGEST_USAGE_BATCH, {"events": texts, "now": api.now(),
                                                              **usage.windows(api.settings)})
                rows = await cur.fetchall()
        results, counts = [], {"accepted": 0, "duplicate": 0, "rejected": 0}
        for row in rows:
            event = events[row["ord"] - 1]
            item = {"index": row["ord"] - 1, "id": _answer_id(event), "status": row["status"]}
            if row["reason"]:
                item["reason"] = row["reason"]
            counts[row["status"]] += 1
            results.append(item)
        return JSONResponse({"object": "usage_ingestion", **counts, "results": results})

    @endpoint_of("/customers/{id}/usage")
    async def get_customer_usage(request: Request) -> Response:
        customer_id = path_id(request, "customer")
        require_customer(request, customer_id)  # a customer token reads its own customer's usage only
        rows = await database.all(db.CURRENT_USAGE, {"customer_id": customer_id, "now": api.now()})
        start = rows[0]["period_start"] if rows else None
        end = rows[0]["period_end"] if rows else None
        return JSONResponse({"object": "customer_usage", "customerId": customer_id,
                             "periodStart": utc(start), "periodEnd": utc(end),
                             "meters": [{"code": r["meter_code"], "aggregation": r["aggregation"],
                                         "value": _number(r["value"]), "events": r["events"]} for r in rows]})

    @endpoint_of("/subscriptions/{id}/upcoming-invoice")
    async def get_upcoming_invoice(request: Request) -> Response:
        sub_id = path_id(request)
        row = await database.one(db.API_GET_SUBSCRIPTION, {"id": sub_id})
        if row is None:
            raise ApiError(404, "not_found", f"subscription {sub_id} not found")
        require_customer(request, row["customer_id"])  # a customer token previews its own only
        doc = (await database.one(db.UPCOMING_INVOICE, {"id": sub_id, "now": api.now()}))["doc"]
        return JSONResponse(_upcoming(doc))

    return [Route("/usage-events", post_usage_events, methods=["POST"]),
            Route("/customers/{id}/usage", get_customer_usage, methods=["GET"]),
            Route("/subscriptions/{id}/upcoming-invoice", get_upcoming_invoice, methods=["GET"])]


_WS = re.compile(r"[ \t\n\r]*")
_WRAPPED = re.compile(r'[ \t\n\r]*\{[ \t\n\r]*"events"[ \t\n\r]*:')
_DECODER = json.JSONDecoder(strict=False)  # (a control character in a string: the database's call)
_NOT_JSON = "the body is not valid JSON (UTF-8)"
_NOT_EVENTS = 'the body must be a JSON array of CloudEvents (or {"events": [...]})'


def event_texts(body: bytes) -> tuple[list[str], list]:
    """The events of a POST /usage-events body (a JSON array, or {"events": [...]}), each as its own
    JSON text exactly as it came, and as Python parsed it (for the answer's ids). The texts go to the
    database, which parses each one as it parses a Kafka message: a number is read as its digits
    (Python's json turned `1e3` into `1000.0` and dropped the digits a float cannot hold, so the same
    event had another exactly-once key, another subject or another value through this door than
    through Kafka), and an event PostgreSQL cannot hold (a \\u0000 escape, a lone surrogate, NaN, a
    number past numeric's range) is answered rejected `invalid_json` alone instead of failing the
    whole batch. ApiError 400 when the body is not such an array."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "invalid_json", _NOT_JSON) from None
    wrapped = _WRAPPED.match(text)
    at = _WS.match(text, wrapped.end() if wrapped else 0).end()
    if text[at:at + 1] != "[":
        try:
            json.loads(text)
        except (ValueError, RecursionError):
            raise ApiError(400, "invalid_json", _NOT_JSON) from None
        raise ApiError(400, "invalid_json", _NOT_EVENTS)
    texts, events = [], []
    at = _WS.match(text, at + 1).end()
    if text[at:at + 1] == "]":
        at += 1
    else:
        while True:
            try:
                event, end = _DECODER.raw_decode(text, at)
            except (ValueError, RecursionError):
                raise ApiError(400, "invalid_json", _NOT_JSON) from None
            texts.append(text[at:end])
            events.append(event)
            at = _WS.match(text, end).end()
            sep, at = text[at:at + 1], at + 1
            if sep == "]":
                break
            if sep != ",":
                raise ApiError(400, "invalid_json", _NOT_JSON)
            at = _WS.match(text, at).end()
    if wrapped:
        at = _WS.match(text, at).end()
        if text[at:at + 1] != "}":
            raise ApiError(400, "invalid_json", _NOT_EVENTS)
        at += 1
    if _WS.match(text, at).end() != len(text):
        raise ApiError(400, "invalid_json", _NOT_JSON)
    return texts, events


def _answer_id(event):
    """The answer's `id`: the event's as Python parsed it, None when no JSON answer can hold it (NaN, a
    lone surrogate: the event is rejected invalid_json)."""
    value = event.get("id") if isinstance(event, dict) else None
    if type(value) is str or value is None:
        return value if value is None or value.isascii() or _encodes(value) else None
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode()
    except (ValueError, RecursionError):  # (UnicodeEncodeError is a ValueError)
        return None
    return value


def _encodes(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _when(value):
    """A JSON timestamp from SQL (ISO 8601 with an offset) in the API's UTC form."""
    from datetime import datetime
    return utc(datetime.fromisoformat(value)) if value else None


def _upcoming(doc: dict) -> dict:
    """billing.upcoming_invoice's document with the API's forms: times in UTC 'Z', quantities as numbers."""
    out = dict(doc)
    for key in ("invoicedAt", "asOf"):
        out[key] = _when(doc.get(key))
    lines = []
    for line in doc.get("lines", []):
        line = dict(line)
        for key in ("periodStart", "periodEnd"):
            line[key] = _when(line.get(key))
        lines.append(line)
    out["lines"] = lines
    return out
