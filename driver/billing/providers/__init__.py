"""Payment providers behind one interface (docs/providers.md).

A provider charges with an idempotency key, refunds with an idempotency key, looks a charge up by
its key, and verifies and parses its webhooks into the SQL API's outcomes. The worker and the API
use nothing else of it, so adding a provider is one new module (a class with the methods of
`Provider`, registered in `PROVIDERS`) and its tests.

    provider = provider_from_settings(settings, timeout=8.0)   # BILLING_GATEWAY_PROVIDER: sim | stripe
    result = await provider.charge(ChargeRequest(...), gate=...)   # ChargeResult; RateLimited on 429
    result = await provider.refund(RefundRequest(...), gate=...)   # RefundResult; RateLimited on 429
    found = await provider.lookup(key, customer_ref=..., since=...)  # ChargeResult | None; LookupFailed
    found = await provider.lookup_refund(RefundRequest(...))          # RefundResult | None; LookupFailed
    outcomes = provider.parse_webhook(headers, body, now)          # [WebhookOutcome]; WebhookRejected

Every call is made outside any transaction, after the rate limiter granted it (`gate`: the
limiter's last go-ahead, awaited right before the request's bytes go out; NotSent when it says
no). Outcomes: SUCCEEDED, DECLINED (with the decline code and whether it is hard: retrying the same
method is pointless), UNKNOWN (timeouts, 5xx, connection errors, idempotency errors: the same key
is retried, and the provider's idempotency turns the retry into the first call's answer).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from billing.gateway.client import (DECLINED, FAILED, NOT_FOUND, SUCCEEDED, UNKNOWN, ChargeResult, LookupFailed,
                                    NotSent, RateLimited, RefundResult)

__all__ = ["DECLINED", "FAILED", "NOT_FOUND", "PROVIDERS", "SUCCEEDED", "UNKNOWN", "ChargeRequest", "ChargeResult",
           "LookupFailed", "NotSent", "Provider", "RateLimited", "RefundRequest", "RefundResult", "WebhookOutcome",
           "WebhookRejected", "provider_from_settings"]

Gate = Callable[[], Awaitable[bool]]


@dataclass(frozen=True)
class ChargeRequest:
    """One try of an invoice, as claim_charges handed it over."""

    idempotency_key: str  # <namespace>-inv-<invoice id>-try-<n>
    invoice_id: int
    customer_id: int
    amount: int  # smallest currency unit
    currency: str  # ISO 4217, upper case
    customer_ref: str | None = None  # the provider's customer (Stripe cus_...)
    payment_method_ref: str | None = None  # the provider's payment method (Stripe pm_...)


@dataclass(frozen=True)
class RefundRequest:
    """One refund, as claim_refunds handed it over."""

    idempotency_key: str  # <namespace>-ref-<refund id>
    refund_id: int
    invoice_id: int
    customer_id: int
    amount: int
    currency: str
    charge_reference: str | None  # the provider's id of the charge (Stripe payment intent)
    charge_key: str  # the idempotency key the charge was made with
    lookup: bool = False  # fate unknown near or past the key's end: ask the provider, never send it again


@dataclass(frozen=True)
class WebhookOutcome:
    """What one verified webhook says, in the SQL API's terms.

    kind "charge": apply_gateway_webhook(event_id, idempotency_key, outcome, reference, payload,
    hard_decline); `payload` carries the fields the SQL API compares with the attempt (amount,
    currency, customerId; all three required for a success to be applied) and declineCode. kind
    "refund": apply_refund_webhook(event_id, idempotency_key, outcome, payload refundId, amount,
    currency, charge, reason): applied only when they match the refund the key names."""

    kind: str  # charge | refund
    event_id: str
    idempotency_key: str
    outcome: str
    reference: str | None = None
    reason: str | None = None
    hard_decline: bool = False
    payload: dict = field(default_factory=dict)


class WebhookRejected(Exception):
    """The webhook is not to be trusted or read (bad signature, stale timestamp, malformed body)."""

    def __init__(self, message: str, *, status: int = 400, code: str = "invalid_signature") -> None:
        super().__init__(message)
        self.message, self.status, self.code = message, status, code


class Provider(Protocol):
    name: str  # claim_charges' p_provider and payment_method.provider
    timeout: float  # seconds a call may take at most (inside the lease)
    webhook_path: str  # where the API receives its webhooks

    async def charge(self, request: ChargeRequest, *, gate: Gate | None = None) -> ChargeResult: ...

    async def refund(self, request: RefundRequest, *, gate: Gate | None = None) -> RefundResult: ...

    async def lookup(self, idempotency_key: str, *, customer_ref: str | None = None,
                     since: float | None = None) -> ChargeResult | None: ...

    async def lookup_refund(self, request: RefundRequest) -> RefundResult | None: ...

    def parse_webhook(self, headers: Mapping[str, str], body: bytes, now: float) -> list[WebhookOutcome]: ...

    async def close(self) -> None: ...


PROVIDERS = ("sim", "stripe")


def provider_from_settings(settings, *, timeout: float | None = None) -> Provider:
    """The provider BILLING_GATEWAY_PROVIDER names, configured from the settings."""
    timeout = timeout if timeout is not None else settings.gateway_timeout_seconds
    name = settings.gateway_provider
    if name == "sim":
        from billing.providers.sim import SimProvider

        return SimProvider.from_settings(settings, timeout=timeout)
    if name == "stripe":
        from billing.providers.stripe import StripeProvider

        return StripeProvider.from_settings(settings, timeout=timeout)
    raise ValueError(f"BILLING_GATEWAY_PROVIDER must be one of {', '.join(PROVIDERS)}, got {name!r}")
