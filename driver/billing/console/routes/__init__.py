"""The console's pages and actions, one router per resource.

Each module has `routes(console: billing.console.web.Console) -> list[starlette.routing.BaseRoute]`;
its handlers are `@console.handler` closures (`fn(request, session)`: login required unless
`public=True`, the key's rate, an error page for every failure). `create_console` mounts the routers
of `ROUTERS` in this order, then /static.

Adding a page: a module here with its `routes(console)`, its name in `ROUTERS`, its template in
billing/console/templates, its read function in db/functions (one call per page), its tests.
"""

from billing.console.routes import actions, customers, events, invoices, login, overview, subscriptions

ROUTERS = (overview, login, customers, subscriptions, invoices, events, actions)

__all__ = ["ROUTERS"]
