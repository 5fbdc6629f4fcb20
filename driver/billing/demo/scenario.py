"""What happens in the demo's world: plans, customers and what they do, decided up front by a seed.

The story: a promotion campaign on the 1st of September (a launch at local midnight, then a busy
day) brings most of the signups; others arrive on every other day through October. Monthly plans
renew on the 1st of October at the local time their customer signed up, so the renewals pile up in
a few hours; weekly plans renew every week, yearly ones not within the window. During October some
customers upgrade (an OPEN PRORATION invoice, charged at once) or downgrade (a credit used by their
next invoices), some cancel at once; some decide, any time after signing up, to cancel at the end of
their period. The lifecycle
(docs/lifecycle.md): the campaign's signups redeem the coupon SEPT1 (20% off their first two
periods), some signups start with a free trial (their first invoice comes when it ends), some buy
several seats, and in October some customers add seats, pause (until a date, or until they resume)
and withdraw a cancellation.

Everything here is plain data: the runner applies each action through the SQL API at its own
instant (`p_now`), and the worker does the rest. The same seed gives the same world.

The API product (issue 29, docs/usage.md): one customer in API_EVERY takes API_MONTHLY_<currency>,
a small monthly fee plus a graduated price per request (API_TIERS), and sends requests all along at
a rate of its own (`Scenario.api_rates`, requests per simulated hour); billing.demo.usage streams
them through Kafka and the worker rates each ended month onto a USAGE invoice.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

UTC = timezone.utc

# The window the demo simulates: the campaign day's first local midnight (Asia/Tokyo, UTC+9) to the
# last hours of October in UTC, before the first local midnight of November.
CAMPAIGN_DAY = (2026, 9, 1)
WINDOW_START = datetime(2026, 8, 31, 12, 0, tzinfo=UTC)
WINDOW_END = datetime(2026, 10, 31, 14, 0, tzinfo=UTC)
# Where the clock takes fine steps and the report draws hour by hour: the campaign day and the
# renewal day, from noon UTC the day before (the 1st starts at UTC+9 in Tokyo) to noon the day after.
PEAKS = (
    (datetime(2026, 8, 31, 12, 0, tzinfo=UTC), datetime(2026, 9, 2, 12, 0, tzinfo=UTC)),
    (datetime(2026, 9, 30, 12, 0, tzinfo=UTC), datetime(2026, 10, 2, 12, 0, tzinfo=UTC)),
)

# Currency minor units (ISO 4217 exponent) for display only; money stays an int everywhere.
MINOR_UNITS = {"BRL": 2, "USD": 2, "EUR": 2, "JPY": 0, "GBP": 2, "INR": 2}


@dataclass(frozen=True)
class Plan:
    code: str
    price: int  # smallest currency unit
    currency: str
    interval: str  # DAY | WEEK | MONTH | YEAR
    count: int = 1


@dataclass(frozen=True)
class Region:
    name: str
    weight: float
    currency: str
    timezones: tuple[str, ...]
    # prices in the smallest unit: basic monthly, pro monthly, weekly, yearly
    prices: tuple[int, int, int, int]


REGIONS: tuple[Region, ...] = (
    Region("Brazil", 0.34, "BRL", ("America/Sao_Paulo", "America/Manaus", "America/Recife"), (2990, 7990, 990, 79900)),
    Region("United States", 0.24, "USD", ("America/New_York", "America/Chicago", "America/Denver",
                                          "America/Los_Angeles"), (999, 2499, 299, 24900)),
    Region("Eurozone", 0.20, "EUR", ("Europe/Berlin", "Europe/Paris", "Europe/Lisbon", "Europe/Madrid"),
           (899, 2299, 279, 22900)),
    Region("Japan", 0.10, "JPY", ("Asia/Tokyo",), (1200, 3200, 400, 32000)),
    Region("United Kingdom", 0.07, "GBP", ("Europe/London",), (799, 1999, 249, 19900)),
    Region("India", 0.05, "INR", ("Asia/Kolkata",), (19900, 49900, 4900, 499900)),
)

# Taxes (docs/invoices.md): rates by billing address; the customers' countries follow their zones.
# (code, country, region, name, basis points, inclusive)
TAX_RATES = (
    ("DE_VAT", "DE", None, "VAT", 1900, False), ("FR_VAT", "FR", None, "VAT", 2000, False),
    ("PT_VAT", "PT", None, "VAT", 2300, False), ("ES_VAT", "ES", None, "VAT", 2100, False),
    ("GB_VAT", "GB", None, "VAT", 2000, False), ("IN_GST", "IN", None, "GST", 1800, False),
    ("JP_CT", "JP", None, "Consumption tax", 1000, True), ("US_NY_ST", "US", "NY", "Sales tax", 888, False),
)
_PLACES = {  # zone: (country, region, city, postal code)
    "America/Sao_Paulo": ("BR", "SP", "São Paulo", "01310-100"), "America/Manaus": ("BR", "AM", "Manaus", "69005-000"),
    "America/Recife": ("BR", "PE", "Recife", "50030-230"), "America/New_York": ("US", "NY", "New York", "10001"),
    "America/Chicago": ("US", "IL", "Chicago", "60601"), "America/Denver": ("US", "CO", "Denver", "80202"),
    "America/Los_Angeles": ("US", "CA", "Los Angeles", "90012"), "Europe/Berlin": ("DE", None, "Berlin", "10115"),
    "Europe/Paris": ("FR", None, "Paris", "75001"), "Europe/Lisbon": ("PT", None, "Lisboa", "1100-148"),
    "Europe/Madrid": ("ES", None, "Madrid", "28013"), "Asia/Tokyo": ("JP", None, "Tōkyō", "100-0005"),
    "Europe/London": ("GB", None, "London", "EC1A 1BB"), "Asia/Kolkata": ("IN", None, "Kolkata", "700001"),
}
_EU = {"DE", "FR", "PT", "ES"}


def billing_details(customer_id: int, zone: str) -> tuple:
    """(name, email, address, city, postal code, region, country, tax id, tax status) of a demo
    customer: in the EU, one business in four buys with a VAT id (reverse charge); one customer in
    fifty anywhere is tax exempt (a charity)."""
    country, region, city, postal = _PLACES.get(zone, ("US", None, "Springfield", "00000"))
    status, tax_id = "TAXABLE", None
    if country in _EU and customer_id % 4 == 0:
        status, tax_id = "REVERSE_CHARGE", f"{country}{100000000 + customer_id}"
    elif customer_id % 50 == 7:
        status = "EXEMPT"
    return (f"Customer {customer_id} Ltd", f"billing+{customer_id}@customer.example", f"{customer_id % 200 + 1} Main Street",
            city, postal, region, country, tax_id, status)


# The API product: every API_EVERY-th customer (by signup order of generation) takes it instead of
# the plan drawn for it; a monthly fee (its region's weekly price) plus API_TIERS per request of the
# meter API_METER (a count of API_EVENT_TYPE events), the first API_INCLUDED requests free. The unit
# amounts are USD cents, scaled per currency by the region's basic price against the USD one.
API_KIND = "API_MONTHLY"
API_EVERY = 100
API_METER = "api_requests"
API_EVENT_TYPE = "api.request"
API_INCLUDED = 100
API_TIERS = ((500, "1.0"), (2000, "0.5"), (None, "0.2"))  # (upTo, unit amount in USD cents)


def api_tiers(currency: str) -> list[dict]:
    """The graduated tiers of API_MONTHLY_<currency> (unit amounts as decimal strings, exact)."""
    from decimal import Decimal

    region = next(r for r in REGIONS if r.currency == currency)
    scale = Decimal(region.prices[0]) / Decimal(999)
    return [{"upTo": up_to, "unitAmount": str((Decimal(unit) * scale).quantize(Decimal("0.0001")))}
            for up_to, unit in API_TIERS]


# Share of signups per kind of plan.
PLAN_MIX = (("BASIC_MONTHLY", 0.48), ("PRO_MONTHLY", 0.30), ("WEEKLY", 0.02), ("PRO_YEARLY", 0.20))

# The campaign's coupon (created by the runner): 20% off the first two period invoices, redeemable
# until the campaign day has ended everywhere.
CAMPAIGN_COUPON = "SEPT1"
CAMPAIGN_COUPON_UNTIL = datetime(2026, 9, 2, 12, 0, tzinfo=UTC)

# The campaign's local hour-of-day profile on the 1st: a launch at midnight, then daytime.
CAMPAIGN_HOURS = (
    50, 6, 3, 2, 1, 1, 1, 2, 3, 4, 4, 4,  # 00h..11h
    4, 4, 3, 3, 3, 3, 4, 4, 4, 4, 3, 2,  # 12h..23h
)
BACKGROUND_HOURS = (1, 1, 1, 1, 1, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 5, 3, 2)


def plan_code(kind: str, currency: str) -> str:
    return f"{kind}_{currency}"


def all_plans() -> list[Plan]:
    plans = []
    for r in REGIONS:
        basic, pro, weekly, yearly = r.prices
        plans += [
            Plan(plan_code("BASIC_MONTHLY", r.currency), basic, r.currency, "MONTH"),
            Plan(plan_code("PRO_MONTHLY", r.currency), pro, r.currency, "MONTH"),
            Plan(plan_code("WEEKLY", r.currency), weekly, r.currency, "WEEK"),
            Plan(plan_code("PRO_YEARLY", r.currency), yearly, r.currency, "YEAR"),
            Plan(plan_code(API_KIND, r.currency), weekly, r.currency, "MONTH"),
        ]
    return plans


@dataclass(frozen=True, order=True)
class Action:
    """One customer action at one instant: signup, upgrade, downgrade, cancel_now, cancel_at_end,
    seats, pause, resume, uncancel."""

    at: datetime
    seq: int  # tie-break: actions of one instant keep their generation order
    kind: str = field(compare=False)
    customer_id: int = field(compare=False)
    timezone: str = field(compare=False, default="UTC")
    plan_code: str = field(compare=False, default="")
    trial_days: int = field(compare=False, default=0)      # signup
    coupon: str | None = field(compare=False, default=None)  # signup
    quantity: int = field(compare=False, default=1)        # signup, seats
    resume_at: datetime | None = field(compare=False, default=None)  # pause


@dataclass
class Scenario:
    seed: int
    subscriptions: int
    plans: list[Plan]
    actions: list[Action]  # sorted by (at, seq)
    start: datetime
    end: datetime
    peaks: tuple = PEAKS
    api_rates: dict[int, float] = field(default_factory=dict)  # API customer: requests per simulated hour

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.actions:
            out[a.kind] = out.get(a.kind, 0) + 1
        return out


def _weighted(rng: random.Random, items):
    total = sum(w for _, w in items)
    x = rng.random() * total
    for item, w in items:
        x -= w
        if x < 0:
            return item
    return items[-1][0]


def _local_instant(rng: random.Random, day: datetime, tz: str, hours: tuple[int, ...], launch: bool) -> datetime:
    hour = _weighted(rng, list(enumerate(hours)))
    if launch and hour == 0:
        # The launch: most of the first hour's signups come in its first minutes.
        minute = min(59.99, rng.expovariate(1 / 6.0))
    else:
        minute = rng.uniform(0, 60)
    local = datetime(day.year, day.month, day.day, tzinfo=ZoneInfo(tz)) + timedelta(hours=hour, minutes=minute)
    return local.astimezone(UTC).replace(microsecond=0)


def build(subscriptions: int = 20000, seed: int = 1, *, campaign_share: float = 0.6,
          upgrade_share: float = 0.03, downgrade_share: float = 0.02, cancel_now_share: float = 0.01,
          cancel_at_end_share: float = 0.03, trial_share: float = 0.12, seats_share: float = 0.08,
          pause_share: float = 0.02, seat_change_share: float = 0.02, uncancel_share: float = 0.15,
          refund_share: float = 0.01, start: datetime = WINDOW_START, end: datetime = WINDOW_END) -> Scenario:
    """The demo's world for `subscriptions` customers (one subscription each)."""
    if subscriptions < 1:
        raise ValueError("at least one subscription")
    rng = random.Random(seed)
    plans = all_plans()
    actions: list[Action] = []
    seq = 0

    def add(at, kind, customer_id, tz="UTC", code="", **extra):
        nonlocal seq
        seq += 1
        actions.append(Action(at, seq, kind, customer_id, tz, code, **extra))

    campaign = datetime(*CAMPAIGN_DAY)
    # Background signups: any day from the 2nd of September to four days before the window's end.
    background_days = [campaign + timedelta(days=d) for d in range(1, (end - start).days - 4)]
    signups: list[tuple[datetime, int, str, str, Region, str]] = []
    api_rng = random.Random(seed * 104729 + 3)  # the API product's own draws: the rest stays as it was
    api_rates: dict[int, float] = {}
    for i in range(subscriptions):
        customer_id = 100_001 + i
        region = _weighted(rng, [(r, r.weight) for r in REGIONS])
        tz = rng.choice(region.timezones)
        kind = _weighted(rng, list(PLAN_MIX))
        if rng.random() < campaign_share:
            at = _local_instant(rng, campaign, tz, CAMPAIGN_HOURS, launch=True)
        else:
            at = _local_instant(rng, rng.choice(background_days), tz, BACKGROUND_HOURS, launch=False)
        at = min(max(at, start), end - timedelta(days=3))
        if i % API_EVERY == API_EVERY // 2:
            kind = API_KIND
            # Requests per hour: a long tail, so that months fall in every tier.
            api_rates[customer_id] = min(8.0, api_rng.lognormvariate(-1.5, 1.0))
        signups.append((at, customer_id, tz, kind, region, plan_code(kind, region.currency)))
    signups.sort(key=lambda s: (s[0], s[1]))
    for at, customer_id, tz, kind, region, code in signups:
        # The campaign's signups redeem its coupon; some signups take a trial (7 or 14 days), some
        # buy seats for a team.
        coupon = CAMPAIGN_COUPON if at < CAMPAIGN_COUPON_UNTIL and kind != "WEEKLY" else None
        trial = rng.choice((7, 14)) if rng.random() < trial_share else 0
        quantity = rng.randint(2, 5) if rng.random() < seats_share else 1
        if kind == API_KIND:
            trial, quantity = 0, 1  # usage from the first day, one seat
        add(at, "signup", customer_id, tz, code, trial_days=trial, coupon=coupon, quantity=quantity)

    # Plan changes and cancellations during October, some time after the signup.
    october = datetime(2026, 10, 1, tzinfo=UTC)
    for at, customer_id, tz, kind, region, code in signups:
        if kind == API_KIND:
            continue  # the API customers keep their plan: their months are rated whole
        x = rng.random()
        earliest = max(at + timedelta(hours=6), october)
        if earliest >= end - timedelta(days=1):
            continue
        when = earliest + timedelta(seconds=rng.uniform(0, (end - earliest).total_seconds() - 86400))
        when = when.replace(microsecond=0)
        if kind in ("BASIC_MONTHLY", "PRO_MONTHLY"):
            if x < upgrade_share and kind == "BASIC_MONTHLY":
                add(when, "upgrade", customer_id, tz, plan_code("PRO_MONTHLY", region.currency))
                continue
            if x < upgrade_share + downgrade_share and kind == "PRO_MONTHLY":
                add(when, "downgrade", customer_id, tz, plan_code("BASIC_MONTHLY", region.currency))
                continue
        x = rng.random()
        if x < cancel_now_share:
            add(when, "cancel_now", customer_id, tz)
        elif x < cancel_now_share + cancel_at_end_share:
            # A cancellation at period end is often decided soon after signing up: any time from
            # six hours after it (September included), so that its period end falls in the window.
            first = at + timedelta(hours=6)
            when = (first + timedelta(seconds=rng.uniform(0, (end - first).total_seconds() - 86400))
                    ).replace(microsecond=0)
            add(when, "cancel_at_end", customer_id, tz)
            later = when + timedelta(days=rng.uniform(0.5, 5))
            if rng.random() < uncancel_share and later < end - timedelta(days=1):
                add(later.replace(microsecond=0), "uncancel", customer_id, tz)
        elif x < cancel_now_share + cancel_at_end_share + pause_share:
            # Half pause until a date, half until they come back on their own.
            back = (when + timedelta(days=rng.uniform(5, 15))).replace(microsecond=0)
            if rng.random() < 0.5:
                add(when, "pause", customer_id, tz, resume_at=back)
            else:
                add(when, "pause", customer_id, tz)
                if back < end - timedelta(hours=6):
                    add(back, "resume", customer_id, tz)
        elif x < cancel_now_share + cancel_at_end_share + pause_share + seat_change_share:
            add(when, "seats", customer_id, tz, quantity=rng.randint(2, 6))
    # Refund requests (half of what the customer's last payment has left), from a generator of their
    # own so that the other choices stay what they were without them.
    refund_rng = random.Random(seed * 7919 + 17)
    for at, customer_id, tz, kind, region, code in signups:
        if refund_rng.random() < refund_share:
            when = at + timedelta(days=refund_rng.uniform(2, 20))
            if when < end - timedelta(days=1):
                add(when.replace(microsecond=0), "refund", customer_id, tz)
    actions.sort()
    return Scenario(seed, subscriptions, plans, actions, start, end, api_rates=api_rates)


def major(amount: int, currency: str) -> str:
    """An amount in the smallest unit shown in major units, exactly (no float)."""
    digits = MINOR_UNITS.get(currency, 2)
    sign = "-" if amount < 0 else ""
    amount = abs(amount)
    if digits == 0:
        return f"{sign}{amount:,}"
    whole, frac = divmod(amount, 10**digits)
    return f"{sign}{whole:,}.{frac:0{digits}d}"
