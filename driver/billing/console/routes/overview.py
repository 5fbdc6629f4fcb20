"""/console/ and /console/overview/figures: the overview, its figures refreshed by htmx."""

from __future__ import annotations

import psycopg
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.console import render
from billing.console.web import Console

OVERVIEW_CACHE_SECONDS = 5.0


def routes(console: Console) -> list[BaseRoute]:
    database, clock, settings = console.database, console.clock, console.settings

    async def read(now) -> dict:
        doc = (await database.one(db.CONSOLE_OVERVIEW, {"now": now}, heavy=True))["doc"]
        # The MRR panel is the reports' figure (billing._mrr_totals: kept by the engine's writes,
        # 25 ms at 1,000,000 subscriptions), but it recomputes every line on Citus or with many
        # customers marked since the last fold: past the heavy pool's statement timeout on a large
        # database (bench/README.md), the rest of the overview is shown without it.
        try:
            mrr, mrr_timed_out = await database.all(db.CONSOLE_MRR, {"now": now, "days": 30}, heavy=True), False
        except psycopg.errors.QueryCanceled:
            mrr, mrr_timed_out = [], True
        return {"o": doc, "mrr": render.mrr_series(mrr), "mrr_timed_out": mrr_timed_out,
                "gateway_rate": settings.gateway_rate, "funnel_svg": render.funnel_svg(doc["dunning"])}

    async def overview_context(session) -> dict:
        # The overview reads every table's figures: on the pool of the expensive reads (its statement
        # timeout), weighed 10 in the key's budget, and read at most once per OVERVIEW_CACHE_SECONDS
        # for every session (an action of the console reads it again): issue 27, finding 2.
        console.spend(session, 10)
        now = clock.now()
        bucket = int(now.timestamp() // OVERVIEW_CACHE_SECONDS)
        return await console.cached(("overview", bucket), OVERVIEW_CACHE_SECONDS, lambda: read(now))

    @console.handler
    async def overview(request: Request, session) -> Response:
        return console.page(request, "overview.html", session, **await overview_context(session))

    @console.handler
    async def overview_figures(request: Request, session) -> Response:
        return console.page(request, "_overview_figures.html", session, **await overview_context(session))

    return [
        Route("/", overview, methods=["GET"]),
        Route("/overview/figures", overview_figures, methods=["GET"]),
    ]
