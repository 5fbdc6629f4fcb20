"""The operator console: server-rendered pages under /console of `billing serve` (docs/console.md).

* Login with an API key of the admin or subscriptions:read scope. The key is checked by the HTTP
  API's own check (billing.authenticate_api_key through `Database.authenticate`), then a session
  is opened in the database (billing.console_open_session): the browser holds a random token in a
  cookie (HttpOnly, SameSite=Strict, Path=/console, Secure over TLS), the database its SHA-256.
  Every request reads the session with its key (billing.console_session), so revoking the key or
  logging out ends it at once.
* Every POST carries a CSRF token (an HMAC of the session token: a page of another site can
  neither read it nor the cookie) and, for the login form, a double-submit token; a POST without
  a valid one is refused (403), and so is one whose Origin is another site.
* A read-scope session sees everything and may do nothing (403 on every action); an admin session
  acts through the SQL API's functions (billing.console.actions), audited with actor
  api-key:<key id>, like the HTTP API.
* Pages call one read function each (db/functions/86_console.sql, 84_console_records.sql); the
  overview's figures are refreshed every few seconds by htmx (vendored in static/, no CDN, no build
  step).

Sessions, forms and rendering: billing.console.web; the pages and actions, one router per
resource: billing.console.routes.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from billing.clock import Clock, SystemClock
from billing.console.routes import ROUTERS
from billing.console.web import Console


def create_console(database, settings, *, clock: Clock | None = None, limiter=None) -> Starlette:
    """The console's ASGI app, mounted at /console by billing.api.app.create_app. `database` is the
    API's pool (billing.api.database.Database); `clock` gives p_now to the reads and actions (the
    wall clock for sessions)."""
    console = Console(database, settings, clock or SystemClock(), limiter)
    routes = [route for router in ROUTERS for route in router.routes(console)]
    # Package data, found through the package (an installed wheel as well as a checkout).
    routes.append(Mount("/static", app=StaticFiles(packages=[("billing.console", "static")]), name="static"))
    return Starlette(routes=routes)
