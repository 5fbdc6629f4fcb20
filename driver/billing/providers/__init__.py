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

from billing.providers.base import (DECLINED, FAILED, NOT_FOUND, SUCCEEDED, UNKNOWN, ChargeRequest, ChargeResult,
                                    Gate, LookupFailed, NotSent, Provider, RateLimited, RefundRequest, RefundResult,
                                    WebhookOutcome, WebhookRejected)
from billing.providers.sim import SimProvider
from billing.providers.stripe import StripeProvider

__all__ = ["DECLINED", "FAILED", "NOT_FOUND", "PROVIDERS", "SUCCEEDED", "UNKNOWN", "ChargeRequest", "ChargeResult",
           "Gate", "LookupFailed", "NotSent", "Provider", "RateLimited", "RefundRequest", "RefundResult",
           "SimProvider", "StripeProvider", "WebhookOutcome", "WebhookRejected", "provider_from_settings"]

PROVIDERS = ("sim", "stripe")


def provider_from_settings(settings, *, timeout: float | None = None) -> Provider:
    """The provider BILLING_GATEWAY_PROVIDER names, configured from the settings."""
    timeout = timeout if timeout is not None else settings.gateway_timeout_seconds
    name = settings.gateway_provider
    if name == "sim":
        return SimProvider.from_settings(settings, timeout=timeout)
    if name == "stripe":
        return StripeProvider.from_settings(settings, timeout=timeout)
    raise ValueError(f"BILLING_GATEWAY_PROVIDER must be one of {', '.join(PROVIDERS)}, got {name!r}")
