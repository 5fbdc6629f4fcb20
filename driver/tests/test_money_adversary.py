"""An adversarial customer against the SQL API on the real PostgreSQL (issue 10, docs/money.md).

A hypothesis `RuleBasedStateMachine` plays a customer trying to pay less than they owe: sign-ups
and re-subscriptions, upgrades, downgrades and changes of billing interval, cancels now and at
period end, price changes of the plans, declines, UNKNOWN results, late and duplicate results
(through record_payment_result and signed-webhook storage, some with an amount that is not the
one charged), lookups of keys near their expiry, refunds asked for any paid invoice (whole or in
part) and executed, failed or left unknown, and clock jumps. It keeps no model of the
engine: after every step it checks the money rules on the database itself:

* the books balance: per customer and currency, credit balance = credit granted - credit
  consumed by invoices still owed or paid (nothing counted twice);
* credit is backed: credit granted never exceeds what the customer's PAID invoices were billed,
  and credit consumed never exceeds credit granted;
* every PAID invoice is backed: by a successful charge of exactly its amount, or (amount 0) by
  credit; every other successful charge (a duplicate, a success on a closed invoice) is given back
  whole by the engine's own refund row, with its RefundDue; no charge is refunded beyond it;
* per period (issue 26): the credit its changes gave plus what was refunded of the charges that
  paid it never exceeds what its PAID invoices billed, tax included;
* refunds and credit never make money: what plan changes credited plus what was refunded (or is
  being refunded) of the charges that paid invoices never exceeds what the PAID invoices billed,
  in whatever order refunds (whole, partial, in flight, failed) and plan changes come;
* each period is invoiced at its own terms: the plan and the seats in force when it started (this
  test's own record of the changes) at that plan's price then (this test's own record of the
  prices), discounted only by a coupon redeemed by then;
* nothing is decided after the fact: a cancellation at period end ends a period that had not
  ended when it was asked for, and a pause whose resume date has passed resumed then (a period
  starts by that date: no later resume, no moving the date once it has passed);
* no served period is silently forgiven: no invoice that was declined is VOID, and every FAILED
  invoice is a reverted upgrade, written off with an event, or ended its subscription by dunning;
  unpaid is unpaid (issue 26 #3, #12): a cancellation takes off only the time not served, with an
  UNSERVED credit note: a PAID invoice is backed by a charge of what it still bills (a charge sent
  before the cancellation has its excess refunded), and no cancellation voids an invoice of which
  time was served (below);
* every event written matches its JSON Schema in docs/events (the new money events included).
* the service ledger (issue 26, docs/money.md section 0): every invoice is the net of its lines; a
  reversal never gives back more than its line, nor time outside it; no time of a subscription is
  sold twice by lines in force; a repeating coupon discounts only inside its months of service, a
  plan-restricted one only its plans;
* the issue's invariants as written, per customer and currency (docs/money.md, "The invariants the
  adversary holds"): cash collected less refunds = the net of the PAID lines' service, less what
  credit paid of it, less the refunds of paid service, plus money owed back whose refund failed;
  credit granted plus a cancellation's refunds never exceed the service the lines without invoice
  gave back; revenue recognized over all time = cash kept with its terms (tax, unpaid invoices,
  credit, refunds in flight); MRR now (_mrr_points) = what the lines in force sell, row by row;
  no change's invoice voided whole after some of its time was served.

* usage rated in arrears (issue 29, docs/usage.md): every rated quantity is at most an independent
  count of the events this test had accepted for the span (nothing counted twice), and exactly that
  count unless the span is marked late (nothing lost); what a span billed in all is the charge's
  amount for its latest quantity (never billed twice, never less); every billed amount is a USAGE
  line of a USAGE invoice; the rated spans of a subscription never overlap;
  no USAGE invoice is ever voided (a cancellation forgives no usage served); each customer's current
  usage (the daily rollups folded from the hours, the hours not folded, the edge events) is the
  test's own count of the events it had accepted in the open period; every USAGE line carries its
  customer's tax on its net (computed here from TAXES).

Usage is part of the game: events now, exactly at a period's start, just before it and in the ended
period (late, before and after its rating), sent twice; through every door (the SQL array, the
JSON-text door, the Kafka consumer's parse, the HTTP route's split of its body), the id written as a
string, a number or a number with an exponent (one key: review6); ratings at any time, before and
after plan changes and cancellations.

Coupons of every kind (percent, amount off, plan-restricted, once, repeating, forever), taxed
customers (exclusive and inclusive), invoices waiting for a payment method and given up, and
cancellations with p_proration none, credit or refund are part of the game.

Review7 added what still moved money unplayed: signups in bulk (create_subscriptions, a key twice in
one batch), batched payment results (record_payment_results, a key twice), the provider's refund events
(apply_refund_webhook, its amount sometimes not the refund's), cards added and detached (the waiting
invoices retried), the operator's retry, the portal's cancel, uncancel and offered plan changes, moves
of the billing address (another tax before an invoice is finalized) and changes of the 20% rate; and
the invariant that a finalized invoice's lines carry the tax it billed, so that what a change or
cancellation gives back is what was paid. House8: a change's invoice is taxed line by line (each
reversal at the rates and jurisdiction of the line it reverses, the new line today), its tax the sum
of its lines' (`change_invoices_taxed_by_line`), the moves and rate changes played against it.
Money10 added a customer session's signup (what POST /v1/subscriptions runs for a `cs_` token:
lock_self_serve_plans, then the signup on the plan's own terms, one transaction), the operator's
self-serve switch and void of an unpaid invoice (a change's invoice voided undoes its change), and a
plan a small downgrade below M_PRO, which after a move to the taxed address bills its tax owed on a
PRORATION invoice of negative subtotal (migration 0910). Adv11 added the finalization job and one
invoice's finalization at any time (before, only a claim finalized), moves to an exempt and a reverse-charge
status, and the invariant that a finalized invoice's tax is of the address its bill-to prints unless its
figures stood before (tax_of_one_instant: a change's invoice that retaxed bills nothing ends in credit).

The lifecycle (docs/lifecycle.md) is part of the game: trials, coupons (at signup and later, up to
100% off, amounts larger than the invoice), seats up and down, pauses with and without a resume
date, resumes, uncancels, reactivations after dunning, plan changes at the period end and without
proration. The same rules must hold on every one of those paths: a coupon or a pause never makes
credit from nothing (credit granted stays below what PAID invoices were billed after discounts),
and each period invoice is its plan's price then, times its seats, less its coupon discount.

Size: BILLING_ADVERSARY_EXAMPLES (default 200: 3-4 minutes alone; played in two halves, each on its own worker in make test's parallel pass) x BILLING_ADVERSARY_STEPS (default 30); the larger
run is in docs/testing.md.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from psycopg.rows import dict_row, tuple_row

from billing.api.routes.usage import event_texts
from billing.config import Settings
from billing.events.schemas import catalogue
from billing.usage import event_columns, ingest_columns, ingest_texts

from .wipe import wipe

PLANS = {  # code: (price, currency, interval, count)
    "M_BASIC": (1000, "USD", "MONTH", 1),
    "M_PRO": (3000, "USD", "MONTH", 1),
    "Y_PRO": (30000, "USD", "YEAR", 1),
    "W_LITE": (400, "USD", "WEEK", 1),
    "D_DAILY": (100, "USD", "DAY", 1),
    "M_EUR": (2000, "EUR", "MONTH", 1),
    "M_PLUS": (2800, "USD", "MONTH", 1),  # a small downgrade from M_PRO: after a move to a taxed address it bills tax (0910)
}
# Plans customers may sign up to themselves at the start of each example (plan.self_serve; the
# operator switches them on and off during the game: self_serve).
SELF_SERVE = ("M_BASIC", "M_PRO")
T0 = datetime(2027, 1, 31, 9, 0, tzinfo=timezone.utc)  # a month end: the calendar clamps
TIE = timedelta(milliseconds=1)  # changes this close before a period's start are made at its instant
COUPONS = {  # code: (percent_off, amount_off, currency, duration, months, plans)
    "FREE1": (100, None, None, "once", None, None),
    "HALF2": (50, None, None, "repeating", 2, None),
    "BIG": (None, 100000, "USD", "forever", None, None),
    "TEN": (10, None, None, "forever", None, None),
    "FIVE": (None, 500, "USD", "once", None, None),
    "BASIC90": (90, None, None, "forever", None, ["M_BASIC"]),  # restricted to one plan (issue 26 #1)
}
# Coupons a customer may redeem at most so many times (max_redemptions_per_customer, migration 0830):
# the free first month is a welcome offer, once per customer, on whichever door.
PER_CUSTOMER = {"FREE1": 1}
# Taxes by the billing address (docs/invoices.md): customer 3 pays 20% on top, customer 4 has 10% inside
# its prices; customers 1 and 2 pay none.
TAXES = {3: ("XE", "XE_VAT", 2000, False), 4: ("XI", "XI_VAT", 1000, True)}
# Usage (issue 29): one meter of requests; charges on three plans (a flat price beside usage).
CHARGES = {  # plan: (model, unit_amount, package_size, tiers, included)
    "M_BASIC": ("per_unit", 10, None, [], 0),
    "M_PRO": ("graduated", None, None, [{"upTo": 3, "unitAmount": 0}, {"upTo": None, "unitAmount": 50, "flatAmount": 7}], 0),
    "D_DAILY": ("package", 25, 2, [], 1),
}
# The plan changes the customer portal offers (set_plan_change_options): an upgrade now, a downgrade at the
# period end, a change of interval now.
PORTAL_OPTIONS = {"M_BASIC": [("M_PRO", "now"), ("Y_PRO", "now")], "M_PRO": [("M_BASIC", "period_end"), ("W_LITE", "now")],
                  "D_DAILY": [("M_BASIC", "now")]}
# Wiped between examples beside every table holding a customer_id (driver/tests/wipe.py).
EXTRA_TABLES = ("billing.customer", "billing.coupon", "billing.plan_price", "billing.plan", "billing.plan_charge",
                "billing.meter", "billing.plan_change_option")


class Db:
    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True, row_factory=dict_row)

    def rows(self, query: str, params=()) -> list[dict]:
        return self.conn.execute(query, params).fetchall()

    def call(self, query: str, params=()) -> list[dict] | str:
        """Rows, or the contract SQLSTATE (BLxxx) the API refused with."""
        try:
            return self.conn.execute(query, params).fetchall()
        except psycopg.Error as exc:
            if exc.sqlstate and exc.sqlstate.startswith("BL"):
                return exc.sqlstate
            raise

    def reset(self) -> None:
        wipe(self.conn, *EXTRA_TABLES)
        for code, (price, currency, interval, count) in PLANS.items():
            self.conn.execute("SELECT billing.upsert_plan(%s, %s, %s, %s, %s, %s)",
                              (code, price, currency, interval, count, T0 - timedelta(days=400)))
        for code, (percent, amount, currency, duration, periods, plans) in COUPONS.items():
            self.conn.execute("SELECT billing.upsert_coupon(%s, %s, %s, %s, %s, %s, NULL, NULL, %s, %s)",
                              (code, percent, amount, currency, duration, periods, plans, PER_CUSTOMER.get(code)))
        self.conn.execute("SELECT billing.upsert_meter('adv_req', 'adv.request', 'count', NULL, '{}', %s)",
                          (T0 - timedelta(days=400),))
        for code, (model, unit, package, tiers, included) in CHARGES.items():
            self.conn.execute("SELECT billing.upsert_plan_charge(%s, 'adv_req', %s, %s, %s, %s::jsonb, %s, NULL, NULL, %s)",
                              (code, model, unit, package, json.dumps(tiers), included, T0 - timedelta(days=400)))
        for code in SELF_SERVE:
            self.conn.execute("SELECT billing.set_plan_self_serve(%s, true, %s)", (code, T0 - timedelta(days=400)))
        for code, options in PORTAL_OPTIONS.items():  # the changes the portal offers (docs/customers.md)
            self.conn.execute("SELECT billing.set_plan_change_options(%s, %s::jsonb)",
                              (code, json.dumps([{"plan": to, "when": when} for to, when in options])))
        for customer, (country, code, rate, inclusive) in TAXES.items():
            self.conn.execute("SELECT billing.upsert_tax_rate(%s, %s, NULL, %s, %s, %s)",
                              (code, country, f"VAT {rate // 100}%", rate, inclusive))
            self.conn.execute("SELECT billing.upsert_customer(%s)", (customer,))
            self.conn.execute("SELECT billing.set_customer_details(%s, %s, %s, '1 Road', 'Town', '1000', NULL, %s, NULL)",
                              (customer, f"Customer {customer}", f"c{customer}@example.org", country))


# The doors of a usage event (docs/usage.md "Ingestion, two doors"), and the forms of its id that all
# read as the same key ("17": "17", 17, 0.17e2).
DOORS = ("sql", "text", "kafka", "http")
ID_FORMS = ("string", "number", "exponent")


def _event_text(customer: int, event_id: str, at: datetime, form: str) -> str:
    written = {"string": json.dumps(event_id), "number": event_id, "exponent": f"0.{event_id}e{len(event_id)}"}[form]
    return ('{"specversion": "1.0", "id": %s, "source": "adv", "type": "adv.request", "time": "%s", '
            '"subject": "%d", "data": {}}' % (written, at.isoformat(), customer))


def _ingest(db: Db, door: str, texts: list[str], now: datetime) -> list[dict]:
    """The events through one door: (ord, status, reason) each, in order."""
    if door == "sql":
        return db.rows("SELECT ord, status, reason FROM billing.ingest_usage(%s::jsonb, %s) ORDER BY ord",
                       ("[" + ", ".join(texts) + "]", now))
    if door == "http":  # the route's split of its body (billing.api.routes.usage), then its call
        texts = event_texts(("[" + ",\n".join(texts) + "]").encode())[0]
    db.conn.row_factory = tuple_row  # (the drivers' functions read rows as tuples)
    try:
        if door == "kafka":
            columns, kept, dead = event_columns([t.encode() for t in texts])
            assert kept == list(range(len(texts))) and not dead
            got = ingest_columns(db.conn, columns, now, Settings(database_url="-"))
        else:
            got = ingest_texts(db.conn, texts, now, Settings(database_url="-"))
    finally:
        db.conn.row_factory = dict_row
    return [{"ord": o, "status": st_, "reason": r} for o, st_, r in got]


def make_machine(db: Db, steps: int):
    class Adversary(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            db.reset()
            self.now = T0
            self.keys = 0
            self.events = 0
            # This test's own record of the terms: prices per plan, plan per subscription.
            self.prices = {code: [(datetime.min.replace(tzinfo=timezone.utc), p[0])] for code, p in PLANS.items()}
            self.plan_history: dict[int, list[tuple[datetime, str]]] = {}
            self.seen_reverts = 0
            self.checked_events = 0
            self.scheduled: dict[int, tuple[datetime, str]] = {}  # sub -> (when scheduled, plan)
            self.seat_history: dict[int, list[tuple[datetime, int]]] = {}  # sub -> [(since, quantity)]
            self.cancel_asked: dict[int, datetime] = {}  # sub -> when a cancel at period end was asked
            self.paused: dict[int, tuple[datetime, datetime | None]] = {}  # sub -> (paused_at, resume_at)
            self.usage: list[tuple[int, datetime]] = []  # (customer, time) of every event accepted
            self.usage_sent: list[tuple[int, str, datetime]] = []  # (customer, id, time) sent, for resending
            self.checked_usage_lines = 0
            self.usage_read = None
            self.sellable = set(SELF_SERVE)  # this test's own record of plan.self_serve
            self.moved: set[int] = set()  # customers whose billing address changed (move)
            self.retaxed = False  # the XE rate changed (retax): any customer may live there now

        # -- helpers ---------------------------------------------------------------------------
        def _subs(self) -> list[int]:
            return sorted(self.plan_history)

        def _learn_reverts(self) -> None:
            """A failed upgrade puts the plan back: learnt from its event, with its instant."""
            rows = db.rows("SELECT id, payload FROM billing.outbox_event WHERE event_type = 'SubscriptionPlanReverted' "
                           "AND id > %s ORDER BY id", (self.seen_reverts,))
            for r in rows:
                data = r["payload"]["data"]
                self.plan_history[data["subscriptionId"]].append((self.now, data["planCode"]))
                self.seat_history[data["subscriptionId"]].append((self.now, data["quantity"]))
                self.seen_reverts = r["id"]

        def _learn_scheduled(self) -> None:
            """A change scheduled for the period end takes effect with the first period billed at the new
            plan after it was scheduled (a renewal, or the period a resume starts): learnt from that
            invoice, at its period start."""
            for sub, (since, plan) in list(self.scheduled.items()):
                row = db.rows("SELECT s.scheduled_plan_id, q.code AS scheduled FROM billing.subscription s "
                              "LEFT JOIN billing.plan q ON q.id = s.scheduled_plan_id WHERE s.id = %s", (sub,))[0]
                # Applied or replaced. A call that schedules another change settles the renewals due
                # first, so the one scheduled before may have taken effect in that same call: whether it
                # did is read from the periods billed, not from the schedule now held.
                first = db.rows("SELECT min(i.period_start) AS at FROM billing.invoice i JOIN billing.plan p "
                                "ON p.id = i.plan_id WHERE i.subscription_id = %s AND p.code = %s AND "
                                "i.kind IN ('RENEWAL', 'INITIAL') AND i.created_at >= %s", (sub, plan, since))[0]["at"]
                if row["scheduled"] == plan and first is None:
                    continue  # still waiting for its period end
                del self.scheduled[sub]
                if first is not None:
                    # In force just before that period, but never before it was scheduled: a resume at
                    # the signup instant starts its period at the signup's own instant, and the change
                    # dated 1 us earlier went before the signup's plan. Sorted by time only (stable):
                    # entries of one instant keep the order they happened in, not the plans' names.
                    self.plan_history[sub].append((max(first - timedelta(microseconds=1), since), plan))
                    self.plan_history[sub].sort(key=lambda entry: entry[0])

        def _report(self, key: str, outcome: str, channel: str, data) -> None:
            if channel == "record":
                db.call("SELECT billing.record_payment_result(%s, %s, %s, 'card_declined', %s)",
                        (key, outcome, f"ch_{key}", self.now))
            elif channel in ("batch", "batch_twice"):  # the worker's ResultRecorder (record_payment_results)
                n = 2 if channel == "batch_twice" else 1  # the same key twice in one call
                db.rows("SELECT * FROM billing.record_payment_results(%s, %s, %s, %s, %s)",
                        ([key] * n, [outcome] * n, [f"ch_{key}"] * n, ["card_declined"] * n, self.now))
            else:
                attempt = db.rows("SELECT a.amount, a.currency, i.customer_id FROM billing.payment_attempt a "
                                  "JOIN billing.invoice i ON i.id = a.invoice_id WHERE a.idempotency_key = %s", (key,))
                body = {"declineCode": "do_not_honor"}
                if attempt and outcome == "SUCCEEDED":
                    a = attempt[0]
                    body.update(amount=a["amount"], currency=a["currency"].strip(), customerId=a["customer_id"])
                    if data.draw(st.booleans(), label="tampered amount"):
                        body["amount"] = a["amount"] // 2  # a charge that is not the one asked for
                self.events += 1
                db.call("SELECT billing.apply_gateway_webhook(%s, %s, %s, %s, %s::jsonb, %s)",
                        (f"evt-{self.events}", key, outcome if outcome != "NOT_FOUND" else "UNKNOWN", f"ch_{key}",
                         json.dumps(body), self.now))
            self._learn_reverts()

        # -- the customer ------------------------------------------------------------------------
        @rule(customer=st.integers(1, 4), plan=st.sampled_from(sorted(PLANS)),
              trial=st.sampled_from([0, 0, 0, 3]), coupon=st.sampled_from([None, None] + sorted(COUPONS)),
              quantity=st.sampled_from([1, 1, 3]), door=st.sampled_from(["one", "one", "bulk", "bulk_twice"]))
        def subscribe(self, customer, plan, trial, coupon, quantity, door="one"):
            """A signup through create_subscription, or a row of create_subscriptions (issue 32: its
            set-based path, the key given twice in one batch)."""
            self.keys += 1
            if door == "one":
                rows = db.call("SELECT id FROM billing.create_subscription(%s, %s, %s, %s, %s, %s, %s)",
                               (f"k{self.keys}", customer, plan, self.now, trial, coupon, quantity))
            else:
                row = {"idempotency_key": f"k{self.keys}", "customer_id": customer, "plan_code": plan,
                       "trial_days": trial, "coupon_code": coupon, "quantity": quantity}
                rows = db.call("SELECT subscription_id AS id, outcome FROM billing.create_subscriptions(%s::jsonb, %s)",
                               (json.dumps([row] * (2 if door == "bulk_twice" else 1)), self.now))
                if isinstance(rows, list):
                    assert [r["outcome"] for r in rows] == ["created", "replayed"][:len(rows)], rows
                    assert len({r["id"] for r in rows}) == 1, rows
            if rows == "BL422":  # an amount coupon in another currency, or a coupon of another plan
                assert COUPONS[coupon][2] not in (None, PLANS[plan][1]) or plan not in (COUPONS[coupon][5] or [plan])
                return
            if rows == "BL409":  # a coupon this customer has redeemed its times already (a new key otherwise)
                assert coupon in PER_CUSTOMER, (coupon, rows)
                return
            assert isinstance(rows, list), rows
            self.plan_history[rows[0]["id"]] = [(self.now, plan)]
            self.seat_history[rows[0]["id"]] = [(self.now, quantity)]

        @rule(customer=st.integers(1, 4), plan=st.sampled_from(sorted(PLANS)))
        def session_signup(self, customer, plan):
            """A customer session's signup (money10): what POST /v1/subscriptions runs for a `cs_` token,
            in one transaction: the plans locked FOR SHARE (lock_self_serve_plans), then, only for a
            self-serve plan, the signup on the plan's own terms (no trial, no coupon, one seat)."""
            self.keys += 1
            with db.conn.transaction():
                sellable = db.rows("SELECT billing.lock_self_serve_plans(%s::text[]) AS codes", ([plan],))[0]["codes"]
                assert (plan in sellable) == (plan in self.sellable), (plan, sellable, self.sellable)
                if plan not in sellable:
                    return  # 403: nothing written
                rows = db.rows("SELECT id FROM billing.create_subscription(%s, %s, %s, %s)",
                               (f"cs{self.keys}", customer, plan, self.now))
            self.plan_history[rows[0]["id"]] = [(self.now, plan)]
            self.seat_history[rows[0]["id"]] = [(self.now, 1)]

        @rule(plan=st.sampled_from(sorted(PLANS)), on=st.booleans())
        def self_serve(self, plan, on):
            """The operator switches a plan's self-serve on or off (PATCH /v1/plans/{code})."""
            got = db.rows("SELECT self_serve FROM billing.set_plan_self_serve(%s, %s, %s)", (plan, on, self.now))
            assert got[0]["self_serve"] is on
            (self.sellable.add if on else self.sellable.discard)(plan)

        @precondition(lambda self: self.plan_history)
        @rule(data=st.data())
        def operator_void(self, data):
            """The operator voids an unpaid invoice never sent to the gateway (void_invoice: a VOID credit
            note when it was finalized; a change's invoice voided undoes its change). A second after the
            step before, and before the next: a void is no cancellation's (no_served_period_silently_forgiven
            reads a cancellation's instant)."""
            self.now += timedelta(seconds=1)
            rows = db.rows("SELECT id FROM billing.invoice WHERE status = 'OPEN' AND attempt_count = 0 AND try_count = 0 "
                           "AND kind <> 'USAGE' ORDER BY id")
            if not rows:
                return
            invoice = data.draw(st.sampled_from([r["id"] for r in rows]), label="voided invoice")
            got = db.call("SELECT * FROM billing.void_invoice(%s, 'the operator', %s)", (invoice, self.now))
            assert isinstance(got, list) or got in ("BL409", "BL422"), got
            self._learn_reverts()
            self.now += timedelta(seconds=1)

        @precondition(lambda self: self.plan_history)
        @rule(data=st.data(), code=st.sampled_from(sorted(COUPONS)))
        def apply_coupon(self, data, code):
            sub = data.draw(st.sampled_from(self._subs()), label="subscription")
            got = db.call("SELECT * FROM billing.apply_coupon(%s, %s, %s)", (sub, code, self.now))
            assert isinstance(got, list) or got in ("BL422", "BL409"), got
            self._learn_scheduled()  # (renewals due are settled first: a scheduled change may apply)

        @precondition(lambda self: self.plan_history)
        @rule(data=st.data(), resume_in=st.sampled_from([None, timedelta(days=3), timedelta(days=20)]))
        def pause(self, data, resume_in):
            sub = data.draw(st.sampled_from(self._subs()), label="subscription")
            got = db.call("SELECT * FROM billing.pause_subscription(%s, %s, %s)",
                          (sub, None if resume_in is None else self.now + resume_in, self.now))
            assert isinstance(got, list) or got == "BL422", got
            self._learn_scheduled()

        @precondition(lambda self: self.plan_history)
        @rule(data=st.data(), action=st.sampled_from(["resume", "uncancel", "reactivate"]))
        def come_back(self, data, action):
            sub = data.draw(st.sampled_from(self._subs()), label="subscription")
            got = db.call(f"SELECT * FROM billing.{action}_subscription(%s, %s)", (sub, self.now))
            assert isinstance(got, list) or got in ("BL422", "BL409"), got
            if isinstance(got, list) and not got[0]["cancel_at_period_end"]:
                self.cancel_asked.pop(sub, None)
            self._learn_scheduled()

        @precondition(lambda self: self.plan_history)
        @rule(data=st.data(), quantity=st.sampled_from([1, 2, 5]))
        def seats(self, data, quantity):
            sub = data.draw(st.sampled_from(self._subs()), label="subscription")
            got = db.call("SELECT * FROM billing.set_quantity(%s, %s, %s)", (sub, quantity, self.now))
            assert isinstance(got, list) or got == "BL422", got
            if isinstance(got, list) and got[0]["quantity"] != self.seat_history[sub][-1][1]:
                self.seat_history[sub].append((self.now, got[0]["quantity"]))
            self._learn_scheduled()
            self._learn_reverts()

        @precondition(lambda self: self.plan_history)
        @rule(data=st.data(), plan=st.sampled_from(sorted(PLANS)),
              how=st.sampled_from([("now", True), ("now", True), ("now", False), ("period_end", True)]))
        def change_plan(self, data, plan, how):
            sub = data.draw(st.sampled_from(self._subs()), label="subscription")
            got = db.call("SELECT * FROM billing.change_plan(%s, %s, %s, NULL, %s, %s)", (sub, plan, self.now, *how))
            assert isinstance(got, list) or got == "BL422", got
            self._learn_scheduled()
            if isinstance(got, list) and how[0] == "period_end" and got[0]["scheduled_plan_id"] is not None:
                self.scheduled[sub] = (self.now, plan)
            if isinstance(got, list) and got[0]["plan_id"] is not None:
                current = db.rows("SELECT code FROM billing.plan WHERE id = %s", (got[0]["plan_id"],))[0]["code"]
                if current != self.plan_history[sub][-1][1]:
                    self.plan_history[sub].append((self.now, current))
            self._learn_reverts()

        @precondition(lambda self: self.plan_history)
        @rule(data=st.data(), at_period_end=st.booleans(), proration=st.sampled_from(["none", "none", "credit", "refund"]))
        def cancel(self, data, at_period_end, proration="none"):
            sub = data.draw(st.sampled_from(self._subs()), label="subscription")
            got = db.call("SELECT * FROM billing.cancel_subscription(%s, %s, %s, NULL, %s)",
                          (sub, at_period_end, self.now, "none" if at_period_end else proration))
            assert isinstance(got, list) or (got == "BL422" and at_period_end), got  # a PAUSED one: now only
            if isinstance(got, list) and got[0]["cancel_at_period_end"] and got[0]["status"] != "CANCELED":
                self.cancel_asked.setdefault(sub, self.now)
            self._learn_scheduled()

        @rule(plan=st.sampled_from(sorted(PLANS)), factor=st.sampled_from([0.5, 2, 3]))
        def change_price(self, plan, factor):
            price, currency, interval, count = PLANS[plan]
            new = int(self.prices[plan][-1][1] * factor) or 1
            # One second after now: no period starts at that instant (periods start on whole minutes,
            # or microseconds after for same-instant plan changes), so "the price in force when the
            # period starts" is never a tie with an invoice made at the same instant.
            at = self.now + timedelta(seconds=1)
            db.call("SELECT billing.upsert_plan(%s, %s, %s, %s, %s, %s)", (plan, new, currency, interval, count, at))
            if new != self.prices[plan][-1][1]:
                self.prices[plan].append((at, new))

        # -- usage (issue 29) ---------------------------------------------------------------------
        @precondition(lambda self: self.plan_history)
        @rule(data=st.data(), where=st.sampled_from(["now", "now", "period_start", "just_before", "ended_period",
                                                      "resend", "resend_moved"]),
              count=st.sampled_from([1, 3]), door=st.sampled_from(DOORS), form=st.sampled_from(ID_FORMS))
        def use(self, data, where, count, door="sql", form="string"):
            """Events for a subscription's customer: now, exactly at its period's start, 1 us before it,
            in the ended period (late), or sent again (as it was, or with another time: the same key),
            through any door (the SQL array, the JSON-text door, the Kafka consumer's parse, the HTTP
            route's split of its body), the id written as a string, a number or a number with an
            exponent: one key whichever door and form (review6)."""
            sub = data.draw(st.sampled_from(self._subs()), label="subscription")
            row = db.rows("SELECT customer_id, current_period_start FROM billing.subscription WHERE id = %s", (sub,))[0]
            customer, start = row["customer_id"], row["current_period_start"]
            batch = []
            for n in range(count):
                if where.startswith("resend") and self.usage_sent:
                    cust, eid, at = data.draw(st.sampled_from(self.usage_sent), label="resent")
                    if where == "resend_moved":
                        at = at + timedelta(days=1)
                    batch.append((cust, eid, at))
                    continue
                at = {"now": self.now, "period_start": start, "just_before": start - timedelta(microseconds=1),
                      "ended_period": start - timedelta(days=1)}.get(where, self.now)
                self.events += 1
                batch.append((customer, str(self.events), at))
            if not batch:
                return
            answers = _ingest(db, door, [_event_text(cust, eid, at, form) for cust, eid, at in batch], self.now)
            for (cust, eid, at), answer in zip(batch, answers):
                if answer["status"] == "accepted":
                    assert (cust, eid) not in {(c, e) for c, e, _ in self.usage_sent}, f"event {eid} accepted twice"
                    self.usage.append((cust, at))
                    self.usage_sent.append((cust, eid, at))
                elif answer["status"] == "duplicate":
                    assert (cust, eid) in {(c, e) for c, e, _ in self.usage_sent}, f"event {eid} a duplicate of nothing"

        @rule(grace=st.sampled_from([timedelta(hours=1), timedelta(0)]))
        def rate(self, grace):
            """The worker's rating step (after the renewals), at any time."""
            for _ in range(50):
                if len(db.rows("SELECT * FROM billing.rate_usage(500, %s, %s)", (self.now, grace))) < 500:
                    break

        @rule()
        def renew(self):
            for _ in range(200):
                if not db.rows("SELECT billing.create_due_invoices(500, %s) AS n", (self.now,))[0]["n"]:
                    break
            self._learn_scheduled()
            self.rate(timedelta(hours=1))  # the worker's round: the renewals, then the rating

        @rule(data=st.data(), lease=st.sampled_from([timedelta(minutes=5), timedelta(hours=3)]),
              channel=st.sampled_from(["record", "record", "batch"]))
        def charge(self, data, lease, channel="record"):
            rows = db.rows("SELECT * FROM billing.claim_charges('adversary', 50, %s, %s)", (lease, self.now))
            for r in rows:
                if r["lookup"]:
                    outcome = data.draw(st.sampled_from(["SUCCEEDED", "DECLINED", "NOT_FOUND", "UNKNOWN"]),
                                        label="lookup answer")
                else:
                    outcome = data.draw(st.sampled_from(["SUCCEEDED", "DECLINED", "DECLINED", "UNKNOWN"]),
                                        label="gateway answer")
                self._report(r["idempotency_key"], outcome, channel, data)

        @rule(customer=st.integers(1, 4), country=st.sampled_from(["XE", "XI", "US"]),
              status=st.sampled_from(["TAXABLE", "TAXABLE", "TAXABLE", "EXEMPT", "REVERSE_CHARGE"]))
        def move(self, customer, country, status="TAXABLE"):
            """The customer changes their billing address (another tax: 20% on top, 10% inside, none) or
            tax status (exempt, reverse charge with a tax id: adv11) at any time: before an invoice is
            finalized its tax follows the address (docs/invoices.md)."""
            got = db.call("SELECT * FROM billing.set_customer_details(%s, %s, %s, '1 Road', 'Town', '1000', NULL, %s, %s, %s)",
                          (customer, f"Customer {customer}", f"c{customer}@example.org", country,
                           f"TAX-{customer}" if status == "REVERSE_CHARGE" else None, status))
            assert isinstance(got, list) or got == "BL404", got
            if isinstance(got, list):
                self.moved.add(customer)

        @rule(bp=st.sampled_from([2000, 2500, 500]))
        def retax(self, bp):
            """The operator changes the 20% rate (to 25%, 5%, back): invoices made before keep the rate
            they were made at, new ones take the new one; a change reverses lines at their own tax."""
            db.call("SELECT billing.upsert_tax_rate('XE_VAT', 'XE', NULL, 'VAT', %s, false)", (bp,))
            if bp != TAXES[3][2]:
                self.moved.add(3)  # (its usage lines are no longer at TAXES' rate)
                self.retaxed = True

        @precondition(lambda self: self.plan_history)
        @rule(data=st.data(), one=st.booleans())
        def finalize(self, data, one):
            """The renewal job's finalization (finalize_invoices), or one invoice's (finalize_invoice), at
            any time (adv11): numbered with the bill-to and tax of this instant, a change's invoice that
            then bills nothing ending in credit; before, only a claim finalized in the game."""
            if not one:
                db.rows("SELECT billing.finalize_invoices(500, %s) AS n", (self.now,))
            else:
                rows = db.rows("SELECT id FROM billing.invoice WHERE number IS NULL AND status <> 'VOID' ORDER BY id")
                if not rows:
                    return
                invoice = data.draw(st.sampled_from([r["id"] for r in rows]), label="finalized invoice")
                got = db.call("SELECT * FROM billing.finalize_invoice(%s, %s)", (invoice, self.now))
                assert isinstance(got, list), got
            self._learn_reverts()

        @precondition(lambda self: self.plan_history)
        @rule(customer=st.integers(1, 4), provider=st.sampled_from(["sim", "stripe"]), detach=st.booleans())
        def card(self, customer, provider, detach):
            """The customer adds a card (its waiting and dunning invoices retried at once) or takes it away."""
            ref = f"pm_{provider}_{customer}"
            if detach:
                got = db.call("SELECT * FROM billing.detach_payment_method(%s, %s, %s, %s)",
                              (customer, provider, ref, self.now))
                assert isinstance(got, list) or got == "BL404", got
            else:
                got = db.call("SELECT * FROM billing.set_payment_method(%s, %s, %s, %s, 'visa', '4242', 12, %s, %s)",
                              (customer, provider, f"cus_{customer}", ref, self.now.year + 2, self.now))
                assert isinstance(got, list) or got == "BL404", got

        @precondition(lambda self: self.plan_history)
        @rule(data=st.data())
        def retry(self, data):
            """The operator's retry of an unpaid invoice (retry_invoice: the same key of its current try)."""
            rows = db.rows("SELECT id FROM billing.invoice WHERE status = 'OPEN' ORDER BY id")
            if rows:
                invoice = data.draw(st.sampled_from([r["id"] for r in rows]), label="retried invoice")
                got = db.call("SELECT * FROM billing.retry_invoice(%s, %s)", (invoice, self.now))
                assert isinstance(got, list) or got == "BL409", got

        @precondition(lambda self: self.plan_history)
        @rule(data=st.data(), action=st.sampled_from(["cancel", "uncancel", "change_plan"]),
              plan=st.sampled_from(sorted(PLANS)))
        def portal(self, data, action, plan):
            """The customer's own actions on the portal (db/functions/37_portal.sql): cancel at period end,
            uncancel, a plan change the operator offers (now or at the period end)."""
            sub = data.draw(st.sampled_from(self._subs()), label="subscription")
            customer = db.rows("SELECT customer_id FROM billing.subscription WHERE id = %s", (sub,))[0]["customer_id"]
            if action == "change_plan":
                before = db.rows("SELECT p.code FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id "
                                 "WHERE s.id = %s", (sub,))[0]["code"]
                when = dict(PORTAL_OPTIONS.get(before, [])).get(plan, "now")
                got = db.call("SELECT * FROM billing.portal_change_plan(%s, %s, %s, %s)", (customer, sub, plan, self.now))
            else:
                got = db.call(f"SELECT * FROM billing.portal_{action}(%s, %s, %s)", (customer, sub, self.now))
            assert isinstance(got, list) or got in ("BL422", "BL409"), got
            self._learn_scheduled()
            if not isinstance(got, list):
                return
            if action == "cancel" and got[0]["cancel_at_period_end"] and got[0]["status"] != "CANCELED":
                self.cancel_asked.setdefault(sub, self.now)
            if action == "uncancel" and not got[0]["cancel_at_period_end"]:
                self.cancel_asked.pop(sub, None)
            if action == "change_plan":
                if when == "period_end" and got[0]["scheduled_plan_id"] is not None:
                    self.scheduled[sub] = (self.now, plan)
                current = db.rows("SELECT code FROM billing.plan WHERE id = %s", (got[0]["plan_id"],))[0]["code"]
                if current != self.plan_history[sub][-1][1]:
                    self.plan_history[sub].append((self.now, current))
                self._learn_reverts()

        @rule()
        def charge_without_a_card(self):
            """A provider that needs a stored card, and none: the invoices due wait for a payment method
            (never declined, attempt_count 0: issue 26 #3), and are given up at the end of their span."""
            db.rows("SELECT * FROM billing.claim_charges('adversary', 50, interval '5 minutes', %s, 'stripe')", (self.now,))
            db.rows("SELECT billing.give_up_waiting_invoices(500, %s)", (self.now,))
            self._learn_reverts()

        @precondition(lambda self: self.plan_history)
        @rule(data=st.data(), outcome=st.sampled_from(["SUCCEEDED", "DECLINED", "UNKNOWN"]),
              channel=st.sampled_from(["record", "webhook", "batch", "batch_twice"]))
        def late_or_duplicate_result(self, data, outcome, channel):
            keys = [r["idempotency_key"] for r in db.rows("SELECT idempotency_key FROM billing.payment_attempt ORDER BY id")]
            if keys:
                self._report(data.draw(st.sampled_from(keys), label="key"), outcome, channel, data)

        @precondition(lambda self: self.plan_history)
        @rule(data=st.data(), share=st.sampled_from([1.0, 0.5, 0.2]))
        def refund(self, data, share):
            """Money back on any PAID invoice, whole or in part, before or after plan changes."""
            rows = db.rows("SELECT i.id, a.amount FROM billing.invoice i "
                           "JOIN billing.payment_attempt a ON a.id = i.paid_attempt_id "
                           "WHERE i.status = 'PAID' ORDER BY i.id")
            if not rows:
                return
            r = data.draw(st.sampled_from(rows), label="refunded invoice")
            got = db.call("SELECT * FROM billing.refund_invoice(%s, %s, NULL, %s)",
                          (r["id"], max(1, int(r["amount"] * share)), self.now))
            assert isinstance(got, list) or got == "BL422", got

        @rule(data=st.data(), channel=st.sampled_from(["record", "record", "webhook"]))
        def execute_refunds(self, data, channel="record"):
            """The provider answers the refunds due: done, failed (the money stays) or unknown; by the
            worker's call, or by the provider's signed event (apply_refund_webhook), its amount or charge
            sometimes not the refund's."""
            for r in db.rows("SELECT * FROM billing.claim_refunds('adversary', 50, interval '5 minutes', %s)",
                             (self.now,)):
                outcome = data.draw(st.sampled_from(["SUCCEEDED", "FAILED", "UNKNOWN"]), label="refund answer")
                if channel == "webhook" and outcome != "UNKNOWN":
                    self.events += 1
                    amount = r["amount"] * data.draw(st.sampled_from([1, 1, 2]), label="refund event's amount")
                    got = db.call("SELECT billing.apply_refund_webhook(%s, %s, %s, %s, %s, %s, %s, %s, %s) AS r",
                                  (f"revt-{self.events}", r["idempotency_key"], outcome, f"re_{r['refund_id']}", amount,
                                   r["currency"].strip(), r["charge_reference"],
                                   None if outcome == "SUCCEEDED" else "declined", self.now))
                    assert isinstance(got, list), got
                    continue
                got = db.call("SELECT * FROM billing.record_refund_result(%s, %s, %s, %s, %s)",
                              (r["idempotency_key"], outcome, f"re_{r['refund_id']}",
                               None if outcome == "SUCCEEDED" else "declined", self.now))
                assert isinstance(got, list), got

        @precondition(lambda self: self.plan_history)
        @rule(data=st.data(), answer=st.sampled_from(["SUCCEEDED", "FAILED"]))
        def refund_failed_after_success(self, data, answer):
            """The provider's event says a refund that succeeded failed (a bank sent it back, or the event
            lies): never applied, the refund marked for the worker to look up; the worker's recheck
            (claim_refund_rechecks, then record_refund_result with the provider's answer) settles it:
            FAILED, the money is back with the engine and owed again (adv11: a path that moves money the
            game never played)."""
            rows = db.rows("SELECT r.idempotency_key, r.amount, r.currency, r.charge_reference, r.provider_reference "
                           "FROM billing.refund r WHERE r.status = 'SUCCEEDED' ORDER BY r.id")
            if rows:
                r = data.draw(st.sampled_from(rows), label="refund said failed")
                self.events += 1
                got = db.call("SELECT billing.apply_refund_webhook(%s, %s, 'FAILED', %s, %s, %s, %s, 'returned', %s) AS r",
                              (f"revt-{self.events}", r["idempotency_key"], r["provider_reference"], r["amount"],
                               r["currency"].strip(), r["charge_reference"], self.now))
                assert isinstance(got, list) and got[0]["r"] in ("RECHECK", "REVIEW"), got
            for c in db.rows("SELECT * FROM billing.claim_refund_rechecks(50, interval '5 minutes', %s)", (self.now,)):
                got = db.call("SELECT * FROM billing.record_refund_result(%s, %s, %s, %s, %s)",
                              (c["idempotency_key"], answer, f"re_{c['refund_id']}",
                               None if answer == "SUCCEEDED" else "returned", self.now))
                assert isinstance(got, list), got

        @rule(delta=st.sampled_from([timedelta(minutes=20), timedelta(hours=6), timedelta(days=1),
                                     timedelta(days=4), timedelta(days=16), timedelta(days=40)]))
        def clock_jump(self, delta):
            self.now += delta

        # -- the money rules, after every step -------------------------------------------------
        @invariant()
        def a_coupon_redeemed_within_its_limit_per_customer(self):
            """max_redemptions_per_customer: on every door (signup, in bulk, apply), a redemption
            replaced or ended counting too, no customer passes it."""
            over = db.rows("SELECT r.customer_id, r.coupon_code, count(*) AS n FROM billing.coupon_redemption r "
                           "JOIN billing.coupon c ON c.code = r.coupon_code WHERE c.max_redemptions_per_customer IS NOT NULL "
                           "GROUP BY 1, 2, c.max_redemptions_per_customer HAVING count(*) > c.max_redemptions_per_customer")
            assert not over, f"coupons redeemed past their limit per customer: {over}"

        @invariant()
        def the_books_balance(self):
            rows = db.rows("""
                WITH c AS (SELECT customer_id, currency FROM billing.credit_entry
                           UNION SELECT customer_id, currency FROM billing.invoice)
                SELECT c.customer_id, c.currency,
                       coalesce((SELECT balance FROM billing.credit_balance b
                                  WHERE b.customer_id = c.customer_id AND b.currency = c.currency), 0) AS balance,
                       coalesce((SELECT sum(amount) FROM billing.credit_entry e WHERE e.customer_id = c.customer_id
                                   AND e.currency = c.currency AND e.reason = 'PRORATION'), 0) AS granted,
                       -- (what a cancellation took off beyond the amount charged went back: not consumed)
                       coalesce((SELECT sum(credit_applied - greatest(unserved - amount, 0)) FROM billing.invoice i
                                  WHERE i.customer_id = c.customer_id
                                   AND i.currency = c.currency AND i.status IN ('PAID', 'OPEN', 'REVIEW')), 0) AS consumed,
                       coalesce((SELECT sum(subtotal + tax_amount - unserved) FROM billing.invoice i WHERE i.customer_id = c.customer_id
                                   AND i.currency = c.currency AND i.status = 'PAID'), 0) AS paid_billed,
                       -- (not the engine's refund of a cut invoice's excess charge: money never billed)
                       coalesce((SELECT sum(r.amount) FROM billing.refund r
                                   JOIN billing.invoice i ON i.id = r.invoice_id AND i.paid_attempt_id = r.attempt_id
                                  WHERE i.customer_id = c.customer_id AND i.currency = c.currency
                                    AND i.status = 'PAID' AND r.status <> 'FAILED'
                                    AND NOT (r.reason = 'SUBSCRIPTION_CANCELED' AND i.unserved > 0)), 0) AS refunded
                  FROM c""")
            for r in rows:
                who = (r["customer_id"], r["currency"])
                assert r["balance"] == r["granted"] - r["consumed"], f"{who}: books do not balance {r}"
                assert r["consumed"] <= r["granted"], f"{who}: credit consumed exceeds credit granted {r}"
                assert r["granted"] <= r["paid_billed"], f"{who}: credit granted exceeds what was paid for {r}"
                assert r["granted"] + r["refunded"] <= r["paid_billed"], \
                    f"{who}: credit granted plus refunds exceed what was paid for (money from nothing) {r}"

        @invariant()
        def a_period_gives_back_at_most_what_it_was_paid(self):
            """Issue 26: per period of a subscription, the credit its changes gave (on the balance at
            once or released) plus what was refunded (or is being refunded) of the charges that paid
            it never exceeds what its PAID invoices billed, tax included, less what a cancellation took
            off (the engine's refund of a charge's excess over a cut invoice gives back what was never
            billed: not counted)."""
            over = db.rows("""
                WITH periods AS (
                    SELECT customer_id, subscription_id, period_start, period_end FROM billing.credit_entry
                     WHERE reason = 'PRORATION' AND period_start IS NOT NULL
                    UNION
                    SELECT customer_id, subscription_id, period_start, period_end FROM billing.credit_pending
                     WHERE status = 'RELEASED'
                    UNION
                    SELECT i.customer_id, i.subscription_id, min(i.period_start) OVER (
                               PARTITION BY i.customer_id, i.subscription_id, i.period_end), i.period_end
                      FROM billing.refund r JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id
                     WHERE i.kind IN ('INITIAL', 'RENEWAL', 'PLAN_CHANGE', 'PRORATION'))
                SELECT p.*, c.credited, f.refunded, b.paid
                  FROM periods p
                  CROSS JOIN LATERAL (
                      SELECT coalesce((SELECT sum(e.amount) FROM billing.credit_entry e
                                        WHERE e.customer_id = p.customer_id AND e.subscription_id = p.subscription_id
                                          AND e.reason = 'PRORATION' AND e.period_start = p.period_start
                                          AND e.period_end = p.period_end), 0)
                           + coalesce((SELECT sum(c.amount) FROM billing.credit_pending c
                                        WHERE c.customer_id = p.customer_id AND c.subscription_id = p.subscription_id
                                          AND c.status = 'RELEASED' AND c.period_start = p.period_start
                                          AND c.period_end = p.period_end), 0) AS credited) c
                  CROSS JOIN LATERAL (
                      SELECT coalesce(sum(r.amount), 0) AS refunded FROM billing.refund r
                        JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id
                       WHERE i.customer_id = p.customer_id AND i.subscription_id = p.subscription_id
                         AND i.period_end = p.period_end AND i.period_start >= p.period_start
                         AND i.status = 'PAID' AND r.attempt_id = i.paid_attempt_id AND r.status <> 'FAILED'
                         AND NOT (r.reason = 'SUBSCRIPTION_CANCELED' AND i.unserved > 0)) f
                  CROSS JOIN LATERAL (
                      SELECT coalesce(sum(i.subtotal + i.tax_amount - i.unserved), 0) AS paid FROM billing.invoice i
                       WHERE i.customer_id = p.customer_id AND i.subscription_id = p.subscription_id
                         AND i.period_end = p.period_end AND i.period_start >= p.period_start
                         AND i.status = 'PAID') b
                 WHERE c.credited + f.refunded > b.paid""")
            assert not over, f"periods that gave back more than they were paid (credit + refunds > paid): {over}"

        @invariant()
        def cash_kept_is_the_paid_service(self):
            """Issue 26, per customer and currency: cash collected less refunds = the net of the PAID
            lines' service (served or still to be served), read from the ledger, with the documented
            correction terms (docs/money.md, "The invariants"): less the part of it paid with credit
            (credit on the balance or held by unpaid invoices is not cash, and not PAID service), less
            the refunds that gave paid service back, plus money owed back whose refund failed. And the
            credit granted plus the cancellations' refunds of unused time never exceed the service the
            lines without invoice gave back (the reversals of changes, pauses and cancellations)."""
            wrong = db.rows("""
                WITH cc AS (SELECT DISTINCT customer_id, currency FROM billing.invoice),
                refunds AS (
                    SELECT r.customer_id, r.currency, r.amount, r.status, r.reason,
                           (i.status = 'PAID' AND r.attempt_id = i.paid_attempt_id
                            AND (r.reason = 'REQUESTED' OR (r.reason = 'SUBSCRIPTION_CANCELED' AND i.unserved = 0))) AS service,
                           (r.reason IN ('DUPLICATE_CHARGE', 'INVOICE_VOID', 'INVOICE_FAILED')
                            OR (r.reason = 'SUBSCRIPTION_CANCELED' AND i.unserved > 0)) AS owed_back
                      FROM billing.refund r JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id)
                SELECT cc.customer_id, cc.currency, x.*
                  FROM cc CROSS JOIN LATERAL (SELECT
                      coalesce((SELECT sum(a.amount) FROM billing.payment_attempt a
                                  JOIN billing.invoice i ON i.id = a.invoice_id
                                 WHERE i.customer_id = cc.customer_id AND a.currency = cc.currency
                                   AND a.outcome = 'SUCCEEDED'), 0) AS collected,
                      coalesce((SELECT sum(amount) FROM refunds r WHERE r.customer_id = cc.customer_id
                                   AND r.currency = cc.currency AND r.status <> 'FAILED'), 0) AS refunded,
                      coalesce((SELECT sum(l.net) FROM billing.service_line l JOIN billing.invoice i
                                    ON i.customer_id = l.customer_id AND i.id = l.invoice_id
                                 WHERE i.customer_id = cc.customer_id AND i.currency = cc.currency
                                   AND i.status = 'PAID'), 0)
                      + coalesce((SELECT sum(i.tax_amount - coalesce(n.tax_amount, 0)) FROM billing.invoice i
                                    LEFT JOIN billing.credit_note n ON n.customer_id = i.customer_id
                                     AND n.invoice_id = i.id AND n.reason = 'UNSERVED'
                                   WHERE i.customer_id = cc.customer_id AND i.currency = cc.currency
                                     AND i.status = 'PAID'), 0) AS paid_service,
                      coalesce((SELECT sum(i.credit_applied - greatest(i.unserved - i.amount, 0)) FROM billing.invoice i
                                 WHERE i.customer_id = cc.customer_id AND i.currency = cc.currency
                                   AND i.status = 'PAID'), 0) AS paid_by_credit,
                      coalesce((SELECT sum(amount) FROM refunds r WHERE r.customer_id = cc.customer_id
                                   AND r.currency = cc.currency AND r.status <> 'FAILED' AND r.service), 0) AS service_refunded,
                      coalesce((SELECT sum(amount) FROM refunds r WHERE r.customer_id = cc.customer_id
                                   AND r.currency = cc.currency AND r.status = 'FAILED' AND r.owed_back), 0) AS owed_back_held,
                      coalesce((SELECT sum(amount) FROM billing.credit_entry e WHERE e.customer_id = cc.customer_id
                                   AND e.currency = cc.currency AND e.reason = 'PRORATION'), 0) AS credit_granted,
                      coalesce((SELECT sum(amount) FROM refunds r WHERE r.customer_id = cc.customer_id
                                   AND r.currency = cc.currency AND r.status <> 'FAILED' AND r.service
                                   AND r.reason = 'SUBSCRIPTION_CANCELED'), 0) AS cancel_refunds,
                      coalesce((SELECT -sum(l.net + CASE WHEN l.tax_inclusive THEN 0 ELSE l.tax END)
                                  FROM billing.service_line l
                                 WHERE l.customer_id = cc.customer_id AND l.currency = cc.currency
                                   AND l.invoice_id IS NULL AND billing._line_in_force(l)), 0) AS given_back) x""")
            for r in wrong:
                who = (r["customer_id"], r["currency"])
                kept = r["collected"] - r["refunded"]
                service = r["paid_service"] - r["paid_by_credit"] - r["service_refunded"] + r["owed_back_held"]
                assert kept == service, f"{who}: cash kept {kept} is not the PAID lines' service {service} {r}"
                assert r["credit_granted"] + r["cancel_refunds"] <= r["given_back"], \
                    f"{who}: credit and cancellation refunds beyond the service the lines gave back {r}"

        @invariant()
        def revenue_over_all_time_is_cash_kept(self):
            """Issue 26, per currency: revenue recognized over all time (_revenue_recognized) = cash kept,
            less the tax it collected, plus what unpaid invoices still bill (recognized as owed), plus the
            credit term (the service the lines without invoice gave back, net of contained tax, plus the
            credit spent on PAID invoices and the cancellations' refunds of unused time: 0 when no credit
            is left unspent, untaxed and uncapped), plus the refunds asked for but not yet settled (and
            the tax share of those settled), less money owed back whose refund failed (docs/money.md)."""
            got = {r["currency"]: r["recognized"] for r in db.rows(
                "SELECT currency, recognized FROM billing._revenue_recognized(%s, %s)",
                (T0 - timedelta(days=800), self.now + timedelta(days=3000)))}
            want = db.rows("""
                WITH cur AS (SELECT DISTINCT currency::text AS currency FROM billing.invoice),
                notes AS (SELECT customer_id, invoice_id, sum(subtotal) AS subtotal, sum(tax_amount) AS tax
                            FROM billing.credit_note WHERE reason = 'UNSERVED' GROUP BY 1, 2),
                inv AS (
                    SELECT i.*, coalesce(n.subtotal, 0) AS note_subtotal, coalesce(n.tax, 0) AS note_tax,
                           CASE WHEN i.subtotal > 0 AND n.subtotal IS NOT NULL
                                THEN floor(n.subtotal::numeric * i.tax_included / i.subtotal)::bigint ELSE 0 END AS note_incl
                      FROM billing.invoice i LEFT JOIN notes n ON n.customer_id = i.customer_id AND n.invoice_id = i.id),
                refunds AS (
                    SELECT r.currency::text AS currency, r.amount, r.status, r.reason, i.subtotal, i.tax_amount, i.tax_included,
                           (i.status = 'PAID' AND r.attempt_id = i.paid_attempt_id) AS paying, i.unserved
                      FROM billing.refund r JOIN billing.invoice i ON i.customer_id = r.customer_id AND i.id = r.invoice_id)
                SELECT c.currency,
                   coalesce((SELECT sum(a.amount) FROM billing.payment_attempt a WHERE a.currency = c.currency
                               AND a.outcome = 'SUCCEEDED'), 0)
                   - coalesce((SELECT sum(amount) FROM refunds r WHERE r.currency = c.currency AND r.status <> 'FAILED'), 0)
                   AS kept,
                   coalesce((SELECT sum(i.tax_amount - i.note_tax + i.tax_included - i.note_incl) FROM inv i
                              WHERE i.currency = c.currency AND i.status = 'PAID'), 0) AS tax_paid,
                   coalesce((SELECT sum(i.subtotal - i.note_subtotal - i.tax_included + i.note_incl) FROM inv i
                              WHERE i.currency = c.currency AND i.status IN ('OPEN', 'REVIEW')), 0) AS unpaid_owed,
                   coalesce((SELECT sum(l.net - CASE WHEN l.tax_inclusive THEN l.tax ELSE 0 END) FROM billing.service_line l
                              LEFT JOIN billing.service_line o ON o.customer_id = l.customer_id AND o.id = l.reverses_id
                              WHERE l.currency = c.currency AND l.invoice_id IS NULL AND billing._line_in_force(l)
                                AND (o.id IS NULL OR billing._line_in_force(o))), 0)
                   + coalesce((SELECT sum(i.credit_applied - greatest(i.unserved - i.amount, 0)) FROM inv i
                                WHERE i.currency = c.currency AND i.status = 'PAID'), 0)
                   + coalesce((SELECT sum(amount) FROM refunds r WHERE r.currency = c.currency AND r.status <> 'FAILED'
                                 AND r.paying AND r.reason = 'SUBSCRIPTION_CANCELED' AND r.unserved = 0), 0) AS credit,
                   coalesce((SELECT sum(amount) FROM refunds r WHERE r.currency = c.currency AND r.status <> 'FAILED'
                               AND r.paying AND r.reason = 'REQUESTED'), 0)
                   - coalesce((SELECT sum(amount - CASE WHEN subtotal + tax_amount > 0
                                                        THEN floor(amount::numeric * (tax_amount + tax_included)
                                                                   / (subtotal + tax_amount)) ELSE 0 END)
                                 FROM refunds r WHERE r.currency = c.currency AND r.status = 'SUCCEEDED'
                                  AND r.paying AND r.reason = 'REQUESTED'), 0) AS refunds_unsettled,
                   coalesce((SELECT sum(amount) FROM refunds r WHERE r.currency = c.currency AND r.status = 'FAILED'
                               AND (r.reason IN ('DUPLICATE_CHARGE', 'INVOICE_VOID', 'INVOICE_FAILED')
                                    OR (r.reason = 'SUBSCRIPTION_CANCELED' AND r.unserved > 0))), 0) AS owed_back_held
                  FROM cur c""")
            for r in want:
                expected = (r["kept"] - r["tax_paid"] + r["unpaid_owed"] + r["credit"] + r["refunds_unsettled"]
                            - r["owed_back_held"])
                assert got.get(r["currency"], 0) == expected, \
                    f"{r['currency']}: revenue over all time {got.get(r['currency'], 0)} != cash kept and its terms {expected} {r}"

        @invariant()
        def mrr_is_what_the_lines_sell(self):
            """Issue 26: MRR now (the one function, _mrr_points) is, per subscription, what its PLAN lines
            in force covering now and not ended by then sell for a whole period (net, without contained
            tax, normalized to a month); 0 paused or canceled; live past its period's end and not renewed
            yet, its terms at that period's last instant. Read row by row with _line_in_force, against
            the set-based function (the model's own MRR is test_model_properties' mrr_equals_model)."""
            got = {r["subscription_id"]: r["mrr"] for r in db.rows(
                "SELECT subscription_id, mrr FROM billing._mrr_at(%s)", (self.now,))}
            want = {r["id"]: r["mrr"] for r in db.rows("""
                WITH s AS (
                    SELECT s.*, CASE WHEN s.status IN ('ACTIVE', 'PAST_DUE') AND NOT s.cancel_at_period_end
                                          AND s.canceled_at IS NULL AND s.current_period_end <= %(now)s
                                     THEN s.current_period_end - interval '1 microsecond' ELSE %(now)s END AS seen
                      FROM billing.subscription s)
                SELECT s.id, sum(CASE WHEN l.tax_inclusive AND l.net > 0 THEN l.basis_net::numeric * (l.net - l.tax) / l.net
                                      ELSE l.basis_net::numeric END
                                 * billing._mrr_factor(p.billing_interval, p.interval_count)) AS mrr
                  FROM s JOIN billing.service_line l ON l.customer_id = s.customer_id AND l.subscription_id = s.id
                  JOIN billing.plan p ON p.id = l.plan_id
                 WHERE l.item = 'PLAN' AND l.kind = 'CHARGE' AND l.span_start <= s.seen AND s.seen < l.span_end
                   AND billing._line_in_force(l)
                   AND NOT EXISTS (SELECT 1 FROM billing.service_line r WHERE r.customer_id = l.customer_id
                                     AND r.reverses_id = l.id AND r.span_start <= s.seen AND billing._line_in_force(r))
                   AND (s.canceled_at IS NULL OR s.canceled_at > %(now)s)
                   AND NOT (s.status = 'PAUSED' AND s.paused_at <= %(now)s)
                 GROUP BY s.id""", {"now": self.now})}
            assert got == want, f"MRR now from _mrr_points {got} != what the lines in force sell {want}"

        @invariant()
        def every_paid_invoice_is_backed(self):
            # What is charged is the amount less what a cancellation took off (issue 26 #3); a charge
            # sent before the cancellation collected more: the excess is the engine's refund.
            bad = db.rows("""
                SELECT i.id, i.amount, i.unserved, a.outcome, a.amount AS charged
                  FROM billing.invoice i LEFT JOIN billing.payment_attempt a ON a.id = i.paid_attempt_id
                 WHERE i.status = 'PAID' AND i.amount - least(i.unserved, i.amount) > 0
                   AND (a.id IS NULL OR a.outcome <> 'SUCCEEDED' OR a.amount < i.amount - least(i.unserved, i.amount)
                        OR (a.amount > i.amount - least(i.unserved, i.amount)
                            AND NOT EXISTS (SELECT 1 FROM billing.refund r WHERE r.attempt_id = a.id
                                              AND r.reason = 'SUBSCRIPTION_CANCELED')))""")
            assert not bad, f"PAID invoices without a successful charge of what they bill: {bad}"
            stray = db.rows("""
                SELECT a.id, a.amount, i.status,
                       (SELECT array_agg(r.amount ORDER BY r.id) FROM billing.refund r WHERE r.attempt_id = a.id
                           AND r.reason IN ('DUPLICATE_CHARGE', 'INVOICE_VOID', 'INVOICE_FAILED')) AS refunds
                  FROM billing.payment_attempt a JOIN billing.invoice i ON i.id = a.invoice_id
                 WHERE a.outcome = 'SUCCEEDED' AND i.paid_attempt_id IS DISTINCT FROM a.id""")
            unrefunded = [r for r in stray if r["refunds"] != [r["amount"]]]
            assert not unrefunded, f"successful charges nobody owed, not given back whole (once): {unrefunded}"
            over = db.rows("""
                SELECT a.id, a.amount, sum(r.amount) AS refunded FROM billing.payment_attempt a
                  JOIN billing.refund r ON r.attempt_id = a.id AND r.status <> 'FAILED'
                 GROUP BY a.id, a.amount HAVING sum(r.amount) > a.amount""")
            assert not over, f"charges refunded beyond what they collected: {over}"
            due = sorted((r["aggregate_id"], r["payload"]["data"]["reason"], r["payload"]["data"]["amount"])
                         for r in db.rows("SELECT aggregate_id, payload FROM billing.outbox_event "
                                          "WHERE event_type = 'RefundDue'"))
            engine = sorted((r["invoice_id"], r["reason"], r["amount"])
                            for r in db.rows("SELECT invoice_id, reason, amount FROM billing.refund "
                                             "WHERE reason <> 'REQUESTED'"))
            assert due == engine, f"RefundDue events {due} != the engine's refund rows {engine}"

        @invariant()
        def each_period_at_its_own_terms(self):
            for r in db.rows("""SELECT i.id, i.subscription_id, i.kind, i.period_start, i.period_end, i.subtotal, i.plan_price,
                                       i.billing_interval, p.code, i.quantity, i.discount_amount, i.coupon_code
                                  FROM billing.invoice i JOIN billing.plan p ON p.id = i.plan_id
                                 WHERE i.kind IN ('INITIAL', 'RENEWAL', 'PLAN_CHANGE')"""):
                start = r["period_start"]
                price = [p for t, p in self.prices[r["code"]] if t <= start][-1]
                # The plan line is the price then times the seats; the coupon's line takes off at most that.
                assert (r["subtotal"] + r["discount_amount"], r["plan_price"], r["billing_interval"]) == \
                    (price * r["quantity"], price, PLANS[r["code"]][2]), \
                    f"invoice {r['id']} ({r['kind']} from {start}): {r['subtotal']} at {r['code']}, terms then: {price}"
                assert r["subtotal"] >= 0 and (r["discount_amount"] == 0 or r["coupon_code"] is not None)
                # The seats in force just before it started, or set at that very instant (a tie; a period
                # started at an instant another already started at moves on by 1 us, so "that instant"
                # is the millisecond up to its start).
                seats = self.seat_history[r["subscription_id"]]
                in_force = {q for t, q in seats if start - TIE <= t <= start}
                before = [q for t, q in seats if t < start - TIE]
                in_force |= {before[-1]} if before else set()
                assert r["quantity"] in in_force, \
                    f"invoice {r['id']} ({r['kind']} from {start}): {r['quantity']} seats, in force then {in_force}"
                if r["coupon_code"] is not None:
                    percent, amount, currency, duration, _, plans = COUPONS[r["coupon_code"]]
                    assert plans is None or r["code"] in plans, \
                        f"invoice {r['id']}: {r['coupon_code']} discounted plan {r['code']} (restricted to {plans})"
                    full = price * r["quantity"]
                    want = full * percent // 100 if percent is not None else min(amount, full)
                    until = db.rows("SELECT discount_until FROM billing.coupon_redemption WHERE subscription_id = %s "
                                    "AND coupon_code = %s", (r["subscription_id"], r["coupon_code"]))[0]["discount_until"]
                    if duration == "repeating":
                        # Months of service (issue 26 #8): a period inside them in full, one across
                        # their end for its share, none after.
                        assert until is not None and r["period_start"] < until, \
                            f"invoice {r['id']}: {r['coupon_code']} discounted a period from {start}, after {until}"
                        if r["period_end"] <= until:
                            assert r["discount_amount"] == want, f"invoice {r['id']}: discount {r['discount_amount']} != {want}"
                        else:
                            assert r["discount_amount"] <= want
                    else:
                        assert r["discount_amount"] == want, f"invoice {r['id']}: discount {r['discount_amount']} != {want}"
                if r["kind"] == "RENEWAL":
                    # A renewal at a period boundary bills the plan in force just before it; a period a
                    # resume or a reactivation starts now bills a plan in force at that instant (changes
                    # made at that very instant, before or after it, are a tie).
                    history = self.plan_history[r["subscription_id"]]
                    in_force = {plan for t, plan in history if start - TIE <= t <= start}
                    before = [plan for t, plan in history if t < start - TIE]
                    in_force |= {before[-1]} if before else set()
                    assert r["code"] in in_force, \
                        f"invoice {r['id']}: period from {start} billed at {r['code']}, plan in force then {in_force}"

        @invariant()
        def a_discount_only_from_a_coupon_redeemed_by_then(self):
            late = db.rows("""
                SELECT i.id, i.kind, i.period_start, r.redeemed_at FROM billing.invoice i
                  JOIN billing.coupon_redemption r ON r.customer_id = i.customer_id
                   AND r.subscription_id = i.subscription_id AND r.coupon_code = i.coupon_code
                 WHERE i.discount_amount > 0 AND r.redeemed_at > i.period_start AND i.kind <> 'USAGE'
                UNION ALL
                -- a USAGE invoice may span periods: each discounted usage line's own span (docs/usage.md "Coupons")
                SELECT l.invoice_id, 'USAGE', l.span_start, r.redeemed_at FROM billing.service_line l
                  JOIN billing.coupon_redemption r ON r.customer_id = l.customer_id
                   AND r.subscription_id = l.subscription_id AND r.coupon_code = l.coupon_code
                 WHERE l.item = 'USAGE' AND l.discount > 0 AND r.redeemed_at > l.span_start""")
            assert not late, f"periods discounted by a coupon redeemed after they began: {late}"

        @invariant()
        def nothing_decided_after_the_fact(self):
            # A cancellation at period end ends a period that had not ended when it was asked for.
            for sub, asked in list(self.cancel_asked.items()):
                row = db.rows("SELECT status, cancel_reason, cancel_at_period_end, current_period_end "
                              "FROM billing.subscription WHERE id = %s", (sub,))[0]
                if row["status"] == "CANCELED":
                    del self.cancel_asked[sub]
                    if row["cancel_reason"] == "PERIOD_END":
                        assert row["current_period_end"] >= asked, \
                            f"subscription {sub}: canceled at the period end {row['current_period_end']}, asked at {asked}"
                elif not row["cancel_at_period_end"]:
                    del self.cancel_asked[sub]
            # A pause whose resume date has passed resumed by then: a period starts by that date.
            rows = db.rows("SELECT id, status, paused_at, resume_at FROM billing.subscription")
            now = {r["id"]: r for r in rows}
            for sub, (paused_at, resume_at) in list(self.paused.items()):
                r = now[sub]
                if r["status"] == "PAUSED" and r["paused_at"] == paused_at:
                    if r["resume_at"] != resume_at:
                        assert resume_at is None or resume_at > self.now, \
                            f"subscription {sub}: its passed resume date {resume_at} moved to {r['resume_at']}"
                        self.paused[sub] = (paused_at, r["resume_at"])
                    continue
                del self.paused[sub]
                if resume_at is not None and resume_at <= self.now:
                    # (a period started at an instant another already started at moves on by 1 us)
                    started = db.rows("SELECT 1 FROM billing.invoice WHERE subscription_id = %s AND kind = 'RENEWAL' "
                                      "AND period_start BETWEEN %s AND %s", (sub, paused_at, resume_at + timedelta(milliseconds=1)))
                    assert started, f"subscription {sub} paused at {paused_at} did not resume by its date {resume_at}"
            for r in rows:
                if r["status"] == "PAUSED" and r["id"] not in self.paused:
                    self.paused[r["id"]] = (r["paused_at"], r["resume_at"])

        @invariant()
        def the_ledger_says_what_was_sold(self):
            """The service ledger (issue 26): every invoice is the net of its lines; a reversal never
            gives back more than its line, nor time outside it; no time is sold twice."""
            # (less what a cancellation took off: its UNSERVED credit note's net, its lines reversed)
            wrong = db.rows("""
                SELECT i.id, i.kind, i.subtotal, sum(l.net) AS lines FROM billing.invoice i
                  LEFT JOIN billing.service_line l ON l.customer_id = i.customer_id AND l.invoice_id = i.id
                 GROUP BY i.customer_id, i.id, i.kind, i.subtotal
                HAVING coalesce(sum(l.net), 0) <> i.subtotal - (SELECT coalesce(sum(n.subtotal), 0) FROM billing.credit_note n
                                                                 WHERE n.customer_id = i.customer_id AND n.invoice_id = i.id
                                                                   AND n.reason = 'UNSERVED')""")
            assert not wrong, f"invoices that are not the net of their lines: {wrong}"
            over = db.rows("""
                SELECT r.id, r.net, o.net AS line FROM billing.service_line r
                  JOIN billing.service_line o ON o.customer_id = r.customer_id AND o.id = r.reverses_id
                 WHERE -r.net > o.net OR -r.gross > o.gross OR r.span_end <> o.span_end OR r.span_start < o.span_start""")
            assert not over, f"reversals beyond their line: {over}"
            twice = db.rows("""
                WITH live AS (
                    SELECT l.*, coalesce((SELECT min(r.span_start) FROM billing.service_line r
                                           WHERE r.customer_id = l.customer_id AND r.reverses_id = l.id
                                             AND billing._line_in_force(r)), l.span_end) AS served_end
                      FROM billing.service_line l WHERE l.kind = 'CHARGE' AND l.item = 'PLAN' AND billing._line_in_force(l))
                SELECT a.subscription_id, a.id, b.id AS other, a.span_start, a.served_end, b.span_start AS other_start,
                       b.served_end AS other_end
                  FROM live a JOIN live b ON b.customer_id = a.customer_id AND b.subscription_id = a.subscription_id
                   AND b.id > a.id AND b.span_start < a.served_end AND a.span_start < b.served_end
                   -- Overlaps under a second are the 1 us shims of changes at one instant (a period
                   -- started where another started moves on by 1 us); proration counts whole seconds.
                   AND least(a.served_end, b.served_end) - greatest(a.span_start, b.span_start) >= interval '1 second'
                 WHERE a.span_start < a.served_end AND b.span_start < b.served_end""")
            assert not twice, f"service sold twice for the same time: {twice}"

        @invariant()
        def usage_is_billed_once_and_whole(self):
            """Usage in arrears (issue 29): per rated span and meter, the latest quantity is this test's
            own count of the events it had accepted for the span (less only while the span is marked
            late), the span billed in all the charge's amount for that quantity, each billed amount a
            USAGE line of a USAGE invoice; a subscription's rated spans never overlap; no USAGE invoice is
            ever voided."""
            spans = db.rows("""
                SELECT r.customer_id, r.subscription_id, r.meter_code, r.span_start, r.span_end,
                       (array_agg(r.quantity ORDER BY r.rated_at DESC, r.id DESC))[1] AS quantity, sum(r.billed) AS billed,
                       billing._usage_amount((SELECT c FROM billing.plan_charge c WHERE c.meter_code = r.meter_code
                                               AND c.plan_id = min(r.plan_id)),
                                             (array_agg(r.quantity ORDER BY r.rated_at DESC, r.id DESC))[1]) AS owed,
                       min(u.late_since) AS late_since
                  FROM billing.usage_rating r
                  JOIN billing.usage_cursor u ON u.customer_id = r.customer_id AND u.subscription_id = r.subscription_id
                 GROUP BY r.customer_id, r.subscription_id, r.meter_code, r.span_start, r.span_end""")
            for r in spans:
                own = sum(1 for c, at in self.usage if c == r["customer_id"] and r["span_start"] <= at < r["span_end"])
                where = f"subscription {r['subscription_id']} [{r['span_start']}, {r['span_end']})"
                assert r["quantity"] <= own, f"{where}: rated {r['quantity']} events, only {own} were accepted (counted twice)"
                if r["late_since"] is None or r["late_since"] >= r["span_end"]:
                    assert r["quantity"] == own, f"{where}: rated {r['quantity']} of {own} events, none marked late (lost)"
                assert r["billed"] == r["owed"], f"{where}: billed {r['billed']} in all, the charge owes {r['owed']}"
            # One query for the rest (it runs after every step): each row a broken rule.
            broken = db.rows("""
                SELECT 'ratings whose amount is not a USAGE line of a USAGE invoice' AS rule, r.subscription_id AS sub,
                       r.span_start AS at FROM billing.usage_rating r
                  LEFT JOIN billing.service_line l ON l.customer_id = r.customer_id AND l.id = r.line_id
                  LEFT JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = l.invoice_id
                 WHERE r.billed > 0 AND (l.id IS NULL OR l.gross <> r.billed OR l.net <> l.gross - l.discount OR l.item <> 'USAGE'
                                         OR i.kind IS DISTINCT FROM 'USAGE')
                UNION ALL
                -- Coupons on usage lines (docs/usage.md "Coupons"): a percentage coupon of the
                -- subscription (repeating or forever, covering the line's plan) takes at most its
                -- percentage of the line, rounded down; nothing else discounts a usage line.
                SELECT 'usage lines discounted beyond their coupon', l.subscription_id, l.span_start
                  FROM billing.service_line l
                  LEFT JOIN billing.coupon c ON c.code = l.coupon_code
                  LEFT JOIN billing.plan p ON p.id = l.plan_id
                 WHERE l.item = 'USAGE' AND l.discount > 0
                   AND (c.code IS NULL OR c.percent_off IS NULL OR c.duration = 'once'
                        OR (c.plan_codes IS NOT NULL AND NOT p.code = ANY (c.plan_codes))
                        OR l.discount > floor(l.gross * c.percent_off / 100)
                        OR NOT EXISTS (SELECT 1 FROM billing.coupon_redemption r
                                        WHERE r.customer_id = l.customer_id AND r.subscription_id = l.subscription_id
                                          AND r.coupon_code = c.code AND r.redeemed_at < l.span_end))
                UNION ALL
                SELECT 'rated spans that overlap (usage rated twice)', o.subscription_id, o.span_start
                  FROM (SELECT s.*, lag(s.span_end) OVER (PARTITION BY s.subscription_id ORDER BY s.span_start) AS prev_end
                          FROM (SELECT DISTINCT subscription_id, span_start, span_end FROM billing.usage_rating) s) o
                 WHERE o.prev_end > o.span_start
                UNION ALL
                SELECT 'spans rated beyond the cursor', u.subscription_id, u.rated_until FROM billing.usage_cursor u
                 WHERE EXISTS (SELECT 1 FROM billing.usage_rating r WHERE r.customer_id = u.customer_id
                                 AND r.subscription_id = u.subscription_id AND r.span_end > u.rated_until)
                UNION ALL
                SELECT 'USAGE invoices voided (usage served, forgiven)', i.subscription_id, i.period_start
                  FROM billing.invoice i WHERE i.kind = 'USAGE' AND i.status = 'VOID'""")
            assert not broken, f"usage rules broken: {broken}"

        @invariant()
        def current_usage_is_the_count(self):
            """The reads (current_usage: the daily rollups folded from the hours, the hours not folded,
            the edge hours' events) give each customer's open period this test's own count of the events
            it had accepted in it: the fold neither loses nor doubles an event, late ones included."""
            seen = (len(self.usage), self.now)  # (after a step that added events or moved the clock)
            if seen == self.usage_read:
                return
            self.usage_read = seen
            for got in db.rows("SELECT c AS customer, u.* FROM unnest(%s::bigint[]) c, LATERAL billing.current_usage(c, %s) u "
                               "WHERE u.meter_code = 'adv_req'", (sorted({c for c, _ in self.usage}), self.now)):
                customer = got["customer"]
                own = sum(1 for c, at in self.usage if c == customer and got["period_start"] <= at < got["period_end"])
                assert (got["value"], got["events"]) == (own, own), (
                    f"customer {customer} [{got['period_start']}, {got['period_end']}): current usage "
                    f"{got['value']} ({got['events']} events), {own} accepted")

        @invariant()
        def usage_lines_taxed_at_the_customers_rate(self):
            """Tax on usage (docs/usage.md "Where it goes"): each USAGE line carries its customer's tax on
            its net (after a coupon), rounded half away from zero, computed here from TAXES (customer
            3: 20% on top, customer 4: 10% inside), none for the others."""
            for line in db.rows("SELECT customer_id, id, net, tax, tax_inclusive FROM billing.service_line "
                                "WHERE item = 'USAGE' AND id > %s ORDER BY id", (self.checked_usage_lines,)):
                if line["customer_id"] in self.moved or self.retaxed:  # invoiced_lines_carry_their_invoices_tax
                    self.checked_usage_lines = line["id"]
                    continue
                rate = TAXES.get(line["customer_id"])
                if rate is None:
                    owed, inside = 0, False
                else:
                    denominator = 10000 + rate[2] if rate[3] else 10000
                    owed, inside = (2 * line["net"] * rate[2] + denominator) // (2 * denominator), rate[3]
                assert (line["tax"], line["tax_inclusive"] and owed > 0) == (owed, inside and owed > 0), (
                    f"USAGE line {line['id']} of customer {line['customer_id']}: net {line['net']}, tax {line['tax']} "
                    f"(inclusive {line['tax_inclusive']}), owed {owed}")
                self.checked_usage_lines = line["id"]

        @invariant()
        def invoiced_lines_carry_their_invoices_tax(self):
            """Each line a finalized invoice sells (CHARGE, plan or usage) carries the tax of its net at
            the rate the invoice was taxed at (its tax detail: the customer's address when finalized),
            rounded half away from zero (or its share of that, cut by a cancellation): a change or a cancellation gives back a line's unused part at
            that line's tax, so a line taxed at another rate than was billed gives back tax never paid
            (or keeps tax that was)."""
            wrong = []
            for line in db.rows("SELECT l.id, l.invoice_id, l.net, l.tax, l.tax_inclusive, i.tax_detail "
                                "FROM billing.service_line l JOIN billing.invoice i ON i.customer_id = l.customer_id "
                                "AND i.id = l.invoice_id WHERE l.kind = 'CHARGE' AND i.number IS NOT NULL "
                                "AND i.tax_detail IS NOT NULL AND NOT EXISTS (SELECT 1 FROM billing.service_line r "
                                "WHERE r.customer_id = i.customer_id AND r.invoice_id = i.id AND r.kind = 'REVERSAL')"):
                rates = line["tax_detail"].get("lines") or []
                bp = sum(r["rateBp"] for r in rates)
                inside = any(r["inclusive"] for r in rates)
                denominator = 10000 + bp if inside else 10000
                owed = (2 * line["net"] * bp + denominator) // (2 * denominator)
                # (within 1: a line a cancellation cut keeps its share of its tax, floored)
                if abs(line["tax"] - owed) > 1 or (line["tax_inclusive"] and owed > 1) != (inside and owed > 1):
                    wrong.append((line["id"], line["invoice_id"], line["net"], line["tax"], owed, bp, inside))
            assert not wrong, f"lines taxed at another rate than their invoice (line, invoice, net, tax, owed, bp, inclusive): {wrong}"

        @invariant()
        def tax_of_one_instant(self):
            """Bill-to and tax of one instant (docs/invoices.md): a finalized invoice's tax is of the
            address and tax status its bill-to prints, unless its figures stood before (paid by credit
            before its finalization, a line of it reversed by then at its tax, or a change's invoice whose
            subscription was in another period by then). adv11: a change's invoice of negative subtotal
            (a small downgrade after a move to a taxed address) kept the taxed address's tax after a move
            back before its finalization; it now ends in credit (VOID)."""
            stale = db.rows(
                "SELECT i.id, i.kind, i.subtotal, i.tax_amount, i.tax_detail ->> 'country' AS taxed_at, i.bill_to ->> 'country' AS billed_at "
                "FROM billing.invoice i WHERE i.number IS NOT NULL AND i.status <> 'VOID' AND i.tax_detail IS NOT NULL "
                "AND billing._tax_stale(i.tax_detail, i.bill_to ->> 'taxStatus', i.bill_to ->> 'country', i.bill_to ->> 'region') "
                "AND NOT (i.paid_at IS NOT NULL AND i.paid_at <= i.finalized_at) "
                "AND NOT EXISTS (SELECT 1 FROM billing.service_line c JOIN billing.service_line r "
                "                 ON r.customer_id = c.customer_id AND r.reverses_id = c.id "
                "                WHERE c.customer_id = i.customer_id AND c.invoice_id = i.id AND c.kind = 'CHARGE' "
                "                  AND r.created_at <= i.finalized_at) "
                "AND NOT (i.kind = 'PRORATION' AND EXISTS (SELECT 1 FROM billing.subscription s WHERE s.id = i.subscription_id "
                "                                          AND s.current_period_end <> i.period_end))")
            assert not stale, f"finalized with the tax of another address than their bill-to: {stale}"

        @invariant()
        def change_invoices_taxed_by_line(self):
            """A change's invoice (a CHARGE line beside REVERSAL lines) is taxed line by line (house8): its
            tax on top and its tax inside are the sums over its lines of each line's own tax, and its
            entries (one per rate and jurisdiction) add up to them; each reversal is taxed at the rates and
            jurisdiction of the line it reverses (its entries), its share of that line's tax at most. So a
            move or a change of rate between the sale and the change bills no (new rate - old rate) x the
            reversed net too little or too much (left out: an invoice a cancellation cut, whose lines the
            UNSERVED credit note accounts for)."""
            unfit = db.rows("""
                SELECT i.id, i.tax_amount, i.tax_included,
                       sum(l.tax) FILTER (WHERE NOT l.tax_inclusive) AS lines_on_top,
                       sum(l.tax) FILTER (WHERE l.tax_inclusive) AS lines_inside,
                       (SELECT sum((e->>'amount')::bigint) FROM jsonb_array_elements(i.tax_detail->'lines') e) AS entries
                  FROM billing.invoice i JOIN billing.service_line l ON l.customer_id = i.customer_id AND l.invoice_id = i.id
                 WHERE i.kind = 'PRORATION'
                   AND EXISTS (SELECT 1 FROM billing.service_line r WHERE r.customer_id = i.customer_id
                                  AND r.invoice_id = i.id AND r.kind = 'REVERSAL')
                   AND NOT EXISTS (SELECT 1 FROM billing.credit_note n WHERE n.customer_id = i.customer_id
                                      AND n.invoice_id = i.id AND n.reason = 'UNSERVED')
                 GROUP BY i.customer_id, i.id, i.tax_amount, i.tax_included, i.tax_detail
                HAVING coalesce(sum(l.tax) FILTER (WHERE NOT l.tax_inclusive), 0) <> i.tax_amount
                    OR coalesce(sum(l.tax) FILTER (WHERE l.tax_inclusive), 0) <> i.tax_included
                    OR coalesce((SELECT sum((e->>'amount')::bigint) FROM jsonb_array_elements(i.tax_detail->'lines') e), 0)
                       <> i.tax_amount + i.tax_included""")
            assert not unfit, f"change invoices whose tax is not their lines' (id, on top, inside, lines', entries): {unfit}"
            strays = db.rows("""
                SELECT r.id, r.tax, o.id AS reversed, o.tax AS reversed_tax, r.tax_lines,
                       billing._line_tax_lines(o) AS reversed_lines
                  FROM billing.service_line r JOIN billing.service_line o ON o.customer_id = r.customer_id AND o.id = r.reverses_id
                 WHERE r.kind = 'REVERSAL' AND r.tax_lines IS NOT NULL AND r.tax <> 0
                   AND ((SELECT array_agg(ARRAY[e->>'code', e->>'rateBp', e->>'country', e->>'region', e->>'inclusive']
                                          ORDER BY e->>'code', e->>'rateBp')
                           FROM jsonb_array_elements(r.tax_lines) e WHERE (e->>'amount')::bigint <> 0)
                        IS DISTINCT FROM
                        (SELECT array_agg(ARRAY[e->>'code', e->>'rateBp', e->>'country', e->>'region', e->>'inclusive']
                                          ORDER BY e->>'code', e->>'rateBp')
                           FROM jsonb_array_elements(billing._line_tax_lines(o)) e WHERE (e->>'amount')::bigint <> 0)
                        OR -r.tax > o.tax
                        OR (SELECT sum((e->>'amount')::bigint) FROM jsonb_array_elements(r.tax_lines) e) <> r.tax)""")
            assert not strays, f"reversals not taxed at the rates of the lines they reverse: {strays}"
            # Its new line (its first CHARGE line; the later ones are a cancellation's re-sales, taxed as
            # the lines they sell again: money10) at its own rates: each entry on the line's net at its
            # rate, rounded half away from zero (inclusive rates: out of 10000 + the sum of the line's
            # inclusive rates).
            off = []
            for line in db.rows("SELECT l.id, l.net, l.tax, l.tax_lines FROM billing.service_line l "
                                "JOIN billing.invoice i ON i.customer_id = l.customer_id AND i.id = l.invoice_id "
                                "WHERE i.kind = 'PRORATION' AND l.kind = 'CHARGE' AND l.tax_lines IS NOT NULL "
                                "AND l.id = (SELECT min(c.id) FROM billing.service_line c WHERE c.customer_id = l.customer_id "
                                "AND c.invoice_id = l.invoice_id AND c.kind = 'CHARGE')"):
                entries = line["tax_lines"]
                inside = sum(e["rateBp"] for e in entries if e["inclusive"])
                owed = [(2 * line["net"] * e["rateBp"] + (10000 + inside if e["inclusive"] else 10000))
                        // (2 * (10000 + inside if e["inclusive"] else 10000)) for e in entries]
                if [e["amount"] for e in entries] != owed or sum(owed) != line["tax"] \
                        or any(e["base"] != line["net"] for e in entries):
                    off.append((line["id"], line["net"], line["tax"], entries, owed))
            assert not off, f"change lines not taxed at their own rates (line, net, tax, entries, owed): {off}"

        @invariant()
        def every_event_matches_the_catalogue(self):
            rows = db.rows("SELECT id, payload FROM billing.outbox_event WHERE id > %s ORDER BY id", (self.checked_events,))
            for r in rows:
                problems = catalogue().errors(r["payload"])
                assert not problems, f"event {r['payload'].get('type')} does not match docs/events: {problems}"
                self.checked_events = r["id"]

        @invariant()
        def no_served_period_silently_forgiven(self):
            voided = db.rows("SELECT id FROM billing.invoice WHERE status = 'VOID' AND attempt_count > 0")
            assert not voided, f"invoices voided after a decline (a served period forgiven): {voided}"
            # Unpaid is unpaid (issue 26 #3): a cancellation voids a period's invoice only when none
            # of its time was served; otherwise it takes off the rest only (UNSERVED).
            forgiven = db.rows("""
                SELECT i.id, i.kind, i.period_start, i.closed_at FROM billing.invoice i
                  JOIN billing.subscription s ON s.customer_id = i.customer_id AND s.id = i.subscription_id
                 WHERE i.status = 'VOID' AND i.kind IN ('INITIAL', 'RENEWAL', 'PLAN_CHANGE') AND s.status = 'CANCELED'
                   AND i.closed_at = s.canceled_at AND i.closed_at > i.period_start""")
            assert not forgiven, f"invoices voided whole by a cancellation after time was served: {forgiven}"
            # ... a change's own invoice too (issue 26 #3, #12): it bills the difference it made for the
            # time served, voided only when the change is not before the cancellation.
            forgiven = db.rows("""
                SELECT i.id, i.period_start, i.closed_at FROM billing.invoice i
                  JOIN billing.subscription s ON s.customer_id = i.customer_id AND s.id = i.subscription_id
                 WHERE i.status = 'VOID' AND i.kind = 'PRORATION' AND s.status = 'CANCELED'
                   AND i.closed_at = s.canceled_at AND i.closed_at > i.period_start
                   -- (not one whose change ended in credit when it was retaxed, adv11: its lines, in
                   -- force without it, sell what it sold; a cancellation at that instant forgave nothing)
                   AND EXISTS (SELECT 1 FROM billing.service_line l
                                WHERE l.customer_id = i.customer_id AND l.invoice_id = i.id)""")
            assert not forgiven, f"change invoices voided whole by a cancellation after time was served: {forgiven}"
            over = db.rows("""
                SELECT i.id, i.unserved, i.subtotal, i.tax_amount, n.total FROM billing.invoice i
                  LEFT JOIN billing.credit_note n ON n.customer_id = i.customer_id AND n.invoice_id = i.id
                   AND n.reason = 'UNSERVED'
                 WHERE i.unserved > 0 AND (n.total IS DISTINCT FROM i.unserved OR i.unserved > i.subtotal + i.tax_amount)""")
            assert not over, f"what a cancellation took off is not its UNSERVED credit note: {over}"
            silent = db.rows("""
                SELECT i.id FROM billing.invoice i JOIN billing.subscription s ON s.id = i.subscription_id
                 WHERE i.status = 'FAILED' AND i.kind <> 'PRORATION'
                   AND NOT EXISTS (SELECT 1 FROM billing.outbox_event e WHERE e.event_type = 'InvoiceWrittenOff'
                                     AND e.aggregate_id = i.id)
                   AND NOT EXISTS (SELECT 1 FROM billing.outbox_event e  -- ended its subscription by dunning
                                    WHERE e.event_type = 'SubscriptionCanceled' AND e.aggregate_id = s.id
                                      AND e.payload -> 'data' ->> 'reason' = 'DUNNING_EXHAUSTED'
                                      AND (e.payload -> 'data' ->> 'canceledAt')::timestamptz = i.closed_at)""")
            assert not silent, f"FAILED invoices written off without an event: {silent}"

    Adversary.TestCase.settings = settings(
        max_examples=int(os.environ.get("BILLING_ADVERSARY_EXAMPLES", 200)), stateful_step_count=steps,
        deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                              HealthCheck.data_too_large])
    return Adversary


# 500 examples took 5-7 minutes alone on this 2-core host before usage joined the game (about twice
# the work per example since), over 10 beside the parallel pass's other files: the default is 200
# examples, the budget 30 minutes; before landing a change of the money rules, run thousands.
# The examples are played in two halves, each a class of its own, so that make test's parallel pass
# (pytest-xdist, --dist loadscope: one worker per class) plays them on two workers at once: the whole
# run was the longest single piece of that pass. Each half draws its own random examples (no seed
# is fixed), the two together as many as BILLING_ADVERSARY_EXAMPLES says.
HALVES = 2


def _play(db_url: str) -> None:
    db = Db(db_url)
    try:
        machine = make_machine(db, int(os.environ.get("BILLING_ADVERSARY_STEPS", 30)))
        examples = int(os.environ.get("BILLING_ADVERSARY_EXAMPLES", 200))
        run_state_machine_as_test(machine, settings=settings(machine.TestCase.settings,
                                                             max_examples=-(-examples // HALVES)))
    finally:
        db.conn.close()


class TestFirstHalf:
    @pytest.mark.timeout(1800)
    def test_an_adversarial_customer_cannot_make_money_from_nothing(self, db_url):
        _play(db_url)


class TestSecondHalf:
    @pytest.mark.timeout(1800)
    def test_an_adversarial_customer_cannot_make_money_from_nothing(self, db_url):
        _play(db_url)


class Drawn:
    """Stands for hypothesis' `data` in a replay: draw() hands out the given values in order."""

    def __init__(self, *values) -> None:
        self.values = list(values)

    def draw(self, strategy, label=None):
        value = self.values.pop(0)
        # a function picks among the strategy's values (a sampled_from of rows known only then)
        return value(list(strategy.elements)) if callable(value) else value


DAYS = timedelta(days=1)
# Attacks the adversary found (or that are siblings of one it found), replayed step by step on every
# run: (rule, arguments) in order; a rule that picks a subscription gets Drawn(1, ...).
REPLAYS = {
    # money10: a move to a taxed address, then a small downgrade (net -200 a month, tax +560): billed,
    # then the change's invoice voided (its change undone) and the subscription canceled with credit
    "a move to a taxed address, then a small downgrade, its invoice voided": [
        ("subscribe", dict(customer=1, plan="M_PRO", trial=0, coupon=None, quantity=1)),
        ("charge", dict(data=Drawn("SUCCEEDED"), lease=timedelta(minutes=5), channel="record")),
        ("clock_jump", dict(delta=4 * DAYS)), ("move", dict(customer=1, country="XE")),
        ("change_plan", dict(data=Drawn(1), plan="M_PLUS", how=("now", True))),
        ("operator_void", dict(data=Drawn(lambda ids: ids[-1]))),
        ("change_plan", dict(data=Drawn(1), plan="M_PLUS", how=("now", True))),
        ("cancel", dict(data=Drawn(1), at_period_end=False, proration="credit")), ("renew", {})],
    # money10 (found by the 400 x 40 run): a change reversed part of an unpaid invoice's line at its
    # tax, then a move to an untaxed address before the invoice was finalized retaxed the line to 0:
    # the reversal had given back tax the customer never paid
    "a change, then a move to an untaxed address before the first charge": [
        ("subscribe", dict(customer=3, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("clock_jump", dict(delta=4 * DAYS)),
        ("change_plan", dict(data=Drawn(1), plan="M_PRO", how=("now", True))),
        ("move", dict(customer=3, country="US")),
        ("charge", dict(data=Drawn("SUCCEEDED", "SUCCEEDED"), lease=timedelta(minutes=5), channel="record"))],
    # adv11: a small downgrade after a move to a taxed address bills its tax owed; the customer moves
    # back before the change's invoice is finalized: it kept the taxed address's tax (tax_of_one_instant);
    # now it ends in credit, as the change would have at that address
    "a small downgrade after a move, the move back before its invoice is finalized": [
        ("subscribe", dict(customer=1, plan="M_PRO", trial=0, coupon=None, quantity=1)),
        ("charge", dict(data=Drawn("SUCCEEDED"), lease=timedelta(minutes=5), channel="record")),
        ("clock_jump", dict(delta=4 * DAYS)), ("move", dict(customer=1, country="XE")),
        ("change_plan", dict(data=Drawn(1), plan="M_PLUS", how=("now", True))),
        ("move", dict(customer=1, country="US")), ("finalize", dict(data=Drawn(), one=False)),
        ("change_plan", dict(data=Drawn(1), plan="M_PRO", how=("now", True))),
        ("cancel", dict(data=Drawn(1), at_period_end=False, proration="credit")), ("renew", {})],
    # adv11: the same, a day later, and a cancellation at the instant of the finalization that ended the
    # change in credit (its invoice VOID then, its lines in force without it: nothing forgiven)
    "a small downgrade after a move, the move back, its invoice retaxed to credit and a cancellation then": [
        ("subscribe", dict(customer=1, plan="M_PRO", trial=0, coupon=None, quantity=1)),
        ("charge", dict(data=Drawn("SUCCEEDED"), lease=timedelta(minutes=5), channel="record")),
        ("clock_jump", dict(delta=4 * DAYS)), ("move", dict(customer=1, country="XE")),
        ("change_plan", dict(data=Drawn(1), plan="M_PLUS", how=("now", True))),
        ("clock_jump", dict(delta=DAYS)), ("move", dict(customer=1, country="US")),
        ("finalize", dict(data=Drawn(lambda ids: ids[-1]), one=True)),
        ("cancel", dict(data=Drawn(1), at_period_end=False, proration="credit")), ("renew", {})],
    # adv11: a move before the first charge (the period's invoice not finalized), then a change: the
    # invoice is retaxed for the address now before the change reverses its line; each way, and a
    # change of tax status
    "a move before the first charge, then a change, each way": [
        ("subscribe", dict(customer=3, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("subscribe", dict(customer=1, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("subscribe", dict(customer=2, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("clock_jump", dict(delta=4 * DAYS)),
        ("move", dict(customer=3, country="US")), ("move", dict(customer=1, country="XE")),
        ("move", dict(customer=2, country="XE", status="REVERSE_CHARGE")),
        ("change_plan", dict(data=Drawn(1), plan="M_PRO", how=("now", True))),
        ("change_plan", dict(data=Drawn(2), plan="M_PRO", how=("now", True))),
        ("change_plan", dict(data=Drawn(3), plan="M_PRO", how=("now", True))),
        ("finalize", dict(data=Drawn(), one=False)),
        ("charge", dict(data=Drawn(*["SUCCEEDED"] * 20), lease=timedelta(minutes=5), channel="record")),
        ("cancel", dict(data=Drawn(1), at_period_end=False, proration="refund")),
        ("execute_refunds", dict(data=Drawn(*["SUCCEEDED"] * 20)))],
    # adv11: a refund succeeded, then the provider's event says it failed; the recheck finds it failed
    "a refund said failed after it succeeded, the recheck finds it failed": [
        ("subscribe", dict(customer=3, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("charge", dict(data=Drawn("SUCCEEDED"), lease=timedelta(minutes=5), channel="record")),
        ("refund", dict(data=Drawn(lambda rows: rows[0]), share=0.5)),
        ("execute_refunds", dict(data=Drawn("SUCCEEDED"), channel="record")),
        ("refund_failed_after_success", dict(data=Drawn(lambda rows: rows[0]), answer="FAILED")),
        ("refund", dict(data=Drawn(lambda rows: rows[0]), share=1.0)),
        ("execute_refunds", dict(data=Drawn("SUCCEEDED"), channel="record"))],
    "a customer session signs up while the operator switches the plan off and on": [
        ("session_signup", dict(customer=2, plan="M_BASIC")), ("self_serve", dict(plan="M_BASIC", on=False)),
        ("session_signup", dict(customer=2, plan="M_BASIC")), ("self_serve", dict(plan="M_PLUS", on=True)),
        ("session_signup", dict(customer=2, plan="M_PLUS")), ("clock_jump", dict(delta=40 * DAYS)), ("renew", {})],
    # change_plan after a passed resume date billed the resumed period at the new plan
    "plan change after a passed resume date": [
        ("subscribe", dict(customer=1, plan="D_DAILY", trial=0, coupon=None, quantity=1)),
        ("pause", dict(data=Drawn(1), resume_in=3 * DAYS)), ("clock_jump", dict(delta=4 * DAYS)),
        ("change_plan", dict(data=Drawn(1), plan="M_BASIC", how=("now", True))), ("renew", {})],
    "seats removed after a passed resume date": [
        ("subscribe", dict(customer=1, plan="M_BASIC", trial=0, coupon=None, quantity=3)),
        ("pause", dict(data=Drawn(1), resume_in=3 * DAYS)), ("clock_jump", dict(delta=4 * DAYS)),
        ("seats", dict(data=Drawn(1), quantity=1)), ("renew", {})],
    "coupon applied after a renewal was due": [
        ("subscribe", dict(customer=1, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("clock_jump", dict(delta=40 * DAYS)), ("apply_coupon", dict(data=Drawn(1), code="FREE1")), ("renew", {})],
    "coupon after a change scheduled for the period end was due": [
        ("subscribe", dict(customer=1, plan="D_DAILY", trial=0, coupon=None, quantity=1)),
        ("change_plan", dict(data=Drawn(1), plan="M_BASIC", how=("period_end", True))),
        ("clock_jump", dict(delta=40 * DAYS)), ("apply_coupon", dict(data=Drawn(1), code="BIG")), ("renew", {})],
    "cancel at period end after the period ended": [
        ("subscribe", dict(customer=1, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("clock_jump", dict(delta=40 * DAYS)), ("cancel", dict(data=Drawn(1), at_period_end=True)), ("renew", {})],
    "cancel at period end after the trial ended": [
        ("subscribe", dict(customer=1, plan="M_BASIC", trial=3, coupon=None, quantity=1)),
        ("clock_jump", dict(delta=4 * DAYS)), ("cancel", dict(data=Drawn(1), at_period_end=True)), ("renew", {})],
    "resume after the resume date": [
        ("subscribe", dict(customer=1, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("pause", dict(data=Drawn(1), resume_in=3 * DAYS)), ("clock_jump", dict(delta=16 * DAYS)),
        ("come_back", dict(data=Drawn(1), action="resume"))],
    "a second pause and resume at the signup instant, another subscription of the customer between": [
        ("subscribe", dict(customer=1, plan="D_DAILY", trial=0, coupon=None, quantity=1)),
        ("pause", dict(data=Drawn(1), resume_in=None)), ("come_back", dict(data=Drawn(1), action="resume")),
        ("subscribe", dict(customer=1, plan="D_DAILY", trial=0, coupon=None, quantity=1)),
        ("pause", dict(data=Drawn(1), resume_in=None)), ("come_back", dict(data=Drawn(1), action="resume")),
        ("seats", dict(data=Drawn(1), quantity=2))],
    "a plan change after two pauses at the signup instant, another subscription between": [
        ("subscribe", dict(customer=1, plan="D_DAILY", trial=0, coupon=None, quantity=1)),
        ("pause", dict(data=Drawn(1), resume_in=None)), ("come_back", dict(data=Drawn(1), action="resume")),
        ("subscribe", dict(customer=1, plan="D_DAILY", trial=0, coupon=None, quantity=1)),
        ("pause", dict(data=Drawn(1), resume_in=None)), ("come_back", dict(data=Drawn(1), action="resume")),
        ("pause", dict(data=Drawn(1), resume_in=3 * DAYS)), ("cancel", dict(data=Drawn(2), at_period_end=True)),
        ("change_plan", dict(data=Drawn(1), plan="M_PRO", how=("now", True)))],
    # a change scheduled for the period end, applied by a resume at the signup instant: the
    # adversary dated it before the signup (its own bookkeeping)
    "a scheduled change applied by a resume at the signup instant": [
        ("subscribe", dict(customer=1, plan="D_DAILY", trial=0, coupon=None, quantity=1)),
        ("pause", dict(data=Drawn(1), resume_in=None)),
        ("change_plan", dict(data=Drawn(1), plan="M_BASIC", how=("period_end", True))),
        ("come_back", dict(data=Drawn(1), action="resume")),
        ("clock_jump", dict(delta=40 * DAYS)), ("renew", {})],
    # a change scheduled for the period end whose time passed before the next call: that call (here a
    # second change scheduled) settles the renewal first, at the first plan scheduled, and the
    # adversary had forgotten it (its own bookkeeping: the second schedule replaced the first)
    "a scheduled change applied by the call that schedules the next one": [
        ("subscribe", dict(customer=1, plan="D_DAILY", trial=0, coupon=None, quantity=1)),
        ("subscribe", dict(customer=2, plan="D_DAILY", trial=0, coupon=None, quantity=1)),
        ("change_plan", dict(data=Drawn(2), plan="M_BASIC", how=("period_end", True))),
        ("clock_jump", dict(delta=4 * DAYS)),
        ("change_plan", dict(data=Drawn(1), plan="D_DAILY", how=("now", True))),
        ("change_plan", dict(data=Drawn(2), plan="D_DAILY", how=("period_end", True))),
        ("renew", {}), ("clock_jump", dict(delta=40 * DAYS)), ("renew", {})],
    # issue 26's widened game: an invoice waiting for a payment method given up while its subscription
    # was paused past its resume date ended the subscription without the resume
    "a waiting invoice given up on a subscription paused past its resume date": [
        ("clock_jump", dict(delta=timedelta(minutes=20))),
        ("subscribe", dict(customer=1, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("charge_without_a_card", {}), ("clock_jump", dict(delta=timedelta(minutes=20))),
        ("pause", dict(data=Drawn(1), resume_in=20 * DAYS)), ("clock_jump", dict(delta=40 * DAYS)),
        ("charge_without_a_card", {})],
    # issue 26's widened game: seats added unpaid, a pause, the seats' invoice given up: the year's
    # first line, in force again, was sold beside the period the resume started
    "seats added unpaid, a pause, the seats' invoice given up": [
        ("subscribe", dict(customer=1, plan="Y_PRO", trial=0, coupon="BIG", quantity=1)),
        ("seats", dict(data=Drawn(1), quantity=5)), ("charge_without_a_card", {}),
        ("pause", dict(data=Drawn(1), resume_in=3 * DAYS)), ("clock_jump", dict(delta=40 * DAYS)),
        ("charge_without_a_card", {}), ("renew", {})],
    # issue 26 #3/#12, the last case: an upgrade's invoice waiting for a card (never declined) was voided
    # whole by a cancellation days later (the upgraded days free); in dunning it stayed collectible whole
    "an upgrade waiting for a card, canceled days later": [
        ("subscribe", dict(customer=3, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("charge", dict(data=Drawn("SUCCEEDED"), lease=timedelta(minutes=5))), ("clock_jump", dict(delta=4 * DAYS)),
        ("change_plan", dict(data=Drawn(1), plan="M_PRO", how=("now", True))), ("charge_without_a_card", {}),
        ("clock_jump", dict(delta=4 * DAYS)), ("cancel", dict(data=Drawn(1), at_period_end=False, proration="none"))],
    "an upgrade in dunning, canceled days later with credit, then its dunning runs out": [
        ("subscribe", dict(customer=4, plan="M_BASIC", trial=0, coupon="TEN", quantity=2)),
        ("charge", dict(data=Drawn("SUCCEEDED"), lease=timedelta(minutes=5))), ("clock_jump", dict(delta=4 * DAYS)),
        ("change_plan", dict(data=Drawn(1), plan="M_PRO", how=("now", True))),
        ("charge", dict(data=Drawn("DECLINED"), lease=timedelta(minutes=5))),
        ("clock_jump", dict(delta=4 * DAYS)), ("cancel", dict(data=Drawn(1), at_period_end=False, proration="credit")),
        ("clock_jump", dict(delta=16 * DAYS)), ("charge", dict(data=Drawn("DECLINED"), lease=timedelta(minutes=5))),
        ("clock_jump", dict(delta=16 * DAYS)), ("charge", dict(data=Drawn("DECLINED", "DECLINED"), lease=timedelta(minutes=5))),
        ("clock_jump", dict(delta=16 * DAYS)), ("charge", dict(data=Drawn("DECLINED", "DECLINED"), lease=timedelta(minutes=5)))],
    "a passed resume date moved by pausing again": [
        ("subscribe", dict(customer=1, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("pause", dict(data=Drawn(1), resume_in=3 * DAYS)), ("clock_jump", dict(delta=4 * DAYS)),
        ("pause", dict(data=Drawn(1), resume_in=20 * DAYS)), ("clock_jump", dict(delta=16 * DAYS)), ("renew", {})],
    # usage (issue 29): a late event after its span was rated must be billed on the next USAGE invoice
    "usage: a late event after the rating": [
        ("subscribe", dict(customer=1, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("use", dict(data=Drawn(1), where="now", count=3)), ("clock_jump", dict(delta=40 * DAYS)), ("renew", {}),
        ("rate", dict(grace=timedelta(0))), ("use", dict(data=Drawn(1), where="ended_period", count=1)),
        ("use", dict(data=Drawn(1), where="just_before", count=1)), ("rate", dict(grace=timedelta(0))),
        ("clock_jump", dict(delta=40 * DAYS)), ("renew", {}), ("rate", dict(grace=timedelta(hours=1))),
        ("use", dict(data=Drawn(1, (1, "1", T0)), where="resend", count=1))],
    # review6: one key whichever door and form of the id (POST /usage-events read `1e3` as the key
    # "1000.0" and Kafka as "1000"); a late event's adjustment on a taxed customer's next USAGE invoice
    "usage: one event through every door and id form, taxed, late, refunded": [
        ("subscribe", dict(customer=3, plan="M_BASIC", trial=0, coupon="TEN", quantity=1)),
        ("use", dict(data=Drawn(1), where="now", count=3, door="kafka", form="exponent")),
        ("use", dict(data=Drawn(1, (3, "1", T0), (3, "2", T0), (3, "3", T0)), where="resend", count=3, door="http",
                     form="number")),
        ("use", dict(data=Drawn(1, (3, "2", T0)), where="resend", count=1, door="sql", form="exponent")),
        ("use", dict(data=Drawn(1, (3, "3", T0)), where="resend_moved", count=1, door="text", form="string")),
        ("clock_jump", dict(delta=40 * DAYS)), ("renew", {}), ("rate", dict(grace=timedelta(0))),
        ("use", dict(data=Drawn(1), where="ended_period", count=3, door="http", form="exponent")),
        ("rate", dict(grace=timedelta(0))), ("charge", dict(data=Drawn(*["SUCCEEDED"] * 10), lease=timedelta(minutes=5))),
        ("refund", dict(data=Drawn(lambda paid: paid[-1]), share=0.5)), ("clock_jump", dict(delta=40 * DAYS)), ("renew", {}),
        ("rate", dict(grace=timedelta(hours=1)))],
    # review7: a customer taxed 20% moves to an address without tax before the first charge; the invoice is
    # finalized at 0% but its line kept 20%, and the downgrade half way credited the unused half's tax,
    # never paid (1,341 for 1,032)
    "a move before the first charge, then a downgrade": [
        ("subscribe", dict(customer=3, plan="M_PRO", trial=0, coupon=None, quantity=1)),
        ("move", dict(customer=3, country="US")),
        ("charge", dict(data=Drawn("SUCCEEDED"), lease=timedelta(minutes=5))),
        ("clock_jump", dict(delta=16 * DAYS)),
        ("change_plan", dict(data=Drawn(1), plan="M_BASIC", how=("now", True))),
        ("move", dict(customer=3, country="XE")), ("clock_jump", dict(delta=16 * DAYS)), ("renew", {}),
        ("rate", dict(grace=timedelta(0))), ("move", dict(customer=3, country="XI")),
        ("charge", dict(data=Drawn(*["SUCCEEDED"] * 3), lease=timedelta(minutes=5))),
        ("cancel", dict(data=Drawn(1), at_period_end=False, proration="credit"))],
    # review7: an untaxed customer pays the month, moves to a 20% address, upgrades (the invoice taxes the
    # difference, 200 of 1,000, its CHARGE line claimed 20% of its whole 1,500), downgrades and cancels with
    # credit: the reversals gave back 300 of tax where 200 was billed
    "a move, then an upgrade and a downgrade": [
        ("subscribe", dict(customer=1, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("charge", dict(data=Drawn("SUCCEEDED"), lease=timedelta(minutes=5))),
        ("move", dict(customer=1, country="XE")), ("clock_jump", dict(delta=16 * DAYS)),
        ("change_plan", dict(data=Drawn(1), plan="M_PRO", how=("now", True))),
        ("charge", dict(data=Drawn("SUCCEEDED"), lease=timedelta(minutes=5))),
        ("clock_jump", dict(delta=timedelta(minutes=20))),
        ("change_plan", dict(data=Drawn(1), plan="M_BASIC", how=("now", True))),
        ("cancel", dict(data=Drawn(1), at_period_end=False, proration="credit"))],
    # review7 (the 60-step run, a hole of 103e888): a change of interval at the signup instant leaves the
    # signup's credit pending on its unpaid invoice; later changes at that instant (1 us shims) and a
    # cancellation cut that invoice to nothing, which settles it PAID and released the pending 1,000
    "changes at the signup instant, then a cancellation": [
        ("subscribe", dict(customer=1, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("change_plan", dict(data=Drawn(1), plan="D_DAILY", how=("now", True))),
        ("seats", dict(data=Drawn(1), quantity=5)),
        ("change_plan", dict(data=Drawn(1), plan="Y_PRO", how=("now", True))),
        ("seats", dict(data=Drawn(1), quantity=2)),
        ("cancel", dict(data=Drawn(1), at_period_end=False, proration="none"))],
    # usage at a period boundary, a plan change mid-period (two parts), a cancellation before the rating
    "usage: boundaries, a plan change, a cancellation before the rating": [
        ("subscribe", dict(customer=2, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
        ("clock_jump", dict(delta=16 * DAYS)), ("use", dict(data=Drawn(1), where="now", count=3)),
        ("change_plan", dict(data=Drawn(1), plan="M_PRO", how=("now", True))),
        ("use", dict(data=Drawn(1), where="now", count=3)), ("clock_jump", dict(delta=16 * DAYS)), ("renew", {}),
        ("use", dict(data=Drawn(1), where="period_start", count=1)),
        ("use", dict(data=Drawn(1), where="just_before", count=1)), ("rate", dict(grace=timedelta(0))),
        ("use", dict(data=Drawn(1), where="now", count=3)),
        ("cancel", dict(data=Drawn(1), at_period_end=False, proration="credit")),
        ("rate", dict(grace=timedelta(hours=1))), ("clock_jump", dict(delta=timedelta(hours=6))),
        ("rate", dict(grace=timedelta(hours=1))), ("use", dict(data=Drawn(1), where="ended_period", count=1)),
        ("rate", dict(grace=timedelta(hours=1)))],
    # two coupons on a daily plan, renewals, a rating, the first coupon again after an uncancel, usage
    # just before the period's end, rated at once (make test, lead6, 2027-03-11 10:00)
    "usage after coupons redeemed again, rated at once": [
        ("clock_jump", dict(delta=timedelta(seconds=1200))), ("charge_without_a_card", {}),
        ("clock_jump", dict(delta=timedelta(seconds=1200))), ("charge_without_a_card", {}),
        ("clock_jump", dict(delta=timedelta(seconds=1200))), ("charge_without_a_card", {}),
        ("subscribe", dict(customer=2, plan="D_DAILY", trial=0, coupon=None, quantity=1)),
        ("charge_without_a_card", {}),
        ("apply_coupon", dict(data=Drawn(1), code="HALF2")), ("apply_coupon", dict(data=Drawn(1), code="TEN")),
        ("renew", {}), ("renew", {}), ("clock_jump", dict(delta=40 * DAYS)),
        ("rate", dict(grace=timedelta(hours=1))),
        ("come_back", dict(data=Drawn(1), action="uncancel")),
        ("apply_coupon", dict(data=Drawn(1), code="HALF2")),
        ("use", dict(data=Drawn(1), where="just_before", count=3, door="http", form="number")),
        ("come_back", dict(data=Drawn(1), action="uncancel")),
        ("rate", dict(grace=timedelta(0)))],
}
INVARIANTS = ("the_books_balance", "cash_kept_is_the_paid_service", "revenue_over_all_time_is_cash_kept",
              "mrr_is_what_the_lines_sell", "a_period_gives_back_at_most_what_it_was_paid", "every_paid_invoice_is_backed", "each_period_at_its_own_terms",
              "the_ledger_says_what_was_sold", "usage_is_billed_once_and_whole",
              "a_discount_only_from_a_coupon_redeemed_by_then", "nothing_decided_after_the_fact",
              "every_event_matches_the_catalogue", "no_served_period_silently_forgiven",
              "current_usage_is_the_count", "usage_lines_taxed_at_the_customers_rate",
              "invoiced_lines_carry_their_invoices_tax")

# House8 (self-contained): a change's invoice taxed line by line. Customer 3 (20% on top) moves to an
# untaxed address and upgrades; customer 4 (10% inside) moves to 20% on top and upgrades, then the rate
# changes and it downgrades; each time the invoice's tax is its lines' (review7's rule taxed the
# difference at the rate of the day).
INVARIANTS = INVARIANTS + ("change_invoices_taxed_by_line", "tax_of_one_instant")
REPLAYS["h8_moves_and_rates_between_sale_and_change"] = [
    ("subscribe", dict(customer=3, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
    ("subscribe", dict(customer=4, plan="M_BASIC", trial=0, coupon=None, quantity=1)),
    ("clock_jump", dict(delta=10 * DAYS)),
    ("move", dict(customer=3, country="US")),
    ("move", dict(customer=4, country="XE")),
    ("change_plan", dict(data=Drawn(1), plan="M_PRO", how=("now", True))),
    ("change_plan", dict(data=Drawn(2), plan="M_PRO", how=("now", True))),
    ("clock_jump", dict(delta=5 * DAYS)),
    ("retax", dict(bp=500)),
    ("change_plan", dict(data=Drawn(2), plan="M_BASIC", how=("now", True))),
    ("move", dict(customer=3, country="XI")),
    ("change_plan", dict(data=Drawn(1), plan="M_EUR", how=("now", True))),
    ("seats", dict(data=Drawn(1), quantity=5)),
]


@pytest.mark.parametrize("name", sorted(REPLAYS))
def test_replayed_attacks_stay_closed(db_url, name):
    """Each replay broke one of the money rules on the engine before its fix (docs/lifecycle.md, "Due
    but not yet processed")."""
    db = Db(db_url)
    try:
        adversary = make_machine(db, 30)()
        for rule_name, kwargs in REPLAYS[name]:
            getattr(adversary, rule_name)(**kwargs)
            for check in INVARIANTS:
                try:
                    getattr(adversary, check)()
                except AssertionError as exc:
                    raise AssertionError(f"after {rule_name}: {exc}") from exc
    finally:
        db.conn.close()


def test_a_late_success_on_a_cut_invoice_is_no_refund_of_paid_service(db_url):
    """Found by the 60-step run (seed 201): a charge sent before a cancellation that succeeds after it
    collected more than the cut invoice still bills; the engine refunds the excess. That refund gives
    back money never billed: the books' bound (credit granted + refunds <= what PAID invoices billed)
    must not count it (as the per-period bound already did not)."""
    db = Db(db_url)
    try:
        adversary = make_machine(db, 30)()
        steps = [("subscribe", dict(customer=1, plan="M_PRO", trial=0, coupon=None, quantity=1)),
                 ("charge", dict(data=Drawn("SUCCEEDED"), lease=timedelta(minutes=5))),
                 ("change_plan", dict(data=Drawn(1), plan="D_DAILY", how=("now", True))),
                 ("subscribe", dict(customer=1, plan="Y_PRO", trial=0, coupon=None, quantity=1)),
                 ("charge", dict(data=Drawn("UNKNOWN", "UNKNOWN"), lease=timedelta(minutes=5))),
                 ("clock_jump", dict(delta=timedelta(days=40))),
                 ("cancel", dict(data=Drawn(2), at_period_end=False, proration="none"))]
        for rule_name, kwargs in steps:
            getattr(adversary, rule_name)(**kwargs)
        key = db.rows("SELECT a.idempotency_key FROM billing.payment_attempt a JOIN billing.invoice i ON i.id = a.invoice_id "
                      "WHERE i.subscription_id = 2 ORDER BY a.id LIMIT 1")[0]["idempotency_key"]
        adversary._report(key, "SUCCEEDED", "record", None)
        for check in INVARIANTS:
            getattr(adversary, check)()
    finally:
        db.conn.close()
