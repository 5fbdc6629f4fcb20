"""/v1: every resource of the engine over HTTP (issue 28; docs/http-api.md).

* Every route of the other routers (bar the health/metrics/openapi ones and the gateways' webhooks)
  is served again under /v1 by the same handler (`aliases`); the unprefixed paths stay for one
  release, marked deprecated in the OpenAPI document (billing.api.openapi).
* The lists: customers, plans, coupons, tax rates, a customer's payment methods, subscriptions,
  invoices, credit notes, refunds, events. Each is one page of a cursor walk
  (db/functions/77_api_lists.sql): `limit` (1..100, default 10), `starting_after` or
  `ending_before` (a `nextCursor` / `previousCursor` of an earlier page), newest first; answered
  `{"object": "list", "data": [...], "hasMore", "nextCursor", "previousCursor"}`. Never an offset.
* A customer token (`Bearer cs_...`) lists its own customer's rows only: the customer filter is
  forced to it (another customer's id: 404, as if it did not exist).
* Reads and writes of customers, plans and tax rates, events by id, an invoice's lines, and the
  reports (MRR, churn, revenue) as JSON on the heavy pool.
"""

from __future__ import annotations

import json
import re
import uuid
from urllib.parse import quote
from datetime import timezone

import psycopg
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.api.context import (
    IDEMPOTENCY_KEY, Api, actor, bound_customer, require_customer, scoped_idempotency_key, sees_people, utc,
)
from billing.api.errors import database_error, endpoint_of
from billing.api.routes.coupons import coupon_json
from billing.api.routes.customers import payment_method_json
from billing.api.routes.invoices import invoice_json
from billing.api.routes.refunds import refund_json
from billing.api.routes.subscriptions import self_serve_check, signup_terms
from billing.api.routes.v1_values import (
    CUSTOMER_FIELDS, INVOICE_STATUSES, MAX_BATCH, PREFIX, SUBSCRIPTION_STATUSES, Page, credit_note_json,
    customer_json, customer_scope, event_json, optional_text, plan_code_of, plan_json, query_bool,
    query_choice, query_date, query_instant, report_json, resolve, subscription_item, tax_rate_json,
)
from billing.api.security import LARGE_BODIES
from billing.api.validation import (
    BIGINT_MAX, ApiError, bool_field, error_response, instant_field, int_field, json_object, path_id,
    query_int, query_text, read_body, text_field,
)


# -- the routes ----------------------------------------------------------------------------------------


def _kind_of(path: str) -> str | None:
    if path.startswith("/customers/{id}") or path.startswith("/v1/customers/{id}"):
        return "customer"
    if path.startswith("/subscriptions/{id}") or path.startswith("/v1/subscriptions/{id}"):
        return "subscription"
    return None


def by_reference(database, kind: str, endpoint):
    """The endpoint with its path id resolved first: our id (digits) as is, anything else the
    caller's external id of a `kind` (billing.resolve_external_id); unknown: 404."""

    async def resolved(request: Request) -> Response:
        raw = request.path_params.get("id", "")
        if raw and not (raw.isascii() and raw.isdigit()):
            try:
                if len(raw) > 255 or not raw.isprintable():
                    raise ApiError(404, "not_found", f"no such {kind}")
                row = await database.one(db.V1_RESOLVE_EXTERNAL_ID, {"kind": kind, "external_id": raw})
                if row is None or row["id"] is None:
                    if bound_customer(request) is not None:  # as another customer's answers (require_customer):
                        raise ApiError(404, "not_found", "no such resource")  # no oracle of others' external ids
                    raise ApiError(404, "not_found", f"no {kind} has the external id {raw[:60]!r}")
            except ApiError as exc:
                return error_response(exc.status, exc.code, exc.message, exc.headers)
            except psycopg.Error as exc:
                if db.contract_error(exc) is not None:  # a malformed external id: no such thing
                    return error_response(404, "not_found", f"no such {kind}")
                return database_error(exc, None)
            request.path_params["id"] = str(row["id"])
        return await endpoint(request)

    resolved.__name__ = getattr(endpoint, "__name__", "endpoint")
    return resolved


def aliases(routers, database) -> list[BaseRoute]:
    """The routes of `routers` again under /v1, the same handlers (their unprefixed paths: deprecated);
    under /v1 a customer's or subscription's path id may be the caller's external id."""
    made = []
    for route in routers:
        kind = _kind_of(route.path)
        endpoint = by_reference(database, kind, route.endpoint) if kind else route.endpoint
        made.append(Route(PREFIX + route.path, endpoint, methods=sorted(route.methods - {"HEAD"})))
    return made


def routes(api: Api) -> list[BaseRoute]:
    database, clock = api.database, api.clock

    # -- customers ----------------------------------------------------------------------------
    @endpoint_of("/v1/customers")
    async def list_customers(request: Request) -> Response:
        page = Page(request)
        email = query_text(request.query_params, "email", 320)
        external = query_text(request.query_params, "external_id", 255)
        if external is not None:  # one customer at most
            ref = await resolve(database, "customer", external)
            rows = [] if ref is None else await database.all(db.V1_GET_CUSTOMER, {"id": ref})
            rows = [r for r in rows if email is None or (r["email"] or "").lower() == email.lower()]
            return page.answer(rows if page.after is None and page.before is None else [], customer_json, "id")
        rows = await database.all(db.V1_LIST_CUSTOMERS, {**page.params(), "email": email})
        return page.answer(rows, customer_json, "id")

    @endpoint_of("/v1/customers")
    async def create_customer(request: Request) -> Response:
        doc = await json_object(request, allowed={"id", "timezone", "externalId", *CUSTOMER_FIELDS}, required={"id"})
        customer_id = int_field(doc, "id", 1, BIGINT_MAX)
        values = {column: optional_text(doc, field, 500) for field, column in CUSTOMER_FIELDS.items()}
        row = await database.mutate(actor(request), db.V1_CREATE_CUSTOMER, {
            "id": customer_id, "timezone": optional_text(doc, "timezone", 64),
            "external_id": optional_text(doc, "externalId", 255), **values})
        return JSONResponse(customer_json(row), status_code=201, headers={"Location": f"/v1/customers/{customer_id}"})

    @endpoint_of("/v1/customers/{id}")
    async def get_customer(request: Request) -> Response:
        customer_id = path_id(request, "customer")
        require_customer(request, customer_id)
        row = await database.one(db.V1_GET_CUSTOMER, {"id": customer_id})
        if row is None:
            raise ApiError(404, "not_found", f"customer {customer_id} does not exist")
        return JSONResponse(customer_json(row))

    @endpoint_of("/v1/customers/{id}")
    async def update_customer(request: Request) -> Response:
        customer_id = path_id(request, "customer")
        doc = await json_object(request, allowed=set(CUSTOMER_FIELDS), required=set())
        params: dict = {"id": customer_id}
        for field, column in CUSTOMER_FIELDS.items():
            params[f"has_{column}"] = field in doc
            params[column] = optional_text(doc, field, 500)
        row = await database.mutate(actor(request), db.V1_UPDATE_CUSTOMER, params)
        if row is None:
            raise ApiError(404, "not_found", f"customer {customer_id} does not exist")
        return JSONResponse(customer_json(row))

    @endpoint_of("/v1/customers/{id}/payment-methods")
    async def list_payment_methods(request: Request) -> Response:
        customer_id = path_id(request, "customer")
        require_customer(request, customer_id)
        rows = await database.all(db.V1_LIST_PAYMENT_METHODS, {"customer_id": customer_id})
        # A customer has a handful of methods: one page, the default first.
        return JSONResponse({"object": "list", "data": [payment_method_json(r, sees_people(request)) for r in rows], "hasMore": False,
                             "nextCursor": None, "previousCursor": None})

    @endpoint_of("/v1/customers/{id}/payment-methods/{method_id}")
    async def get_payment_method(request: Request) -> Response:
        customer_id = path_id(request, "customer")
        require_customer(request, customer_id)
        raw = request.path_params["method_id"]
        method_id = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 18 else None
        rows = await database.all(db.V1_LIST_PAYMENT_METHODS, {"customer_id": customer_id})
        row = next((r for r in rows if r["id"] == method_id), None)
        if row is None:
            raise ApiError(404, "not_found", f"customer {customer_id} has no payment method {raw[:30]!r}")
        return JSONResponse(payment_method_json(row, sees_people(request)))

    # -- the catalog ---------------------------------------------------------------------------
    @endpoint_of("/v1/plans")
    async def list_plans(request: Request) -> Response:
        page = Page(request)
        archived = query_bool(request.query_params, "archived")
        return page.answer(await database.all(db.V1_LIST_PLANS, {**page.params(), "archived": archived}), plan_json, "id")

    @endpoint_of("/v1/plans")
    async def create_plan(request: Request) -> Response:
        doc = await json_object(request, allowed={"code", "priceAmount", "currency", "billingInterval",
                                                  "intervalCount", "billingDay", "externalId", "selfServe"},
                                required={"code", "priceAmount", "currency", "billingInterval"})
        code = text_field(doc, "code", max_len=100)
        external_id = optional_text(doc, "externalId", 255)
        existing = await database.one(db.V1_GET_PLAN, {"code": code})
        if existing is not None:
            raise ApiError(409, "conflict", f"plan {code} exists; a new price is POST /v1/plans/{code}/prices")
        row = await database.mutate(actor(request), db.V1_UPSERT_PLAN, {
            "code": code, "price": int_field(doc, "priceAmount", 0, BIGINT_MAX),
            "currency": text_field(doc, "currency", max_len=3),
            "interval": text_field(doc, "billingInterval", max_len=10),
            "count": int_field(doc, "intervalCount", 1, 1000) if doc.get("intervalCount") is not None else 1,
            "now": clock.now(),
            "billing_day": int_field(doc, "billingDay", 1, 31) if doc.get("billingDay") is not None else None,
            "external_id": external_id,
            "self_serve": bool_field(doc, "selfServe") if doc.get("selfServe") is not None else False})
        return JSONResponse(plan_json(row), status_code=201, headers={"Location": f"/v1/plans/{quote(code, safe='')}"})

    async def plan_by_reference(request: Request) -> dict:
        """The plan of a path's {code}: its code, else the caller's external id of it."""
        ref = plan_code_of(request)
        row = await database.one(db.V1_GET_PLAN, {"code": ref})
        if row is None:
            try:
                row = await database.one(db.V1_GET_PLAN_BY_EXTERNAL_ID, {"external_id": ref})
            except psycopg.Error as exc:
                if db.contract_error(exc) is None:
                    raise
                row = None
        if row is None:
            raise ApiError(404, "not_found", "no such plan")
        return row

    @endpoint_of("/v1/plans/{code}")
    async def get_plan(request: Request) -> Response:
        return JSONResponse(plan_json(await plan_by_reference(request)))

    @endpoint_of("/v1/plans/{code}")
    async def update_plan(request: Request) -> Response:
        """What a plan says beside its price and terms: selfServe (customers may sign up to it
        themselves, migration 0850). Signups of customer sessions in flight are waited for
        (billing.set_plan_self_serve); the same value again: unchanged."""
        plan = await plan_by_reference(request)
        doc = await json_object(request, allowed={"selfServe"}, required={"selfServe"})
        row = await database.mutate(actor(request), db.SET_PLAN_SELF_SERVE, {
            "code": plan["code"], "self_serve": bool_field(doc, "selfServe"), "now": clock.now()})
        return JSONResponse(plan_json(row))

    @endpoint_of("/v1/plans/{code}/prices")
    async def new_price(request: Request) -> Response:
        plan = await plan_by_reference(request)
        code = plan["code"]
        doc = await json_object(request, allowed={"priceAmount", "effectiveFrom"}, required={"priceAmount"})
        now = clock.now()
        effective = instant_field(doc, "effectiveFrom") if doc.get("effectiveFrom") is not None else now
        if effective < now:
            raise ApiError(422, "invalid_input", "effectiveFrom must not be in the past: periods already started "
                                                 "keep their price")
        # The same plan with a new price from `effective` (upsert_plan keeps the history in plan_price).
        row = await database.mutate(actor(request), db.V1_UPSERT_PLAN, {
            "code": code, "price": int_field(doc, "priceAmount", 0, BIGINT_MAX),
            "currency": plan["currency"].strip(), "interval": plan["billing_interval"],
            "count": plan["interval_count"], "now": effective, "billing_day": plan["billing_day"], "external_id": None,
            "self_serve": None})  # (None: the plan keeps its self_serve)
        return JSONResponse(plan_json(row))

    @endpoint_of("/v1/plans/{code}/archive")
    async def archive_plan(request: Request) -> Response:
        plan = await plan_by_reference(request)
        await json_object(request, allowed=set(), required=set(), optional_body=True)
        row = await database.mutate(actor(request), db.V1_ARCHIVE_PLAN, {"code": plan["code"], "now": clock.now()})
        return JSONResponse(plan_json(row))

    @endpoint_of("/v1/coupons")
    async def list_coupons(request: Request) -> Response:
        page = Page(request, numeric=False)
        archived = query_bool(request.query_params, "archived")
        return page.answer(await database.all(db.V1_LIST_COUPONS, {**page.params(), "archived": archived}),
                           coupon_json, "code")

    @endpoint_of("/v1/coupons/{code}/archive")
    async def archive_coupon(request: Request) -> Response:
        code = request.path_params["code"]
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", code):
            raise ApiError(404, "not_found", "no such coupon")
        await json_object(request, allowed=set(), required=set(), optional_body=True)
        row = await database.mutate(actor(request), db.V1_ARCHIVE_COUPON, {"code": code, "now": clock.now()})
        return JSONResponse(coupon_json(row))

    @endpoint_of("/v1/tax-rates")
    async def list_tax_rates(request: Request) -> Response:
        page = Page(request, numeric=False)
        return page.answer(await database.all(db.V1_LIST_TAX_RATES, page.params()), tax_rate_json, "code")

    @endpoint_of("/v1/tax-rates")
    async def upsert_tax_rate(request: Request) -> Response:
        doc = await json_object(request, allowed={"code", "country", "region", "name", "rateBp", "inclusive", "active"},
                                required={"code", "country", "name", "rateBp", "inclusive"})
        row = await database.mutate(actor(request), db.V1_UPSERT_TAX_RATE, {
            "code": text_field(doc, "code", max_len=64), "country": text_field(doc, "country", max_len=2),
            "region": optional_text(doc, "region", 64), "name": text_field(doc, "name", max_len=200),
            "bp": int_field(doc, "rateBp", 0, 10000), "inclusive": bool_field(doc, "inclusive"),
            "active": bool_field(doc, "active") if doc.get("active") is not None else True})
        return JSONResponse(tax_rate_json(row))

    # -- signups in bulk (issue 32) -----------------------------------------------------------------
    @endpoint_of("/v1/subscriptions/batch")
    async def create_subscriptions(request: Request) -> Response:
        """Up to 1,000 signups in one call (billing.create_subscriptions): each row what POST
        /v1/subscriptions makes of it, under its own Idempotency-Key (scoped to the API key as that
        route's header is); all or nothing."""
        body = await read_body(request, LARGE_BODIES["/subscriptions/batch"])
        try:
            doc = json.loads(body) if body.strip() else None
        except (ValueError, RecursionError):
            raise ApiError(400, "invalid_json", "the body is not valid JSON (UTF-8)") from None
        if not isinstance(doc, dict) or set(doc) != {"signups"} or not isinstance(doc["signups"], list):
            raise ApiError(400, "invalid_json", 'the body must be {"signups": [...]}')
        signups = doc["signups"]
        if not 1 <= len(signups) <= MAX_BATCH:
            raise ApiError(400, "invalid_field", f"signups holds 1 to {MAX_BATCH} signups")
        owner = request.state.api_key_id
        if bound_customer(request) is not None:  # as the header's keys of POST /subscriptions
            owner = f"{owner}.c{bound_customer(request)}"
        rows, keys = [], []
        allowed = {"idempotencyKey", "customerId", "planCode", "trialDays", "couponCode", "quantity", "externalId"}
        for n, one in enumerate(signups, 1):
            if not isinstance(one, dict) or set(one) - allowed or not {"idempotencyKey", "customerId", "planCode"} <= set(one):
                raise ApiError(400, "invalid_field", f"signup {n}: an object with idempotencyKey, customerId, planCode "
                                                     f"and optionally {', '.join(sorted(allowed - {'idempotencyKey', 'customerId', 'planCode'}))}")
            key = one["idempotencyKey"]
            if not isinstance(key, str) or not IDEMPOTENCY_KEY.match(key):
                raise ApiError(400, "invalid_idempotency_key",
                               f"signup {n}: idempotencyKey must be 1 to 255 printable ASCII characters without spaces")
            keys.append(key)
            rows.append({"idempotency_key": scoped_idempotency_key(owner, key), **signup_terms(request, one, f"signup {n}: ")})
        row = await database.mutate(actor(request), db.V1_CREATE_SUBSCRIPTIONS, {"rows": json.dumps(rows), "now": clock.now()},
                                    check=self_serve_check(request, [r["plan_code"] for r in rows],
                                                           [f"signup {n}: " for n in range(1, len(rows) + 1)]))
        made = row["made"] or []
        return JSONResponse({"object": "list", "hasMore": False, "nextCursor": None, "previousCursor": None,
                             "data": [{"object": "signup", "idempotencyKey": k, "subscriptionId": m["id"],
                                       "customerId": m["customer_id"], "outcome": m["outcome"]}
                                      for k, m in zip(keys, made)]})

    # -- subscriptions and money -----------------------------------------------------------------
    @endpoint_of("/v1/subscriptions")
    async def list_subscriptions(request: Request) -> Response:
        page, q = Page(request), request.query_params
        external = query_text(q, "external_id", 255)
        if external is not None:
            ref = await resolve(database, "subscription", external)
            rows = [] if ref is None else [await database.one(db.API_GET_SUBSCRIPTION, {"id": ref})]
            bound = bound_customer(request)
            rows = [r for r in rows if bound is None or r["customer_id"] == bound]
            return page.answer(rows if page.after is None and page.before is None else [], subscription_item, "id")
        rows = await database.all(db.V1_LIST_SUBSCRIPTIONS, {
            **page.params(), "customer_id": customer_scope(request, query_int(q, "customer_id", 1, BIGINT_MAX)),
            "status": query_choice(q, "status", SUBSCRIPTION_STATUSES), "plan_code": query_text(q, "plan_code", 100),
            "created_from": query_instant(q, "created_from"), "created_to": query_instant(q, "created_to")})
        return page.answer(rows, subscription_item, "id")

    @endpoint_of("/v1/invoices")
    async def list_invoices(request: Request) -> Response:
        page, q = Page(request), request.query_params
        rows = await database.all(db.V1_LIST_INVOICES, {
            **page.params(), "customer_id": customer_scope(request, query_int(q, "customer_id", 1, BIGINT_MAX)),
            "status": query_choice(q, "status", INVOICE_STATUSES),
            "period_from": query_instant(q, "period_from"), "period_to": query_instant(q, "period_to"),
            "subscription_id": query_int(q, "subscription_id", 1, BIGINT_MAX)})
        return page.answer(rows, invoice_json, "id")

    @endpoint_of("/v1/invoices/{id}/lines")
    async def invoice_lines(request: Request) -> Response:
        invoice_id = path_id(request, "invoice")
        row = await database.one(db.GET_INVOICE_DOCUMENT, {"invoice_id": invoice_id})
        doc = row["document"]
        require_customer(request, doc.get("customerId"))
        lines = doc.get("lines") or []
        return JSONResponse({"object": "list", "data": lines, "hasMore": False, "nextCursor": None,
                             "previousCursor": None})

    @endpoint_of("/v1/credit-notes")
    async def list_credit_notes(request: Request) -> Response:
        page, q = Page(request), request.query_params
        rows = await database.all(db.V1_LIST_CREDIT_NOTES, {
            **page.params(), "customer_id": customer_scope(request, query_int(q, "customer_id", 1, BIGINT_MAX)),
            "invoice_id": query_int(q, "invoice_id", 1, BIGINT_MAX)})
        return page.answer(rows, credit_note_json, "id")

    @endpoint_of("/v1/refunds")
    async def list_refunds(request: Request) -> Response:
        page, q = Page(request), request.query_params
        rows = await database.all(db.V1_LIST_REFUNDS, {
            **page.params(), "customer_id": customer_scope(request, query_int(q, "customer_id", 1, BIGINT_MAX)),
            "invoice_id": query_int(q, "invoice_id", 1, BIGINT_MAX)})
        return page.answer(rows, refund_json, "id")

    # -- events ------------------------------------------------------------------------------------
    @endpoint_of("/v1/events")
    async def list_events(request: Request) -> Response:
        page, q = Page(request), request.query_params
        rows = await database.all(db.V1_LIST_EVENTS, {
            **page.params(), "type": query_text(q, "type", 100), "from": query_instant(q, "from"),
            "to": query_instant(q, "to"), "customer_id": query_int(q, "customer_id", 1, BIGINT_MAX)})
        return page.answer(rows, event_json, "id")

    @endpoint_of("/v1/events/{id}")
    async def get_event(request: Request) -> Response:
        raw = request.path_params["id"]
        try:
            event_id = uuid.UUID(raw) if len(raw) <= 40 else None
        except ValueError:
            event_id = None
        if event_id is None:
            raise ApiError(404, "not_found", "no such event")
        row = await database.one(db.V1_GET_EVENT, {"event_id": str(event_id)})
        if row is None:
            raise ApiError(404, "not_found", "no such event (or no longer kept: docs/events.md, retention)")
        return JSONResponse(event_json(row))

    # -- reports (docs/reports.md), on the heavy pool ------------------------------------------------
    def month_range(q) -> dict:
        today = clock.now().date()
        start = query_date(q, "from", today.replace(day=1))
        end = query_date(q, "to", today)
        if end < start or (end - start).days > 3700:
            raise ApiError(400, "invalid_query", "to must be on or after from, at most ten years later")
        return {"from": start, "to": end}

    @endpoint_of("/v1/reports/mrr")
    async def report_mrr(request: Request) -> Response:
        at = query_instant(request.query_params, "at") or clock.now()
        rows = await database.all(db.REPORT_MRR, {"at": at}, heavy=True)
        return JSONResponse({"object": "report", "report": "mrr", "at": utc(at.astimezone(timezone.utc)),
                             "data": [report_json(r) for r in rows]})

    def monthly(name: str, query: str):
        @endpoint_of(f"/v1/reports/{name}")
        async def report(request: Request) -> Response:
            span = month_range(request.query_params)
            rows = await database.all(query, span, heavy=True)
            return JSONResponse({"object": "report", "report": name, "from": span["from"].isoformat(),
                                 "to": span["to"].isoformat(), "data": [report_json(r) for r in rows]})

        report.__name__ = f"report_{name}"
        return report

    return [
        Route("/v1/customers", list_customers, methods=["GET"]),
        Route("/v1/customers", create_customer, methods=["POST"]),
        Route("/v1/customers/{id}", by_reference(database, "customer", get_customer), methods=["GET"]),
        Route("/v1/customers/{id}", by_reference(database, "customer", update_customer), methods=["POST"]),
        Route("/v1/customers/{id}/payment-methods", by_reference(database, "customer", list_payment_methods),
              methods=["GET"]),
        Route("/v1/customers/{id}/payment-methods/{method_id}", by_reference(database, "customer", get_payment_method),
              methods=["GET"]),
        Route("/v1/plans", list_plans, methods=["GET"]),
        Route("/v1/plans", create_plan, methods=["POST"]),
        Route("/v1/plans/{code}", get_plan, methods=["GET"]),
        Route("/v1/plans/{code}", update_plan, methods=["PATCH"]),
        Route("/v1/plans/{code}/prices", new_price, methods=["POST"]),
        Route("/v1/plans/{code}/archive", archive_plan, methods=["POST"]),
        Route("/v1/coupons", list_coupons, methods=["GET"]),
        Route("/v1/coupons/{code}/archive", archive_coupon, methods=["POST"]),
        Route("/v1/tax-rates", list_tax_rates, methods=["GET"]),
        Route("/v1/tax-rates", upsert_tax_rate, methods=["POST"]),
        Route("/v1/subscriptions", list_subscriptions, methods=["GET"]),
        Route("/v1/subscriptions/batch", create_subscriptions, methods=["POST"]),
        Route("/v1/invoices", list_invoices, methods=["GET"]),
        Route("/v1/invoices/{id}/lines", invoice_lines, methods=["GET"]),
        Route("/v1/credit-notes", list_credit_notes, methods=["GET"]),
        Route("/v1/refunds", list_refunds, methods=["GET"]),
        Route("/v1/events", list_events, methods=["GET"]),
        Route("/v1/events/{id}", get_event, methods=["GET"]),
        Route("/v1/reports/mrr", report_mrr, methods=["GET"]),
        Route("/v1/reports/churn", monthly("churn", db.REPORT_CHURN), methods=["GET"]),
        Route("/v1/reports/revenue", monthly("revenue", db.REPORT_REVENUE), methods=["GET"]),
    ]
