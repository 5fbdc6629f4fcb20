"""/v1/customers/{id}/usage-alerts: a customer's usage alerts (docs/usage.md "Usage alerts"): a
threshold on a meter that announces UsageThresholdReached once per open period. List, create, read,
change the threshold, delete. Scopes subscriptions:read / subscriptions:write; a customer token
(cs_...) manages its own customer's alerts only. An alert makes no money: it announces an event."""

from __future__ import annotations

import math
from decimal import Decimal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.api.context import Api, actor, require_customer, utc
from billing.api.errors import endpoint_of
from billing.api.routes.v1 import by_reference
from billing.api.validation import ApiError, json_object, path_id, text_field

MAX_THRESHOLD = Decimal("1e15")


def alert_json(row: dict) -> dict:
    threshold = row["threshold"]
    return {"object": "usage_alert", "id": row["id"], "customerId": row["customer_id"], "meterCode": row["meter_code"],
            "threshold": int(threshold) if threshold == threshold.to_integral_value() else float(threshold),
            "firedFor": utc(row["fired_for"]), "createdAt": utc(row["created_at"]), "updatedAt": utc(row["updated_at"])}


def _threshold(doc: dict) -> Decimal:
    value = doc.get("threshold")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
        raise ApiError(422, "invalid_input", "threshold must be a number above 0")
    threshold = Decimal(str(value))
    if not Decimal(0) < threshold <= MAX_THRESHOLD:
        raise ApiError(422, "invalid_input", f"threshold must be above 0 and at most {MAX_THRESHOLD:f}")
    return threshold


def _alert_id(request: Request) -> int:
    raw = request.path_params["alert_id"]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise ApiError(404, "not_found", f"no usage alert {raw[:30]!r}")
    return int(raw)


def routes(api: Api) -> list[BaseRoute]:
    database = api.database

    async def alerts_of(customer_id: int) -> list[dict]:
        return await database.all(db.LIST_USAGE_ALERTS, {"customer_id": customer_id})

    @endpoint_of("/v1/customers/{id}/usage-alerts")
    async def list_alerts(request: Request) -> Response:
        customer_id = path_id(request, "customer")
        require_customer(request, customer_id)
        # at most 100 a customer: one page
        return JSONResponse({"object": "list", "data": [alert_json(r) for r in await alerts_of(customer_id)],
                             "hasMore": False, "nextCursor": None, "previousCursor": None})

    @endpoint_of("/v1/customers/{id}/usage-alerts")
    async def create_alert(request: Request) -> Response:
        customer_id = path_id(request, "customer")
        require_customer(request, customer_id)
        doc = await json_object(request, allowed={"meterCode", "threshold"}, required={"meterCode", "threshold"})
        params = {"customer_id": customer_id, "meter_code": text_field(doc, "meterCode", max_len=64),
                  "threshold": _threshold(doc), "now": api.now()}
        row = await database.mutate(actor(request), db.SET_USAGE_ALERT, params)
        # the same threshold on the meter again is the same alert (idempotent): 200 then
        created = row["created_at"] == row["updated_at"] == params["now"]
        return JSONResponse(alert_json(row), status_code=201 if created else 200,
                            headers={"Location": f"/v1/customers/{customer_id}/usage-alerts/{row['id']}"})

    @endpoint_of("/v1/customers/{id}/usage-alerts/{alert_id}")
    async def get_alert(request: Request) -> Response:
        customer_id = path_id(request, "customer")
        require_customer(request, customer_id)
        alert_id = _alert_id(request)
        row = next((r for r in await alerts_of(customer_id) if r["id"] == alert_id), None)
        if row is None:
            raise ApiError(404, "not_found", f"customer {customer_id} has no usage alert {alert_id}")
        return JSONResponse(alert_json(row))

    @endpoint_of("/v1/customers/{id}/usage-alerts/{alert_id}")
    async def update_alert(request: Request) -> Response:
        customer_id = path_id(request, "customer")
        require_customer(request, customer_id)
        alert_id = _alert_id(request)
        doc = await json_object(request, allowed={"threshold"}, required={"threshold"})
        row = await database.mutate(actor(request), db.UPDATE_USAGE_ALERT, {
            "customer_id": customer_id, "alert_id": alert_id, "threshold": _threshold(doc), "now": api.now()})
        return JSONResponse(alert_json(row))

    @endpoint_of("/v1/customers/{id}/usage-alerts/{alert_id}")
    async def delete_alert(request: Request) -> Response:
        customer_id = path_id(request, "customer")
        require_customer(request, customer_id)
        row = await database.mutate(actor(request), db.DELETE_USAGE_ALERT, {
            "customer_id": customer_id, "alert_id": _alert_id(request), "now": api.now()})
        return JSONResponse({**alert_json(row), "deleted": True})

    path, one = "/v1/customers/{id}/usage-alerts", "/v1/customers/{id}/usage-alerts/{alert_id}"
    return [Route(path, by_reference(database, "customer", list_alerts), methods=["GET"]),
            Route(path, by_reference(database, "customer", create_alert), methods=["POST"]),
            Route(one, by_reference(database, "customer", get_alert), methods=["GET"]),
            Route(one, by_reference(database, "customer", update_alert), methods=["POST"]),
            Route(one, by_reference(database, "customer", delete_alert), methods=["DELETE"])]
