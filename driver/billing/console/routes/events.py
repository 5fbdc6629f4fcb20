"""/console/events: the outbox's events, by subject and type."""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.console.web import PAGE, Console, opt_int


def routes(console: Console) -> list[BaseRoute]:
    database = console.database

    @console.handler
    async def events(request: Request, session) -> Response:
        subject = request.query_params.get("subject", "")[:100]
        type_ = request.query_params.get("type", "")[:100]
        before = opt_int(request.query_params.get("before"))
        rows = await database.all(db.CONSOLE_EVENTS, {"subject": subject or None, "type": type_ or None, "before": before,
                                           "limit": PAGE}, heavy=True)
        sigs = await console.signatures()
        for e in rows:
            e["forms"] = console.forms_for(sigs, "event", e["status"])
            if not session["sees_people"]:  # payloads carry customers' details: customers:read, as /v1/events
                e["payload"] = None
        back_url = "/console/events" + ("?" + urlencode({"subject": subject, "type": type_}) if subject or type_ else "")
        return console.page(request, "events.html", session, rows=rows, subject=subject, type=type_,
                            back_url=back_url, next_before=rows[-1]["id"] if len(rows) == PAGE else None)

    return [Route("/events", events, methods=["GET"])]
