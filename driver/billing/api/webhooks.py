"""Gateway webhooks: the `v1` signature (HMAC-SHA256 of "<t>.<body>") and the body's fields."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from billing.api.validation import ApiError, check_text, text_field

MAX_WEBHOOK_BODY = 256 * 1024
SIGNATURE_TOLERANCE = 300  # seconds, both ways


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The `v1` signature: hex HMAC-SHA256 of "<t>.<body>" (what the gateway sends)."""
    return hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


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


def webhook_fields(doc: Any) -> dict:
    if not isinstance(doc, dict):
        raise ApiError(400, "invalid_json", "the webhook body must be a JSON object")
    for name in ("eventId", "idempotencyKey", "status"):
        if name not in doc:
            raise ApiError(400, "missing_field", f"missing field: {name}")
    event_id = text_field(doc, "eventId", max_len=255)
    key = text_field(doc, "idempotencyKey", max_len=255)
    status = doc["status"]
    if status not in _OUTCOMES:
        raise ApiError(422, "invalid_input", "status must be succeeded or declined")
    reference = doc.get("id")
    if reference is not None and not isinstance(reference, str):
        raise ApiError(400, "invalid_field", "id must be a string")
    if reference is not None:
        check_text("id", reference, 255)
    return {"event_id": event_id, "key": key, "outcome": _OUTCOMES[status], "reference": reference}
