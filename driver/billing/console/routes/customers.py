"""/console/customers and /console/customers/{id}."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

import psycopg

from billing import db, people
from billing.console.web import PAGE, Console, path_id

# What a login without customers:read (or admin) sees of a customer: ids, never its personal data
# (name, email, address, tax id, ...: docs/console.md "Personal data"). An allow-list: a column added
# to billing.customer stays hidden from it until it is named here.
PUBLIC_CUSTOMER_KEYS = ("id", "external_id", "timezone", "created_at", "updated_at")


def visible_customer(customer: dict, session: dict) -> dict:
    return customer if session["sees_people"] else {k: customer[k] for k in PUBLIC_CUSTOMER_KEYS if k in customer}


def routes(console: Console) -> list[BaseRoute]:
    database = console.database

    async def search_by_reference(q: str) -> str | None:
        """For a login that may not search names and emails: a customer's id as is, else the
        customer whose external id is exactly `q` (its id), else None (no search at all: the
        answer is the same whatever the words, so the search tells nothing of them)."""
        if not q or (q.isascii() and q.isdigit()):
            return q
        try:
            row = await database.one(db.V1_RESOLVE_EXTERNAL_ID, {"kind": "customer", "external_id": q})
        except psycopg.Error as exc:
            if db.contract_error(exc) is None:
                raise
            return None
        return str(row["id"]) if row is not None and row["id"] is not None else None

    @console.handler
    async def customers(request: Request, session) -> Response:
        q = request.query_params.get("q", "")[:200]
        console.spend(session, 5 if q else 1)  # a text search: through the word index, still a search
        query = q if session["sees_people"] else await search_by_reference(q.strip())
        rows = [] if query is None else await database.all(db.CONSOLE_CUSTOMERS, {"q": query, "limit": PAGE}, heavy=True)
        for r in rows:
            r["customer"] = visible_customer(r["customer"], session)
        columns = sorted({k for r in rows for k in r["customer"]} - {"id", "timezone", "created_at", "updated_at"})
        return console.page(request, "customers.html", session, q=q, rows=rows, extra_columns=columns)

    @console.handler
    async def customer(request: Request, session) -> Response:
        console.spend(session, 1)
        doc = (await database.one(db.CONSOLE_CUSTOMER, {"id": path_id(request), "limit": 200}, heavy=True))["doc"]
        doc["customer"] = visible_customer(doc["customer"], session)
        if doc.get("payment_methods") and not session["sees_people"]:  # the card and references: customers:read
            doc["payment_methods"] = [{k: m[k] for k in people.PUBLIC_PAYMENT_METHOD_KEYS if k in m}
                                      for m in doc["payment_methods"]]
        sigs = await console.signatures()
        for inv in doc["invoices"]:
            inv["forms"] = console.forms_for(sigs, "invoice", inv["status"])
        return console.page(request, "customer.html", session, c=doc)

    return [
        Route("/customers", customers, methods=["GET"]),
        Route("/customers/{id}", customer, methods=["GET"]),
    ]
