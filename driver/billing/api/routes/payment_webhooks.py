"""/webhooks/payments (the simulator's signed results) and /webhooks/stripe (Stripe-Signature):
the gateways' webhooks, public and authenticated by their signature (docs/gateway.md,
docs/providers.md). Each outcome goes to the SQL API: charges through apply_gateway_webhook
(stored once per event id), refunds through record_refund_result (idempotent)."""

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
from billing.api.webhooks import MAX_WEBHOOK_BODY, verify_signature, webhook_fields
from billing.metrics import WEBHOOKS_FOR_REVIEW
from billing.providers import LookupFailed, WebhookRejected
from billing.providers.sim import is_hard
from billing.providers.stripe import StripeProvider

log = logging.getLogger("billing.api")


def routes(api: Api) -> list[BaseRoute]:
    database, clock, settings, wall_clock = api.database, api.clock, api.settings, api.wall_clock
    secrets = [s for s in (settings.webhook_secret or "").split(",") if s]
    # Its webhook verifier, and (with BILLING_STRIPE_API_KEY) the reading of a charge's refunds that
    # a charge.refunded event does not list; without BILLING_STRIPE_WEBHOOK_SECRET every Stripe
    # webhook is refused.
    stripe_parser = StripeProvider(settings.stripe_api_key or "", api_base=settings.stripe_api_base,
                                   webhook_secrets=[x for x in (settings.stripe_webhook_secret or "").split(",") if x])
    api.stripe = stripe_parser  # closed by the app's lifespan (a test without it closes it itself)
    api.closers.append(stripe_parser.close)

    @endpoint_of("/webhooks/payments")
    async def payment_webhook(request: Request) -> Response:
        body = await read_body(request, MAX_WEBHOOK_BODY)
        # The signature is checked on the raw bytes, before anything is parsed.
        verify_signature(request.headers.get("billing-signature"), body, secrets, wall_clock())
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise ApiError(400, "invalid_json", "the body is not valid JSON (UTF-8)") from None
        fields = webhook_fields(doc)
        row = await database.mutate("gateway-webhook", db.APPLY_GATEWAY_WEBHOOK, {
            **fields, "payload": json.dumps(doc), "now": clock.now(),
            "hard_decline": fields["outcome"] == "DECLINED" and is_hard(doc.get("declineCode"))})
        outcome = row["outcome"]
        if outcome == "REVIEW":
            # Kept, not applied: a success that is not the charge we asked for (docs/gateway.md).
            WEBHOOKS_FOR_REVIEW.inc()
            log.warning("webhook kept for review", extra={"eventId": fields["event_id"], "key": fields["key"]})
        return JSONResponse({"received": True, "applied": outcome == "APPLIED", "duplicate": outcome == "DUPLICATE",
                             "review": outcome == "REVIEW"})

    @endpoint_of("/webhooks/stripe")
    async def stripe_webhook(request: Request) -> Response:
        # Verified with the Stripe-Signature scheme on the raw bytes, then each outcome goes to the
        # SQL API. Events we do not act on are acknowledged.
        body = await read_body(request, MAX_WEBHOOK_BODY)
        try:
            outcomes = stripe_parser.parse_webhook(request.headers, body, wall_clock())
        except WebhookRejected as exc:
            raise ApiError(exc.status, exc.code, exc.message) from None
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
        applied = []
        for o in outcomes:
            if o.kind == "charge":
                row = await database.mutate("gateway-webhook", db.APPLY_GATEWAY_WEBHOOK, {
                    "event_id": o.event_id, "key": o.idempotency_key, "outcome": o.outcome, "reference": o.reference,
                    "payload": json.dumps(o.payload), "now": clock.now(), "hard_decline": o.hard_decline})
                applied.append(row["outcome"])
                if row["outcome"] == "REVIEW":
                    WEBHOOKS_FOR_REVIEW.inc()
                    log.warning("webhook kept for review", extra={"eventId": o.event_id, "key": o.idempotency_key})
            else:
                await database.mutate("gateway-webhook", db.RECORD_REFUND_RESULT, {
                    "key": o.idempotency_key, "outcome": o.outcome, "reference": o.reference, "reason": o.reason,
                    "now": clock.now()})
                applied.append("REFUND")
        return JSONResponse({"received": True, "outcomes": applied})

    return [
        Route("/webhooks/payments", payment_webhook, methods=["POST"]),
        Route("/webhooks/stripe", stripe_webhook, methods=["POST"]),
    ]
