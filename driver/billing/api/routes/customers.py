"""/customers/{id}/payment-method: a customer's payment method (docs/providers.md);
/customers/{id}/portal-links: a single-use link to the customer portal (docs/customers.md)."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import aiohttp
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db, people
from billing.api.context import Api, actor, bound_customer, require_customer, sees_people, utc
from billing.api.errors import endpoint_of
from billing.api.validation import ApiError, json_object, path_id, text_field
from billing.notifications.links import login_url, new_token, token_hash
from billing.providers import LookupFailed

_NEXT = re.compile(r"^/[A-Za-z0-9/_-]{0,199}$")
_SETUP_INTENT = re.compile(r"^seti_[A-Za-z0-9_]{1,95}$")


def payment_method_json(row: dict, sees: bool) -> dict:
    """A payment method as the API shows it (the provider references are the caller's own); for a
    caller without customers:read (`sees` false: billing.people) ids only, the card and the
    references null."""
    row = people.payment_method_for(row, sees)
    return {"object": "payment_method", "id": row["id"], "customerId": row["customer_id"], "provider": row["provider"],
            "customerRef": row["customer_ref"], "paymentMethodRef": row["payment_method_ref"], "brand": row["brand"],
            "last4": row["last4"], "expMonth": row["exp_month"], "expYear": row["exp_year"],
            "isDefault": row["is_default"], "status": row["status"], "updatedAt": utc(row["updated_at"])}


def small_int(doc: dict, name: str) -> int:
    value = doc[name]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, "invalid_field", f"{name} must be an integer")
    if not 0 <= value <= 10000:
        raise ApiError(422, "invalid_input", f"{name} is out of range")
    return value


def routes(api: Api) -> list[BaseRoute]:
    database, clock = api.database, api.clock

    @endpoint_of("/customers/{id}/payment-method")
    async def put_payment_method(request: Request) -> Response:
        customer_id = path_id(request, "customer")
        require_customer(request, customer_id)  # a customer token sets its own customer's method only
        fields = {"provider", "customerRef", "paymentMethodRef", "brand", "last4", "expMonth", "expYear"}
        if bound_customer(request) is not None:
            return await proven_payment_method(request, customer_id, fields)
        doc = await json_object(request, allowed=fields,
                                required={"provider", "paymentMethodRef", "expMonth", "expYear"})
        optional = {name: (text_field(doc, name, max_len=255) if doc.get(name) is not None else None)
                    for name in ("customerRef", "brand", "last4")}
        row = await database.mutate(actor(request), db.SET_PAYMENT_METHOD, {
            "customer_id": customer_id, "provider": text_field(doc, "provider", max_len=32),
            "customer_ref": optional["customerRef"], "payment_method_ref": text_field(doc, "paymentMethodRef", max_len=255),
            "brand": optional["brand"], "last4": optional["last4"],
            "exp_month": small_int(doc, "expMonth"), "exp_year": small_int(doc, "expYear"), "now": clock.now()})
        return JSONResponse(payment_method_json(row, sees_people(request)))

    async def proven_payment_method(request: Request, customer_id: int, fields: set[str]) -> Response:
        """A customer token's payment method: never a reference of its choosing (a card number it
        read somewhere, another customer's method), only a SetupIntent that the provider confirms
        was made for this customer and succeeded: the portal's check (billing.portal.cards.finish).
        {"provider": "stripe", "setupIntentId": "seti_..."}; 403 for anything else or a SetupIntent
        it cannot prove, 422 for one not (yet) succeeded: nothing is stored then."""
        from billing.portal import cards

        doc = await json_object(request, allowed=fields | {"setupIntentId"}, required=set())
        if set(doc) - {"provider", "setupIntentId"} or doc.get("provider", "stripe") != "stripe" \
                or not isinstance(doc.get("setupIntentId"), str):
            raise ApiError(403, "forbidden", "a customer session sets a payment method only through a SetupIntent "
                                             "its provider confirms: {\"provider\": \"stripe\", \"setupIntentId\": \"seti_...\"}")
        setup_id = doc["setupIntentId"]
        if not _SETUP_INTENT.match(setup_id):
            raise ApiError(403, "forbidden", "no such SetupIntent for this customer")
        provider = api.stripe if api.stripe is not None and api.stripe.api_key else None
        if provider is None:
            raise ApiError(503, "unavailable", "no card provider is configured")
        try:
            outcome = await cards.finish(database, provider, customer_id, setup_id, now=clock.now(), actor=actor(request))
        except LookupFailed as exc:  # one the provider refuses or does not know (its 4xx) is not proven
            if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:  # 429: rate-limited, retry
                raise ApiError(403, "forbidden", "no such SetupIntent for this customer") from None
            raise ApiError(503, "unavailable", "the card provider did not answer; retry later") from None
        except (aiohttp.ClientError, asyncio.TimeoutError):
            raise ApiError(503, "unavailable", "the card provider did not answer; retry later") from None
        if outcome == "not_found":
            raise ApiError(403, "forbidden", "no such SetupIntent for this customer")
        if outcome != "added":
            raise ApiError(422, "invalid_input", f"the SetupIntent has not succeeded ({outcome}): nothing was stored")
        rows = await database.all(db.V1_LIST_PAYMENT_METHODS, {"customer_id": customer_id})
        return JSONResponse(payment_method_json(next(r for r in rows if r["is_default"]), sees_people(request)))

    @endpoint_of("/customers/{id}/portal-links")
    async def post_portal_link(request: Request) -> Response:
        customer_id = path_id(request, "customer")
        # A customer token may ask for its own customer's link only: a link opens the portal as
        # the customer it names (404 for another customer, as every customer route).
        require_customer(request, customer_id)
        doc = await json_object(request, allowed={"next"}, required=set(), optional_body=True)
        next_path = doc.get("next") or "/"
        if not isinstance(next_path, str) or not _NEXT.match(next_path) or "//" in next_path:
            raise ApiError(422, "invalid_input", "next must be a path of the portal such as /invoices")
        token = new_token(customer_id)
        row = await database.mutate(actor(request), db.CREATE_PORTAL_LINK, {
            "customer_id": customer_id, "hash": token_hash(token),
            "ttl": timedelta(hours=api.settings.portal_link_hours), "now": clock.now()})
        return JSONResponse({"object": "portal_link", "customerId": row["customer_id"],
                             "url": login_url(api.settings.portal_url, token, next_path),
                             "expiresAt": utc(row["expires_at"])}, status_code=201)

    return [Route("/customers/{id}/payment-method", put_payment_method, methods=["PUT"]),
            Route("/customers/{id}/portal-links", post_portal_link, methods=["POST"])]
