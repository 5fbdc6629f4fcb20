"""/webhooks/payments (the simulator's signed results) and /webhooks/stripe (Stripe-Signature):
the gateways' webhooks, public and authenticated by their signature (docs/gateway.md,
docs/providers.md). Each outcome goes to the SQL API: charges through apply_gateway_webhook
(stored once per event id), refunds through apply_refund_webhook (bound to their refund)."""

from __future__ import annotations

import json
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.api.context import Api
from billing.api.errors import endpoint_of
from billing.api.validation import ApiError, read_body
from billing.metrics import REFUND_REVIEWS, WEBHOOKS_FOR_REVIEW
from billing.providers import LookupFailed, Provider, SimProvider, StripeProvider, WebhookOutcome, WebhookRejected

log = logging.getLogger("billing.api")

MAX_WEBHOOK_BODY = 256 * 1024


def routes(api: Api) -> list[BaseRoute]:
    database, clock, settings, wall_clock = api.database, api.clock, api.settings, api.wall_clock
    # Each gateway's webhooks are verified and read by its provider (billing.providers, signatures:
    # billing.signing). The simulator's with BILLING_WEBHOOK_SECRET; Stripe's with
    # BILLING_STRIPE_WEBHOOK_SECRET, and (with BILLING_STRIPE_API_KEY) the reading of a charge's
    # refunds that a charge.refunded event does not list. Without its secret, every webhook of a
    # gateway is refused.
    sim = SimProvider.from_settings(settings, timeout=settings.gateway_timeout_seconds)
    stripe_parser = StripeProvider(settings.stripe_api_key or "", api_base=settings.stripe_api_base,
                                   webhook_secrets=[x for x in (settings.stripe_webhook_secret or "").split(",") if x])
    api.stripe = stripe_parser  # closed by the app's lifespan (a test without it closes it itself)
    api.sim = sim
    api.closers.extend([sim.close, stripe_parser.close])

    async def parse(provider: Provider, request: Request) -> list[WebhookOutcome]:
        body = await read_body(request, MAX_WEBHOOK_BODY)
        try:
            return provider.parse_webhook(request.headers, body, wall_clock())
        except WebhookRejected as exc:
            raise ApiError(exc.status, exc.code, exc.message) from None

    async def apply(outcome: WebhookOutcome) -> str:
        """One outcome to the SQL API: APPLIED, DUPLICATE or REVIEW for a charge; REFUND (applied or
        settled already), REVIEW or RECHECK for a refund."""
        if outcome.kind != "charge":
            # Bound to the refund its key names: its refund id (once known), amount, currency and
            # charge must all be given and match, and a failure after success is only looked up by
            # the worker (billing.apply_refund_webhook; issue 27, finding 1).
            p = outcome.payload or {}
            row = await database.mutate("gateway-webhook", db.APPLY_REFUND_WEBHOOK, {
                "event_id": outcome.event_id, "key": outcome.idempotency_key, "outcome": outcome.outcome,
                "refund_id": p.get("refundId"), "amount": p.get("amount"), "currency": p.get("currency"),
                "charge": p.get("charge"), "reason": outcome.reason, "now": clock.now()})
            if row["outcome"] in ("REVIEW", "RECHECK"):
                REFUND_REVIEWS.labels(outcome=row["outcome"]).inc()
                log.warning("refund event not applied", extra={"eventId": outcome.event_id,
                                                              "key": outcome.idempotency_key, "outcome": row["outcome"]})
            return "REFUND" if row["outcome"] in ("APPLIED", "DUPLICATE") else row["outcome"]
        row = await database.mutate("gateway-webhook", db.APPLY_GATEWAY_WEBHOOK, {
            "event_id": outcome.event_id, "key": outcome.idempotency_key, "outcome": outcome.outcome,
            "reference": outcome.reference, "payload": json.dumps(outcome.payload), "now": clock.now(),
            "hard_decline": outcome.hard_decline})
        if row["outcome"] == "REVIEW":
            # Kept, not applied: a success that is not the charge we asked for (docs/gateway.md).
            WEBHOOKS_FOR_REVIEW.inc()
            log.warning("webhook kept for review", extra={"eventId": outcome.event_id, "key": outcome.idempotency_key})
        return row["outcome"]

    @endpoint_of("/webhooks/payments")
    async def payment_webhook(request: Request) -> Response:
        (outcome,) = await parse(sim, request)
        applied = await apply(outcome)
        return JSONResponse({"received": True, "applied": applied == "APPLIED", "duplicate": applied == "DUPLICATE",
                             "review": applied == "REVIEW"})

    @endpoint_of("/webhooks/stripe")
    async def stripe_webhook(request: Request) -> Response:
        # Events we do not act on are acknowledged (no outcome).
        outcomes = await parse(stripe_parser, request)
        if any(o.kind == "refund_lookup" for o in outcomes):
            # A charge.refunded without its refunds: read from Stripe (with the API key), or left to
            # the worker's look-ups when this API has none.
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
        return JSONResponse({"received": True, "outcomes": [await apply(o) for o in outcomes]})

    return [
        Route("/webhooks/payments", payment_webhook, methods=["POST"]),
        Route("/webhooks/stripe", stripe_webhook, methods=["POST"]),
    ]
