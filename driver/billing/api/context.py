"""What every router of the HTTP API shares (`Api`), and the checks several of them make.

`billing.api.app.create_app` builds one `Api` and hands it to each router's `routes(api)`
(billing.api.routes). A handler reads the database, the clock and the settings from it, never
from a global, so a test's app (a simulated clock, its own database) is the app itself."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from starlette.requests import Request

from billing.api.database import Database
from billing.db import Actor
from billing.api.validation import IDEMPOTENCY_KEY, ApiError
from billing.clock import Clock
from billing.invoices.documents import Issuer
from billing.limiter import KeyRateLimiter


@dataclass
class Api:
    """The app's parts. `clock` gives p_now for the SQL calls; `wall_clock` (unix seconds) checks
    webhook signature timestamps, which are always real time; `pool_timeout`: how long a request
    waits for a database connection before answering 503."""

    settings: Any
    database: Database
    clock: Clock
    wall_clock: Callable[[], float] = time.time
    pool_timeout: float = 5.0
    limiter: KeyRateLimiter | None = None
    issuer: Issuer | None = None
    stripe: Any = None  # the Stripe provider of /webhooks/stripe (billing.api.routes.payment_webhooks)
    sim: Any = None  # the simulator's provider (its webhooks; the portal's 3-D Secure page on it)
    # Closed by the app's lifespan, after the pool (a router registers what it opens).
    closers: list[Callable[[], Any]] = field(default_factory=list)

    def now(self) -> datetime:
        return self.clock.now()


def actor(request: Request) -> Actor:
    """The audit actor of a request (ApiGuard put its principal in the request's state)."""
    principal = getattr(request.state, "principal", None)
    if principal is not None and principal.customer_id is not None:
        name = Actor(f"customer-session:{principal.customer_id} (api-key:{principal.key_id})")
    else:
        name = Actor(f"api-key:{request.state.api_key_id}")
    name.proof = principal.proof if principal is not None else ""
    return name


def principal_of(request: Request):
    return getattr(request.state, "principal", None)


def bound_customer(request: Request) -> int | None:
    """The customer a customer token binds this request to; None for a server key."""
    principal = principal_of(request)
    return principal.customer_id if principal is not None else None


def require_customer(request: Request, customer_id: int | None) -> None:
    """404 when a customer token reaches for another customer's resource (or one it cannot see):
    as if it did not exist (docs/security.md, "Customer sessions")."""
    bound = bound_customer(request)
    if bound is not None and bound != customer_id:
        raise ApiError(404, "not_found", "no such resource")


def refuse_for_customer(request: Request, what: str, where: str = "") -> None:
    """403 `forbidden` for a customer token: `what` it may never do, even on its own customer (a
    customer session never makes value from nothing: docs/security.md, "Customer sessions")."""
    if bound_customer(request) is not None:
        raise ApiError(403, "forbidden", f"{where}a customer session cannot {what}")


async def require_subscription_of(request: Request, database, sub_id: int) -> None:
    """For a customer token, the subscription must be its customer's (one read; none for a key)."""
    if bound_customer(request) is None:
        return
    from billing import db

    row = await database.one(db.API_GET_SUBSCRIPTION, {"id": sub_id})
    require_customer(request, row["customer_id"] if row else None)


async def require_invoice_of(request: Request, database, invoice_id: int) -> None:
    """For a customer token, the invoice must be its customer's (one read; none for a key)."""
    if bound_customer(request) is None:
        return
    from billing import db

    row = await database.one(db.GET_INVOICE_DOCUMENT, {"invoice_id": invoice_id})
    require_customer(request, (row["document"] or {}).get("customerId") if row else None)


def guardrail(request: Request, ok: bool, message: str) -> None:
    """403 when the request's key has a guardrail this request passes (docs/security.md, "Key guardrails")."""
    if not ok:
        raise ApiError(403, "guardrail", message)


def guardrails_of(request: Request):
    from billing.api_keys import Guardrails

    principal = principal_of(request)
    return principal.guardrails if principal is not None else Guardrails()


def is_admin(request: Request) -> bool:
    principal = principal_of(request)
    return principal is not None and principal.is_admin


def sees_people(request: Request) -> bool:
    """Whether the caller reads customers' personal data (a bill-to, a card): a key with customers:read
    or admin, or a customer session on its own customer (billing.people; docs/security.md)."""
    from billing import people

    principal = principal_of(request)
    if principal is None:
        return False
    return people.sees_people(principal.scopes if principal.customer_id is None else (),
                              customer_session=principal.customer_id is not None)


def require_admin(request: Request) -> None:
    # The operator's routes: ApiGuard has already required an API key with the admin scope
    # (billing.api.security); this only makes sure no route of this kind escapes it.
    if getattr(request.state, "api_key_id", None) is None:
        raise ApiError(401, "unauthorized", "an API key with the admin scope is required",
                       {"WWW-Authenticate": "Bearer"})


def idempotency_key(request: Request) -> str:
    """The request's Idempotency-Key, scoped to its API key (`scoped_idempotency_key`); 400 when
    missing or malformed."""
    key = request.headers.get("idempotency-key")
    if key is None or key == "":
        raise ApiError(400, "missing_idempotency_key", "the Idempotency-Key header is required")
    if not IDEMPOTENCY_KEY.match(key):
        raise ApiError(400, "invalid_idempotency_key",
                       "Idempotency-Key must be 1 to 255 printable ASCII characters without spaces")
    owner = request.state.api_key_id
    if bound_customer(request) is not None:  # a customer token's keys never meet its server key's
        owner = f"{owner}.c{bound_customer(request)}"
    return scoped_idempotency_key(owner, key)


def scoped_idempotency_key(api_key_id: str, key: str) -> str:
    """Idempotency keys are per API key: the SQL API sees `<key id>/<Idempotency-Key>` (hashed
    when that would pass its 255 characters), so one caller's key never meets another's."""
    scoped = f"{api_key_id}/{key}"
    if len(scoped) > 255:
        scoped = f"{api_key_id}/sha256:{hashlib.sha256(key.encode()).hexdigest()}"
    return scoped


def utc(value) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
