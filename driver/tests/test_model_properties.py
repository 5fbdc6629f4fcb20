"""Model-based test of the SQL API: random sequences of calls against a small Python model.

Hypothesis drives sign-ups (new and replayed idempotency keys), customer time zones, cancels
(now / at period end, with fresh, stale or no expected version), plan changes (up, down, across
intervals, other currency, unknown plan), renewal runs, charge claims with random batch sizes and
leases, payment results through record_payment_result and signed-webhook storage (apply_gateway_webhook,
fresh and replayed event ids, late and repeated, UNKNOWN then the truth) and clock jumps over
a DST change. After every step the whole database (subscriptions, invoices, attempts, events per
aggregate, credit balances, stored webhooks) must equal the model; any divergence fails.

The model is written from docs/sql-api.md and the documented rules of db/functions, not from
their code; what the contract leaves open (e.g. how an at-period-end cancel treats unpaid
invoices) follows the functions' comments.

Each example gets a clean slate by TRUNCATE in the test's own database. Examples and steps:
BILLING_MODEL_EXAMPLES / BILLING_MODEL_STEPS (defaults 60 x 50).
"""

from __future__ import annotations

import calendar
import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from psycopg.rows import dict_row

PLANS = {  # code: (price, currency, interval, count)
    "D_BASIC": (1000, "USD", "DAY", 1),
    "D_PRO": (3000, "USD", "DAY", 1),
    "W_BASIC": (5000, "USD", "WEEK", 1),
    "M_PRO": (20000, "USD", "MONTH", 1),
    "D_EUR": (2000, "EUR", "DAY", 1),
}
ZONES = ["UTC", "America/New_York", "Asia/Kolkata"]
T0 = datetime(2026, 3, 5, 15, 30, tzinfo=timezone.utc)  # the US DST change (Mar 8) is a few jumps away
DUNNING = {1: timedelta(days=1), 2: timedelta(days=3), 3: timedelta(days=5)}
JITTER = timedelta(minutes=120)
UNKNOWN_RETRY = timedelta(minutes=15)
KEY_LIFETIME = timedelta(hours=23)   # billing.installation defaults
LOOKUP_MARGIN = timedelta(hours=1)
US = timedelta(microseconds=1)

TABLES = ("billing.gateway_webhook, billing.outbox_event, billing.credit_entry, billing.credit_balance, "
          "billing.credit_pending, "
          "billing.payment_attempt, billing.invoice, billing.subscription_request, billing.subscription, "
          "billing.customer")


# -- the calendar, independently of PostgreSQL -------------------------------------------------


def _local_to_instant(local: datetime, tz: str) -> datetime:
    """PostgreSQL's `timestamp AT TIME ZONE`: a local time in a spring-forward gap moves forward by
    the gap (the offset before the change), an ambiguous one takes the later instant."""
    zone = ZoneInfo(tz)
    early, late = local.replace(tzinfo=zone, fold=0), local.replace(tzinfo=zone, fold=1)
    candidates = [c for c in (early, late)
                  if c.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None) == local]
    if not candidates:  # a gap
        return early.astimezone(timezone.utc)
    return max(c.astimezone(timezone.utc) for c in candidates)


def boundary(anchor: datetime, interval: str, count: int, n: int, tz: str) -> datetime:
    local = anchor.astimezone(ZoneInfo(tz)).replace(tzinfo=None)
    k = count * n
    if interval == "DAY":
        local += timedelta(days=k)
    elif interval == "WEEK":
        local += timedelta(weeks=k)
    else:
        months = k * (12 if interval == "YEAR" else 1)
        y, m = divmod(local.month - 1 + months, 12)
        year, month = local.year + y, m + 1
        local = local.replace(year=year, month=month, day=min(local.day, calendar.monthrange(year, month)[1]))
    return _local_to_instant(local, tz)


def proration(old: int, new: int, start: datetime, end: datetime, at: datetime) -> int:
    total = (end - start) // timedelta(seconds=1)
    remaining = (end - at) // timedelta(seconds=1)
    return new * remaining // total - old * remaining // total


# -- the model ------------------------------------------------------------------------------------


@dataclass
class MSub:
    id: int
    customer: int
    plan: str
    tz: str
    anchor: datetime
    period_number: int
    start: datetime
    end: datetime
    status: str = "ACTIVE"
    cancel_at_period_end: bool = False
    canceled_at: datetime | None = None
    cancel_reason: str | None = None
    version: int = 1
    price: int = 0  # period_price: what the current period is billed at


@dataclass
class MInv:
    sub: int
    kind: str
    start: datetime
    end: datetime
    subtotal: int
    credit: int
    currency: str
    status: str
    next_attempt_at: datetime | None
    due_at: datetime
    paid_at: datetime | None = None
    closed_at: datetime | None = None
    attempt_count: int = 0
    plan: str = ""
    from_plan: str | None = None  # PRORATION: the plan it replaced
    from_price: int | None = None
    id: int | None = None
    dunning_window: tuple[datetime, datetime] | None = None  # jittered: learnt from the database

    @property
    def nkey(self) -> tuple:
        return (self.sub, self.kind, self.start)

    @property
    def amount(self) -> int:
        return self.subtotal - self.credit


@dataclass
class MAttempt:
    key: str
    invoice: tuple
    number: int
    truth: str  # what the gateway really did with this key: SUCCEEDED or DECLINED
    claim_count: int = 1
    outcome: str | None = None
    result_claim: int | None = None
    expires: datetime | None = None


class Refused(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


@dataclass
class Model:
    now: datetime = T0
    tz: dict[int, str] = field(default_factory=dict)              # customer -> zone
    subs: dict[int, MSub] = field(default_factory=dict)
    requests: dict[str, tuple[int, str, int]] = field(default_factory=dict)  # key -> (customer, plan, sub)
    invoices: dict[tuple, MInv] = field(default_factory=dict)     # natural key -> invoice
    attempts: dict[str, MAttempt] = field(default_factory=dict)
    events: list[tuple[str, object, str]] = field(default_factory=list)  # (aggregate type, id or nkey, type)
    credit: dict[tuple[int, str], int] = field(default_factory=dict)
    webhooks: dict[str, tuple] = field(default_factory=dict)      # event id -> (key, outcome, reference)
    pending: list[list] = field(default_factory=list)             # [customer, currency, amount, {nkeys}, status]
    namespace: str = ""

    # -- helpers --------------------------------------------------------------------------------
    def emit(self, aggregate: str, ident, kind: str) -> None:
        self.events.append((aggregate, ident, kind))

    def new_invoice(self, sub: MSub, kind: str, start: datetime, end: datetime, subtotal: int, currency: str,
                    plan: str = "", from_plan: str | None = None, from_price: int | None = None) -> MInv:
        balance = self.credit.get((sub.customer, currency), 0)
        applied = min(balance, subtotal)
        if applied:
            self.credit[(sub.customer, currency)] = balance - applied
        paid = subtotal - applied == 0
        inv = MInv(sub.id, kind, start, end, subtotal, applied, currency, "PAID" if paid else "OPEN",
                   None if paid else self.now, self.now, paid_at=self.now if paid else None,
                   plan=plan or sub.plan, from_plan=from_plan, from_price=from_price)
        assert inv.nkey not in self.invoices
        self.invoices[inv.nkey] = inv
        self.emit("invoice", inv.nkey, "InvoiceCreated")
        if paid:
            self.emit("invoice", inv.nkey, "InvoicePaid")
        return inv

    def add_credit(self, customer: int, currency: str, amount: int) -> None:
        if amount > 0:
            self.credit[(customer, currency)] = self.credit.get((customer, currency), 0) + amount

    def grant_change_credit(self, sub: MSub, currency: str, amount: int) -> None:
        if amount <= 0:
            return
        unpaid = {i.nkey for i in self.invoices.values() if i.sub == sub.id and i.status in ("OPEN", "REVIEW")}
        if not unpaid:
            self.add_credit(sub.customer, currency, amount)
        else:
            self.pending.append([sub.customer, currency, amount, unpaid, "PENDING"])

    def settle_pending(self, inv: MInv) -> None:
        for p in self.pending:
            if p[4] != "PENDING" or inv.nkey not in p[3]:
                continue
            if inv.status in ("VOID", "FAILED"):
                p[4] = "REVERSED"
            elif inv.status == "PAID" and all(self.invoices[k].status == "PAID" for k in p[3]):
                p[4] = "RELEASED"
                self.add_credit(p[0], p[1], p[2])

    def void_open(self, sub: MSub) -> None:
        voided = []
        for inv in self.invoices.values():
            if inv.sub == sub.id and inv.status == "OPEN" and inv.attempt_count == 0:
                inv.status, inv.next_attempt_at, inv.closed_at, inv.dunning_window = "VOID", None, self.now, None
                self.emit("invoice", inv.nkey, "InvoiceVoided")
                self.add_credit(sub.customer, inv.currency, inv.credit)
                voided.append(inv)
        for inv in voided:
            self.settle_pending(inv)

    def catch_up(self, sub: MSub) -> None:
        while sub.status != "CANCELED" and sub.end <= self.now:
            if sub.cancel_at_period_end:
                sub.status, sub.canceled_at, sub.cancel_reason = "CANCELED", self.now, "PERIOD_END"
                sub.version += 1
                self.emit("subscription", sub.id, "SubscriptionCanceled")
                self.void_open(sub)
                return
            price, currency, interval, count = PLANS[sub.plan]
            end = boundary(sub.anchor, interval, count, sub.period_number + 1, sub.tz)
            self.new_invoice(sub, "RENEWAL", sub.end, end, price, currency)
            sub.start, sub.end, sub.period_number, sub.price = sub.end, end, sub.period_number + 1, price
            sub.version += 1

    def lock(self, sub_id: int) -> MSub:
        if sub_id not in self.subs:
            raise Refused("BL404")
        return self.subs[sub_id]

    @staticmethod
    def check_version(sub: MSub, expected: int | None) -> None:
        if expected is not None and expected != sub.version:
            raise Refused("BL409")

    # -- the API --------------------------------------------------------------------------------
    def upsert_customer(self, customer: int, tz: str) -> None:
        if tz not in ZONES:
            raise Refused("BL422")
        self.tz[customer] = tz

    def create_subscription(self, key: str, customer: int, plan: str, new_id) -> int:
        if key in self.requests:
            c, p, sub_id = self.requests[key]
            if (c, p) != (customer, plan):
                raise Refused("BL409")
            return sub_id
        if plan not in PLANS:
            raise Refused("BL422")
        price, currency, interval, count = PLANS[plan]
        tz = self.tz.setdefault(customer, "UTC")
        sub_id = new_id()
        sub = MSub(sub_id, customer, plan, tz, self.now, 1, self.now, boundary(self.now, interval, count, 1, tz),
                   price=price)
        self.subs[sub_id] = sub
        self.requests[key] = (customer, plan, sub_id)
        self.emit("subscription", sub_id, "SubscriptionCreated")
        self.new_invoice(sub, "INITIAL", sub.start, sub.end, price, currency)
        return sub_id

    def cancel(self, sub_id: int, at_period_end: bool, expected: int | None) -> None:
        sub = self.lock(sub_id)
        if sub.status == "CANCELED":
            return
        self.check_version(sub, expected)
        if at_period_end:
            if not sub.cancel_at_period_end:
                sub.cancel_at_period_end = True
                sub.version += 1
                self.emit("subscription", sub.id, "SubscriptionUpdated")
            return
        sub.status, sub.canceled_at, sub.cancel_reason = "CANCELED", self.now, "REQUESTED"
        sub.version += 1
        self.void_open(sub)
        self.emit("subscription", sub.id, "SubscriptionCanceled")

    def change_plan(self, sub_id: int, plan: str, expected: int | None) -> None:
        sub = self.lock(sub_id)
        if sub.status == "CANCELED":
            raise Refused("BL422")
        self.check_version(sub, expected)
        if plan not in PLANS:
            raise Refused("BL422")
        old, new = PLANS[sub.plan], PLANS[plan]
        if old[1] != new[1]:
            raise Refused("BL422")
        if plan == sub.plan:
            return
        if sub.cancel_at_period_end and sub.end <= self.now:
            raise Refused("BL422")  # it ended at its period end (the database rolls the catch-up back)
        self.catch_up(sub)
        change_at = max(self.now, sub.start)
        from_plan, from_price = sub.plan, sub.price
        superseded = [i for i in self.invoices.values() if i.sub == sub.id and i.kind == "PRORATION"
                      and i.status == "OPEN" and i.from_plan is not None and i.attempt_count == 0
                      and i.end == sub.end]
        if superseded:
            p = max(superseded, key=lambda i: i.id)
            p.status, p.next_attempt_at, p.closed_at, p.dunning_window = "VOID", None, self.now, None
            self.emit("invoice", p.nkey, "InvoiceVoided")
            self.add_credit(sub.customer, p.currency, p.credit)
            self.settle_pending(p)
            from_plan, from_price = p.from_plan, p.from_price
        fp = PLANS[from_plan]
        if (new[2], new[3]) == (fp[2], fp[3]):
            if plan == from_plan:
                amount, new_price = 0, from_price
            else:
                new_price = new[0]
                amount = proration(from_price, new_price, sub.start, sub.end, change_at)
            if amount > 0:
                later = [i.start for i in self.invoices.values()
                         if i.sub == sub.id and i.kind == "PRORATION" and i.start >= change_at]
                start = max(change_at, max(later) + US) if later else change_at
                if start < sub.end:
                    self.new_invoice(sub, "PRORATION", start, sub.end, amount, new[1], plan, from_plan, from_price)
            elif amount < 0:
                self.grant_change_credit(sub, new[1], -amount)
            sub.plan, sub.price = plan, new_price
            sub.version += 1
            self.emit("subscription", sub.id, "SubscriptionUpdated")
            return
        later = [i.start for i in self.invoices.values()
                 if i.sub == sub.id and i.kind == "PLAN_CHANGE" and i.start >= change_at]
        start = max(change_at, max(later) + US) if later else change_at
        unused = -proration(from_price, 0, sub.start, sub.end, min(start, sub.end))
        end = boundary(start, new[2], new[3], 1, sub.tz)
        self.grant_change_credit(sub, new[1], unused)
        sub.plan, sub.anchor, sub.period_number, sub.start, sub.end, sub.price = plan, start, 1, start, end, new[0]
        sub.version += 1
        self.emit("subscription", sub.id, "SubscriptionUpdated")
        self.new_invoice(sub, "PLAN_CHANGE", start, end, new[0], new[1], plan, from_plan, from_price)

    def create_due_invoices(self) -> int:
        due = sorted((s for s in self.subs.values() if s.status in ("ACTIVE", "PAST_DUE") and s.end <= self.now),
                     key=lambda s: s.id)
        for sub in due:  # credit is spread over a customer's renewals in subscription id order
            if sub.cancel_at_period_end:
                continue
            price, currency, interval, count = PLANS[sub.plan]
            end = boundary(sub.anchor, interval, count, sub.period_number + 1, sub.tz)
            self.new_invoice(sub, "RENEWAL", sub.end, end, price, currency)
            sub.start, sub.end, sub.period_number, sub.price = sub.end, end, sub.period_number + 1, price
            sub.version += 1
        for sub in due:
            if sub.cancel_at_period_end:
                sub.status, sub.canceled_at, sub.cancel_reason = "CANCELED", self.now, "PERIOD_END"
                sub.version += 1
                self.emit("subscription", sub.id, "SubscriptionCanceled")
                self.void_open(sub)
        return len(due)

    def key_of(self, inv: MInv) -> str:
        return f"{self.namespace}-inv-{inv.id}-try-{inv.attempt_count}"

    def due(self) -> list[MInv]:
        return [i for i in self.invoices.values() if i.status == "OPEN" and i.next_attempt_at <= self.now]

    def expired(self, inv: MInv) -> bool:
        a = self.attempts.get(self.key_of(inv))
        return a is not None and a.expires <= self.now

    def chargeable(self) -> list[MInv]:
        return [i for i in self.due() if not self.expired(i)]

    def to_review(self, due: list[MInv]) -> None:
        """What claim_charges does first to the due invoices it locked: expired keys go to REVIEW."""
        for inv in sorted(due, key=lambda i: i.id):
            if self.expired(inv):
                inv.status, inv.next_attempt_at, inv.dunning_window = "REVIEW", None, None
                self.emit("invoice", inv.nkey, "InvoicePaymentReview")

    def claim(self, inv: MInv, lease: timedelta, truth: str) -> str:
        inv.next_attempt_at = self.now + lease
        key = self.key_of(inv)
        if key in self.attempts:
            self.attempts[key].claim_count += 1
        else:
            self.attempts[key] = MAttempt(key, inv.nkey, inv.attempt_count, truth, expires=self.now + KEY_LIFETIME)
        return key

    def payment_result(self, key: str, outcome: str) -> None:
        if key not in self.attempts:
            raise Refused("BL404")
        a = self.attempts[key]
        inv = self.invoices[a.invoice]
        sub = self.subs[inv.sub]
        if (a.outcome == "SUCCEEDED" or (a.outcome == "DECLINED" and outcome != "SUCCEEDED")
                or (a.outcome == "UNKNOWN" and outcome == "UNKNOWN" and a.result_claim == a.claim_count)):
            return
        a.outcome, a.result_claim = outcome, a.claim_count
        if outcome == "SUCCEEDED":
            if inv.status in ("PAID", "VOID", "FAILED"):
                # Money not owed: announced, and a refund of the charge requested (docs/providers.md).
                self.emit("invoice", inv.nkey, "RefundDue")
                self.emit("invoice", inv.nkey, "RefundRequested")
                return
            inv.status, inv.paid_at, inv.next_attempt_at, inv.dunning_window = "PAID", self.now, None, None
            self.emit("invoice", inv.nkey, "InvoicePaid")
            self.settle_pending(inv)
            if sub.status == "CANCELED" and inv.attempt_count == 0:
                self.emit("invoice", inv.nkey, "RefundDue")
                self.emit("invoice", inv.nkey, "RefundRequested")
            elif sub.status == "PAST_DUE" and not any(
                    i.sub == sub.id and i.status == "OPEN" and i is not inv for i in self.invoices.values()):
                sub.status = "ACTIVE"
                sub.version += 1
                self.emit("subscription", sub.id, "SubscriptionUpdated")
                self.emit("subscription", sub.id, "SubscriptionRecovered")
            return
        if inv.status not in ("OPEN", "REVIEW") or a.number != inv.attempt_count:
            return
        if outcome == "UNKNOWN":
            if inv.status == "OPEN":
                inv.next_attempt_at = min(self.now + UNKNOWN_RETRY,
                                          max(self.now + timedelta(minutes=1), a.expires - LOOKUP_MARGIN))
                inv.dunning_window = None
            return
        inv.attempt_count += 1
        step = DUNNING.get(inv.attempt_count)
        if step is None:
            inv.status, inv.next_attempt_at, inv.closed_at, inv.dunning_window = "FAILED", None, self.now, None
        else:
            inv.status, inv.next_attempt_at = "OPEN", None
            inv.dunning_window = (self.now + step, self.now + step + JITTER)
        self.emit("invoice", inv.nkey, "InvoicePaymentFailed")
        if step is None:
            self.emit("invoice", inv.nkey, "InvoiceFailed")
        if step is not None:
            if sub.status == "ACTIVE":
                sub.status = "PAST_DUE"
                sub.version += 1
                self.emit("subscription", sub.id, "SubscriptionUpdated")
                self.emit("subscription", sub.id, "SubscriptionPastDue")
            return
        self.add_credit(sub.customer, inv.currency, inv.credit)
        self.settle_pending(inv)
        if inv.kind == "PRORATION" and inv.from_plan is not None:
            if sub.status != "CANCELED" and sub.plan == inv.plan and sub.end == inv.end:
                sub.plan, sub.price = inv.from_plan, inv.from_price
                sub.version += 1
                self.emit("subscription", sub.id, "SubscriptionPlanReverted")
                self.emit("subscription", sub.id, "SubscriptionUpdated")
            if sub.status == "PAST_DUE" and not any(
                    i.sub == sub.id and i.status == "OPEN" for i in self.invoices.values()):
                sub.status = "ACTIVE"
                sub.version += 1
                self.emit("subscription", sub.id, "SubscriptionUpdated")
                self.emit("subscription", sub.id, "SubscriptionRecovered")
        elif sub.status == "CANCELED":
            self.emit("invoice", inv.nkey, "InvoiceWrittenOff")
        else:
            sub.status, sub.canceled_at, sub.cancel_reason = "CANCELED", self.now, "DUNNING_EXHAUSTED"
            sub.version += 1
            self.void_open(sub)
            self.emit("subscription", sub.id, "SubscriptionCanceled")

    def webhook(self, event_id: str, key: str, outcome: str, reference: str) -> bool:
        if event_id in self.webhooks:
            return False
        self.payment_result(key, outcome)  # BL404 first: nothing stored for an unknown key
        self.webhooks[event_id] = (key, outcome, reference)
        return True


# -- the database side ------------------------------------------------------------------------------


class Database:
    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)

    def call(self, query: str, params: tuple = (), *, many: bool = False):
        try:
            cur = self.conn.execute(query, params)
            return cur.fetchall() if many else cur.fetchone()
        except psycopg.Error as exc:
            if exc.sqlstate and exc.sqlstate.startswith("BL"):
                raise Refused(exc.sqlstate) from None
            raise

    def reset(self) -> None:
        # Triggers off for the wipe only: subscriptions are never deleted by the engine itself.
        with self.conn.transaction():
            self.conn.execute("SET LOCAL session_replication_role = replica")
            self.conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
        for code, (price, currency, interval, count) in PLANS.items():
            self.conn.execute("SELECT billing.upsert_plan(%s, %s, %s, %s, %s)", (code, price, currency, interval, count))


def same_outcome(model_fn, db_fn):
    """Run both sides; they must agree on success or on the contract error."""
    try:
        expected = model_fn()
        expected_error = None
    except Refused as r:
        expected, expected_error = None, r.sqlstate
    try:
        got = db_fn()
        got_error = None
    except Refused as r:
        got, got_error = None, r.sqlstate
    assert got_error == expected_error, f"database {got_error or 'succeeded'}, model {expected_error or 'succeeds'}"
    return expected, got


def make_machine(db: Database, max_steps: int):
    class BillingMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            db.reset()
            self.m = Model(namespace=db.call("SELECT key_namespace FROM billing.installation")["key_namespace"])
            self.key_seq = 0
            self.event_seq = 0

        # -- strategies drawn inside rules ------------------------------------------------------
        def _sub_id(self, data) -> int:
            ids = sorted(self.m.subs)
            return data.draw(st.sampled_from(ids + [999_999]) if ids else st.just(999_999), label="subscription")

        def _expected_version(self, data, sub_id: int) -> int | None:
            version = self.m.subs[sub_id].version if sub_id in self.m.subs else 1
            return data.draw(st.sampled_from([None, None, version, version - 1, version + 3]), label="If-Match")

        # -- rules ------------------------------------------------------------------------------
        @rule(customer=st.integers(1, 2), tz=st.sampled_from(ZONES + ["Mars/Olympus"]))
        def upsert_customer(self, customer, tz):
            same_outcome(lambda: self.m.upsert_customer(customer, tz),
                         lambda: db.call("SELECT * FROM billing.upsert_customer(%s, %s)", (customer, tz)))

        @rule(data=st.data(), customer=st.integers(1, 2), plan=st.sampled_from(sorted(PLANS) + ["NOPE"]))
        def create_subscription(self, data, customer, plan):
            if self.m.requests and data.draw(st.booleans(), label="replay a key"):
                key = data.draw(st.sampled_from(sorted(self.m.requests)), label="key")
                if data.draw(st.booleans(), label="same parameters"):
                    customer, plan = self.m.requests[key][0], self.m.requests[key][1]
            else:
                self.key_seq += 1
                key = f"key-{self.key_seq}"
            box = {}

            def db_side():
                row = db.call("SELECT * FROM billing.create_subscription(%s, %s, %s, %s)",
                              (key, customer, plan, self.m.now))
                box["id"] = row["id"]
                return row["id"]

            def model_side():
                return self.m.create_subscription(key, customer, plan, lambda: box["id"])

            # The database runs first so that the model can adopt the id it assigned.
            try:
                got, got_error = db_side(), None
            except Refused as r:
                got, got_error = None, r.sqlstate
            try:
                expected, expected_error = model_side(), None
            except Refused as r:
                expected, expected_error = None, r.sqlstate
            assert got_error == expected_error, (got_error, expected_error)
            assert got == expected

        @rule(data=st.data(), at_period_end=st.booleans())
        def cancel(self, data, at_period_end):
            sub_id = self._sub_id(data)
            expected = self._expected_version(data, sub_id)
            same_outcome(lambda: self.m.cancel(sub_id, at_period_end, expected),
                         lambda: db.call("SELECT * FROM billing.cancel_subscription(%s, %s, %s, %s)",
                                         (sub_id, at_period_end, self.m.now, expected)))

        @rule(data=st.data(), plan=st.sampled_from(sorted(PLANS) + ["NOPE"]))
        def change_plan(self, data, plan):
            sub_id = self._sub_id(data)
            expected = self._expected_version(data, sub_id)
            same_outcome(lambda: self.m.change_plan(sub_id, plan, expected),
                         lambda: db.call("SELECT * FROM billing.change_plan(%s, %s, %s, %s)",
                                         (sub_id, plan, self.m.now, expected)))

        @rule(until_done=st.booleans())
        def renew(self, until_done):
            for _ in range(400 if until_done else 1):
                expected = self.m.create_due_invoices()
                got = db.call("SELECT billing.create_due_invoices(500, %s) AS n", (self.m.now,))["n"]
                assert got == expected, f"create_due_invoices handled {got}, model {expected}"
                self._learn_ids()
                if not got:
                    break

        def _reviewed(self) -> set[int]:
            return {r["id"] for r in db.call("SELECT id FROM billing.invoice WHERE status = 'REVIEW'", many=True)}

        def _check_lookup(self, row, lease) -> None:
            a = self.m.attempts[row["idempotency_key"]]
            assert row["lookup"] == (a.claim_count > 1 and self.m.now + lease > a.expires - LOOKUP_MARGIN), \
                f"{row['idempotency_key']}: lookup {row['lookup']}"

        @rule(data=st.data(), batch=st.sampled_from([1, 2, 5, 100]),
              lease=st.sampled_from([timedelta(minutes=1), timedelta(minutes=5), timedelta(hours=2)]))
        def claim_charges(self, data, batch, lease):
            due = self.m.due()
            before = self._reviewed()
            rows = db.call("SELECT * FROM billing.claim_charges('model', %s, %s, %s)",
                           (batch, lease, self.m.now), many=True)
            by_id = {i.id: i for i in self.m.invoices.values()}
            claimed = [by_id[r["invoice_id"]] for r in rows]
            reviewed = [by_id[i] for i in sorted(self._reviewed() - before)]
            assert all(c in due and not self.m.expired(c) for c in claimed), "claimed an invoice that is not chargeable"
            assert all(r in due and self.m.expired(r) for r in reviewed), "sent to REVIEW an invoice whose key is alive"
            assert len(claimed) + len(reviewed) == min(batch, len(due)), (len(claimed), len(reviewed), batch, len(due))
            if claimed and len(claimed) + len(reviewed) < len(due):  # oldest next_attempt_at first
                cut = max(c.next_attempt_at for c in claimed + reviewed)
                assert all(d.next_attempt_at >= cut for d in due if d not in claimed and d not in reviewed)
            self.m.to_review(reviewed)
            for r, inv in zip(rows, claimed):
                truth = data.draw(st.sampled_from(["SUCCEEDED", "DECLINED"]), label="gateway truth")
                key = self.m.claim(inv, lease, truth)
                sub = self.m.subs[inv.sub]
                assert (r["idempotency_key"], r["amount"], r["currency"], r["customer_id"]) == \
                    (key, inv.amount, inv.currency, sub.customer)
                self._check_lookup(r, lease)

        @rule(data=st.data(), lease=st.sampled_from([timedelta(minutes=1), timedelta(minutes=20)]))
        def charge_round(self, data, lease):
            """What a worker does: claim everything due, then report each result (or UNKNOWN)."""
            due = self.m.due()
            expected = sorted(i.id for i in self.m.chargeable())
            rows = db.call("SELECT * FROM billing.claim_charges('model', 100, %s, %s)", (lease, self.m.now), many=True)
            assert sorted(r["invoice_id"] for r in rows) == expected
            self.m.to_review(due)
            by_id = {i.id: i for i in self.m.invoices.values()}
            for r in rows:
                truth = data.draw(st.sampled_from(["SUCCEEDED", "DECLINED"]), label="gateway truth")
                key = self.m.claim(by_id[r["invoice_id"]], lease, truth)
                assert r["idempotency_key"] == key
                self._check_lookup(r, lease)
            for r in rows:
                key = r["idempotency_key"]
                outcome = data.draw(st.sampled_from([self.m.attempts[key].truth, "UNKNOWN"]), label="outcome")
                same_outcome(lambda: self.m.payment_result(key, outcome),
                             lambda: db.call("SELECT * FROM billing.record_payment_result(%s, %s, %s, %s, %s)",
                                             (key, outcome, f"ch_{key}", "card_declined", self.m.now)))

        @precondition(lambda self: self.m.attempts)
        @rule(data=st.data(), channel=st.sampled_from(["record", "webhook", "webhook replay"]))
        def payment_result(self, data, channel):
            key = data.draw(st.sampled_from(sorted(self.m.attempts) + [f"{self.m.namespace}-inv-999999-try-0"]), label="key")
            truth = self.m.attempts[key].truth if key in self.m.attempts else "SUCCEEDED"
            outcome = data.draw(st.sampled_from([truth, truth, "UNKNOWN"]), label="outcome")
            if channel == "record":
                same_outcome(lambda: self.m.payment_result(key, outcome),
                             lambda: db.call("SELECT * FROM billing.record_payment_result(%s, %s, %s, %s, %s)",
                                             (key, outcome, f"ch_{key}", "card_declined", self.m.now)))
                return
            if channel == "webhook replay" and self.m.webhooks:
                event_id = data.draw(st.sampled_from(sorted(self.m.webhooks)), label="replayed event")
                key, outcome, _ = self.m.webhooks[event_id]
            else:
                self.event_seq += 1
                event_id = f"evt-{self.event_seq}"
            expected, got = same_outcome(
                lambda: self.m.webhook(event_id, key, outcome, f"ch_{key}"),
                lambda: db.call("SELECT billing.apply_gateway_webhook(%s, %s, %s, %s, %s::jsonb, %s) AS outcome",
                                (event_id, key, outcome, f"ch_{key}", '{"declineCode": "do_not_honor"}',
                                 self.m.now))["outcome"])
            assert got == (None if expected is None else "APPLIED" if expected else "DUPLICATE")

        @rule(delta=st.sampled_from([timedelta(seconds=1), timedelta(minutes=16), timedelta(hours=5),
                                     timedelta(days=1), timedelta(days=1, hours=3), timedelta(days=3),
                                     timedelta(days=6)]))
        def tick(self, delta):
            self.m.now += delta

        # -- the whole state, after every step ---------------------------------------------------
        def _learn_ids(self) -> None:
            for r in db.call("SELECT id, subscription_id, kind, period_start FROM billing.invoice", many=True):
                inv = self.m.invoices.get((r["subscription_id"], r["kind"], r["period_start"]))
                if inv is not None:
                    inv.id = r["id"]

        @invariant()
        def database_equals_model(self):
            m = self.m
            subs = {r["id"]: r for r in db.call(
                "SELECT s.*, p.code FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id", many=True)}
            assert set(subs) == set(m.subs), "subscriptions differ"
            for sid, s in m.subs.items():
                r = subs[sid]
                got = (r["code"], r["status"], r["timezone"], r["billing_anchor"], r["period_number"],
                       r["current_period_start"], r["current_period_end"], r["cancel_at_period_end"],
                       r["canceled_at"], r["cancel_reason"], r["version"], r["period_price"])
                want = (s.plan, s.status, s.tz, s.anchor, s.period_number, s.start, s.end, s.cancel_at_period_end,
                        s.canceled_at, s.cancel_reason, s.version, s.price)
                assert got == want, f"subscription {sid}: database {got} != model {want}"

            invs = {(r["subscription_id"], r["kind"], r["period_start"]): r
                    for r in db.call("SELECT * FROM billing.invoice", many=True)}
            assert set(invs) == set(m.invoices), (
                f"invoices differ: only in database {sorted(set(invs) - set(m.invoices))}, "
                f"only in model {sorted(set(m.invoices) - set(invs))}")
            for k, inv in m.invoices.items():
                r = invs[k]
                inv.id = r["id"]
                if inv.dunning_window is not None:
                    lo, hi = inv.dunning_window
                    assert r["next_attempt_at"] is not None and lo <= r["next_attempt_at"] < hi, \
                        f"invoice {inv.id}: next try {r['next_attempt_at']} outside the dunning window [{lo}, {hi})"
                    inv.next_attempt_at, inv.dunning_window = r["next_attempt_at"], None
                got = (r["status"], r["period_end"], r["subtotal"], r["credit_applied"], r["amount"],
                       r["currency"].strip(), r["attempt_count"], r["next_attempt_at"], r["due_at"], r["paid_at"],
                       r["closed_at"] if r["status"] in ("VOID", "FAILED") else None)
                want = (inv.status, inv.end, inv.subtotal, inv.credit, inv.amount, inv.currency, inv.attempt_count,
                        inv.next_attempt_at, inv.due_at, inv.paid_at,
                        inv.closed_at if inv.status in ("VOID", "FAILED") else None)
                assert got == want, f"invoice {inv.id} {k[1]}: database {got} != model {want}"

            attempts = {r["idempotency_key"]: r for r in db.call("SELECT * FROM billing.payment_attempt", many=True)}
            assert set(attempts) == set(m.attempts), "payment attempts differ"
            for key, a in m.attempts.items():
                r = attempts[key]
                assert (r["attempt_number"], r["claim_count"], r["outcome"]) == (a.number, a.claim_count, a.outcome), \
                    f"attempt {key}: database {(r['attempt_number'], r['claim_count'], r['outcome'])} != model"

            ids = {inv.nkey: inv.id for inv in m.invoices.values()}
            want_events: dict[tuple, list[str]] = {}
            for aggregate, ident, kind in m.events:
                agg_id = ids[ident] if aggregate == "invoice" else ident
                want_events.setdefault((aggregate, agg_id), []).append(kind)
            got_events: dict[tuple, list[str]] = {}
            for r in db.call("SELECT aggregate_type, aggregate_id, event_type, payload FROM billing.outbox_event "
                             "ORDER BY id", many=True):
                got_events.setdefault((r["aggregate_type"], r["aggregate_id"]), []).append(r["event_type"])
                assert r["payload"]["subject"] == f"{r['aggregate_type']}/{r['aggregate_id']}"
            assert got_events == want_events, "events differ (per aggregate, in commit order)"

            balances = {(r["customer_id"], r["currency"].strip()): r["balance"]
                        for r in db.call("SELECT * FROM billing.credit_balance", many=True) if r["balance"]}
            assert balances == {k: v for k, v in m.credit.items() if v}, "credit balances differ"
            n_webhooks = db.call("SELECT count(*) AS n FROM billing.gateway_webhook")["n"]
            assert n_webhooks == len(m.webhooks), "stored webhooks differ"

    BillingMachine.TestCase.settings = settings(
        max_examples=int(os.environ.get("BILLING_MODEL_EXAMPLES", 60)),
        stateful_step_count=max_steps, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )
    return BillingMachine


def test_sql_api_matches_the_model(db_url):
    db = Database(db_url)
    try:
        machine = make_machine(db, int(os.environ.get("BILLING_MODEL_STEPS", 50)))
        run_state_machine_as_test(machine, settings=machine.TestCase.settings)
    finally:
        db.conn.close()


def test_model_calendar_agrees_with_the_documented_cases():
    """The model's own oracle, on the contract's examples (so a model bug is not blamed on SQL)."""
    utc = "UTC"
    jan31 = datetime(2026, 1, 31, 10, tzinfo=timezone.utc)
    assert [boundary(jan31, "MONTH", 1, n, utc).day for n in (1, 2, 3)] == [28, 31, 30]
    assert proration(100000, 300000, datetime(2026, 10, 1, tzinfo=timezone.utc),
                     datetime(2026, 10, 31, tzinfo=timezone.utc), datetime(2026, 10, 16, tzinfo=timezone.utc)) == 100000
    ny = "America/New_York"
    assert boundary(datetime(2026, 3, 7, 17, tzinfo=timezone.utc), "DAY", 1, 1, ny) == \
        datetime(2026, 3, 8, 16, tzinfo=timezone.utc)  # local noon kept across spring forward
    assert boundary(datetime(2026, 3, 7, 7, 30, tzinfo=timezone.utc), "DAY", 1, 1, ny) == \
        datetime(2026, 3, 8, 7, 30, tzinfo=timezone.utc)  # 02:30 does not exist: 03:30 EDT
    assert boundary(datetime(2026, 10, 31, 5, 30, tzinfo=timezone.utc), "DAY", 1, 1, ny) == \
        datetime(2026, 11, 1, 6, 30, tzinfo=timezone.utc)  # 01:30 twice: the later one


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
