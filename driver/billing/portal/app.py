"""The customer portal: server-rendered pages under /portal of `billing serve` (docs/customers.md,
"The portal"), mounted by billing.api.app.create_app beside the console. Sessions, forms and
rendering: billing.portal.web; the pages and actions: billing.portal.routes."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from billing.clock import Clock, SystemClock
from billing.portal import routes as portal_routes
from billing.portal.web import Portal


def create_portal(database, settings, *, clock: Clock | None = None, provider_factory=None) -> Starlette:
    """The portal's ASGI app. `provider_factory()` gives the card provider (Stripe) for 3-D Secure
    and SetupIntents, or None when none is configured (those pages then answer 503)."""
    portal = Portal(database, settings, clock or SystemClock(), provider_factory)
    routes = portal_routes.routes(portal)
    routes.append(Mount("/static", app=StaticFiles(packages=[("billing.portal", "static")]), name="static"))
    return Starlette(routes=routes)
