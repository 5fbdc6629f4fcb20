"""`billing serve`: the HTTP API (Starlette on uvicorn), routes and serving.

Every request first passes `billing.api.security.ApiGuard` (API key, scope, per-key rate, content
type, declared size). Each endpoint validates its input (billing.api.validation), makes one call to
the SQL API and maps the SQLSTATEs of docs/sql-api.md to HTTP statuses (BL404 -> 404, BL409 -> 409,
or 412 when the caller sent If-Match, BL422 -> 422). A mutation runs in a transaction that first
names its actor (`billing.actor` = api-key:<id>) for the audit log. Plus /webhooks/payments (signed
gateway results, billing.api.webhooks), /webhook-endpoints (outbound webhooks), /invoices/{id}[.html|.pdf] (documents), /admin/audit, /metrics, /healthz and /openapi.json
(billing.api.openapi), and the operator console under /console (billing.console). Serving (timeouts,
concurrency, the internal listener): billing.api.serving.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets as secrets_module
import logging
import time
from datetime import timezone
from decimal import Decimal
from typing import Awaitable, Callable

import psycopg
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from billing import db
from billing.api.openapi import OPENAPI
from billing.api.security import ApiGuard, KeyRateLimiter, Unavailable
from billing.api.validation import (
    BIGINT_MAX, IDEMPOTENCY_KEY, ApiError, bigint_field, bool_field, error_response, if_match, instant_field,
    int_field, iso_utc, json_object, path_id, query_int, query_text, read_body, subscription_response, text_field,
)
from billing.api.webhooks import MAX_WEBHOOK_BODY, verify_signature, webhook_fields
from billing.events.schemas import catalogue
from billing.worker.targets import BlockedAddress, check_target
from billing.clock import Clock, SystemClock
from billing.console import create_console
from billing.invoices.documents import Issuer, render_html, render_pdf
from billing.metrics import HTTP_REQUESTS, OUTBOX_BACKLOG, OUTBOX_DEAD, OUTBOX_OLDEST_AGE, WEBHOOKS_FOR_REVIEW

log = logging.getLogger("billing.api")

METRICS_REFRESH = 2.0  # seconds between two reads of the outbox figures for /metrics


class Database:
    """The connection pool, opened on first use (so an app built for a test works without lifespan)."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = url
        self.timeout = timeout
        self._pool: AsyncConnectionPool | None = None
        self._lock = asyncio.Lock()

    async def pool(self) -> AsyncConnectionPool:
        if self._pool is None:
            async with self._lock:
                if self._pool is None:
                    pool = AsyncConnectionPool(
                        self.url, min_size=1, max_size=10, name="billing-api", open=False, timeout=self.timeout,
                        kwargs={"autocommit": True, "row_factory": dict_row},
                    )
                    await pool.open(wait=False)
                    self._pool = pool
        return self._pool

    async def one(self, query: str, params: dict | None = None) -> dict | None:
        pool = await self.pool()
        async with pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchone()

    async def all(self, query: str, params: dict | None = None) -> list[dict]:
        pool = await self.pool()
        async with pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

    async def mutate(self, actor: str, query: str, params: dict | None = None) -> dict | None:
        """One mutation in a transaction whose audit actor is `actor` (docs/security.md)."""
        pool = await self.pool()
        async with pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(db.SET_ACTOR, {"actor": actor})
                cur = await conn.execute(query, params)
                return await cur.fetchone()

    async def authenticate(self, key_hash: bytes) -> tuple[str, list[str]] | None:
        try:
            row = await self.one(db.AUTHENTICATE_API_KEY, {"hash": key_hash})
        except (psycopg.OperationalError, PoolTimeout) as exc:
            log.warning("API key check: database unavailable", extra={"error": str(exc).strip()})
            raise Unavailable() from exc
        return (row["key_id"], list(row["scopes"])) if row else None

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


Handler = Callable[[Request], Awaitable[Response]]


def endpoint_of(route: str, *, precondition: bool = False) -> Callable[[Handler], Handler]:
    """Maps every failure of a handler to the contract's error body, and counts the request."""

    def wrap(handler: Handler) -> Handler:
        async def endpoint(request: Request) -> Response:
            try:
                response = await handler(request)
            except ApiError as exc:
                response = error_response(exc.status, exc.code, exc.message, exc.headers)
            except psycopg.Error as exc:
                response = database_error(exc, request if precondition else None)
            except PoolTimeout:
                response = error_response(503, "unavailable", "the database is not reachable; retry later")
            HTTP_REQUESTS.labels(route=route, status=str(response.status_code)).inc()
            return response

        endpoint.__name__ = handler.__name__
        return endpoint

    return wrap


def _utc(value) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def endpoint_json(row: dict, *, with_secret: bool = False) -> dict:
    """A webhook endpoint as the API shows it; its secret only in the answer to its creation."""
    out = {"object": "webhook_endpoint", "id": row["id"], "url": row["url"], "eventTypes": row["event_types"],
           "status": row["status"], "createdAt": _utc(row["created_at"]), "disabledAt": _utc(row["disabled_at"]),
           "disabledReason": row["disabled_reason"]}
    if with_secret:
        out["secret"] = row["secret"]
    return out


def coupon_json(row: dict) -> dict:
    return {"object": "coupon", "code": row["code"],
            "percentOff": None if row["percent_off"] is None else float(row["percent_off"]),
            "amountOff": row["amount_off"], "currency": row["currency"], "duration": row["duration"],
            "durationPeriods": row["duration_periods"], "maxRedemptions": row["max_redemptions"],
            "timesRedeemed": row["times_redeemed"], "redeemBy": _utc(row["redeem_by"]), "planCodes": row["plan_codes"]}


def payment_method_json(row: dict) -> dict:
    """A payment method as the API shows it (the provider references are the caller's own)."""
    return {"object": "payment_method", "id": row["id"], "customerId": row["customer_id"], "provider": row["provider"],
            "customerRef": row["customer_ref"], "paymentMethodRef": row["payment_method_ref"], "brand": row["brand"],
            "last4": row["last4"], "expMonth": row["exp_month"], "expYear": row["exp_year"],
            "isDefault": row["is_default"], "status": row["status"], "updatedAt": _utc(row["updated_at"])}


def refund_json(row: dict) -> dict:
    return {"object": "refund", "id": row["id"], "invoiceId": row["invoice_id"], "customerId": row["customer_id"],
            "amount": row["amount"], "currency": row["currency"].strip(), "reason": row["reason"],
            "status": row["status"], "requestedAt": _utc(row["requested_at"]), "settledAt": _utc(row["settled_at"]),
            "providerReference": row["provider_reference"], "failureReason": row["failure_reason"]}


def small_int(doc: dict, name: str) -> int:
    value = doc[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, "invalid_field", f"{name} must be an integer")
    if not 0 <= value <= 10000:
        raise ApiError(422, "invalid_input", f"{name} is out of range")
    return value


def invoice_json(row: dict) -> dict:
    """An invoice as the API shows it (amounts in minor units)."""
    return {"object": "invoice", "id": row["id"], "subscriptionId": row["subscription_id"],
            "customerId": row["customer_id"], "kind": row["kind"], "status": row["status"],
            "periodStart": _utc(row["period_start"]), "periodEnd": _utc(row["period_end"]),
            "subtotal": row["subtotal"], "creditApplied": row["credit_applied"], "amount": row["amount"],
            "amountRefunded": row["amount_refunded"], "currency": row["currency"].strip(),
            "attemptCount": row["attempt_count"], "nextAttemptAt": _utc(row["next_attempt_at"]),
            "paidAt": _utc(row["paid_at"]), "closedAt": _utc(row["closed_at"])}


def attempt_json(row: dict) -> dict:
    return {"object": "webhook_attempt", "eventId": str(row["event_id"]), "eventType": row["event_type"],
            "outboxId": row["outbox_id"], "attempt": row["attempt"], "attemptedAt": _utc(row["attempted_at"]),
            "statusCode": row["status_code"], "error": row["error"], "durationMs": row["duration_ms"],
            "deliveryStatus": row["delivery_status"]}


def database_error(exc: psycopg.Error, request: Request | None) -> Response:
    err = db.contract_error(exc)
    if err is not None:
        if err.code == "BL404":
            return error_response(404, "not_found", err.message)
        if err.code == "BL409":
            if request is not None and request.headers.get("if-match", "").strip() not in ("", "*"):
                return error_response(412, "precondition_failed", err.message)
            return error_response(409, "conflict", err.message)
        return error_response(422, "invalid_input", err.message)
    state = exc.sqlstate or ""
    if state == "23505":
        return error_response(409, "conflict", "a concurrent request with the same key won; retry to read its result")
    if state.startswith(("22", "23")) or isinstance(exc, psycopg.DataError):
        # data exception, integrity violation: the input was wrong. The database's own text is
        # never echoed (it may name internals); the rule's name is ours and says which rule.
        log.info("request refused by a database rule", extra={"sqlstate": state, "error": str(exc).strip()[:500]})
        rule = exc.diag.constraint_name
        return error_response(422, "invalid_input",
                              f"the request breaks the rule {rule}" if rule else "the input was refused by the database")
    if state.startswith("40"):  # serialization failure, deadlock: a concurrent change won
        return error_response(409, "conflict", "a concurrent change conflicted with this request; retry it")
    if isinstance(exc, psycopg.OperationalError):
        log.warning("database unavailable", extra={"error": str(exc).strip()})
        return error_response(503, "unavailable", "the database is not reachable; retry later")
    log.exception("unexpected database error")
    return error_response(500, "internal", "unexpected database error")


def create_app(settings, *, clock: Clock | None = None, wall_clock: Callable[[], float] = time.time,
               pool_timeout: float = 5.0, rate_limit: bool = True) -> Starlette:
    """The ASGI app. `clock` gives p_now for the SQL calls; `wall_clock` (unix seconds) checks
    webhook signature timestamps, which are always real time. `pool_timeout`: how long a request
    waits for a database connection before answering 503. `rate_limit`: the per-key request rate
    of the settings (api_rate_per_key, api_burst_per_key)."""
    clock = clock or SystemClock()
    database = Database(settings.database_url, pool_timeout)
    secrets = [s for s in (settings.webhook_secret or "").split(",") if s]
    limiter = (KeyRateLimiter(settings.api_rate_per_key, settings.api_burst_per_key, settings.redis_url)
               if rate_limit else None)

    def actor(request: Request) -> str:
        return f"api-key:{request.state.api_key_id}"

    @endpoint_of("/subscriptions")
    async def create_subscription(request: Request) -> Response:
        key = request.headers.get("idempotency-key")
        if key is None or key == "":
            raise ApiError(400, "missing_idempotency_key", "the Idempotency-Key header is required")
        if not IDEMPOTENCY_KEY.match(key):
            raise ApiError(400, "invalid_idempotency_key",
                           "Idempotency-Key must be 1 to 255 printable ASCII characters without spaces")
        doc = await json_object(request, allowed={"customerId", "planCode", "trialDays", "couponCode", "quantity"},
                                required={"customerId", "planCode"})
        customer_id = bigint_field(doc, "customerId")
        plan_code = text_field(doc, "planCode")
        trial_days = int_field(doc, "trialDays", 0, 730) if doc.get("trialDays") is not None else 0
        coupon = text_field(doc, "couponCode", max_len=64) if doc.get("couponCode") is not None else None
        quantity = int_field(doc, "quantity", 1, 1_000_000) if doc.get("quantity") is not None else 1
        row = await database.mutate(actor(request), db.API_CREATE_SUBSCRIPTION, {
            "key": scoped_idempotency_key(request.state.api_key_id, key), "customer_id": customer_id,
            "plan_code": plan_code, "now": clock.now(), "trial_days": trial_days, "coupon_code": coupon,
            "quantity": quantity})
        created = bool(row and row["created"])
        return subscription_response(row, 201 if created else 200, {"Location": f"/subscriptions/{row['id']}"})

    @endpoint_of("/subscriptions/{id}")
    async def get_subscription(request: Request) -> Response:
        row = await database.one(db.API_GET_SUBSCRIPTION, {"id": path_id(request)})
        return subscription_response(row)

    @endpoint_of("/subscriptions/{id}/cancel", precondition=True)
    async def cancel_subscription(request: Request) -> Response:
        sub_id = path_id(request)
        expected = if_match(request)
        doc = await json_object(request, allowed={"atPeriodEnd"}, required={"atPeriodEnd"})
        row = await database.mutate(actor(request), db.API_CANCEL_SUBSCRIPTION, {
            "id": sub_id, "at_period_end": bool_field(doc, "atPeriodEnd"),
            "now": clock.now(), "expected_version": expected})
        return subscription_response(row)

    @endpoint_of("/subscriptions/{id}/change-plan", precondition=True)
    async def change_plan(request: Request) -> Response:
        sub_id = path_id(request)
        expected = if_match(request)
        doc = await json_object(request, allowed={"planCode", "when", "prorate"}, required={"planCode"})
        when = text_field(doc, "when", max_len=20) if doc.get("when") is not None else "now"
        if when not in ("now", "period_end"):
            raise ApiError(422, "invalid_input", "when must be now or period_end")
        prorate = bool_field(doc, "prorate") if doc.get("prorate") is not None else True
        row = await database.mutate(actor(request), db.API_CHANGE_PLAN, {
            "id": sub_id, "plan_code": text_field(doc, "planCode"),
            "now": clock.now(), "expected_version": expected, "when": when, "prorate": prorate})
        return subscription_response(row)

    # -- the lifecycle (docs/lifecycle.md) -------------------------------------------------------
    @endpoint_of("/subscriptions/{id}/coupon")
    async def apply_coupon(request: Request) -> Response:
        sub_id = path_id(request)
        doc = await json_object(request, allowed={"couponCode"}, required={"couponCode"})
        row = await database.mutate(actor(request), db.API_APPLY_COUPON, {
            "id": sub_id, "code": text_field(doc, "couponCode", max_len=64), "now": clock.now()})
        return subscription_response(row)

    @endpoint_of("/subscriptions/{id}/pause")
    async def pause_subscription(request: Request) -> Response:
        sub_id = path_id(request)
        doc = await json_object(request, allowed={"resumeAt"}, required=set(), optional_body=True)
        resume_at = instant_field(doc, "resumeAt") if doc.get("resumeAt") is not None else None
        row = await database.mutate(actor(request), db.API_PAUSE_SUBSCRIPTION, {
            "id": sub_id, "resume_at": resume_at, "now": clock.now()})
        return subscription_response(row)

    def no_body_call(route: str, query: str):
        @endpoint_of(route)
        async def handler(request: Request) -> Response:
            sub_id = path_id(request)
            await json_object(request, allowed=set(), required=set(), optional_body=True)
            row = await database.mutate(actor(request), query, {"id": sub_id, "now": clock.now()})
            return subscription_response(row)
        return handler

    resume_subscription = no_body_call("/subscriptions/{id}/resume", db.API_RESUME_SUBSCRIPTION)
    uncancel_subscription = no_body_call("/subscriptions/{id}/uncancel", db.API_UNCANCEL_SUBSCRIPTION)
    reactivate_subscription = no_body_call("/subscriptions/{id}/reactivate", db.API_REACTIVATE_SUBSCRIPTION)

    @endpoint_of("/subscriptions/{id}/quantity")
    async def set_quantity(request: Request) -> Response:
        sub_id = path_id(request)
        doc = await json_object(request, allowed={"quantity"}, required={"quantity"})
        row = await database.mutate(actor(request), db.API_SET_QUANTITY, {
            "id": sub_id, "quantity": int_field(doc, "quantity", 1, 1_000_000), "now": clock.now()})
        return subscription_response(row)

    @endpoint_of("/coupons")
    async def upsert_coupon(request: Request) -> Response:
        require_admin(request)
        fields = {"code", "percentOff", "amountOff", "currency", "duration", "durationPeriods", "maxRedemptions",
                  "redeemBy", "planCodes"}
        doc = await json_object(request, allowed=fields, required={"code", "duration"})
        percent = doc.get("percentOff")
        if percent is not None and (isinstance(percent, bool) or not isinstance(percent, (int, float))):
            raise ApiError(400, "invalid_field", "percentOff must be a number")
        plans = doc.get("planCodes")
        if plans is not None and (not isinstance(plans, list) or not all(isinstance(p, str) for p in plans)):
            raise ApiError(400, "invalid_field", "planCodes must be a list of plan codes")
        opt = lambda name, f: f(doc, name) if doc.get(name) is not None else None  # noqa: E731
        row = await database.mutate(actor(request), db.UPSERT_COUPON, {
            "code": text_field(doc, "code", max_len=64),
            "percent_off": None if percent is None else Decimal(str(percent)),
            "amount_off": opt("amountOff", bigint_field),
            "currency": opt("currency", lambda d, n: text_field(d, n, max_len=3)),
            "duration": text_field(doc, "duration", max_len=20),
            "duration_periods": opt("durationPeriods", lambda d, n: int_field(d, n, 1, 120)),
            "max_redemptions": opt("maxRedemptions", lambda d, n: int_field(d, n, 1, 2**31 - 1)),
            "redeem_by": opt("redeemBy", instant_field),
            "plan_codes": plans})
        return JSONResponse(coupon_json(row))

    @endpoint_of("/webhooks/payments")
    async def payment_webhook(request: Request) -> Response:
        body = await read_body(request, MAX_WEBHOOK_BODY)
        # The signature is checked on the raw bytes, before anything is parsed.
        verify_signature(request.headers.get("billing-signature"), body, secrets, wall_clock())
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise ApiError(400, "invalid_json", "the body is not valid JSON (UTF-8)") from None
        fields = webhook_fields(doc)
        from billing.providers.sim import is_hard

        row = await database.mutate("gateway-webhook", db.APPLY_GATEWAY_WEBHOOK, {
            **fields, "payload": json.dumps(doc), "now": clock.now(),
            "hard_decline": fields["outcome"] == "DECLINED" and is_hard(doc.get("declineCode"))})
        outcome = row["outcome"]
        if outcome == "REVIEW":
            # Kept, not applied: a success that is not the charge we asked for (docs/gateway.md).
            WEBHOOKS_FOR_REVIEW.inc()
            log.warning("webhook kept for review", extra={"eventId": fields["event_id"], "key": fields["key"]})
        return JSONResponse({"received": True, "applied": outcome == "APPLIED", "duplicate": outcome == "DUPLICATE",
                             "review": outcome == "REVIEW"})

    @endpoint_of("/webhooks/stripe")
    async def stripe_webhook(request: Request) -> Response:
        # Verified with the Stripe-Signature scheme on the raw bytes, then each outcome goes to the
        # SQL API: charges through apply_gateway_webhook (stored once per event id), refunds
        # through record_refund_result (idempotent). Events we do not act on are acknowledged.
        from billing.providers import WebhookRejected

        body = await read_body(request, MAX_WEBHOOK_BODY)
        try:
            outcomes = stripe_parser.parse_webhook(request.headers, body, wall_clock())
        except WebhookRejected as exc:
            raise ApiError(exc.status, exc.code, exc.message) from None
        if any(o.kind == "refund_lookup" for o in outcomes):
            # A charge.refunded without its refunds: read from Stripe (with the API key), or left to
            # the worker's look-ups when this API has none.
            from billing.providers import LookupFailed

            if not stripe_parser.api_key:
                log.warning("charge.refunded without its refunds and no BILLING_STRIPE_API_KEY to read them; "
                            "the refund worker's look-ups settle them", extra={"eventId": outcomes[0].event_id})
                outcomes = [o for o in outcomes if o.kind != "refund_lookup"]
            else:
                try:
                    outcomes = await stripe_parser.complete_webhook(outcomes)
                except LookupFailed as exc:
                    # Not acknowledged: Stripe delivers the event again later.
                    raise ApiError(503, "unavailable", f"could not read the charge's refunds from Stripe: {exc}") from None
        applied = []
        for o in outcomes:
            if o.kind == "charge":
                row = await database.mutate("gateway-webhook", db.APPLY_GATEWAY_WEBHOOK, {
                    "event_id": o.event_id, "key": o.idempotency_key, "outcome": o.outcome, "reference": o.reference,
                    "payload": json.dumps(o.payload), "now": clock.now(), "hard_decline": o.hard_decline})
                applied.append(row["outcome"])
                if row["outcome"] == "REVIEW":
                    WEBHOOKS_FOR_REVIEW.inc()
                    log.warning("webhook kept for review", extra={"eventId": o.event_id, "key": o.idempotency_key})
            else:
                await database.mutate("gateway-webhook", db.RECORD_REFUND_RESULT, {
                    "key": o.idempotency_key, "outcome": o.outcome, "reference": o.reference, "reason": o.reason,
                    "now": clock.now()})
                applied.append("REFUND")
        return JSONResponse({"received": True, "outcomes": applied})

    from billing.providers.stripe import StripeProvider as _Stripe

    # Its webhook verifier, and (with BILLING_STRIPE_API_KEY) the reading of a charge's refunds that
    # a charge.refunded event does not list; without BILLING_STRIPE_WEBHOOK_SECRET every Stripe
    # webhook is refused.
    stripe_parser = _Stripe(settings.stripe_api_key or "", api_base=settings.stripe_api_base,
                            webhook_secrets=[x for x in (settings.stripe_webhook_secret or "").split(",") if x])

    # -- payment methods and refunds -------------------------------------------------------------
    @endpoint_of("/customers/{id}/payment-method")
    async def put_payment_method(request: Request) -> Response:
        customer_id = path_id(request, "customer")
        fields = {"provider", "customerRef", "paymentMethodRef", "brand", "last4", "expMonth", "expYear"}
        doc = await json_object(request, allowed=fields,
                                required={"provider", "paymentMethodRef", "expMonth", "expYear"})
        optional = {name: (text_field(doc, name, max_len=255) if doc.get(name) is not None else None)
                    for name in ("customerRef", "brand", "last4")}
        row = await database.mutate(actor(request), db.SET_PAYMENT_METHOD, {
            "customer_id": customer_id, "provider": text_field(doc, "provider", max_len=32),
            "customer_ref": optional["customerRef"], "payment_method_ref": text_field(doc, "paymentMethodRef", max_len=255),
            "brand": optional["brand"], "last4": optional["last4"],
            "exp_month": small_int(doc, "expMonth"), "exp_year": small_int(doc, "expYear"), "now": clock.now()})
        return JSONResponse(payment_method_json(row))

    @endpoint_of("/invoices/{id}/refunds")
    async def create_refund(request: Request) -> Response:
        invoice_id = path_id(request, "invoice")
        key = request.headers.get("idempotency-key")
        if key is None or key == "":
            raise ApiError(400, "missing_idempotency_key", "the Idempotency-Key header is required")
        if not IDEMPOTENCY_KEY.match(key):
            raise ApiError(400, "invalid_idempotency_key",
                           "Idempotency-Key must be 1 to 255 printable ASCII characters without spaces")
        doc = await json_object(request, allowed={"amount"}, required={"amount"})
        amount = bigint_field(doc, "amount")
        if amount < 1:
            raise ApiError(422, "invalid_input", "amount must be a positive integer in the currency's smallest unit")
        request_key = scoped_idempotency_key(request.state.api_key_id, key)
        row = await database.mutate(actor(request), db.REFUND_INVOICE, {
            "invoice_id": invoice_id, "amount": amount, "request_key": request_key, "now": clock.now()})
        # 200 for the request and for its replays (same Idempotency-Key), as Stripe answers.
        return JSONResponse(refund_json(row))

    @endpoint_of("/invoices/{id}/refunds")
    async def list_refunds(request: Request) -> Response:
        rows = await database.all(db.LIST_REFUNDS, {"invoice_id": path_id(request, "invoice")})
        return JSONResponse({"object": "list", "data": [refund_json(r) for r in rows]})

    # -- an operator's invoice actions (admin) ---------------------------------------------------
    @endpoint_of("/invoices/{id}/retry")
    async def retry_invoice(request: Request) -> Response:
        require_admin(request)
        invoice_id = path_id(request, "invoice")
        await json_object(request, allowed=set(), required=set(), optional_body=True)
        row = await database.mutate(actor(request), db.RETRY_INVOICE, {"invoice_id": invoice_id, "now": clock.now()})
        return JSONResponse(invoice_json(row))

    @endpoint_of("/invoices/{id}/void")
    async def void_invoice(request: Request) -> Response:
        require_admin(request)
        invoice_id = path_id(request, "invoice")
        doc = await json_object(request, allowed={"reason"}, required={"reason"})
        row = await database.mutate(actor(request), db.VOID_INVOICE, {
            "invoice_id": invoice_id, "reason": text_field(doc, "reason", max_len=500), "now": clock.now()})
        return JSONResponse(invoice_json(row))
    # -- invoice documents (docs/invoices.md) -------------------------------------------------------
    issuer = Issuer.from_settings(settings)

    @endpoint_of("/invoices/{id}")
    async def get_invoice(request: Request) -> Response:
        # /invoices/12 (JSON with its lines), /invoices/12.html, /invoices/12.pdf
        ref = request.path_params["id"]
        stem, _, suffix = ref.partition(".")
        if suffix not in ("", "html", "pdf"):
            raise ApiError(404, "not_found", "an invoice is served as /invoices/{id}, {id}.html or {id}.pdf")
        request.path_params["id"] = stem
        invoice_id = path_id(request, "invoice")
        row = await database.one(db.GET_INVOICE_DOCUMENT, {"invoice_id": invoice_id})
        doc = row["document"]
        if suffix == "html":
            return Response(render_html(doc, issuer), media_type="text/html; charset=utf-8")
        if suffix == "pdf":
            pdf = await asyncio.get_running_loop().run_in_executor(None, render_pdf, doc, issuer)
            name = doc.get("number") or f"draft-{invoice_id}"
            return Response(pdf, media_type="application/pdf",
                            headers={"Content-Disposition": f'inline; filename="invoice-{name}.pdf"'})
        return JSONResponse({"object": "invoice", **doc})

    # -- outbound webhook endpoints (admin) ------------------------------------------------------
    def require_admin(request: Request) -> None:
        # The operator's routes: ApiGuard has already required an API key with the admin scope
        # (billing.api.security); this only makes sure no route of this kind escapes it.
        if getattr(request.state, "api_key_id", None) is None:
            raise ApiError(401, "unauthorized", "an API key with the admin scope is required",
                           {"WWW-Authenticate": "Bearer"})

    @endpoint_of("/webhook-endpoints")
    async def create_webhook_endpoint(request: Request) -> Response:
        require_admin(request)
        doc = await json_object(request, allowed={"url", "eventTypes", "secret"}, required={"url", "eventTypes"})
        url = text_field(doc, "url", max_len=2048)
        try:
            check_target(url, allow_private=settings.webhook_allow_private)
        except BlockedAddress as exc:
            raise ApiError(422, "invalid_input", f"url: {exc} (private and loopback targets are not allowed)") from None
        except ValueError as exc:
            raise ApiError(422, "invalid_input", f"url: {exc}") from None
        types = doc["eventTypes"]
        if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
            raise ApiError(400, "invalid_field", "eventTypes must be a non-empty list of event type names, or [\"*\"]")
        unknown = sorted(set(types) - catalogue().types - {"*"})
        if unknown:
            raise ApiError(422, "invalid_input", f"unknown event type(s): {', '.join(unknown)[:300]}; see docs/events.md")
        secret = text_field(doc, "secret", max_len=256) if doc.get("secret") is not None else \
            "whsec_" + secrets_module.token_urlsafe(32)
        row = await database.mutate(actor(request), db.CREATE_WEBHOOK_ENDPOINT, {"url": url, "types": types, "secret": secret,
                                                              "now": clock.now()})
        return JSONResponse(endpoint_json(row, with_secret=True), status_code=201,
                            headers={"Location": f"/webhook-endpoints/{row['id']}"})

    @endpoint_of("/webhook-endpoints")
    async def list_webhook_endpoints(request: Request) -> Response:
        require_admin(request)
        rows = await database.all(db.LIST_WEBHOOK_ENDPOINTS)
        return JSONResponse({"object": "list", "data": [endpoint_json(r) for r in rows]})

    @endpoint_of("/webhook-endpoints/{id}")
    async def get_webhook_endpoint(request: Request) -> Response:
        require_admin(request)
        return JSONResponse(endpoint_json(await database.one(db.GET_WEBHOOK_ENDPOINT, {"id": path_id(request)})))

    @endpoint_of("/webhook-endpoints/{id}")
    async def delete_webhook_endpoint(request: Request) -> Response:
        require_admin(request)
        row = await database.mutate(actor(request), db.DELETE_WEBHOOK_ENDPOINT, {"id": path_id(request)})
        return JSONResponse({"object": "webhook_endpoint", "id": row["id"], "deleted": True})

    @endpoint_of("/webhook-endpoints/{id}/attempts")
    async def list_webhook_attempts(request: Request) -> Response:
        require_admin(request)
        raw = request.query_params.get("limit", "100")
        if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= 1000:
            raise ApiError(400, "invalid_field", "limit must be an integer from 1 to 1000")
        rows = await database.all(db.LIST_WEBHOOK_ATTEMPTS, {"id": path_id(request), "limit": int(raw)})
        return JSONResponse({"object": "list", "data": [attempt_json(r) for r in rows]})

    refreshed = [float("-inf")]

    async def metrics(request: Request) -> Response:
        # The outbox figures come from the database, at most once per METRICS_REFRESH seconds
        # however many scrapers there are.
        if time.monotonic() - refreshed[0] >= METRICS_REFRESH:
            try:
                stats = await database.one(db.OUTBOX_STATS, {"now": clock.now()})
                OUTBOX_BACKLOG.set(stats["backlog"])
                OUTBOX_DEAD.set(stats["dead"])
                OUTBOX_OLDEST_AGE.set(stats["oldest_age_seconds"])
                refreshed[0] = time.monotonic()
            except (psycopg.Error, PoolTimeout) as exc:
                log.warning("metrics: outbox figures not refreshed", extra={"error": str(exc).strip()})
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @endpoint_of("/admin/audit")
    async def audit(request: Request) -> Response:
        q = request.query_params
        before = query_int(q, "beforeId", 1, BIGINT_MAX)
        limit = query_int(q, "limit", 1, 1000) or 100
        rows = await database.all(db.READ_AUDIT, {
            "before": before, "limit": limit, "actor": query_text(q, "actor"), "function": query_text(q, "function")})
        entries = [{"id": r["id"], "at": iso_utc(r["at"]), "actor": r["actor"], "dbRole": r["db_role"],
                    "function": r["function"], "args": r["args"]} for r in rows]
        return JSONResponse({"entries": entries,
                             "nextBeforeId": entries[-1]["id"] if len(entries) == limit else None})

    async def healthz(request: Request) -> Response:
        try:
            await asyncio.wait_for(database.one(db.HEALTH), timeout=pool_timeout + 1)
        except (psycopg.Error, PoolTimeout, asyncio.TimeoutError) as exc:
            log.warning("health check: database unavailable", extra={"error": str(exc).strip()[:200]})
            return JSONResponse({"status": "unavailable"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def openapi(request: Request) -> Response:
        return JSONResponse(OPENAPI)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
        status = exc.status_code if exc.status_code in (404, 405) else 400
        return error_response(status, code, exc.detail or "bad request", getattr(exc, "headers", None))

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error", exc_info=exc)
        return error_response(500, "internal", "unexpected error")

    routes = [
        Route("/subscriptions", create_subscription, methods=["POST"]),
        Route("/subscriptions/{id}", get_subscription, methods=["GET"]),
        Route("/subscriptions/{id}/cancel", cancel_subscription, methods=["POST"]),
        Route("/subscriptions/{id}/change-plan", change_plan, methods=["POST"]),
        Route("/subscriptions/{id}/coupon", apply_coupon, methods=["POST"]),
        Route("/subscriptions/{id}/pause", pause_subscription, methods=["POST"]),
        Route("/subscriptions/{id}/resume", resume_subscription, methods=["POST"]),
        Route("/subscriptions/{id}/uncancel", uncancel_subscription, methods=["POST"]),
        Route("/subscriptions/{id}/reactivate", reactivate_subscription, methods=["POST"]),
        Route("/subscriptions/{id}/quantity", set_quantity, methods=["POST"]),
        Route("/coupons", upsert_coupon, methods=["POST"]),
        Route("/webhooks/payments", payment_webhook, methods=["POST"]),
        Route("/webhooks/stripe", stripe_webhook, methods=["POST"]),
        Route("/customers/{id}/payment-method", put_payment_method, methods=["PUT"]),
        Route("/invoices/{id}", get_invoice, methods=["GET"]),
        Route("/invoices/{id}/refunds", create_refund, methods=["POST"]),
        Route("/invoices/{id}/refunds", list_refunds, methods=["GET"]),
        Route("/invoices/{id}/retry", retry_invoice, methods=["POST"]),
        Route("/invoices/{id}/void", void_invoice, methods=["POST"]),
        Route("/webhook-endpoints", create_webhook_endpoint, methods=["POST"]),
        Route("/webhook-endpoints", list_webhook_endpoints, methods=["GET"]),
        Route("/webhook-endpoints/{id}", get_webhook_endpoint, methods=["GET"]),
        Route("/webhook-endpoints/{id}", delete_webhook_endpoint, methods=["DELETE"]),
        Route("/webhook-endpoints/{id}/attempts", list_webhook_attempts, methods=["GET"]),
        Route("/admin/audit", audit, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        # The operator console (docs/console.md): its own login with the same API keys.
        Mount("/console", app=create_console(database, settings, clock=clock, limiter=limiter)),
    ]

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        await database.pool()
        yield
        await database.close()
        await stripe_parser.close()
        if limiter is not None:
            await limiter.close()

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error, Exception: unexpected},
                    middleware=[Middleware(ApiGuard, authenticate=database.authenticate, limiter=limiter)])
    app.state.database = database
    app.state.stripe = stripe_parser  # closed by the lifespan (a test without it closes it itself)
    app.state.metrics = metrics
    app.state.openapi = openapi
    app.state.healthz = healthz
    return app


def internal_app(app: Starlette) -> Starlette:
    """/metrics, /openapi.json and /healthz without a key, for `billing serve --internal-port`
    (a listener meant for the scraper on a private interface, never published)."""
    return Starlette(routes=[Route("/metrics", app.state.metrics, methods=["GET"]),
                             Route("/openapi.json", app.state.openapi, methods=["GET"]),
                             Route("/healthz", app.state.healthz, methods=["GET"])])


def scoped_idempotency_key(api_key_id: str, key: str) -> str:
    """Idempotency keys are per API key: the SQL API sees `<key id>/<Idempotency-Key>` (hashed
    when that would pass its 255 characters), so one caller's key never meets another's."""
    scoped = f"{api_key_id}/{key}"
    if len(scoped) > 255:
        scoped = f"{api_key_id}/sha256:{hashlib.sha256(key.encode()).hexdigest()}"
    return scoped


def serve(settings, *, host: str = "127.0.0.1", port: int = 8080, internal_host: str = "127.0.0.1",
          internal_port: int | None = None) -> None:
    """Serve until SIGTERM/SIGINT (billing.api.serving)."""
    from billing.api.serving import serve as _serve

    _serve(settings, host=host, port=port, internal_host=internal_host, internal_port=internal_port)
