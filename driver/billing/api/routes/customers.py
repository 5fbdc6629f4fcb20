"""/customers/{id}/payment-method: a customer's payment method (docs/providers.md)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.api.context import Api, actor, require_customer, utc
from billing.api.errors import endpoint_of
from billing.api.validation import ApiError, json_object, path_id, text_field


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

    return [Route("/customers/{id}/payment-method", put_payment_method, methods=["PUT"])]
