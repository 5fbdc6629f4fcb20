"""Prometheus metrics shared by the worker and the HTTP API (one registry per process)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RENEWALS = Counter("billing_renewals_total", "Subscriptions handled by create_due_invoices")
RENEWAL_BATCHES = Counter("billing_renewal_batches_total", "create_due_invoices calls that handled rows")
CHARGES = Counter("billing_charges_total", "Gateway charge calls by outcome", ["outcome"])
# outcome: SUCCEEDED | DECLINED | UNKNOWN | RATE_LIMITED
GATEWAY_LATENCY = Histogram(
    "billing_gateway_latency_seconds", "Gateway charge call latency",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0),
)
CHARGES_IN_FLIGHT = Gauge("billing_charges_in_flight", "Gateway calls in flight in this process")
LIMITER_WAIT = Histogram(
    "billing_limiter_wait_seconds", "Time spent waiting for a rate-limit slot",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
LIMITER_PAUSES = Counter("billing_limiter_pauses_total", "Times charging paused because the limiter was unreachable")
LIMITER_PAUSED = Gauge("billing_limiter_paused", "1 while charging is paused (limiter unreachable)")
LIMITER_LATE_DROPS = Counter(
    "billing_limiter_late_drops_total", "Rate-limit grants given back: the round trip was too slow to be sure the call stays in the window"
)
LIMITER_REFUSALS = Counter(
    "billing_limiter_refusals_total", "Paced callers refused by the sliding window (they queue again)"
)
CHARGES_ABANDONED = Counter(
    "billing_charges_abandoned_total", "Claimed invoices left for their lease to expire (lease nearly over, shutdown)"
)
OUTBOX_PUBLISHED = Counter("billing_outbox_published_total", "Events acknowledged by Kafka and marked published")
OUTBOX_FAILED = Counter("billing_outbox_failed_total", "Events whose delivery failed")
OUTBOX_BACKLOG = Gauge("billing_outbox_backlog", "Unpublished outbox events")
OUTBOX_OLDEST_AGE = Gauge("billing_outbox_oldest_age_seconds", "Age of the oldest unpublished outbox event")
OUTBOX_DEAD = Gauge("billing_outbox_dead", "Outbox events given up on (DEAD)")
RELAY_ACTIVE = Gauge("billing_relay_active", "1 while this process holds the relay's advisory lock")
WEBHOOKS_FOR_REVIEW = Counter(
    "billing_webhooks_review_total",
    "Successful gateway webhooks kept unapplied because their amount, currency or customer disagree with the attempt",
)
KEY_LOOKUPS = Counter("billing_gateway_key_lookups_total", "Idempotency-key status lookups at the gateway by answer",
                      ["answer"])  # answer: FOUND | NOT_FOUND | FAILED
HTTP_REQUESTS = Counter("billing_http_requests_total", "HTTP API requests", ["route", "status"])
# Issue 27 (docs/security.md): failed authentications (never the secret), refund events held for
# review, requests refused for their cost or their address.
AUTH_FAILURES = Counter("billing_auth_failures_total", "Failed authentications (API key or console login) by reason",
                        ["reason"])  # reason: missing | malformed | unknown | wrong_secret | throttled
REFUND_REVIEWS = Counter("billing_refund_reviews_total",
                         "Provider refund events not applied: another refund's, incomplete, or a failure after success",
                         ["outcome"])  # outcome: REVIEW | RECHECK
COST_REFUSALS = Counter("billing_http_cost_refusals_total", "Requests refused (429) by the cost-aware limits",
                        ["limit"])  # limit: key | address
