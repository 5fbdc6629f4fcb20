"""/v1's shared parts (a pure move out of v1.py): the limits, the JSON of each resource, and the
query string's readers. The routes are in billing.api.routes.v1."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Callable

import psycopg
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from billing import db
from billing.api.context import bound_customer, require_customer, utc
from billing.api.validation import (
    BIGINT_MAX, ApiError, instant_field, query_int, query_text, subscription_json, text_field,
)

PREFIX = "/v1"
DEFAULT_LIMIT = 10
MAX_BATCH = 1000  # signups a call of POST /v1/subscriptions/batch
MAX_LIMIT = 100
SUBSCRIPTION_STATUSES = ("TRIALING", "ACTIVE", "PAST_DUE", "PAUSED", "CANCELED")
INVOICE_STATUSES = ("OPEN", "PAID", "FAILED", "VOID", "REVIEW")
CUSTOMER_FIELDS = {"name": "name", "email": "email", "address": "address", "city": "city",
                   "postalCode": "postal_code", "region": "region", "country": "country", "taxId": "tax_id",
                   "taxStatus": "tax_status"}


# -- the JSON of each resource -------------------------------------------------------------------


def customer_json(row: dict) -> dict:
    return {"object": "customer", "id": row["id"], "timezone": row["timezone"], "name": row["name"],
            "email": row["email"], "address": row["address"], "city": row["city"], "postalCode": row["postal_code"],
            "region": row["region"], "country": row["country"], "taxId": row["tax_id"], "taxStatus": row["tax_status"],
            "locale": row["locale"], "externalId": row.get("external_id"), "createdAt": utc(row["created_at"]),
            "updatedAt": utc(row["updated_at"])}


def plan_json(row: dict) -> dict:
    return {"object": "plan", "id": row["id"], "code": row["code"], "priceAmount": row["price_amount"],
            "currency": row["currency"].strip(), "billingInterval": row["billing_interval"],
            "intervalCount": row["interval_count"], "billingDay": row["billing_day"],
            "priceEffectiveFrom": utc(row["price_effective_from"]), "externalId": row.get("external_id"),
            "selfServe": bool(row.get("self_serve")),
            "archivedAt": utc(row.get("archived_at")), "createdAt": utc(row["created_at"])}


def tax_rate_json(row: dict) -> dict:
    return {"object": "tax_rate", "code": row["code"], "country": row["country"], "region": row["region"],
            "name": row["name"], "rateBp": row["rate_bp"], "inclusive": row["inclusive"], "active": row["active"]}


def credit_note_json(row: dict) -> dict:
    return {"object": "credit_note", "id": row["id"], "customerId": row["customer_id"], "invoiceId": row["invoice_id"],
            "number": row["number"], "reason": row["reason"], "refundId": row["refund_id"], "subtotal": row["subtotal"],
            "taxAmount": row["tax_amount"], "total": row["total"], "currency": row["currency"].strip(),
            "issuedAt": utc(row["issued_at"])}


def event_json(row: dict) -> dict:
    return {"object": "event", "id": str(row["event_id"]), "seq": row["id"], "type": row["event_type"],
            "aggregateType": row["aggregate_type"], "aggregateId": row["aggregate_id"],
            "customerId": row["customer_id"], "createdAt": utc(row["created_at"]), "payload": row["payload"]}


def subscription_item(row: dict) -> dict:
    return {"object": "subscription", **subscription_json(row)}


def _report_value(value):
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime):
        return utc(value)
    if isinstance(value, date):
        return value.isoformat()
    return value


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def report_json(row: dict) -> dict:
    return {_camel(k): _report_value(v) for k, v in row.items()}


# -- the query string ----------------------------------------------------------------------------


class Page:
    """limit, starting_after / ending_before of a list request; `numeric`: the cursor is an id."""

    def __init__(self, request: Request, numeric: bool = True) -> None:
        params = request.query_params
        self.limit = query_int(params, "limit", 1, MAX_LIMIT) or DEFAULT_LIMIT
        self.after = self._cursor(params, "starting_after", numeric)
        self.before = self._cursor(params, "ending_before", numeric)
        if self.after is not None and self.before is not None:
            raise ApiError(400, "invalid_query", "starting_after and ending_before cannot be used together")

    @staticmethod
    def _cursor(params, name: str, numeric: bool):
        if numeric:
            return query_int(params, name, 1, BIGINT_MAX)
        return query_text(params, name, 100)

    def params(self) -> dict:
        return {"limit": self.limit + 1, "after": self.after, "before": self.before}

    def answer(self, rows: list[dict], to_json: Callable[[dict], dict], key: str) -> Response:
        has_more = len(rows) > self.limit
        rows = rows[: self.limit]
        if self.before is not None:
            rows.reverse()  # the walk upward came nearest the cursor first
        data = [to_json(r) for r in rows]
        return JSONResponse({"object": "list", "data": data, "hasMore": has_more,
                             "nextCursor": str(rows[-1][key]) if rows else None,
                             "previousCursor": str(rows[0][key]) if rows else None})


def query_choice(params, name: str, choices: tuple[str, ...]) -> str | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if raw not in choices:
        raise ApiError(400, "invalid_query", f"{name} must be one of {', '.join(choices)}")
    return raw


def query_bool(params, name: str) -> bool | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if raw not in ("true", "false"):
        raise ApiError(400, "invalid_query", f"{name} must be true or false")
    return raw == "true"


def query_instant(params, name: str) -> datetime | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    try:
        return instant_field({name: raw}, name)
    except ApiError:
        raise ApiError(400, "invalid_query", f"{name} must be an ISO 8601 instant such as 2026-09-01T00:00:00Z") from None


def query_date(params, name: str, default: date) -> date:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return date.fromisoformat(raw) if len(raw) == 10 else _bad_date(name)
    except ValueError:
        return _bad_date(name)


def _bad_date(name: str):
    raise ApiError(400, "invalid_query", f"{name} must be a date such as 2026-09-01")


def customer_scope(request: Request, asked: int | None) -> int | None:
    """The customer filter of a list: a customer token's own customer, whatever it asked (another: 404)."""
    bound = bound_customer(request)
    if bound is None:
        return asked
    if asked is not None:
        require_customer(request, asked)
    return bound


def optional_text(doc: dict, name: str, max_len: int) -> str | None:
    return text_field(doc, name, max_len=max_len) if doc.get(name) is not None else None


async def resolve(database, kind: str, external_id: str) -> int | None:
    """Our id of the caller's external id of a `kind`, or None (a malformed one names nothing)."""
    try:
        row = await database.one(db.V1_RESOLVE_EXTERNAL_ID, {"kind": kind, "external_id": external_id})
    except psycopg.Error as exc:
        if db.contract_error(exc) is None:
            raise
        return None
    return row["id"] if row else None


def plan_code_of(request: Request) -> str:
    code = request.path_params["code"]
    if not code or len(code) > 255 or not code.isprintable():
        raise ApiError(404, "not_found", "no such plan")
    return code
