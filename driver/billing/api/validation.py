"""Input checks of the HTTP API (the request: body, path, headers, query; the fields: billing.fields): every value is checked strictly before it reaches PostgreSQL
(types, bigint range, unknown fields, NUL characters...), so bad input is a 4xx with the API's error
body ({"error": {"code", "message"}}), never a 500."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

# The checks of a JSON document's fields, shared with the providers' webhook parsers (an
# ApiError is a billing.fields.InputError): billing.fields.
from billing.fields import (BIGINT_MAX, InputError, bigint_field, bool_field, check_text, instant_field,  # noqa: F401
                            int_field, text_field)

# What this module offers: its own names and those it hands on from the imports above.
__all__ = ["ApiError", "IDEMPOTENCY_KEY", "MAX_BODY", "bigint_field", "bool_field", "error_response",
           "if_match", "instant_field", "int_field", "iso_utc", "json_object", "path_id", "query_int",
           "query_text", "read_body", "subscription_json", "subscription_response", "text_field"]

ApiError = InputError

MAX_BODY = 64 * 1024
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")  # printable ASCII, no spaces
_ETAG = re.compile(r'^(?:W/)?"?([0-9]{1,30})"?$')


def error_response(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


# -- input checks ----------------------------------------------------------------------------


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing it as soon as it passes `limit` bytes (never buffers a huge one)."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, "payload_too_large", f"the body must be at most {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        # The client went away, or the server closed a body that arrived too slowly.
        raise ApiError(400, "incomplete_body", "the connection closed before the whole body arrived") from None
    return b"".join(chunks)


async def json_object(request: Request, *, allowed: set[str], required: set[str], optional_body: bool = False) -> dict:
    body = await read_body(request, MAX_BODY)
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


def path_id(request: Request, what: str = "subscription") -> int:
    raw = request.path_params["id"]
    if not raw.isascii() or not raw.isdigit():
        raise ApiError(400, "invalid_id", f"the {what} id must be a positive integer")
    value = int(raw)
    if value < 1 or value > BIGINT_MAX:
        raise ApiError(404, "not_found", f"{what} {raw[:40]} does not exist")
    return value


def if_match(request: Request) -> int | None:
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


def query_int(params, name: str, low: int, high: int) -> int | None:
    """An optional integer query parameter in [low, high]; 400 otherwise."""
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 19 or not low <= int(raw) <= high:
        raise ApiError(400, "invalid_query", f"{name} must be an integer from {low} to {high}")
    return int(raw)


def query_text(params, name: str, max_len: int = 200) -> str | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    check_text(name, raw, max_len)
    return raw


def iso_utc(value: datetime | None) -> str | None:
    return _iso(value)


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
        "quantity": row["quantity"],
        "trialEnd": _iso(row["trial_end"]),
        "pausedAt": _iso(row["paused_at"]) if row["status"] == "PAUSED" else None,
        "resumeAt": _iso(row["resume_at"]),
        "scheduledPlanCode": row.get("scheduled_plan_code"),
        "couponCode": row["coupon_code"],
        "externalId": row.get("external_id"),
    }


def subscription_response(row: dict | None, status: int = 200, headers: dict | None = None) -> JSONResponse:
    if row is None or row.get("id") is None:
        raise ApiError(404, "not_found", "no such subscription")
    headers = {"ETag": f'"{row["version"]}"', **(headers or {})}
    return JSONResponse(subscription_json(row), status_code=status, headers=headers)
