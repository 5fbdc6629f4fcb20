"""/customers/{id}/payment-method: a customer's payment method (docs/providers.md);
/customers/{id}/portal-links: a single-use link to the customer portal (docs/customers.md)."""

from __future__ import annotations

import re
from datetime import timedelta

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.api.context import Api, actor, require_customer, utc
from billing.api.errors import endpoint_of
from billing.api.validation import ApiError, json_object, path_id, text_field
from billing.notifications.links import login_url, new_token, token_hash

_NEXT = re.compile(r"^/[A-Za-z0-9/_-]{0,199}$")


def payment_method_json(row: dict) -> dict:
    """A payment method as the API shows it (the provider references are the caller's own)."""
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
        doc = await json_object(request, allowed=fields,
                                required={"provider", "paymentMethodRef", "expMonth", "expYear"})
        optional = {name: (text_field(doc, name, max_len=255) if doc.get(name) is not None else None)
                    for name in ("customerRef", "brand", "last4")}
        row = await database.mutate(actor(request), db.SET_PAYMENT_METHOD, {
            "customer_id": customer_id, "provider": text_field(doc, "provider", max_len=32),
            "customer_ref": optional["customerRef"], "payment_method_ref": text_field(doc, "paymentMethodRef", max_len=255),
            "brand": optional["brand"], "last4": optional["last4"],
            "exp_month": small_int(doc, "expMonth"), "exp_year": small_int(doc, "expYear"), "now": clock.now()})
        return JSONResponse(payment_method_json(row))

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
