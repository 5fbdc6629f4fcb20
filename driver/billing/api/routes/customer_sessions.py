"""/customer-sessions: a short-lived token that reads and acts on one customer only (issue 27;
docs/security.md, "Customer sessions"). A server key with the scope customer-sessions:write (or
admin) opens one; the token is shown once (only its SHA-256 is stored). billing.api.customer_sessions
has the token's form and what it may do."""

from __future__ import annotations

from datetime import timedelta

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.api.context import Api, actor, bound_customer, utc
from billing.api.customer_sessions import DEFAULT_TTL_SECONDS, MAX_TTL_SECONDS, MIN_TTL_SECONDS, new_customer_token
from billing.api.errors import endpoint_of
from billing.api.validation import ApiError, bigint_field, int_field, json_object


def routes(api: Api) -> list[BaseRoute]:
    database, clock = api.database, api.clock

    @endpoint_of("/customer-sessions")
    async def open_session(request: Request) -> Response:
        if bound_customer(request) is not None:
            raise ApiError(403, "forbidden", "a customer session cannot open another")
        doc = await json_object(request, allowed={"customerId", "ttlSeconds"}, required={"customerId"})
        customer_id = bigint_field(doc, "customerId")
        if customer_id < 1:
            raise ApiError(422, "invalid_input", "customerId must be a positive integer")
        ttl = int_field(doc, "ttlSeconds", MIN_TTL_SECONDS, MAX_TTL_SECONDS) \
            if doc.get("ttlSeconds") is not None else DEFAULT_TTL_SECONDS
        token = new_customer_token(customer_id)
        row = await database.mutate(actor(request), db.OPEN_CUSTOMER_SESSION, {
            "customer_id": customer_id, "hash": token.token_hash, "ttl": timedelta(seconds=ttl), "now": clock.now()})
        return JSONResponse({"object": "customer_session", "customerId": row["customer_id"], "token": token.token,
                             "expiresAt": utc(row["expires_at"])}, status_code=201,
                            headers={"Cache-Control": "no-store"})

    return [Route("/customer-sessions", open_session, methods=["POST"])]
