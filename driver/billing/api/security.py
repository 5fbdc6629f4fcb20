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
"""

from __future__ import annotations

import logging
import math
import re
from typing import Awaitable, Callable

from starlette.responses import JSONResponse

from billing.api_keys import SCOPES, NewKey, hash_key, key_id_of, looks_like_key, new_api_key  # noqa: F401
from billing.limiter import KeyRateLimiter

log = logging.getLogger("billing.api.security")

MAX_BODY = 256 * 1024  # bytes a request may declare (the handlers have tighter limits of their own)
LARGE_BODIES = {"/usage-events": 1024 * 1024}  # a batch of 1,000 usage events (docs/usage.md)
MUTATING = frozenset({"POST", "PUT", "PATCH"})  # and a DELETE that carries a body


# -- which scope each route needs ----------------------------------------------------------

PUBLIC = "public"
ANY_KEY = "any key"
CONSOLE = "console session"  # /console: the operator console checks its own session and CSRF token
_CONSOLE_PATH = re.compile(r"^/console(/.*)?$")
_RULES: list[tuple[str, re.Pattern, str]] = [
    ("GET", re.compile(r"^/healthz$"), PUBLIC),
    ("POST", re.compile(r"^/webhooks/payments$"), PUBLIC),  # authenticated by its signature
    ("POST", re.compile(r"^/webhooks/stripe$"), PUBLIC),  # likewise (Stripe-Signature)
    ("PUT", re.compile(r"^/customers/[^/]+/payment-method$"), "subscriptions:write"),
    ("POST", re.compile(r"^/invoices/[^/]+/refunds$"), "refunds:write"),  # money leaves: a scope of its own
    ("GET", re.compile(r"^/invoices/[^/]+/refunds$"), "subscriptions:read"),
    ("POST", re.compile(r"^/invoices/[^/]+/(retry|void)$"), "admin"),  # the operator's: a void forgives a debt
    ("GET", re.compile(r"^/invoices/[^/]+$"), "subscriptions:read"),  # the document: JSON, .html or .pdf
    ("GET", re.compile(r"^/subscriptions/[^/]+$"), "subscriptions:read"),
    ("POST", re.compile(r"^/subscriptions$"), "subscriptions:write"),
    ("POST", re.compile(r"^/subscriptions/[^/]+/(cancel|change-plan|coupon|pause|resume|uncancel|reactivate|quantity)$"),
     "subscriptions:write"),
    ("POST", re.compile(r"^/coupons$"), "admin"),  # a coupon is money: only the operator makes one
    ("GET", re.compile(r"^/admin/audit$"), "admin"),
    ("GET", re.compile(r"^/webhook-endpoints(/[^/]+(/attempts)?)?$"), "admin"),
    ("POST", re.compile(r"^/webhook-endpoints$"), "admin"),
    ("DELETE", re.compile(r"^/webhook-endpoints/[^/]+$"), "admin"),
    ("POST", re.compile(r"^/usage-events$"), "usage:write"),
    ("GET", re.compile(r"^/customers/[^/]+/usage$"), "subscriptions:read"),
    ("GET", re.compile(r"^/metrics$"), "admin"),
    ("GET", re.compile(r"^/openapi\.json$"), "admin"),
]


def required_scope(method: str, path: str) -> str:
    """PUBLIC, a scope, or ANY_KEY (an unknown route: a valid key first, then 404/405, so that
    nobody learns the routes without one). CONSOLE for the console's pages (billing.console)."""
    if _CONSOLE_PATH.match(path):
        return CONSOLE
    for m, pattern, scope in _RULES:
        if (m == method or (m == "GET" and method == "HEAD")) and pattern.match(path):
            return scope
    return ANY_KEY


def allows(scopes: list[str] | tuple[str, ...], needed: str) -> bool:
    return needed == ANY_KEY or "admin" in scopes or needed in scopes


# -- the per-key request rate -------------------------------------------------------------------

# -- the middleware ---------------------------------------------------------------------------------


def _error(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


Authenticate = Callable[[bytes], Awaitable[tuple[str, list[str]] | None]]


class Unavailable(Exception):
    """The key store (the database) cannot answer now: 503."""


class ApiGuard:
    """ASGI middleware: authentication, scope, rate, content type and declared size, in that
    order, from the request head alone (the body is never read here)."""

    def __init__(self, app, *, authenticate: Authenticate, limiter: KeyRateLimiter | None,
                 max_body: int = MAX_BODY) -> None:
        self.app = app
        self.authenticate = authenticate
        self.limiter = limiter
        self.max_body = max_body

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response = await self._refusal(scope)
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _refusal(self, scope) -> JSONResponse | None:
        method, path = scope["method"], scope["path"]
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
            if scheme.lower() != "bearer" or not token:
                return _error(401, "unauthorized", "an API key is required: Authorization: Bearer <key>",
                              {"WWW-Authenticate": 'Bearer realm="billing"'})
            found = None
            if looks_like_key(token):
                try:
                    found = await self.authenticate(hash_key(token))
                except Unavailable:
                    return _error(503, "unavailable", "the database is not reachable; retry later")
            if found is None:
                return _error(401, "unauthorized", "unknown or revoked API key",
                              {"WWW-Authenticate": 'Bearer realm="billing", error="invalid_token"'})
            key_id, scopes = found
            if not allows(scopes, needed):
                return _error(403, "forbidden", f"this API key lacks the scope {needed}")
            if self.limiter is not None:
                wait = await self.limiter.check(key_id)
                if wait > 0:
                    return _error(429, "rate_limited", "too many requests for this API key; retry later",
                                  {"Retry-After": str(max(1, math.ceil(wait)))})
            scope.setdefault("state", {})["api_key_id"] = key_id
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
                limit = LARGE_BODIES.get(path, self.max_body)
                if declared > limit:
                    return _error(413, "payload_too_large", f"the body must be at most {limit} bytes")
        return None
