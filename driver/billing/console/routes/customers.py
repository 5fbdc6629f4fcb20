"""/console/customers and /console/customers/{id}."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.console.web import PAGE, Console, path_id


def routes(console: Console) -> list[BaseRoute]:
    database = console.database

    @console.handler
    async def customers(request: Request, session) -> Response:
        q = request.query_params.get("q", "")[:200]
        console.spend(session, 5 if q else 1)  # a text search: through the word index, still a search
        rows = await database.all(db.CONSOLE_CUSTOMERS, {"q": q, "limit": PAGE}, heavy=True)
        columns = sorted({k for r in rows for k in r["customer"]} - {"id", "timezone", "created_at", "updated_at"})
        return console.page(request, "customers.html", session, q=q, rows=rows, extra_columns=columns)

    @console.handler
    async def customer(request: Request, session) -> Response:
        console.spend(session, 1)
        doc = (await database.one(db.CONSOLE_CUSTOMER, {"id": path_id(request), "limit": 200}, heavy=True))["doc"]
        sigs = await console.signatures()
        for inv in doc["invoices"]:
            inv["forms"] = console.forms_for(sigs, "invoice", inv["status"])
        return console.page(request, "customer.html", session, c=doc)

    return [
        Route("/customers", customers, methods=["GET"]),
        Route("/customers/{id}", customer, methods=["GET"]),
    ]
