"""/webhook-endpoints: the operator's outbound webhook endpoints and their delivery attempts
(admin; docs/webhooks.md)."""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.api.context import Api, actor, require_admin, utc
from billing.api.errors import endpoint_of
from billing.config import webhook_secret_problem
from billing.api.validation import ApiError, json_object, path_id, text_field
from billing.events.schemas import catalogue
from billing.worker.targets import BlockedAddress, check_target


def endpoint_json(row: dict, *, with_secret: bool = False) -> dict:
    """A webhook endpoint as the API shows it; its secret only in the answer to its creation."""
    out = {"object": "webhook_endpoint", "id": row["id"], "url": row["url"], "eventTypes": row["event_types"],
           "status": row["status"], "createdAt": utc(row["created_at"]), "disabledAt": utc(row["disabled_at"]),
           "disabledReason": row["disabled_reason"]}
    if with_secret:
        out["secret"] = row["secret"]
    return out


def attempt_json(row: dict) -> dict:
    return {"object": "webhook_attempt", "eventId": str(row["event_id"]), "eventType": row["event_type"],
            "outboxId": row["outbox_id"], "attempt": row["attempt"], "attemptedAt": utc(row["attempted_at"]),
            "statusCode": row["status_code"], "error": row["error"], "durationMs": row["duration_ms"],
            "deliveryStatus": row["delivery_status"]}


def routes(api: Api) -> list[BaseRoute]:
    database, clock, settings = api.database, api.clock, api.settings

    @endpoint_of("/webhook-endpoints")
    async def create_webhook_endpoint(request: Request) -> Response:
        require_admin(request)
        doc = await json_object(request, allowed={"url", "eventTypes", "secret"}, required={"url", "eventTypes"})
        url = text_field(doc, "url", max_len=2048)
        try:
            check_target(url, allow_private=settings.webhook_allow_private)
        except BlockedAddress as exc:
            raise ApiError(422, "invalid_input", f"url: {exc} (private and loopback targets are not allowed)") from None
        except ValueError as exc:
            raise ApiError(422, "invalid_input", f"url: {exc}") from None
        types = doc["eventTypes"]
        if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
            raise ApiError(400, "invalid_field", "eventTypes must be a non-empty list of event type names, or [\"*\"]")
        unknown = sorted(set(types) - catalogue().types - {"*"})
        if unknown:
            raise ApiError(422, "invalid_input", f"unknown event type(s): {', '.join(unknown)[:300]}; see docs/events.md")
        secret = text_field(doc, "secret", max_len=256) if doc.get("secret") is not None else \
            "whsec_" + secrets.token_urlsafe(32)
        if doc.get("secret") is not None:
            # an operator's own secret: 32 bytes of entropy or more, not guessable (issue 27, finding 8)
            problem = webhook_secret_problem(secret)
            if problem:
                raise ApiError(422, "invalid_input", problem)
        row = await database.mutate(actor(request), db.CREATE_WEBHOOK_ENDPOINT,
                                    {"url": url, "types": types, "secret": secret, "now": clock.now()})
        return JSONResponse(endpoint_json(row, with_secret=True), status_code=201,
                            headers={"Location": f"/webhook-endpoints/{row['id']}"})

    @endpoint_of("/webhook-endpoints")
    async def list_webhook_endpoints(request: Request) -> Response:
        require_admin(request)
        rows = await database.all(db.LIST_WEBHOOK_ENDPOINTS)
        return JSONResponse({"object": "list", "data": [endpoint_json(r) for r in rows]})

    @endpoint_of("/webhook-endpoints/{id}")
    async def get_webhook_endpoint(request: Request) -> Response:
        require_admin(request)
        return JSONResponse(endpoint_json(await database.one(db.GET_WEBHOOK_ENDPOINT, {"id": path_id(request)})))

    @endpoint_of("/webhook-endpoints/{id}")
    async def delete_webhook_endpoint(request: Request) -> Response:
        require_admin(request)
        row = await database.mutate(actor(request), db.DELETE_WEBHOOK_ENDPOINT, {"id": path_id(request)})
        return JSONResponse({"object": "webhook_endpoint", "id": row["id"], "deleted": True})

    @endpoint_of("/webhook-endpoints/{id}/attempts")
    async def list_webhook_attempts(request: Request) -> Response:
        require_admin(request)
        raw = request.query_params.get("limit", "100")
        if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= 1000:
            raise ApiError(400, "invalid_field", "limit must be an integer from 1 to 1000")
        rows = await database.all(db.LIST_WEBHOOK_ATTEMPTS, {"id": path_id(request), "limit": int(raw)})
        return JSONResponse({"object": "list", "data": [attempt_json(r) for r in rows]})

    return [
        Route("/webhook-endpoints", create_webhook_endpoint, methods=["POST"]),
        Route("/webhook-endpoints", list_webhook_endpoints, methods=["GET"]),
        Route("/webhook-endpoints/{id}", get_webhook_endpoint, methods=["GET"]),
        Route("/webhook-endpoints/{id}", delete_webhook_endpoint, methods=["DELETE"]),
        Route("/webhook-endpoints/{id}/attempts", list_webhook_attempts, methods=["GET"]),
    ]
