"""The customers' side of the demo: their actions of a clock step applied through the SQL API,
each at its own instant, and the clock's steps over the window."""

from __future__ import annotations

from datetime import datetime, timedelta

import psycopg

from billing import db
from billing.demo.scenario import Action, Scenario, billing_details


class NothingToRefund(Exception):
    """The customer has no PAID invoice with money left to refund."""


async def apply_actions(conn: psycopg.AsyncConnection, batch: list[Action], sub_ids: dict[int, int],
                        rejections: dict[str, int]) -> None:
    """Signups first (two statements for the whole batch), then the plan changes and
    cancellations in order. An action the SQL API refuses (e.g. a customer canceling a
    subscription that dunning already canceled) is counted in `rejections`, not fatal."""
    signups = [a for a in batch if a.kind == "signup"]
    if signups:
        await apply_signups(conn, signups, sub_ids)
    for a in batch:
        if a.kind == "signup":
            continue
        try:
            await apply_change(conn, a, sub_ids[a.customer_id])
        except NothingToRefund:
            rejections[f"{a.kind} none paid"] = rejections.get(f"{a.kind} none paid", 0) + 1
        except psycopg.Error as exc:
            err = db.contract_error(exc)
            if err is None:
                raise
            rejections[f"{a.kind} {err.code}"] = rejections.get(f"{a.kind} {err.code}", 0) + 1


async def apply_signups(conn: psycopg.AsyncConnection, actions: list[Action], sub_ids: dict[int, int]) -> None:
    customer_ids = [a.customer_id for a in actions]
    await conn.execute(db.DEMO_SIGNUP_CUSTOMERS,
                       {"customer_ids": customer_ids, "timezones": [a.timezone for a in actions]})
    details = [billing_details(a.customer_id, a.timezone) for a in actions]
    columns = ("names", "emails", "addresses", "cities", "postal_codes", "regions", "countries", "tax_ids", "statuses")
    await conn.execute(db.DEMO_CUSTOMER_DETAILS, {"ids": customer_ids, **{
        c: [d[i] for d in details] for i, c in enumerate(columns)}})
    cur = await conn.execute(db.DEMO_SIGNUP_SUBSCRIPTIONS, {
        "keys": [f"demo-signup-{a.customer_id}" for a in actions], "customer_ids": customer_ids,
        "plan_codes": [a.plan_code for a in actions], "ats": [a.at for a in actions],
        "trial_days": [a.trial_days for a in actions], "coupons": [a.coupon for a in actions],
        "quantities": [a.quantity for a in actions]})
    for row in await cur.fetchall():
        sub_ids[row["customer_id"]] = row["id"]


async def apply_change(conn: psycopg.AsyncConnection, a: Action, sub_id: int) -> None:
    if a.kind in ("upgrade", "downgrade"):
        await conn.execute(db.CHANGE_PLAN, {"id": sub_id, "plan_code": a.plan_code, "now": a.at,
                                            "expected_version": None})
    elif a.kind in ("cancel_now", "cancel_at_end"):
        await conn.execute(db.CANCEL_SUBSCRIPTION, {"id": sub_id, "at_period_end": a.kind == "cancel_at_end",
                                                    "now": a.at, "expected_version": None})
    elif a.kind == "seats":
        await conn.execute(db.API_SET_QUANTITY, {"id": sub_id, "quantity": a.quantity, "now": a.at})
    elif a.kind == "pause":
        await conn.execute(db.API_PAUSE_SUBSCRIPTION, {"id": sub_id, "resume_at": a.resume_at, "now": a.at})
    elif a.kind == "resume":
        await conn.execute(db.API_RESUME_SUBSCRIPTION, {"id": sub_id, "now": a.at})
    elif a.kind == "uncancel":
        await conn.execute(db.API_UNCANCEL_SUBSCRIPTION, {"id": sub_id, "now": a.at})
    elif a.kind == "refund":
        # Half of what the customer's last payment has left, through refund_invoice (the worker's
        # refund loop executes it at the gateway).
        cur = await conn.execute(db.DEMO_REFUND_INVOICE, {"customer_id": a.customer_id, "now": a.at})
        if await cur.fetchone() is None:
            raise NothingToRefund()  # counted with the refused actions
    else:  # pragma: no cover - the scenario makes no other kind
        raise ValueError(a.kind)


def estimate_renewals(sc: Scenario) -> int:
    """About how many renewals the window holds if nobody cancels (for the progress bar only)."""
    per_plan = {p.code: p for p in sc.plans}
    end = sc.end
    total = 0
    for a in sc.actions:
        if a.kind != "signup" or a.at >= end:
            continue
        interval, at = per_plan[a.plan_code].interval, a.at
        if interval == "WEEK":
            total += (end - at).days // 7
        elif interval in ("MONTH", "YEAR"):
            months = (end.year - at.year) * 12 + end.month - at.month
            if (end.day, end.hour, end.minute) < (at.day, at.hour, at.minute):
                months -= 1
            total += max(0, months if interval == "MONTH" else months // 12)
        else:
            total += (end - at).days
    return total


def next_step(now: datetime, fine: timedelta, coarse: timedelta, peaks, end: datetime) -> datetime:
    """The next instant of the clock: `fine` steps within a peak window, `coarse` ones elsewhere
    (aligned on multiples of `coarse` from midnight UTC, never stepping over a peak's start)."""
    for a, b in peaks:
        if a <= now < b:
            return min(now + fine, b, end)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    n = int((now - midnight) / coarse) + 1
    target = midnight + n * coarse
    for a, _ in peaks:
        if now < a < target:
            target = a
    return min(target, end)
