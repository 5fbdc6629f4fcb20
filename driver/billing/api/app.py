"""`billing serve`: the HTTP API (Starlette on uvicorn), assembled from its routers.

Every request first passes `billing.api.security.ApiGuard` (API key, scope, per-key rate, content
type, declared size). Each endpoint validates its input (billing.api.validation), makes one call to
the SQL API and maps the SQLSTATEs of docs/sql-api.md to HTTP statuses (billing.api.errors). A
mutation runs in a transaction that first names its actor (`billing.actor` = api-key:<id>) for the
audit log (billing.api.database). The routes, one router per resource, are in billing.api.routes;
the operator console is mounted under /console (billing.console). Serving (timeouts, concurrency,
the internal listener): billing.api.serving.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from typing import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Mount

from billing.api.context import Api
from billing.api.database import Database
from billing.api.errors import http_error, unexpected
from billing.api.headers import SecurityHeaders
from billing.api.routes import NOT_ALIASED, ROUTERS, health, v1
from billing.api.security import ApiGuard
from billing.clock import Clock, SystemClock
from billing.console.app import create_console
from billing.portal.app import create_portal
from billing.invoices.documents import Issuer
from billing.limiter import KeyRateLimiter


def create_app(settings, *, clock: Clock | None = None, wall_clock: Callable[[], float] = time.time,
               pool_timeout: float = 5.0, rate_limit: bool = True) -> Starlette:
    """The ASGI app. `clock` gives p_now for the SQL calls; `wall_clock` (unix seconds) checks
    webhook signature timestamps, which are always real time. `pool_timeout`: how long a request
    waits for a database connection before answering 503. `rate_limit`: the per-key request rate
    of the settings (api_rate_per_key, api_burst_per_key)."""
    database = Database(settings.database_url, pool_timeout, heavy_size=settings.api_heavy_pool_size,
                        heavy_statement_timeout_ms=settings.api_heavy_statement_timeout_ms)
    api = Api(settings=settings, database=database, clock=clock or SystemClock(),
              wall_clock=wall_clock, pool_timeout=pool_timeout,
              limiter=(KeyRateLimiter(settings.api_rate_per_key, settings.api_burst_per_key, settings.redis_url)
                       if rate_limit else None),
              issuer=Issuer.from_settings(settings))
    routes, aliased = [], []
    for router in ROUTERS:
        made = router.routes(api)
        routes.extend(made)
        if router is health:
            internal = made
        if router not in NOT_ALIASED:
            aliased.extend(made)
    routes.extend(v1.aliases(aliased, api.database))  # /v1/<path> for every resource route (docs/http-api.md)
    # The operator console (docs/console.md): its own login with the same API keys.
    routes.append(Mount("/console", app=create_console(api.database, settings, clock=api.clock, limiter=api.limiter)))
    # The customer portal (docs/customers.md): a session opened by a single-use link, one customer.
    routes.append(Mount("/portal", app=create_portal(
        api.database, settings, clock=api.clock,
        provider_factory=lambda name="stripe": (
            api.sim if name == "sim" and api.settings.gateway_url else
            api.stripe if name == "stripe" and api.stripe is not None and api.stripe.api_key else None))))

    @asynccontextmanager
    async def lifespan(app):
        await api.database.pool()
        yield
        await api.database.close()
        for close in api.closers:
            await close()
        if api.limiter is not None:
            await api.limiter.close()

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error, Exception: unexpected},
                    middleware=[
                        # outermost: every answer, refusals included, gets the security headers
                        Middleware(SecurityHeaders),
                        Middleware(ApiGuard, authenticate=api.database.authenticate, limiter=api.limiter,
                                   customer_session=lambda customer_id, token_hash: api.database.customer_session(
                                       customer_id, token_hash, api.clock.now()),
                                   record_failure=lambda key_id, address, route: api.database.record_failure(
                                       key_id, address, route, api.clock.now()),
                                   cost_per_second=settings.api_cost_per_key,
                                   address_rate=settings.api_unauthenticated_rate_per_address,
                                   address_burst=settings.api_unauthenticated_burst_per_address,
                                   failures_free=settings.api_auth_failures_free)])
    app.state.api = api
    app.state.database = api.database
    app.state.stripe = api.stripe  # closed by the lifespan (a test without it closes it itself)
    app.state.internal_routes = internal
    return app


def internal_app(app: Starlette) -> Starlette:
    """/metrics, /openapi.json and /healthz without a key, for `billing serve --internal-port`
    (a listener meant for the scraper on a private interface, never published)."""
    return Starlette(routes=list(app.state.internal_routes))
