"""Input checks of the HTTP API: every value is checked strictly before it reaches PostgreSQL
(types, bigint range, unknown fields, NUL characters...), so bad input is a 4xx with the API's error
body ({"error": {"code", "message"}}), never a 500."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

BIGINT_MAX = 2**63 - 1
MAX_BODY = 64 * 1024
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")  # printable ASCII, no spaces
_ETAG = re.compile(r'^(?:W/)?"?([0-9]{1,30})"?$')


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


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


def bigint_field(doc: dict, name: str) -> int:
    value = doc[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, "invalid_field", f"{name} must be an integer")
    if not -BIGINT_MAX - 1 <= value <= BIGINT_MAX:
        raise ApiError(422, "invalid_input", f"{name} is out of range (a 64-bit signed integer)")
    return value


def text_field(doc: dict, name: str, *, max_len: int = 1000) -> str:
    value = doc[name]
    if not isinstance(value, str):
        raise ApiError(400, "invalid_field", f"{name} must be a string")
    check_text(name, value, max_len)
    return value


def check_text(name: str, value: str, max_len: int) -> None:
    if "\x00" in value:
        raise ApiError(400, "invalid_field", f"{name} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "invalid_field", f"{name} is not valid Unicode (lone surrogate)") from None
    if len(value) > max_len:
        raise ApiError(422, "invalid_input", f"{name} is too long (at most {max_len} characters)")


def int_field(doc: dict, name: str, low: int, high: int) -> int:
    """An integer in [low, high]: 400 when not an integer, 422 when out of range."""
    value = doc[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, "invalid_field", f"{name} must be an integer")
    if not low <= value <= high:
        raise ApiError(422, "invalid_input", f"{name} must be between {low} and {high}")
    return value


def instant_field(doc: dict, name: str) -> datetime:
    """An ISO 8601 instant with its offset (e.g. 2026-09-01T00:00:00Z)."""
    value = doc[name]
    if not isinstance(value, str) or len(value) > 40:
        raise ApiError(400, "invalid_field", f"{name} must be an ISO 8601 instant such as 2026-09-01T00:00:00Z")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        raise ApiError(400, "invalid_field", f"{name} must be an ISO 8601 instant such as 2026-09-01T00:00:00Z") from None
    if parsed.tzinfo is None:
        raise ApiError(400, "invalid_field", f"{name} needs its offset (Z or +hh:mm)")
    return parsed


def bool_field(doc: dict, name: str) -> bool:
    value = doc[name]
    if not isinstance(value, bool):
        raise ApiError(400, "invalid_field", f"{name} must be true or false")
    return value


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
    }


def subscription_response(row: dict | None, status: int = 200, headers: dict | None = None) -> JSONResponse:
    if row is None or row.get("id") is None:
        raise ApiError(404, "not_found", "no such subscription")
    headers = {"ETag": f'"{row["version"]}"', **(headers or {})}
    return JSONResponse(subscription_json(row), status_code=status, headers=headers)
