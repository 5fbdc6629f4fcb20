"""/console/subscriptions/{id}: a subscription, its usage and upcoming invoice, its invoices and the
actions it allows."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.console.web import Console, path_id


def routes(console: Console) -> list[BaseRoute]:
    database = console.database

    @console.handler
    async def subscription(request: Request, session) -> Response:
        sub_id = path_id(request)
        doc = (await database.one(db.CONSOLE_SUBSCRIPTION, {"id": sub_id}, heavy=True))["doc"]
        # the usage panel: the open period's usage per meter and the next invoicing's preview (docs/usage.md)
        usage = (await database.one(db.CONSOLE_USAGE, {"id": sub_id, "now": console.clock.now()}, heavy=True))["doc"]
        sigs = await console.signatures()
        sub = doc["subscription"]
        forms = console.forms_for(sigs, "subscription", sub["status"])
        # A pending cancellation is undone, not asked again; a subscription that ends at its
        # period end is not paused (pause_subscription refuses it).
        hidden = {"cancel-at-period-end", "pause"} if sub["cancel_at_period_end"] else {"uncancel"}
        forms = [f for f in forms if f["action"].name not in hidden]
        for inv in doc["invoices"]:
            inv["forms"] = console.forms_for(sigs, "invoice", inv["status"])
        return console.page(request, "subscription.html", session, s=doc, forms=forms, u=usage)

    return [Route("/subscriptions/{id}", subscription, methods=["GET"])]
