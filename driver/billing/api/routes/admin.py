"""/admin/audit: the audit log, newest first (admin; docs/security.md)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.api.context import Api
from billing.api.errors import endpoint_of
from billing.api.validation import BIGINT_MAX, iso_utc, query_int, query_text


def routes(api: Api) -> list[BaseRoute]:
    database = api.database

    @endpoint_of("/admin/audit")
    async def audit(request: Request) -> Response:
        q = request.query_params
        before = query_int(q, "beforeId", 1, BIGINT_MAX)
        limit = query_int(q, "limit", 1, 1000) or 100
        rows = await database.all(db.READ_AUDIT, {
            "before": before, "limit": limit, "actor": query_text(q, "actor"), "function": query_text(q, "function")})
        entries = [{"id": r["id"], "at": iso_utc(r["at"]), "actor": r["actor"], "dbRole": r["db_role"],
                    "function": r["function"], "args": r["args"]} for r in rows]
        return JSONResponse({"entries": entries,
                             "nextBeforeId": entries[-1]["id"] if len(entries) == limit else None})

    return [Route("/admin/audit", audit, methods=["GET"])]
