"""Webhook signatures, the one scheme every webhook of this house uses, both ways.

`<Header>: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` (Stripe's scheme, under two
header names):

* `Billing-Signature`: the payment simulator signs its results to /webhooks/payments
  (billing.gateway.simulator), the API verifies them (billing.providers.sim.SimProvider.parse_webhook);
  the webhook worker signs the events it delivers to the operator's endpoints (billing.worker.webhooks).
* `Stripe-Signature`: Stripe signs, billing.providers.stripe verifies (and its tests sign).

Verification: one of the header's `v1` values must match one of the configured secrets (several
during a rotation), compared in constant time (no early exit across secrets or candidates either),
with `t` within `tolerance` seconds of `now` either way (a replay later than that is refused).

The house's other keyed digests live here too, each once: the stored form of a secret token (API
keys, customer sessions, console and portal sessions, portal links: `token_hash`, SHA-256 of the
whole token; only that is stored, the SQL API compares it) and the CSRF token of a browser session
(console, portal: `csrf_token`, an HMAC of the form's purpose under the session's token), compared
in constant time (`same`).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass

SIGNATURE_TOLERANCE = 300  # seconds, both ways


@dataclass(frozen=True)
class Scheme:
    header: str  # the header's name, as the messages say it
    what: str  # what is refused when no secret is configured
    setting: str  # the environment variable that configures the secrets


BILLING = Scheme("Billing-Signature", "webhooks", "BILLING_WEBHOOK_SECRET")
STRIPE = Scheme("Stripe-Signature", "Stripe webhooks", "BILLING_STRIPE_WEBHOOK_SECRET")


class SignatureError(ValueError):
    """The signature does not hold (missing, malformed, stale, or no match): the message says which."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def token_hash(token: str) -> bytes:
    """The stored form of a secret token: the SHA-256 of its UTF-8 bytes (the token itself is never stored)."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def csrf_token(session_token: str, purpose: str) -> str:
    """The CSRF token of a browser session's forms: hex HMAC-SHA256 of `purpose` under the session's token."""
    return hmac.new(session_token.encode("utf-8"), purpose.encode("utf-8"), hashlib.sha256).hexdigest()


def same(sent: str, expected: str) -> bool:
    """`sent == expected` in constant time (any text: compared as UTF-8 bytes)."""
    return hmac.compare_digest(sent.encode("utf-8"), expected.encode("utf-8"))


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The `v1` signature: hex HMAC-SHA256 of "<t>.<body>"."""
    return hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def signature_header(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The header's value: `t=<unix>,v1=<signature>` (now, unless `timestamp`)."""
    ts = int(time.time()) if timestamp is None else timestamp
    return f"t={ts},v1={sign(secret, ts, body)}"


def verify(header: str | None, body: bytes, secrets: list[str], now: float, *, scheme: Scheme = BILLING,
           tolerance: int = SIGNATURE_TOLERANCE) -> None:
    """Raises SignatureError unless one `v1` of `header` is a valid signature of `body` by one of
    `secrets`, timestamped within `tolerance` seconds of `now` (either way)."""
    name = scheme.header
    if not secrets:
        raise SignatureError(f"{scheme.what} are disabled: no {scheme.setting} is configured")
    if not header:
        raise SignatureError(f"missing {name} header")
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            continue
        if key == "t":
            if not value.isascii() or not value.isdigit() or len(value) > 12:
                raise SignatureError(f"{name} t= must be a unix time in seconds")
            timestamp = int(value)
        elif key == "v1":
            candidates.append(value.strip())
    if timestamp is None or not candidates:
        raise SignatureError(f"{name} must be t=<unix time>,v1=<hex signature>")
    if abs(now - timestamp) > tolerance:
        raise SignatureError(f"{name} timestamp is more than {tolerance} s away from this server's clock")
    matched = False
    for secret in secrets:
        expected = sign(secret, timestamp, body).encode()
        for candidate in candidates:
            # compare_digest on bytes of any length; no early exit across candidates either.
            matched |= hmac.compare_digest(expected, candidate.encode("ascii", "replace"))
    if not matched:
        raise SignatureError(f"no {name} v1 matches the body")
