"""/usage-events (ingestion, scope usage:write), /customers/{id}/usage (the open period's usage
per meter, from the rollups) and /subscriptions/{id}/upcoming-invoice (the preview of the next
invoicing: fixed price and usage so far): docs/usage.md."""

from __future__ import annotations

import json

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
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise ApiError(400, "invalid_json", "the body is not valid JSON (UTF-8)") from None
        events = doc.get("events") if isinstance(doc, dict) and set(doc) == {"events"} else doc
        if not isinstance(events, list):
            raise ApiError(400, "invalid_json", "the body must be a JSON array of CloudEvents (or {\"events\": [...]})")
        if len(events) > usage.MAX_BATCH:
            raise ApiError(413, "batch_too_large", f"at most {usage.MAX_BATCH} events a request, got {len(events)}")
        if not events:
            raise ApiError(400, "invalid_json", "the batch is empty")
        from psycopg.types.json import Jsonb

        pool = await database.pool()
        async with pool.connection() as conn:
            async with conn.transaction():
                cur = await conn.execute(db.INGEST_USAGE, {"events": Jsonb(events), "now": api.now(),
                                                        **usage.windows(api.settings)})
                rows = await cur.fetchall()
        results, counts = [], {"accepted": 0, "duplicate": 0, "rejected": 0}
        for row in rows:
            event = events[row["ord"] - 1]
            item = {"index": row["ord"] - 1, "id": event.get("id") if isinstance(event, dict) else None,
                    "status": row["status"]}
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
