"""/coupons: the operator makes or updates a coupon (admin; docs/api.md)."""

from __future__ import annotations

from decimal import Decimal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.api.context import Api, actor, require_admin, utc
from billing.api.errors import endpoint_of
from billing.api.validation import ApiError, bigint_field, instant_field, int_field, json_object, text_field


def coupon_json(row: dict) -> dict:
    return {"object": "coupon", "code": row["code"],
            "percentOff": None if row["percent_off"] is None else float(row["percent_off"]),
            "amountOff": row["amount_off"], "currency": row["currency"], "duration": row["duration"],
            "durationPeriods": row["duration_periods"], "maxRedemptions": row["max_redemptions"],
            "maxRedemptionsPerCustomer": row.get("max_redemptions_per_customer"), "timesRedeemed": row["times_redeemed"],
            "redeemBy": utc(row["redeem_by"]), "planCodes": row["plan_codes"],
            "archivedAt": utc(row.get("archived_at"))}


def routes(api: Api) -> list[BaseRoute]:
    database = api.database

    @endpoint_of("/coupons")
    async def upsert_coupon(request: Request) -> Response:
        require_admin(request)
        fields = {"code", "percentOff", "amountOff", "currency", "duration", "durationPeriods", "maxRedemptions",
                  "maxRedemptionsPerCustomer", "redeemBy", "planCodes"}
        doc = await json_object(request, allowed=fields, required={"code", "duration"})
        percent = doc.get("percentOff")
        if percent is not None and (isinstance(percent, bool) or not isinstance(percent, (int, float))):
            raise ApiError(400, "invalid_field", "percentOff must be a number")
        plans = doc.get("planCodes")
        if plans is not None and (not isinstance(plans, list) or not all(isinstance(p, str) for p in plans)):
            raise ApiError(400, "invalid_field", "planCodes must be a list of plan codes")
        opt = lambda name, f: f(doc, name) if doc.get(name) is not None else None  # noqa: E731
        row = await database.mutate(actor(request), db.UPSERT_COUPON, {
            "code": text_field(doc, "code", max_len=64),
            "percent_off": None if percent is None else Decimal(str(percent)),
            "amount_off": opt("amountOff", bigint_field),
            "currency": opt("currency", lambda d, n: text_field(d, n, max_len=3)),
            "duration": text_field(doc, "duration", max_len=20),
            "duration_periods": opt("durationPeriods", lambda d, n: int_field(d, n, 1, 120)),
            "max_redemptions": opt("maxRedemptions", lambda d, n: int_field(d, n, 1, 2**31 - 1)),
            "max_per_customer": opt("maxRedemptionsPerCustomer", lambda d, n: int_field(d, n, 1, 2**31 - 1)),
            "redeem_by": opt("redeemBy", instant_field),
            "plan_codes": plans})
        return JSONResponse(coupon_json(row))

    return [Route("/coupons", upsert_coupon, methods=["POST"])]
