"""Customer-scoped tokens (issue 27; docs/security.md, "Customer sessions").

A server key with the scope `customer-sessions:write` (or admin) asks `POST /customer-sessions
{"customerId": 42, "ttlSeconds": 900}` and gets `cs_42_<secret>`: a token a front-end (a customer
portal, a checkout page) may hold, that reads and acts on customer 42 only, for at most an hour.

* Form: `cs_<customer id>_<43 characters of URL-safe base64: 32 random bytes>`. The customer id is
  in the token so that its check is one lookup by (customer_id, token hash), one shard on Citus.
* Only the SHA-256 of the whole token is stored (billing.customer_session); the check is
  `billing.customer_session(customer_id, hash, now)`, made by ApiGuard on every request that
  carries one; a revoked opening key ends its sessions at once.
* What such a token may do: `CUSTOMER_SCOPES` below, and only on its customer's resources:
  every handler that reads or changes a customer's data calls `require_customer(request, id)`
  (404 for another customer's, as if it did not exist). The opening key's guardrails apply.
"""

from __future__ import annotations

import base64
import re
import secrets
from dataclasses import dataclass

from billing import signing

TOKEN_PREFIX = "cs_"
_TOKEN_FORM = re.compile(r"^cs_([1-9][0-9]{0,17})_[A-Za-z0-9_-]{43}$")
# What a customer token may do (on its own customer only): read its subscriptions and invoices,
# change them the ways a customer may, and set its payment method. Never refunds, coupons,
# webhooks, the audit log or anything admin.
CUSTOMER_SCOPES = ("subscriptions:read", "subscriptions:write")
MIN_TTL_SECONDS = 60
MAX_TTL_SECONDS = 3600
DEFAULT_TTL_SECONDS = 900


@dataclass(frozen=True)
class CustomerToken:
    customer_id: int
    token: str  # shown once, never stored

    @property
    def token_hash(self) -> bytes:
        return hash_token(self.token)


def new_customer_token(customer_id: int) -> CustomerToken:
    if not isinstance(customer_id, int) or customer_id < 1:
        raise ValueError("a customer id is a positive integer")
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    return CustomerToken(customer_id, f"{TOKEN_PREFIX}{customer_id}_{secret}")


def hash_token(token: str) -> bytes:
    return signing.token_hash(token)


def parse_customer_token(token: str) -> int | None:
    """The customer id a well-formed token names, else None (nothing is looked up here)."""
    m = _TOKEN_FORM.match(token)
    return int(m.group(1)) if m else None


class NotYourCustomer(Exception):
    """A customer token reached for another customer's resource: answered 404."""


def token_customer(scope_or_request) -> int | None:
    """The customer a request's token is bound to, or None for a server key."""
    state = scope_or_request.get("state", {}) if isinstance(scope_or_request, dict) else \
        getattr(scope_or_request, "scope", {}).get("state", {})
    return state.get("customer_id")


def require_customer(request, customer_id: int | None) -> None:
    """Raises NotYourCustomer when the request carries a customer token bound to another
    customer than `customer_id` (None: the resource has no customer it could show: refused too)."""
    bound = token_customer(request)
    if bound is not None and bound != customer_id:
        raise NotYourCustomer()
