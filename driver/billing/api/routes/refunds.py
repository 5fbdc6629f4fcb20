"""/invoices/{id}/refunds: refund an invoice (scope refunds:write) and list its refunds (docs/refunds.md)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.api.context import Api, actor, guardrail, guardrails_of, idempotency_key, require_invoice_of, utc
from billing.api.errors import endpoint_of
from billing.api.validation import ApiError, bigint_field, json_object, path_id


def refund_json(row: dict) -> dict:
    return {"object": "refund", "id": row["id"], "invoiceId": row["invoice_id"], "customerId": row["customer_id"],
            "amount": row["amount"], "currency": row["currency"].strip(), "reason": row["reason"],
            "status": row["status"], "requestedAt": utc(row["requested_at"]), "settledAt": utc(row["settled_at"]),
            "providerReference": row["provider_reference"], "failureReason": row["failure_reason"]}


def routes(api: Api) -> list[BaseRoute]:
    database, clock = api.database, api.clock

    @endpoint_of("/invoices/{id}/refunds")
    async def create_refund(request: Request) -> Response:
        invoice_id = path_id(request, "invoice")
        request_key = idempotency_key(request)
        doc = await json_object(request, allowed={"amount"}, required={"amount"})
        amount = bigint_field(doc, "amount")
        if amount < 1:
            raise ApiError(422, "invalid_input", "amount must be a positive integer in the currency's smallest unit")
        limit = guardrails_of(request).max_refund
        guardrail(request, limit is None or amount <= limit, f"this API key may refund at most {limit} per request")
        row = await database.mutate(actor(request), db.REFUND_INVOICE, {
            "invoice_id": invoice_id, "amount": amount, "request_key": request_key, "now": clock.now()})
        # 200 for the request and for its replays (same Idempotency-Key), as Stripe answers.
        return JSONResponse(refund_json(row))

    @endpoint_of("/invoices/{id}/refunds")
    async def list_refunds(request: Request) -> Response:
        invoice_id = path_id(request, "invoice")
        await require_invoice_of(request, database, invoice_id)
        rows = await database.all(db.LIST_REFUNDS, {"invoice_id": invoice_id})
        return JSONResponse({"object": "list", "data": [refund_json(r) for r in rows]})

    return [
        Route("/invoices/{id}/refunds", create_refund, methods=["POST"]),
        Route("/invoices/{id}/refunds", list_refunds, methods=["GET"]),
    ]
