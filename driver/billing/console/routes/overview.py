"""/console/ and /console/overview/figures: the overview, its figures refreshed by htmx."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.console import render
from billing.console.web import Console


def routes(console: Console) -> list[BaseRoute]:
    database, clock, settings = console.database, console.clock, console.settings

    async def overview_context() -> dict:
        now = clock.now()
        doc = (await database.one(db.CONSOLE_OVERVIEW, {"now": now}))["doc"]
        mrr = await database.all(db.CONSOLE_MRR, {"now": now, "days": 30})
        return {"o": doc, "mrr": render.mrr_series(mrr), "gateway_rate": settings.gateway_rate,
                "funnel_svg": render.funnel_svg(doc["dunning"])}

    @console.handler
    async def overview(request: Request, session) -> Response:
        return console.page(request, "overview.html", session, **await overview_context())

    @console.handler
    async def overview_figures(request: Request, session) -> Response:
        return console.page(request, "_overview_figures.html", session, **await overview_context())

    return [
        Route("/", overview, methods=["GET"]),
        Route("/overview/figures", overview_figures, methods=["GET"]),
    ]
