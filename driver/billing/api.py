"""`billing serve`: the HTTP API of CONTRACT section 6 (Starlette on uvicorn).

Each endpoint validates its input, makes one call to the SQL API and maps the contract's
SQLSTATEs to HTTP statuses (BL404 -> 404, BL409 -> 409, or 412 when the caller sent If-Match,
BL422 -> 422). Input is checked strictly before it reaches PostgreSQL (types, bigint range,
unknown fields, NUL characters...), so bad input is a 4xx with the contract's error body, never a
500. Plus /webhooks/payments (signed gateway results), /metrics, /healthz and /openapi.json.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import time
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

import psycopg
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from billing import db
from billing.clock import Clock, SystemClock
from billing.metrics import HTTP_REQUESTS, OUTBOX_BACKLOG, OUTBOX_DEAD, OUTBOX_OLDEST_AGE

log = logging.getLogger("billing.api")

BIGINT_MAX = 2**63 - 1
MAX_BODY = 64 * 1024
MAX_WEBHOOK_BODY = 256 * 1024
SIGNATURE_TOLERANCE = 300  # seconds, both ways
METRICS_REFRESH = 2.0  # seconds between two reads of the outbox figures for /metrics
_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")  # printable ASCII, no spaces
_ETAG = re.compile(r'^(?:W/)?"?([0-9]{1,30})"?$')


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def error_response(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


# -- input checks ----------------------------------------------------------------------------


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refusing it as soon as it passes `limit` bytes (never buffers a huge one)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(400, "body_too_large", f"the body must be at most {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _json_object(request: Request, *, allowed: set[str], required: set[str], optional_body: bool = False) -> dict:
    body = await _read_body(request, MAX_BODY)
    if not body.strip():
        if optional_body and not required:
            return {}
        raise ApiError(400, "invalid_json", f"a JSON object body is required with {', '.join(sorted(required))}")
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise ApiError(400, "invalid_json", "the body is not valid JSON (UTF-8)") from None
    if not isinstance(doc, dict):
        raise ApiError(400, "invalid_json", "the body must be a JSON object")
    unknown = set(doc) - allowed
    if unknown:
        raise ApiError(400, "unknown_field", f"unknown field(s): {', '.join(sorted(map(repr, unknown)))[:200]}; "
                                             f"allowed: {', '.join(sorted(allowed))}")
    missing = required - set(doc)
    if missing:
        raise ApiError(400, "missing_field", f"missing field(s): {', '.join(sorted(missing))}")
    return doc


def _bigint_field(doc: dict, name: str) -> int:
    value = doc[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, "invalid_field", f"{name} must be an integer")
    if not -BIGINT_MAX - 1 <= value <= BIGINT_MAX:
        raise ApiError(422, "invalid_input", f"{name} is out of range (a 64-bit signed integer)")
    return value


def _text_field(doc: dict, name: str, *, max_len: int = 1000) -> str:
    value = doc[name]
    if not isinstance(value, str):
        raise ApiError(400, "invalid_field", f"{name} must be a string")
    _check_text(name, value, max_len)
    return value


def _check_text(name: str, value: str, max_len: int) -> None:
    if "\x00" in value:
        raise ApiError(400, "invalid_field", f"{name} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "invalid_field", f"{name} is not valid Unicode (lone surrogate)") from None
    if len(value) > max_len:
        raise ApiError(422, "invalid_input", f"{name} is too long (at most {max_len} characters)")


def _bool_field(doc: dict, name: str) -> bool:
    value = doc[name]
    if not isinstance(value, bool):
        raise ApiError(400, "invalid_field", f"{name} must be true or false")
    return value


def _path_id(request: Request) -> int:
    raw = request.path_params["id"]
    if not raw.isascii() or not raw.isdigit():
        raise ApiError(400, "invalid_id", "the subscription id must be a positive integer")
    value = int(raw)
    if value < 1 or value > BIGINT_MAX:
        raise ApiError(404, "not_found", f"subscription {raw[:40]} does not exist")
    return value


def _if_match(request: Request) -> int | None:
    """If-Match -> p_expected_version. Absent or `*`: no check. The ETag is the version, quoted."""
    raw = request.headers.get("if-match")
    if raw is None or raw.strip() == "*":
        return None
    m = _ETAG.match(raw.strip())
    if not m:
        raise ApiError(400, "invalid_header", 'If-Match must be one ETag as returned by GET, e.g. "3"')
    version = int(m.group(1))
    if version > BIGINT_MAX:
        raise ApiError(412, "precondition_failed", "If-Match names a version the subscription cannot have")
    return version


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def subscription_json(row: dict) -> dict:
    return {
        "id": row["id"],
        "customerId": row["customer_id"],
        "planCode": row["plan_code"],
        "status": row["status"],
        "currentPeriodStart": _iso(row["current_period_start"]),
        "currentPeriodEnd": _iso(row["current_period_end"]),
        "cancelAtPeriodEnd": row["cancel_at_period_end"],
        "version": row["version"],
    }


def _subscription_response(row: dict | None, status: int = 200, headers: dict | None = None) -> JSONResponse:
    if row is None or row.get("id") is None:
        raise ApiError(404, "not_found", "no such subscription")
    headers = {"ETag": f'"{row["version"]}"', **(headers or {})}
    return JSONResponse(subscription_json(row), status_code=status, headers=headers)


# -- webhook signatures -------------------------------------------------------------------------


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The `v1` signature: hex HMAC-SHA256 of "<t>.<body>" (what the gateway sends)."""
    return hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={sign(secret, timestamp, body)}"


def verify_signature(header: str | None, body: bytes, secrets: list[str], now: float,
                     tolerance: int = SIGNATURE_TOLERANCE) -> None:
    """Raises ApiError unless one v1 of `header` is a valid signature of `body` by one of
    `secrets`, timestamped within `tolerance` seconds of `now` (either way)."""
    if not secrets:
        raise ApiError(400, "invalid_signature", "webhooks are disabled: no BILLING_WEBHOOK_SECRET is configured")
    if not header:
        raise ApiError(400, "invalid_signature", "missing Billing-Signature header")
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            continue
        if key == "t":
            if not value.isascii() or not value.isdigit() or len(value) > 12:
                raise ApiError(400, "invalid_signature", "Billing-Signature t= must be a unix time in seconds")
            timestamp = int(value)
        elif key == "v1":
            candidates.append(value.strip())
    if timestamp is None or not candidates:
        raise ApiError(400, "invalid_signature", "Billing-Signature must be t=<unix time>,v1=<hex signature>")
    if abs(now - timestamp) > tolerance:
        raise ApiError(400, "invalid_signature",
                       f"Billing-Signature timestamp is more than {tolerance} s away from this server's clock")
    matched = False
    for secret in secrets:
        expected = sign(secret, timestamp, body).encode()
        for candidate in candidates:
            # compare_digest on bytes of any length; no early exit across candidates either.
            matched |= hmac.compare_digest(expected, candidate.encode("ascii", "replace"))
    if not matched:
        raise ApiError(400, "invalid_signature", "no Billing-Signature v1 matches the body")


_OUTCOMES = {"succeeded": "SUCCEEDED", "declined": "DECLINED"}


def _webhook_fields(doc: Any) -> dict:
    if not isinstance(doc, dict):
        raise ApiError(400, "invalid_json", "the webhook body must be a JSON object")
    for name in ("eventId", "idempotencyKey", "status"):
        if name not in doc:
            raise ApiError(400, "missing_field", f"missing field: {name}")
    event_id = _text_field(doc, "eventId", max_len=255)
    key = _text_field(doc, "idempotencyKey", max_len=255)
    status = doc["status"]
    if status not in _OUTCOMES:
        raise ApiError(422, "invalid_input", "status must be succeeded or declined")
    reference = doc.get("id")
    if reference is not None and not isinstance(reference, str):
        raise ApiError(400, "invalid_field", "id must be a string")
    if reference is not None:
        _check_text("id", reference, 255)
    return {"event_id": event_id, "key": key, "outcome": _OUTCOMES[status], "reference": reference}


# -- the app ------------------------------------------------------------------------------------


class _Database:
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

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


Handler = Callable[[Request], Awaitable[Response]]


def _endpoint(route: str, *, precondition: bool = False) -> Callable[[Handler], Handler]:
    """Maps every failure of a handler to the contract's error body, and counts the request."""

    def wrap(handler: Handler) -> Handler:
        async def endpoint(request: Request) -> Response:
            try:
                response = await handler(request)
            except ApiError as exc:
                response = error_response(exc.status, exc.code, exc.message, exc.headers)
            except psycopg.Error as exc:
                response = _database_error(exc, request if precondition else None)
            except PoolTimeout:
                response = error_response(503, "unavailable", "the database is not reachable; retry later")
            HTTP_REQUESTS.labels(route=route, status=str(response.status_code)).inc()
            return response

        endpoint.__name__ = handler.__name__
        return endpoint

    return wrap


def _database_error(exc: psycopg.Error, request: Request | None) -> Response:
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
        # data exception, integrity violation: the input was wrong
        return error_response(422, "invalid_input", (exc.diag.message_primary or str(exc))[:500])
    if state.startswith("40"):  # serialization failure, deadlock: a concurrent change won
        return error_response(409, "conflict", "a concurrent change conflicted with this request; retry it")
    if isinstance(exc, psycopg.OperationalError):
        log.warning("database unavailable", extra={"error": str(exc).strip()})
        return error_response(503, "unavailable", "the database is not reachable; retry later")
    log.exception("unexpected database error")
    return error_response(500, "internal", "unexpected database error")


def create_app(settings, *, clock: Clock | None = None, wall_clock: Callable[[], float] = time.time,
               pool_timeout: float = 5.0) -> Starlette:
    """The ASGI app. `clock` gives p_now for the SQL calls; `wall_clock` (unix seconds) checks
    webhook signature timestamps, which are always real time. `pool_timeout`: how long a request
    waits for a database connection before answering 503."""
    clock = clock or SystemClock()
    database = _Database(settings.database_url, pool_timeout)
    secrets = [s for s in (settings.webhook_secret or "").split(",") if s]

    @_endpoint("/subscriptions")
    async def create_subscription(request: Request) -> Response:
        key = request.headers.get("idempotency-key")
        if key is None or key == "":
            raise ApiError(400, "missing_idempotency_key", "the Idempotency-Key header is required")
        if not _IDEMPOTENCY_KEY.match(key):
            raise ApiError(400, "invalid_idempotency_key",
                           "Idempotency-Key must be 1 to 255 printable ASCII characters without spaces")
        doc = await _json_object(request, allowed={"customerId", "planCode"}, required={"customerId", "planCode"})
        customer_id = _bigint_field(doc, "customerId")
        plan_code = _text_field(doc, "planCode")
        row = await database.one(db.API_CREATE_SUBSCRIPTION, {
            "key": key, "customer_id": customer_id, "plan_code": plan_code, "now": clock.now()})
        created = bool(row and row["created"])
        return _subscription_response(row, 201 if created else 200, {"Location": f"/subscriptions/{row['id']}"})

    @_endpoint("/subscriptions/{id}")
    async def get_subscription(request: Request) -> Response:
        row = await database.one(db.API_GET_SUBSCRIPTION, {"id": _path_id(request)})
        return _subscription_response(row)

    @_endpoint("/subscriptions/{id}/cancel", precondition=True)
    async def cancel_subscription(request: Request) -> Response:
        sub_id = _path_id(request)
        expected = _if_match(request)
        doc = await _json_object(request, allowed={"atPeriodEnd"}, required={"atPeriodEnd"})
        row = await database.one(db.API_CANCEL_SUBSCRIPTION, {
            "id": sub_id, "at_period_end": _bool_field(doc, "atPeriodEnd"),
            "now": clock.now(), "expected_version": expected})
        return _subscription_response(row)

    @_endpoint("/subscriptions/{id}/change-plan", precondition=True)
    async def change_plan(request: Request) -> Response:
        sub_id = _path_id(request)
        expected = _if_match(request)
        doc = await _json_object(request, allowed={"planCode"}, required={"planCode"})
        row = await database.one(db.API_CHANGE_PLAN, {
            "id": sub_id, "plan_code": _text_field(doc, "planCode"),
            "now": clock.now(), "expected_version": expected})
        return _subscription_response(row)

    @_endpoint("/webhooks/payments")
    async def payment_webhook(request: Request) -> Response:
        body = await _read_body(request, MAX_WEBHOOK_BODY)
        # The signature is checked on the raw bytes, before anything is parsed.
        verify_signature(request.headers.get("billing-signature"), body, secrets, wall_clock())
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise ApiError(400, "invalid_json", "the body is not valid JSON (UTF-8)") from None
        fields = _webhook_fields(doc)
        row = await database.one(db.APPLY_GATEWAY_WEBHOOK, {
            **fields, "payload": json.dumps(doc), "now": clock.now()})
        applied = bool(row["applied"])
        return JSONResponse({"received": True, "applied": applied, "duplicate": not applied})

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

    async def healthz(request: Request) -> Response:
        try:
            await asyncio.wait_for(database.one(db.HEALTH), timeout=pool_timeout + 1)
        except (psycopg.Error, PoolTimeout, asyncio.TimeoutError) as exc:
            return JSONResponse({"status": "unavailable", "database": str(exc).strip()[:200]}, status_code=503)
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
        Route("/webhooks/payments", payment_webhook, methods=["POST"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        await database.pool()
        yield
        await database.close()

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error, Exception: unexpected})
    app.state.database = database
    return app


def serve(settings, *, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve until SIGTERM/SIGINT; a SIGTERM ends in a graceful shutdown and exit status 0."""
    import signal

    import uvicorn

    app = create_app(settings)
    log.info("serving the HTTP API", extra={"host": host, "port": port})
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it to the handler that was there
    # before; a no-op one makes a requested stop a clean exit for supervisors.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    uvicorn.run(app, host=host, port=port, log_config=None, access_log=False, proxy_headers=False)


# -- OpenAPI 3.1 description (the fuzzing step reads it) ------------------------------------------

_ERROR = {
    "type": "object", "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "string"}, "message": {"type": "string"}}}},
}
_SUBSCRIPTION = {
    "type": "object",
    "required": ["id", "customerId", "planCode", "status", "currentPeriodStart", "currentPeriodEnd",
                 "cancelAtPeriodEnd", "version"],
    "properties": {
        "id": {"type": "integer", "format": "int64"},
        "customerId": {"type": "integer", "format": "int64"},
        "planCode": {"type": "string"},
        "status": {"type": "string", "enum": ["ACTIVE", "PAST_DUE", "CANCELED"]},
        "currentPeriodStart": {"type": "string", "format": "date-time"},
        "currentPeriodEnd": {"type": "string", "format": "date-time"},
        "cancelAtPeriodEnd": {"type": "boolean"},
        "version": {"type": "integer", "format": "int64"},
    },
}


def _errors(*statuses: int) -> dict:
    text = {400: "Bad input", 404: "Not found", 409: "Conflict", 412: "If-Match does not match the version",
            422: "Invalid input for the billing rules", 503: "Database unavailable"}
    return {str(s): {"description": text[s], "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
            for s in statuses}


def _sub_ok(description: str) -> dict:
    return {"description": description,
            "headers": {"ETag": {"schema": {"type": "string"}, "description": "The version, quoted"}},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Subscription"}}}}


_ID_PARAM = {"name": "id", "in": "path", "required": True,
             "schema": {"type": "integer", "format": "int64", "minimum": 1}}
_IF_MATCH = {"name": "If-Match", "in": "header", "required": False, "schema": {"type": "string"},
             "description": 'The ETag of GET (e.g. "3"): the change applies only to that version, else 412'}

OPENAPI: dict = {
    "openapi": "3.1.0",
    "info": {"title": "billing", "version": "1.0.0",
             "description": "Subscription billing engine: subscriptions, plan changes, cancellation and gateway webhooks."},
    "paths": {
        "/subscriptions": {"post": {
            "operationId": "createSubscription",
            "parameters": [{"name": "Idempotency-Key", "in": "header", "required": True,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x21-\\x7e]+$"}}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False, "required": ["customerId", "planCode"],
                "properties": {"customerId": {"type": "integer", "format": "int64"},
                               "planCode": {"type": "string", "minLength": 1, "maxLength": 100}}}}}},
            "responses": {"201": _sub_ok("Created"), "200": _sub_ok("The key replays an earlier request"),
                          **_errors(400, 409, 422, 503)},
        }},
        "/subscriptions/{id}": {"get": {
            "operationId": "getSubscription", "parameters": [_ID_PARAM],
            "responses": {"200": _sub_ok("The subscription"), **_errors(400, 404, 503)},
        }},
        "/subscriptions/{id}/cancel": {"post": {
            "operationId": "cancelSubscription", "parameters": [_ID_PARAM, _IF_MATCH],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False, "required": ["atPeriodEnd"],
                "properties": {"atPeriodEnd": {"type": "boolean"}}}}}},
            "responses": {"200": _sub_ok("Canceled, or flagged to cancel at period end"),
                          **_errors(400, 404, 409, 412, 422, 503)},
        }},
        "/subscriptions/{id}/change-plan": {"post": {
            "operationId": "changePlan", "parameters": [_ID_PARAM, _IF_MATCH],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "additionalProperties": False, "required": ["planCode"],
                "properties": {"planCode": {"type": "string", "minLength": 1, "maxLength": 100}}}}}},
            "responses": {"200": _sub_ok("The plan was changed (prorated)"),
                          **_errors(400, 404, 409, 412, 422, 503)},
        }},
        "/webhooks/payments": {"post": {
            "operationId": "paymentWebhook",
            "parameters": [{"name": "Billing-Signature", "in": "header", "required": True, "schema": {"type": "string"},
                            "description": "t=<unix seconds>,v1=<hex HMAC-SHA256 of '<t>.<body>'>[,v1=...]"}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["eventId", "idempotencyKey", "status"],
                "properties": {"eventId": {"type": "string"}, "idempotencyKey": {"type": "string"},
                               "status": {"type": "string", "enum": ["succeeded", "declined"]},
                               "id": {"type": ["string", "null"]}, "declineCode": {"type": ["string", "null"]}}}}}},
            "responses": {"200": {"description": "Received; applied false for a duplicate delivery", "content": {
                "application/json": {"schema": {"type": "object", "properties": {
                    "received": {"type": "boolean"}, "applied": {"type": "boolean"}, "duplicate": {"type": "boolean"}}}}}},
                **_errors(400, 404, 422, 503)},
        }},
        "/healthz": {"get": {"operationId": "health", "responses": {
            "200": {"description": "The database answers"}, "503": {"description": "It does not"}}}},
        "/metrics": {"get": {"operationId": "metrics", "responses": {
            "200": {"description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    },
    "components": {"schemas": {"Error": _ERROR, "Subscription": _SUBSCRIPTION}},
}
