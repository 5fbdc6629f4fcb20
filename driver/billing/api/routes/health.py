"""/metrics, /healthz and /openapi.json: on the public port (admin scope, /healthz public) and, the
same route objects, on the internal listener without a key (`billing serve --internal-port`,
billing.api.app.internal_app)."""

from __future__ import annotations

import asyncio
import logging
import time

import psycopg
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from psycopg_pool import PoolTimeout
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.api.context import Api
from billing.api.openapi import OPENAPI
from billing.metrics import OUTBOX_BACKLOG, OUTBOX_DEAD, OUTBOX_OLDEST_AGE

log = logging.getLogger("billing.api")

METRICS_REFRESH = 2.0  # seconds between two reads of the outbox figures for /metrics


def routes(api: Api) -> list[BaseRoute]:
    database, clock = api.database, api.clock
    refreshed = [float("-inf")]

    async def metrics(request: Request) -> Response:
        # The outbox figures come from the database, at most once per METRICS_REFRESH seconds
        # however many scrapers there are.
        if time.monotonic() - refreshed[0] >= METRICS_REFRESH:
            try:
                stats = await database.one(db.OUTBOX_STATS, {"now": clock.now()})
                OUTBOX_BACKLOG.set(stats["backlog"])
                OUTBOX_DEAD.set(stats["dead"])
                OUTBOX_OLDEST_AGE.set(stats["oldest_age_seconds"])
                refreshed[0] = time.monotonic()
            except (psycopg.Error, PoolTimeout) as exc:
                log.warning("metrics: outbox figures not refreshed", extra={"error": str(exc).strip()})
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> Response:
        try:
            await asyncio.wait_for(database.one(db.HEALTH), timeout=api.pool_timeout + 1)
        except (psycopg.Error, PoolTimeout, asyncio.TimeoutError) as exc:
            log.warning("health check: database unavailable", extra={"error": str(exc).strip()[:200]})
            return JSONResponse({"status": "unavailable"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def openapi(request: Request) -> Response:
        return JSONResponse(OPENAPI)

    return [
        Route("/metrics", metrics, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]
