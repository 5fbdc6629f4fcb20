"""The simulator's protocol (docs/gateway.md) as a provider: `BILLING_GATEWAY_PROVIDER=sim`, the default.

| the simulator says | the SQL API gets |
|---|---|
| charge 200 `succeeded` | SUCCEEDED, reference = id |
| charge 200 `declined`, declineCode C | DECLINED, reason C, hard when C is in `HARD_DECLINES` |
| 429 | nothing: RateLimited, the same key again after the limiter |
| 5xx, timeout, connection error, 400 | UNKNOWN (400 logged) |
| 409 `idempotency_conflict` | UNKNOWN with `key_conflict` (logged): the charger looks the key up at once |
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

from billing import signing
from billing.fields import InputError, check_text, text_field
from billing.gateway.client import DECLINED, ChargeResult, GatewayClient, LookupFailed, RefundResult
from billing.providers.base import ChargeRequest, Gate, RefundRequest, WebhookOutcome, WebhookRejected

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

    # -- the customer's authentication (3-D Secure), on session, from the portal ----------------
    # The simulator's page (docs/gateway.md), in the shapes of billing.portal.payments (Stripe's).

    async def confirm_intent(self, intent_id: str, *, return_url: str, key: str) -> dict:
        """Confirm a charge that waits for authentication: `requires_action` with the simulator's
        page in `next_action.redirect_to_url.url`, or the charge's status ("succeeded", ...)."""
        from urllib.parse import quote

        session = self.client._get_session()
        async with session.post(f"{self.client.base_url}/v1/charges/{quote(intent_id)}/confirm",
                                json={"returnUrl": return_url}, headers={"Idempotency-Key": key}) as resp:
            doc = await resp.json(content_type=None)
        if not isinstance(doc, dict) or resp.status != 200:
            return {"status": "error", "error": doc}
        url = (doc.get("nextAction") or {}).get("redirectUrl")
        if doc.get("status") == "requires_action" and url:
            return {"status": "requires_action", "next_action": {"type": "redirect_to_url",
                                                                 "redirect_to_url": {"url": url}}}
        return {"status": doc.get("status")}

    async def retrieve_intent(self, intent_id: str) -> dict:
        """The charge as the simulator has it now: status, amount, currency."""
        from urllib.parse import quote

        session = self.client._get_session()
        async with session.get(f"{self.client.base_url}/v1/charges/{quote(intent_id)}") as resp:
            doc = await resp.json(content_type=None)
            if resp.status != 200 or not isinstance(doc, dict):
                raise LookupFailed(f"charge {intent_id}: {resp.status}", resp.status)
        return {"status": doc.get("status"), "amount": doc.get("amount"), "currency": doc.get("currency")}

    def parse_webhook(self, headers: Mapping[str, str], body: bytes, now: float) -> list[WebhookOutcome]:
        """The simulator's signed result (Billing-Signature, billing.signing), checked on the raw
        bytes before anything is parsed; WebhookRejected (with its HTTP status and code) otherwise."""
        try:
            signing.verify(headers.get("billing-signature"), body, self.webhook_secrets, now, scheme=signing.BILLING)
        except signing.SignatureError as exc:
            raise WebhookRejected(exc.message) from None
        try:
            try:
                doc = json.loads(body)
            except (ValueError, RecursionError):
                raise InputError(400, "invalid_json", "the body is not valid JSON (UTF-8)") from None
            fields = webhook_fields(doc)
        except InputError as exc:
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


_OUTCOMES = {"succeeded": "SUCCEEDED", "declined": "DECLINED"}


def webhook_fields(doc) -> dict:
    """The SQL API's fields of the simulator's webhook body (docs/gateway.md); InputError otherwise."""
    if not isinstance(doc, dict):
        raise InputError(400, "invalid_json", "the webhook body must be a JSON object")
    for name in ("eventId", "idempotencyKey", "status"):
        if name not in doc:
            raise InputError(400, "missing_field", f"missing field: {name}")
    event_id = text_field(doc, "eventId", max_len=255)
    key = text_field(doc, "idempotencyKey", max_len=255)
    status = doc["status"]
    if status not in _OUTCOMES:
        raise InputError(422, "invalid_input", "status must be succeeded or declined")
    reference = doc.get("id")
    if reference is not None and not isinstance(reference, str):
        raise InputError(400, "invalid_field", "id must be a string")
    if reference is not None:
        check_text("id", reference, 255)
    return {"event_id": event_id, "key": key, "outcome": _OUTCOMES[status], "reference": reference}
