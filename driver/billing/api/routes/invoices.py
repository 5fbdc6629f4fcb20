"""/invoices/{id}[.html|.pdf]: the invoice document (docs/invoices.md), and the operator's invoice
actions /invoices/{id}/retry and /void (admin)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db, people
from billing.api.context import Api, actor, require_admin, require_customer, sees_people, utc
from billing.api.errors import endpoint_of
from billing.api.validation import ApiError, json_object, path_id, text_field
from billing.invoices.documents import render_html, render_pdf


RENDER_CACHE_SECONDS = 5.0


def invoice_json(row: dict) -> dict:
    """An invoice as the API shows it (amounts in minor units)."""
    return {"object": "invoice", "id": row["id"], "subscriptionId": row["subscription_id"],
            "customerId": row["customer_id"], "kind": row["kind"], "status": row["status"],
            "periodStart": utc(row["period_start"]), "periodEnd": utc(row["period_end"]),
            "subtotal": row["subtotal"], "creditApplied": row["credit_applied"], "amount": row["amount"],
            "amountRefunded": row["amount_refunded"], "currency": row["currency"].strip(),
            "attemptCount": row["attempt_count"], "nextAttemptAt": utc(row["next_attempt_at"]),
            "paidAt": utc(row["paid_at"]), "closedAt": utc(row["closed_at"])}


def routes(api: Api) -> list[BaseRoute]:
    database, clock, issuer = api.database, api.clock, api.issuer

    # Rendering costs CPU (a PDF about 180 ms): at most two at once in this process, and the same
    # document (same content) rendered once per RENDER_CACHE_SECONDS (issue 27, finding 2; the
    # per-key cost budget of billing.api.security weighs these routes too).
    renders = asyncio.Semaphore(2)
    cache: dict[tuple[str, str], tuple[float, bytes | str]] = {}

    async def rendered(doc: dict, kind: str):
        key = (kind, hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest())
        now = time.monotonic()
        hit = cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        async with renders:
            hit = cache.get(key)
            if hit is not None and hit[0] > time.monotonic():
                return hit[1]
            if kind == "pdf":
                out = await asyncio.get_running_loop().run_in_executor(None, render_pdf, doc, issuer)
            else:
                out = render_html(doc, issuer)
        if len(cache) > 256:
            for k in [k for k, v in cache.items() if v[0] <= now] or list(cache)[:128]:
                cache.pop(k, None)
        cache[key] = (time.monotonic() + RENDER_CACHE_SECONDS, out)
        return out

    @endpoint_of("/invoices/{id}")
    async def get_invoice(request: Request) -> Response:
        # /invoices/12 (JSON with its lines), /invoices/12.html, /invoices/12.pdf
        ref = request.path_params["id"]
        stem, _, suffix = ref.partition(".")
        if suffix not in ("", "html", "pdf"):
            raise ApiError(404, "not_found", "an invoice is served as /invoices/{id}, {id}.html or {id}.pdf")
        request.path_params["id"] = stem
        invoice_id = path_id(request, "invoice")
        row = await database.one(db.GET_INVOICE_DOCUMENT, {"invoice_id": invoice_id})
        doc = row["document"]
        require_customer(request, doc.get("customerId"))
        doc = people.document_for(doc, sees_people(request))  # the bill-to: customers:read (money10)
        if suffix == "html":
            return Response(await rendered(doc, "html"), media_type="text/html; charset=utf-8")
        if suffix == "pdf":
            pdf = await rendered(doc, "pdf")
            name = doc.get("number") or f"draft-{invoice_id}"
            return Response(pdf, media_type="application/pdf",
                            headers={"Content-Disposition": f'inline; filename="invoice-{name}.pdf"'})
        return JSONResponse({"object": "invoice", **doc})

    # -- an operator's invoice actions (admin) ---------------------------------------------------
    @endpoint_of("/invoices/{id}/retry")
    async def retry_invoice(request: Request) -> Response:
        require_admin(request)
        invoice_id = path_id(request, "invoice")
        await json_object(request, allowed=set(), required=set(), optional_body=True)
        row = await database.mutate(actor(request), db.RETRY_INVOICE, {"invoice_id": invoice_id, "now": clock.now()})
        return JSONResponse(invoice_json(row))

    @endpoint_of("/invoices/{id}/void")
    async def void_invoice(request: Request) -> Response:
        require_admin(request)
        invoice_id = path_id(request, "invoice")
        doc = await json_object(request, allowed={"reason"}, required={"reason"})
        row = await database.mutate(actor(request), db.VOID_INVOICE, {
            "invoice_id": invoice_id, "reason": text_field(doc, "reason", max_len=500), "now": clock.now()})
        return JSONResponse(invoice_json(row))

    return [
        Route("/invoices/{id}", get_invoice, methods=["GET"]),
        Route("/invoices/{id}/retry", retry_invoice, methods=["POST"]),
        Route("/invoices/{id}/void", void_invoice, methods=["POST"]),
    ]
