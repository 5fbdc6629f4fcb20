"""/console/invoices (filtered by status) and /console/invoices/{id}.html|.pdf (the document)."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db, people
from billing.console.web import PAGE, Console, Refused, opt_int
from billing.invoices.documents import render_html, render_pdf


def routes(console: Console) -> list[BaseRoute]:
    database, issuer = console.database, console.issuer

    @console.handler
    async def invoices(request: Request, session) -> Response:
        status = request.query_params.get("status", "").upper() or None
        if status not in (None, "OPEN", "PAID", "FAILED", "VOID", "REVIEW"):
            raise Refused(422, "filter by OPEN, PAID, FAILED, VOID or REVIEW")
        before = opt_int(request.query_params.get("before"))
        console.spend(session, 2)
        rows = await database.all(db.CONSOLE_INVOICES, {"status": status, "before": before, "limit": PAGE}, heavy=True)
        sigs = await console.signatures()
        for inv in rows:
            inv["forms"] = console.forms_for(sigs, "invoice", inv["status"])
        return console.page(request, "invoices.html", session, rows=rows, status=status or "",
                            next_before=rows[-1]["id"] if len(rows) == PAGE else None)

    @console.handler
    async def invoice_document(request: Request, session) -> Response:
        # /console/invoices/12.html and .pdf: the invoice document (docs/invoices.md) for a logged-in
        # operator (the API's /invoices/{id}.html needs a bearer key, which a link cannot carry).
        stem, _, suffix = request.path_params["ref"].partition(".")
        if suffix not in ("html", "pdf") or not stem.isascii() or not stem.isdigit() or len(stem) > 18:
            raise Refused(404, "an invoice document is /console/invoices/{id}.html or /console/invoices/{id}.pdf")
        console.spend(session, 10 if suffix == "pdf" else 3)  # as the API's documents (billing.api.security)
        row = await database.one(db.GET_INVOICE_DOCUMENT, {"invoice_id": int(stem)}, heavy=True)
        doc = people.document_for(row["document"], session["sees_people"])  # the bill-to: customers:read (money10)
        if suffix == "html":
            return HTMLResponse(render_html(doc, issuer))
        pdf = await asyncio.get_running_loop().run_in_executor(None, render_pdf, doc, issuer)
        return Response(pdf, media_type="application/pdf",
                        headers={"Content-Disposition": f'inline; filename="invoice-{doc.get("number") or stem}.pdf"'})

    return [
        Route("/invoices", invoices, methods=["GET"]),
        Route("/invoices/{ref}", invoice_document, methods=["GET"]),
    ]
