"""`billing import stripe`: a Stripe account read through its REST API and mapped (docs/import.md).

Read with the account's secret key (`BILLING_STRIPE_API_KEY`, at `BILLING_STRIPE_API_BASE`), page
by page (`limit=100`, `starting_after`): prices (with their products), coupons, customers (with
their default payment method expanded) and subscriptions (`status=all`, discounts expanded).

The mapping, and what it refuses rather than guesses:

* a recurring per-unit licensed price -> a plan: code = the price's `lookup_key` or its id,
  amount = `unit_amount`, interval and count, external id = the price id. Metered, tiered or
  decimal prices are refused (no such plan here); one-time prices are not plans and are skipped;
* a coupon -> a coupon of the same code (percent or amount off, once / repeating (months) /
  forever, max redemptions, redeem-by); a code outside `[A-Za-z0-9_-]{1,64}` is refused;
* a customer -> a customer (external id = its id; name, email; UTC: Stripe's periods are UTC
  instants, and so are the calendar's months here) and its default card -> the default payment
  method (provider `stripe`);
* a subscription -> an `active` or `trialing` one in its current period (the items' period, or the
  subscription's on older API versions), one item (its price and quantity), its discount's coupon
  until the discount's end, cancel at period end. Refused: several items, `past_due` / `unpaid` /
  `incomplete` (a period unpaid at Stripe is Stripe's to collect), paused collection, invoices
  sent for manual payment; `canceled` and `incomplete_expired` ones are over and skipped.

The import never tells Stripe anything: stop Stripe's renewals (cancel at period end there, or
pause collection) for what was imported before its current periods end, or the period after
would be billed on both sides. docs/import.md, "Switching over".
"""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

from billing.importer import Coupon, Customer, PaymentMethod, Plan, Source, Unmapped, as_utc

COUPON_CODE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")
INTERVALS = {"day": "DAY", "week": "WEEK", "month": "MONTH", "year": "YEAR"}


class StripeError(RuntimeError):
    pass


class StripeReader:
    def __init__(self, api_key: str, api_base: str = "https://api.stripe.com", timeout: float = 30.0):
        self.api_key = api_key
        self.api_base = api_base.rstrip("/")
        self.timeout = timeout
        self.requests = 0

    def get(self, path: str, params: list[tuple[str, str]]) -> dict:
        url = f"{self.api_base}{path}?{urllib.parse.urlencode(params)}"
        auth = base64.b64encode(f"{self.api_key}:".encode()).decode()
        request = urllib.request.Request(url, headers={"Authorization": f"Basic {auth}"})
        self.requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")[:500]
            raise StripeError(f"GET {path}: HTTP {exc.code}: {body}") from None
        except urllib.error.URLError as exc:
            raise StripeError(f"GET {path}: {exc.reason}") from None

    def list(self, path: str, extra: list[tuple[str, str]] = ()) -> Iterator[dict]:
        """Every object of a list endpoint, page by page."""
        after: str | None = None
        while True:
            params = [("limit", "100"), *extra] + ([("starting_after", after)] if after else [])
            page = self.get(path, params)
            data = page.get("data") or []
            yield from data
            if not page.get("has_more") or not data:
                return
            after = data[-1]["id"]


def map_price(price: dict) -> Plan | Unmapped | None:
    recurring = price.get("recurring")
    if price.get("type") != "recurring" or not recurring:
        return None  # a one-time price is not a plan
    if recurring.get("usage_type") != "licensed":
        return Unmapped("plan", price["id"], "a metered price (usage-based plans are not imported)")
    if price.get("billing_scheme") != "per_unit" or price.get("unit_amount") is None:
        return Unmapped("plan", price["id"], "a tiered or decimal price (only a whole per-unit amount is a plan here)")
    interval = INTERVALS.get(recurring.get("interval"))
    if interval is None:
        return Unmapped("plan", price["id"], f"unknown interval {recurring.get('interval')!r}")
    code = price.get("lookup_key") or price["id"]
    if len(code) > 100:
        code = price["id"]
    return Plan(code=code, price=int(price["unit_amount"]), currency=str(price["currency"]).upper(),
                interval=interval, count=int(recurring.get("interval_count") or 1), external_id=price["id"])


def map_coupon(coupon: dict) -> Coupon | Unmapped:
    if not COUPON_CODE.match(coupon.get("id") or ""):
        return Unmapped("coupon", coupon.get("id") or "?", "its id is not a coupon code here ([A-Za-z0-9_-], 1 to 64)")
    duration = coupon.get("duration")
    if duration not in ("once", "repeating", "forever"):
        return Unmapped("coupon", coupon["id"], f"unknown duration {duration!r}")
    return Coupon(code=coupon["id"], duration=duration, percent_off=coupon.get("percent_off"),
                  amount_off=coupon.get("amount_off"),
                  currency=str(coupon["currency"]).upper() if coupon.get("amount_off") else None,
                  duration_periods=coupon.get("duration_in_months") if duration == "repeating" else None,
                  max_redemptions=coupon.get("max_redemptions"), redeem_by=as_utc(coupon.get("redeem_by")))


def map_customer(customer: dict) -> Customer | Unmapped:
    if customer.get("deleted"):
        return Unmapped("customer", customer["id"], "deleted at Stripe")
    email = customer.get("email")
    name = customer.get("name")
    row = {"external_id": customer["id"], "timezone": "UTC",
           "name": name if name and name.strip() and len(name) <= 200 else None,
           "email": email if email and EMAIL.match(email) and len(email) <= 254 else None}
    method = None
    pm = (customer.get("invoice_settings") or {}).get("default_payment_method")
    if isinstance(pm, dict) and pm.get("type") == "card" and pm.get("card"):
        card = pm["card"]
        last4 = card.get("last4")
        method = PaymentMethod(provider="stripe", customer_ref=customer["id"], payment_method_ref=pm["id"],
                               brand=card.get("brand"), last4=last4 if last4 and re.fullmatch(r"[0-9]{4}", last4) else None,
                               exp_month=int(card["exp_month"]), exp_year=int(card["exp_year"]))
    return Customer(row=row, payment_method=method)


def _discount(sub: dict) -> dict | None:
    discounts = [d for d in (sub.get("discounts") or []) if isinstance(d, dict)]
    if discounts:
        return discounts[0]
    d = sub.get("discount")
    return d if isinstance(d, dict) else None


def map_subscription(sub: dict) -> dict | Unmapped | None:
    status = sub.get("status")
    if status in ("canceled", "incomplete_expired"):
        return None  # over: nothing to bring
    if status not in ("active", "trialing"):
        return Unmapped("subscription", sub["id"], f"status {status}: a period unpaid at Stripe is Stripe's to collect")
    if sub.get("pause_collection"):
        return Unmapped("subscription", sub["id"], "its collection is paused at Stripe")
    if sub.get("collection_method") == "send_invoice":
        return Unmapped("subscription", sub["id"], "invoices sent for manual payment (collection_method send_invoice)")
    items = (sub.get("items") or {}).get("data") or []
    if len(items) != 1:
        return Unmapped("subscription", sub["id"], f"{len(items)} items (one price per subscription here)")
    item = items[0]
    price = item.get("price") or {}
    start = as_utc(item.get("current_period_start") or sub.get("current_period_start"))
    end = as_utc(item.get("current_period_end") or sub.get("current_period_end"))
    if status == "trialing":
        start, end = as_utc(sub.get("trial_start")) or start, as_utc(sub.get("trial_end")) or end
    if start is None or end is None or end <= start:
        return Unmapped("subscription", sub["id"], f"its current period [{start}, {end}) is not a period")
    customer = sub.get("customer")
    customer = customer.get("id") if isinstance(customer, dict) else customer
    row = {"external_id": sub["id"], "customer_external_id": customer, "plan_external_id": price.get("id"),
           "status": status.upper(), "current_period_start": start, "current_period_end": end,
           "quantity": int(item.get("quantity") or 1), "cancel_at_period_end": bool(sub.get("cancel_at_period_end"))}
    discount = _discount(sub)
    if discount:
        coupon = discount.get("coupon") or ((discount.get("source") or {}).get("coupon"))
        coupon = coupon.get("id") if isinstance(coupon, dict) else coupon
        if coupon:
            row["coupon_code"] = coupon
            row["coupon_until"] = as_utc(discount.get("end"))
    return row


def _mapped(objects: Iterator[dict], mapper) -> Iterator:
    for obj in objects:
        mapped = mapper(obj)
        if mapped is not None:
            yield mapped


def read(reader: StripeReader) -> Source:
    """The account, mapped; each list is read lazily, in the order the import writes it."""
    return Source(
        plans=_mapped(reader.list("/v1/prices", [("expand[]", "data.product")]), map_price),
        coupons=_mapped(reader.list("/v1/coupons"), map_coupon),
        customers=_mapped(reader.list("/v1/customers", [("expand[]", "data.invoice_settings.default_payment_method")]),
                          map_customer),
        subscriptions=_mapped(reader.list("/v1/subscriptions", [("status", "all"), ("expand[]", "data.discounts")]),
                              map_subscription),
    )
