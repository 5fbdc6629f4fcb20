"""/subscriptions: create, read, and the lifecycle's calls (docs/api.md, docs/lifecycle.md)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.api.context import (
    Api, actor, bound_customer, guardrail, guardrails_of, idempotency_key, is_admin, refuse_for_customer,
    require_customer, require_subscription_of,
)
from billing.api.errors import endpoint_of
from billing.api.validation import (
    bigint_field, bool_field, if_match, instant_field, int_field, json_object, path_id, subscription_response,
    text_field, ApiError,
)



def signup_terms(request: Request, doc: dict, where: str = "") -> dict:
    """A signup's terms read from its JSON object, with the checks of the caller's key: its own customer
    only for a customer token, the key's seat and trial limits. One home for POST /subscriptions and
    each row of POST /v1/subscriptions/batch (where = "signup N: " names the row in an error)."""
    customer_id = bigint_field(doc, "customerId")
    if customer_id < 1:  # found by the fuzzer: customer 0 was accepted, its events broke their schema
        raise ApiError(422, "invalid_input", f"{where}customerId must be a positive integer")
    terms = {"customer_id": customer_id, "plan_code": text_field(doc, "planCode"),
             "trial_days": int_field(doc, "trialDays", 0, 730) if doc.get("trialDays") is not None else 0,
             "coupon_code": text_field(doc, "couponCode", max_len=64) if doc.get("couponCode") is not None else None,
             "quantity": int_field(doc, "quantity", 1, 1_000_000) if doc.get("quantity") is not None else 1,
             "external_id": text_field(doc, "externalId", max_len=255) if doc.get("externalId") is not None else None}
    require_customer(request, customer_id)  # a customer token subscribes its own customer only
    # ... on the plan's own terms: no coupon, no trial of its choosing (docs/security.md, "Customer sessions")
    if doc.get("couponCode") is not None:
        refuse_for_customer(request, "pass a coupon", where)
    if doc.get("trialDays") is not None:
        refuse_for_customer(request, "choose trial days (a subscription it makes has the plan's own terms)", where)
    if doc.get("externalId") is not None:  # the operator's own ids: a browser squatting one would be addressed by them
        refuse_for_customer(request, "choose an external id (they are the operator's own ids)", where)
    limits = guardrails_of(request)
    guardrail(request, limits.max_quantity is None or terms["quantity"] <= limits.max_quantity,
              f"this API key may create subscriptions of at most {limits.max_quantity} seats")
    guardrail(request, limits.max_trial_days is None or terms["trial_days"] <= limits.max_trial_days,
              f"this API key may give trials of at most {limits.max_trial_days} days")
    return terms


def self_serve_check(request: Request, plan_codes: list[str], wheres: list[str] | None = None):
    """A customer session signs up only to a plan the operator sells to customers themselves
    (plan.self_serve, migration 0850): 403 `forbidden` for any other, an unknown code too (no oracle
    of the operator's plan codes), before anything is written. The check for Database.mutate's
    `check`: read in the signup's own transaction, the plans locked FOR SHARE
    (billing.lock_self_serve_plans), so a switch-off at that instant is waited for and refuses, or
    waits for the signup. A server key: None, nothing to check."""
    if bound_customer(request) is None:
        return None

    def test(row: dict | None) -> None:
        sellable = set((row or {}).get("codes") or ())
        for n, code in enumerate(plan_codes):
            if code not in sellable:
                refuse_for_customer(request, f"sign up to plan {code}: customers may not choose it themselves "
                                             "(the operator has not made it self-serve)", wheres[n] if wheres else "")

    return db.API_LOCK_SELF_SERVE_PLANS, {"codes": sorted(set(plan_codes))}, test


def routes(api: Api) -> list[BaseRoute]:
    database, clock = api.database, api.clock

    @endpoint_of("/subscriptions")
    async def create_subscription(request: Request) -> Response:
        key = idempotency_key(request)
        doc = await json_object(request, allowed={"customerId", "planCode", "trialDays", "couponCode", "quantity",
                                                  "externalId"},
                                required={"customerId", "planCode"})
        terms = signup_terms(request, doc)
        row = await database.mutate(actor(request), db.API_CREATE_SUBSCRIPTION, {
            "key": key, "now": clock.now(), **terms}, check=self_serve_check(request, [terms["plan_code"]]))
        created = bool(row and row["created"])
        return subscription_response(row, 201 if created else 200, {"Location": f"/subscriptions/{row['id']}"})

    @endpoint_of("/subscriptions/{id}")
    async def get_subscription(request: Request) -> Response:
        row = await database.one(db.API_GET_SUBSCRIPTION, {"id": path_id(request)})
        if row is not None:
            require_customer(request, row["customer_id"])
        return subscription_response(row)

    @endpoint_of("/subscriptions/{id}/cancel", precondition=True)
    async def cancel_subscription(request: Request) -> Response:
        sub_id = path_id(request)
        expected = if_match(request)
        doc = await json_object(request, allowed={"atPeriodEnd"}, required={"atPeriodEnd"})
        await require_subscription_of(request, database, sub_id)
        row = await database.mutate(actor(request), db.API_CANCEL_SUBSCRIPTION, {
            "id": sub_id, "at_period_end": bool_field(doc, "atPeriodEnd"),
            "now": clock.now(), "expected_version": expected})
        return subscription_response(row)

    @endpoint_of("/subscriptions/{id}/change-plan", precondition=True)
    async def change_plan(request: Request) -> Response:
        sub_id = path_id(request)
        expected = if_match(request)
        doc = await json_object(request, allowed={"planCode", "when", "prorate"}, required={"planCode"})
        when = text_field(doc, "when", max_len=20) if doc.get("when") is not None else "now"
        if when not in ("now", "period_end"):
            raise ApiError(422, "invalid_input", "when must be now or period_end")
        prorate = bool_field(doc, "prorate") if doc.get("prorate") is not None else True
        # A change without proration bills nothing for the rest of the period: the operator's, or a
        # key created with --allow-no-proration (docs/security.md, "Key guardrails").
        if not prorate:  # never a customer session's, whatever its opening key may
            refuse_for_customer(request, "change a plan without proration")
        guardrail(request, prorate or is_admin(request) or guardrails_of(request).allow_no_proration,
                  "prorate: false needs the admin scope or a key created with --allow-no-proration")
        bound = bound_customer(request)
        if bound is not None:
            # A customer session changes plans as the portal does: only to a plan the operator offers
            # from this one (set_plan_change_options), prorated, when the offer says (its `when`
            # wins); never to a plan of its choosing, such as a free plan kept for staff.
            current = await database.one(db.API_GET_SUBSCRIPTION, {"id": sub_id})
            require_customer(request, current["customer_id"] if current else None)
            if expected is not None and current["version"] != expected:
                raise ApiError(412, "precondition_failed", f"subscription {sub_id} is at version {current['version']}")
            row = await database.mutate(actor(request), db.API_PORTAL_CHANGE_PLAN, {
                "customer_id": bound, "id": sub_id, "plan_code": text_field(doc, "planCode"), "now": clock.now()})
            return subscription_response(row)
        await require_subscription_of(request, database, sub_id)
        row = await database.mutate(actor(request), db.API_CHANGE_PLAN, {
            "id": sub_id, "plan_code": text_field(doc, "planCode"),
            "now": clock.now(), "expected_version": expected, "when": when, "prorate": prorate})
        return subscription_response(row)

    # -- the lifecycle (docs/lifecycle.md) -------------------------------------------------------
    @endpoint_of("/subscriptions/{id}/coupon")
    async def apply_coupon(request: Request) -> Response:
        refuse_for_customer(request, "apply a coupon")  # (ApiGuard refuses it first: billing.api.security)
        sub_id = path_id(request)
        doc = await json_object(request, allowed={"couponCode"}, required={"couponCode"})
        await require_subscription_of(request, database, sub_id)
        row = await database.mutate(actor(request), db.API_APPLY_COUPON, {
            "id": sub_id, "code": text_field(doc, "couponCode", max_len=64), "now": clock.now()})
        return subscription_response(row)

    @endpoint_of("/subscriptions/{id}/pause")
    async def pause_subscription(request: Request) -> Response:
        sub_id = path_id(request)
        doc = await json_object(request, allowed={"resumeAt"}, required=set(), optional_body=True)
        resume_at = instant_field(doc, "resumeAt") if doc.get("resumeAt") is not None else None
        await require_subscription_of(request, database, sub_id)
        row = await database.mutate(actor(request), db.API_PAUSE_SUBSCRIPTION, {
            "id": sub_id, "resume_at": resume_at, "now": clock.now()})
        return subscription_response(row)

    def no_body_call(route: str, query: str):
        @endpoint_of(route)
        async def handler(request: Request) -> Response:
            sub_id = path_id(request)
            await json_object(request, allowed=set(), required=set(), optional_body=True)
            await require_subscription_of(request, database, sub_id)
            row = await database.mutate(actor(request), query, {"id": sub_id, "now": clock.now()})
            return subscription_response(row)
        return handler

    @endpoint_of("/subscriptions/{id}/quantity")
    async def set_quantity(request: Request) -> Response:
        sub_id = path_id(request)
        doc = await json_object(request, allowed={"quantity"}, required={"quantity"})
        quantity = int_field(doc, "quantity", 1, 1_000_000)
        limits = guardrails_of(request)
        guardrail(request, limits.max_quantity is None or quantity <= limits.max_quantity,
                  f"this API key may set at most {limits.max_quantity} seats")
        await require_subscription_of(request, database, sub_id)
        row = await database.mutate(actor(request), db.API_SET_QUANTITY, {
            "id": sub_id, "quantity": quantity, "now": clock.now()})
        return subscription_response(row)

    return [
        Route("/subscriptions", create_subscription, methods=["POST"]),
        Route("/subscriptions/{id}", get_subscription, methods=["GET"]),
        Route("/subscriptions/{id}/cancel", cancel_subscription, methods=["POST"]),
        Route("/subscriptions/{id}/change-plan", change_plan, methods=["POST"]),
        Route("/subscriptions/{id}/coupon", apply_coupon, methods=["POST"]),
        Route("/subscriptions/{id}/pause", pause_subscription, methods=["POST"]),
        Route("/subscriptions/{id}/resume", no_body_call("/subscriptions/{id}/resume", db.API_RESUME_SUBSCRIPTION),
              methods=["POST"]),
        Route("/subscriptions/{id}/uncancel",
              no_body_call("/subscriptions/{id}/uncancel", db.API_UNCANCEL_SUBSCRIPTION), methods=["POST"]),
        Route("/subscriptions/{id}/reactivate",
              no_body_call("/subscriptions/{id}/reactivate", db.API_REACTIVATE_SUBSCRIPTION), methods=["POST"]),
        Route("/subscriptions/{id}/quantity", set_quantity, methods=["POST"]),
    ]
