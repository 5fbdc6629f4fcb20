"""Who may call the HTTP API, checked before a handler runs and before any body byte is read.

* API keys: `bk_<id>_<secret>`; the id (`bk_` + 10 lower-case letters or digits) is public and
  readable, the secret 32 random bytes (URL-safe base64). The database keeps only the SHA-256 of
  the whole key (billing.api_key); `billing api-key create|list|revoke` manages them.
* `ApiGuard`, an ASGI middleware: `Authorization: Bearer <key>` on every route except /healthz
  and the gateway webhooks (signed); 401 when missing, unknown or revoked, 403 without the route's
  scope, 429 past the key's rate, 415 for a mutation that is not application/json, 413 for a
  declared body over the limit. The key's id goes to the handler (scope["state"]["api_key_id"]).
  /console (the operator console, billing.console) is passed through: it logs in with the same
  keys, through the same check, and holds a session of its own.
* The per-key rate: billing.limiter.KeyRateLimiter (GCRA per key, in Redis when configured).
* Customer tokens (`cs_<customer id>_<secret>`, billing.api.customer_sessions): checked like a key
  (`billing.customer_session`), they carry the scopes subscriptions:read / subscriptions:write of
  their opening key at most, and bind the request to one customer (scope["state"]["customer_id"]):
  every handler that touches a customer's resource checks it.
* Cost (issue 27, finding 2): each key also has a budget of cost units per second
  (`BILLING_API_COST_PER_KEY`, bursts of twice that); a request spends its route's cost
  (`route_cost`: a PDF 10, an HTML document 3, anything else nothing), so a read-only key cannot
  keep the CPU or the pool busy with expensive requests: 429 with `Retry-After` past it.
* Addresses (findings 3 and 7): requests without a valid credential count against their client
  address (`billing.limiter.abuse.AddressLimiter`), failed authentications back off per address
  (`FailureThrottle`), each failure is logged, counted and, for a known key id with a wrong
  secret, audited (`billing.record_auth_failure`).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from starlette.responses import JSONResponse

from billing.limiter.abuse import AddressLimiter, FailureThrottle, report_failure, retry_after
from billing.api.customer_sessions import CUSTOMER_SCOPES, hash_token, parse_customer_token
from billing.api_keys import SCOPES, Guardrails, NewKey, hash_key, key_id_of, looks_like_key, new_api_key  # noqa: F401
from billing.limiter import KeyRateLimiter
from billing.metrics import COST_REFUSALS

# What this module offers: its own names and those it hands on from the imports above.
__all__ = ["ANY_KEY", "ApiGuard", "Authenticate", "CONSOLE", "CustomerCheck", "LARGE_BODIES", "MAX_BODY",
           "MUTATING", "NewKey", "PUBLIC", "Principal", "RecordFailure", "SCOPES", "Unavailable", "allows",
           "customer_never", "new_api_key", "required_scope", "route_cost", "unversioned"]

log = logging.getLogger("billing.api.security")

MAX_BODY = 256 * 1024  # bytes a request may declare (the handlers have tighter limits of their own)
LARGE_BODIES = {"/usage-events": 1024 * 1024,  # a batch of 1,000 usage events (docs/usage.md)
                "/subscriptions/batch": 1024 * 1024}  # 1,000 signups (docs/http-api.md)
MUTATING = frozenset({"POST", "PUT", "PATCH"})  # and a DELETE that carries a body


# -- which scope each route needs ----------------------------------------------------------

PUBLIC = "public"
ANY_KEY = "any key"
CONSOLE = "console session"  # /console and /portal check their own session cookie and CSRF token
_CONSOLE_PATH = re.compile(r"^/(console|portal)(/.*)?$")
_RULES: list[tuple[str, re.Pattern, str]] = [
    ("GET", re.compile(r"^/healthz$"), PUBLIC),
    ("POST", re.compile(r"^/webhooks/payments$"), PUBLIC),  # authenticated by its signature
    ("POST", re.compile(r"^/webhooks/stripe$"), PUBLIC),  # likewise (Stripe-Signature)
    ("PUT", re.compile(r"^/customers/[^/]+/payment-method$"), "subscriptions:write"),
    # a link into the customer portal acts as the customer there (docs/customers.md)
    ("POST", re.compile(r"^/customers/[^/]+/portal-links$"), "subscriptions:write"),
    ("POST", re.compile(r"^/invoices/[^/]+/refunds$"), "refunds:write"),  # money leaves: a scope of its own
    ("GET", re.compile(r"^/invoices/[^/]+/refunds$"), "subscriptions:read"),
    ("POST", re.compile(r"^/invoices/[^/]+/(retry|void)$"), "admin"),  # the operator's: a void forgives a debt
    ("GET", re.compile(r"^/invoices/[^/]+$"), "subscriptions:read"),  # the document: JSON, .html or .pdf
    ("GET", re.compile(r"^/subscriptions/[^/]+$"), "subscriptions:read"),
    ("POST", re.compile(r"^/subscriptions(/batch)?$"), "subscriptions:write"),
    ("POST", re.compile(r"^/subscriptions/[^/]+/(cancel|change-plan|coupon|pause|resume|uncancel|reactivate|quantity)$"),
     "subscriptions:write"),
    ("POST", re.compile(r"^/coupons$"), "admin"),  # a coupon is money: only the operator makes one
    ("POST", re.compile(r"^/customer-sessions$"), "customer-sessions:write"),  # a server key opens them
    ("GET", re.compile(r"^/admin/audit$"), "admin"),
    ("GET", re.compile(r"^/webhook-endpoints(/[^/]+(/attempts)?)?$"), "admin"),
    ("POST", re.compile(r"^/webhook-endpoints$"), "admin"),
    ("DELETE", re.compile(r"^/webhook-endpoints/[^/]+$"), "admin"),
    ("POST", re.compile(r"^/usage-events$"), "usage:write"),
    ("GET", re.compile(r"^/customers/[^/]+/usage$"), "subscriptions:read"),
    ("GET", re.compile(r"^/subscriptions/[^/]+/upcoming-invoice$"), "subscriptions:read"),
    # a customer's usage alerts (/v1 only; an alert announces an event, it makes no money)
    ("GET", re.compile(r"^/customers/[^/]+/usage-alerts(/[^/]+)?$"), "subscriptions:read"),
    ("POST", re.compile(r"^/customers/[^/]+/usage-alerts(/[^/]+)?$"), "subscriptions:write"),
    ("DELETE", re.compile(r"^/customers/[^/]+/usage-alerts/[^/]+$"), "subscriptions:write"),
    # /v1 (issue 28; the table of docs/http-api.md, "Scopes"): customers' data, the catalog, the reports
    ("GET", re.compile(r"^/customers/[^/]+/payment-methods(/[^/]+)?$"), "subscriptions:read"),
    ("GET", re.compile(r"^/customers(/[^/]+)?$"), "customers:read"),
    ("POST", re.compile(r"^/customers(/[^/]+)?$"), "customers:write"),
    ("GET", re.compile(r"^/plans(/[^/]+)?$"), "subscriptions:read"),
    ("POST", re.compile(r"^/plans(/[^/]+/(prices|archive))?$"), "catalog:write"),
    ("PATCH", re.compile(r"^/plans/[^/]+$"), "catalog:write"),  # selfServe: which plans browsers may sign up to
    ("POST", re.compile(r"^/coupons/[^/]+/archive$"), "catalog:write"),  # fewer discounts: no value made
    ("GET", re.compile(r"^/coupons$"), "catalog:write"),  # coupon codes are discounts: not for every reader
    ("GET", re.compile(r"^/tax-rates$"), "subscriptions:read"),
    ("POST", re.compile(r"^/tax-rates$"), "catalog:write"),
    ("GET", re.compile(r"^/(subscriptions|invoices|credit-notes|refunds)$"), "subscriptions:read"),
    ("GET", re.compile(r"^/invoices/[^/]+/lines$"), "subscriptions:read"),
    ("GET", re.compile(r"^/events(/[^/]+)?$"), "customers:read"),  # events carry customers' data
    ("GET", re.compile(r"^/reports/(mrr|churn|revenue)$"), "reports:read"),
    ("GET", re.compile(r"^/metrics$"), "admin"),
    ("GET", re.compile(r"^/openapi\.json$"), "admin"),
]


_NOT_VERSIONED = re.compile(r"^/(healthz|metrics|openapi\.json|webhooks/.*)$")


# What a customer token may never do even on its own customer, whatever its opening key's scopes
# (docs/security.md, "Customer sessions": a customer session never makes value from nothing): apply a
# coupon. (Its other refusals depend on the body: a coupon or trial days in a signup, prorate: false,
# a payment method it cannot prove: the handlers, billing.api.context.refuse_for_customer.)
_CUSTOMER_NEVER: list[tuple[str, re.Pattern]] = [
    ("POST", re.compile(r"^/subscriptions/[^/]+/coupon$")),
]


def customer_never(method: str, path: str) -> bool:
    """True for a route a customer token may never call (403 forbidden)."""
    path = unversioned(path)
    return any(m == method and pattern.match(path) for m, pattern in _CUSTOMER_NEVER)


def unversioned(path: str) -> str:
    """/v1/x -> /x: a route and its deprecated unprefixed alias need the same scope (billing.api.routes.v1).
    The routes never served under /v1 (health, metrics, the document, the gateways' webhooks) keep
    their /v1 form, an unknown route (a key first)."""
    if path.startswith("/v1/") and not _NOT_VERSIONED.match(path[3:]):
        return path[3:]
    return path


def required_scope(method: str, path: str) -> str:
    """PUBLIC, a scope, or ANY_KEY (an unknown route: a valid key first, then 404/405, so that
    nobody learns the routes without one). CONSOLE for the console's pages (billing.console)
    and the customer portal's (billing.portal)."""
    if _CONSOLE_PATH.match(path):
        return CONSOLE
    path = unversioned(path)
    for m, pattern, scope in _RULES:
        if (m == method or (m == "GET" and method == "HEAD")) and pattern.match(path):
            return scope
    return ANY_KEY


def allows(scopes: list[str] | tuple[str, ...], needed: str) -> bool:
    return needed == ANY_KEY or "admin" in scopes or needed in scopes


# What a route costs in the per-key cost budget (issue 27, finding 2): the documents rendered per
# request. The console's expensive pages are weighed by the console itself (billing.console.web).
_COSTS: list[tuple[str, re.Pattern, int]] = [
    ("GET", re.compile(r"^/invoices/[^/]+\.pdf$"), 10),
    ("GET", re.compile(r"^/invoices/[^/]+\.html$"), 3),
]


def route_cost(method: str, path: str) -> int:
    path = unversioned(path)
    for m, pattern, cost in _COSTS:
        if (m == method or (m == "GET" and method == "HEAD")) and pattern.match(path):
            return cost
    return 0


@dataclass(frozen=True)
class Principal:
    """Who a request is: an API key, or a customer token opened by one (customer_id set)."""

    key_id: str
    scopes: tuple[str, ...]
    guardrails: Guardrails = field(default_factory=Guardrails)
    customer_id: int | None = None
    proof: str = ""  # billing.actor_proof: the hash of the credential (db/functions/87_sessions.sql)

    @property
    def is_admin(self) -> bool:
        return "admin" in self.scopes and self.customer_id is None


# -- the per-key request rate -------------------------------------------------------------------

# -- the middleware ---------------------------------------------------------------------------------


def _error(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


Authenticate = Callable[[bytes], Awaitable["Principal | None"]]
CustomerCheck = Callable[[int, bytes], Awaitable["Principal | None"]]
RecordFailure = Callable[[str, str, str], Awaitable[None]]


class Unavailable(Exception):
    """The key store (the database) cannot answer now: 503."""


class ApiGuard:
    """ASGI middleware: authentication, scope, rate, content type and declared size, in that
    order, from the request head alone (the body is never read here)."""

    def __init__(self, app, *, authenticate: Authenticate, limiter: KeyRateLimiter | None,
                 max_body: int = MAX_BODY, customer_session: CustomerCheck | None = None,
                 record_failure: RecordFailure | None = None, cost_per_second: float = 20.0,
                 address_rate: float = 20.0, address_burst: int = 40, failures_free: int = 10) -> None:
        self.app = app
        self.authenticate = authenticate
        self.customer_session = customer_session
        self.record_failure = record_failure
        self.limiter = limiter
        self.max_body = max_body
        self.costs = AddressLimiter(rate=cost_per_second, burst=max(1, int(cost_per_second * 2)))
        self.addresses = AddressLimiter(rate=address_rate, burst=address_burst)
        self.failures = FailureThrottle(free=failures_free)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response = await self._refusal(scope)
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _failed(self, reason: str, address: str, path: str, key_id: str | None) -> JSONResponse:
        """A failed authentication: logged, counted, backed off per address, audited for a real key id."""
        report_failure(reason, address=address, route=path, key_id=key_id)
        already_blocked = self.failures.blocked_for(address) > 0
        self.failures.failed(address)
        if key_id and reason == "unknown" and self.record_failure is not None and not already_blocked:
            try:
                await self.record_failure(key_id, address, path)
            except Exception as exc:  # noqa: BLE001 - the audit must not turn a 401 into a 500
                log.warning("could not audit a failed authentication", extra={"error": repr(exc)})
        return _error(401, "unauthorized", "unknown or revoked API key",
                      {"WWW-Authenticate": 'Bearer realm="billing", error="invalid_token"'})

    async def _refusal(self, scope) -> JSONResponse | None:
        method, path = scope["method"], scope["path"]
        address = (scope.get("client") or ("-", 0))[0] or "-"
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name, value)  # the first of a repeated header
        needed = required_scope(method, path)
        if needed == CONSOLE:
            return None  # its own login (an API key), session cookie, CSRF token and body limits
        if needed != PUBLIC:
            raw = headers.get(b"authorization", b"").decode("latin-1").strip()
            scheme, _, token = raw.partition(" ")
            token = token.strip()
            blocked = self.failures.blocked_for(address)
            if blocked > 0:  # this address failed too often: not even looked up
                COST_REFUSALS.labels(limit="address").inc()
                report_failure("throttled", address=address, route=path, key_id=key_id_of(token) or None)
                return _error(429, "rate_limited", "too many failed authentications from this address; retry later",
                              {"Retry-After": retry_after(blocked)})
            if scheme.lower() != "bearer" or not token:
                wait = self.addresses.check(address)
                if wait > 0:
                    COST_REFUSALS.labels(limit="address").inc()
                    return _error(429, "rate_limited", "too many requests without an API key from this address",
                                  {"Retry-After": retry_after(wait)})
                report_failure("missing", address=address, route=path, key_id=None)
                return _error(401, "unauthorized", "an API key is required: Authorization: Bearer <key>",
                              {"WWW-Authenticate": 'Bearer realm="billing"'})
            principal = None
            customer_id = parse_customer_token(token)
            try:
                if looks_like_key(token):
                    principal = await self.authenticate(hash_key(token))
                elif customer_id is not None and self.customer_session is not None:
                    principal = await self.customer_session(customer_id, hash_token(token))
            except Unavailable:
                return _error(503, "unavailable", "the database is not reachable; retry later")
            if principal is None:
                if self.addresses.check(address) > 0:
                    COST_REFUSALS.labels(limit="address").inc()
                return await self._failed("unknown" if looks_like_key(token) or customer_id else "malformed",
                                          address, path, key_id_of(token) or None)
            if principal.customer_id is not None:
                # a customer token: at most its opening key's scopes among the customer's own
                scopes = CUSTOMER_SCOPES if "admin" in principal.scopes else \
                    tuple(x for x in principal.scopes if x in CUSTOMER_SCOPES)
                if needed != ANY_KEY and needed not in scopes:
                    return _error(403, "forbidden", f"a customer session cannot use {needed} routes")
                if customer_never(method, path):
                    return _error(403, "forbidden", "a customer session cannot apply a coupon")
            elif not allows(principal.scopes, needed):
                return _error(403, "forbidden", f"this API key lacks the scope {needed}")
            if self.limiter is not None:
                wait = await self.limiter.check(principal.key_id)
                if wait > 0:
                    return _error(429, "rate_limited", "too many requests for this API key; retry later",
                                  {"Retry-After": str(max(1, math.ceil(wait)))})
            cost = route_cost(method, path)
            if cost:
                wait = self.costs.check(principal.key_id, cost)
                if wait > 0:
                    COST_REFUSALS.labels(limit="key").inc()
                    return _error(429, "rate_limited", "this API key's budget for expensive requests is spent; "
                                  "retry later", {"Retry-After": retry_after(wait)})
            state = scope.setdefault("state", {})
            state["api_key_id"] = principal.key_id
            state["principal"] = principal
            state["customer_id"] = principal.customer_id
        if method in MUTATING or (method == "DELETE" and (headers.get(b"content-length", b"0") not in (b"0", b"")
                                                             or b"transfer-encoding" in headers)):
            content_type = headers.get(b"content-type", b"").decode("latin-1").split(";", 1)[0].strip().lower()
            if content_type != "application/json":
                return _error(415, "unsupported_media_type", "the body must be application/json")
            length = headers.get(b"content-length")
            if length is not None:
                try:
                    declared = int(length)
                except ValueError:
                    return _error(400, "bad_request", "Content-Length must be a number")
                limit = LARGE_BODIES.get(unversioned(path), self.max_body)
                if declared > limit:
                    return _error(413, "payload_too_large", f"the body must be at most {limit} bytes")
        return None
