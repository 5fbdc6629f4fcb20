"""The HTTP API's routes, one router per resource.

Each module has `routes(api: billing.api.context.Api) -> list[starlette.routing.BaseRoute]`; its
handlers are closures over `api` (the database, the clock, the settings), each wrapped in
`billing.api.errors.endpoint_of(<route template>)` (the contract's error bodies, the request
counter). `create_app` mounts the routers of `ROUTERS` in this order, then the console at /console.

Adding a resource: a module here with its `routes(api)`, its name in `ROUTERS`, its scope rule in
billing.api.security (`_RULES`; an unlisted route needs only *a* key), its paths in
billing.api.openapi, and its tests.
"""

from billing.api.routes import (admin, coupons, customer_sessions, customers, health, invoices, payment_webhooks,
                                refunds, subscriptions, usage, usage_alerts, v1, webhook_endpoints)

ROUTERS = (subscriptions, coupons, payment_webhooks, customers, customer_sessions, invoices, refunds, webhook_endpoints,
           admin, health, usage, v1, usage_alerts)
# Served again under /v1 by the same handlers (billing.api.routes.v1.aliases); their unprefixed
# paths are deprecated. Not aliased: the internal routes (health) and the gateways' signed webhooks.
NOT_ALIASED = (health, payment_webhooks, v1, usage_alerts)  # (usage_alerts: /v1 only, as v1)

__all__ = ["ROUTERS", "NOT_ALIASED"]
