"""The simulator's protocol (docs/gateway.md) as a provider: `BILLING_GATEWAY_PROVIDER=sim`, the default.

| the simulator says | the SQL API gets |
|---|---|
| charge 200 `succeeded` | SUCCEEDED, reference = id |
| charge 200 `declined`, declineCode C | DECLINED, reason C, hard when C is in `HARD_DECLINES` |
| 429 | nothing: RateLimited, the same key again after the limiter |
| 5xx, timeout, connection error, 400/409 | UNKNOWN (400/409 logged) |
| refund 200 `succeeded` / `failed` | SUCCEEDED / FAILED |
| refund 4xx | FAILED (logged) |
| refund look-up 200 / 404 (`GET /v1/refunds?idempotencyKey=`) | its outcome / NOT_FOUND (a new key) |
| webhook `charge.succeeded` / `charge.declined` (Billing-Signature) | apply_gateway_webhook |

A customer without a recorded payment method is charged by customer id (the simulator's protocol
has nothing else); with a method, its reference goes along as `paymentMethod`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from billing.gateway.client import DECLINED, ChargeResult, GatewayClient, RefundResult
from billing.providers import ChargeRequest, Gate, RefundRequest, WebhookOutcome, WebhookRejected

# The simulator speaks Stripe's decline codes; those that mean "this card will not work".
from billing.providers.stripe import HARD_DECLINES


class SimProvider:
    name = "sim"
    webhook_path = "/webhooks/payments"

    def __init__(self, client: GatewayClient, *, webhook_secrets: list[str] | None = None) -> None:
        self.client = client
        self.webhook_secrets = webhook_secrets or []

    @classmethod
    def from_settings(cls, settings, *, timeout: float) -> "SimProvider":
        return cls(GatewayClient(settings.gateway_url, timeout=timeout),
                   webhook_secrets=[s for s in (settings.webhook_secret or "").split(",") if s])

    @property
    def timeout(self) -> float:
        return self.client.timeout

    async def charge(self, request: ChargeRequest, *, gate: Gate | None = None) -> ChargeResult:
        result = await self.client.charge(request.idempotency_key, request.customer_id, request.amount,
                                          request.currency, gate=gate, payment_method=request.payment_method_ref)
        return classify(result)

    async def refund(self, request: RefundRequest, *, gate: Gate | None = None) -> RefundResult:
        return await self.client.refund(request.idempotency_key, request.charge_key, request.amount, gate=gate)

    async def lookup(self, idempotency_key: str, *, customer_ref: str | None = None,
                     since: float | None = None) -> ChargeResult | None:
        found = await self.client.lookup(idempotency_key)
        return None if found is None else classify(found)

    async def lookup_refund(self, request: RefundRequest) -> RefundResult | None:
        return await self.client.lookup_refund(request.idempotency_key)

    def parse_webhook(self, headers: Mapping[str, str], body: bytes, now: float) -> list[WebhookOutcome]:
        from billing.api.validation import ApiError
        from billing.api.webhooks import verify_signature, webhook_fields

        try:
            verify_signature(headers.get("billing-signature"), body, self.webhook_secrets, now)
            try:
                doc = json.loads(body)
            except (ValueError, RecursionError):
                raise ApiError(400, "invalid_json", "the body is not valid JSON (UTF-8)") from None
            fields = webhook_fields(doc)
        except ApiError as exc:
            raise WebhookRejected(exc.message, status=exc.status, code=exc.code) from None
        code = doc.get("declineCode")
        return [WebhookOutcome("charge", fields["event_id"], fields["key"], fields["outcome"], fields["reference"],
                               code, fields["outcome"] == DECLINED and is_hard(code), doc)]

    async def close(self) -> None:
        await self.client.close()


def is_hard(code: str | None) -> bool:
    return bool(code) and code in HARD_DECLINES


def classify(result: ChargeResult) -> ChargeResult:
    """A decline whose code says the card will not work is hard."""
    if result.outcome == DECLINED and is_hard(result.reason):
        return ChargeResult(result.outcome, result.reference, result.reason, hard_decline=True)
    return result
