"""The providers' interface (billing.providers): what the worker and the API hand a provider and
get back. The provider modules (sim, stripe) import this, never the package."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from billing.gateway.client import (DECLINED, FAILED, NOT_FOUND, SUCCEEDED, UNKNOWN, ChargeResult, LookupFailed,
                                    NotSent, RateLimited, RefundResult)

# What this module offers: its own names and those it hands on from the imports above.
__all__ = ["ChargeRequest", "DECLINED", "FAILED", "Gate", "LookupFailed", "NOT_FOUND", "NotSent", "Provider",
           "RateLimited", "RefundRequest", "SUCCEEDED", "UNKNOWN", "WebhookOutcome", "WebhookRejected"]

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
