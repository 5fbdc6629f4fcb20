"""How a handler's failures become the contract's error bodies (docs/api.md): `endpoint_of` wraps
every handler of the routers; SQLSTATEs of docs/sql-api.md map to HTTP statuses (BL404 -> 404,
BL409 -> 409, or 412 when the caller sent If-Match, BL422 -> 422)."""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

import psycopg
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from billing import db
from billing.api.validation import ApiError, error_response
from billing.metrics import HTTP_REQUESTS

log = logging.getLogger("billing.api")

Handler = Callable[[Request], Awaitable[Response]]


def endpoint_of(route: str, *, precondition: bool = False) -> Callable[[Handler], Handler]:
    """Maps every failure of a handler to the contract's error body, and counts the request."""

    def wrap(handler: Handler) -> Handler:
        async def endpoint(request: Request) -> Response:
            try:
                response = await handler(request)
            except ApiError as exc:
                response = error_response(exc.status, exc.code, exc.message, exc.headers)
            except psycopg.Error as exc:
                response = database_error(exc, request if precondition else None)
            except PoolTimeout:
                response = error_response(503, "unavailable", "the database is not reachable; retry later")
            HTTP_REQUESTS.labels(route=route, status=str(response.status_code)).inc()
            return response

        endpoint.__name__ = handler.__name__
        return endpoint

    return wrap


def database_error(exc: psycopg.Error, request: Request | None) -> Response:
    err = db.contract_error(exc)
    if err is not None:
        if err.code == "BL404":
            return error_response(404, "not_found", err.message)
        if err.code == "BL409":
            if request is not None and request.headers.get("if-match", "").strip() not in ("", "*"):
                return error_response(412, "precondition_failed", err.message)
            return error_response(409, "conflict", err.message)
        return error_response(422, "invalid_input", err.message)
    state = exc.sqlstate or ""
    if state == "23505":
        return error_response(409, "conflict", "a concurrent request with the same key won; retry to read its result")
    if state.startswith(("22", "23")) or isinstance(exc, psycopg.DataError):
        # data exception, integrity violation: the input was wrong. The database's own text is
        # never echoed (it may name internals); the rule's name is ours and says which rule.
        log.info("request refused by a database rule", extra={"sqlstate": state, "error": str(exc).strip()[:500]})
        rule = exc.diag.constraint_name
        return error_response(422, "invalid_input",
                              f"the request breaks the rule {rule}" if rule else "the input was refused by the database")
    if state.startswith("40"):  # serialization failure, deadlock: a concurrent change won
        return error_response(409, "conflict", "a concurrent change conflicted with this request; retry it")
    if isinstance(exc, psycopg.OperationalError):
        log.warning("database unavailable", extra={"error": str(exc).strip()})
        return error_response(503, "unavailable", "the database is not reachable; retry later")
    log.exception("unexpected database error")
    return error_response(500, "internal", "unexpected database error")


async def http_error(request: Request, exc: HTTPException) -> Response:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
    status = exc.status_code if exc.status_code in (404, 405) else 400
    return error_response(status, code, exc.detail or "bad request", getattr(exc, "headers", None))


async def unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error", exc_info=exc)
    return error_response(500, "internal", "unexpected error")
