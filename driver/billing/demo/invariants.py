"""The demo's promises, checked from three independent witnesses after the run.

* the database, read table by table through the witness functions (db/functions/78_witness.sql:
  plain reads of the tables that apply no rule of the engine, not the SQL API's own computations);
* the gateway simulator's ledger (`GET /v1/ledger`: one entry per idempotency key ever charged,
  and the number of 429 answers) and its record of accepted calls;
* the event stream as a consumer sees it (the JSON-lines file, or the whole Kafka topic).

Each check returns a `billing.checks.Check` (shared with the chaos checker): a name, whether it
holds, one line of figures, a few counter-examples when it does not, and its promise. `check_all`
runs them all; the exit status of the demo is non-zero when any of them fails.
"""

from __future__ import annotations

import bisect
import calendar
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable
from zoneinfo import ZoneInfo

import psycopg
from psycopg.rows import dict_row

from billing import db
from billing.checks import Check, read_topic

KEY = re.compile(r"^[a-z0-9]+-inv-(\d+)-try-(\d+)$")  # <namespace>-inv-<invoice id>-try-<n>
MAX_EXAMPLES = 5


# -- event stream ----------------------------------------------------------------------------

def load_jsonl_events(path: str | Path) -> list[dict]:
    """Every event in a JsonlSink file, in file order (duplicates kept: delivery is at least once)."""
    events = []
    p = Path(path)
    if not p.exists():
        return events
    with p.open("rb") as f:
        for line in f:
            line = line.strip()
            if line:
                events.append(json.loads(line)["value"])
    return events


def load_kafka_events(bootstrap: str, topic: str, *, timeout: float = 30.0) -> list[dict]:
    """Every event of the whole topic, read from the beginning (a value that is not JSON is {})."""
    return [m.value if isinstance(m.value, dict) else {}
            for m in read_topic(bootstrap, topic, timeout=timeout, group_prefix="billing-demo-check")]


# -- the checks ------------------------------------------------------------------------------

def _fmt(n: int) -> str:
    return f"{n:,}"


def check_charged_once(conn, ledger: dict) -> Check:
    charges = ledger.get("charges", [])
    keys = [c["idempotencyKey"] for c in charges]
    examples: list[str] = []
    dup_keys = len(keys) - len(set(keys))
    if dup_keys:
        seen: set[str] = set()
        for k in keys:
            if k in seen and len(examples) < MAX_EXAMPLES:
                examples.append(f"ledger lists key {k} twice")
            seen.add(k)
    succeeded_per_invoice: dict[int, list[str]] = {}
    foreign = 0
    for c in charges:
        m = KEY.match(c["idempotencyKey"])
        if not m:
            foreign += 1
            continue
        if c["status"] == "succeeded":
            succeeded_per_invoice.setdefault(int(m.group(1)), []).append(c["idempotencyKey"])
    twice = {inv: ks for inv, ks in succeeded_per_invoice.items() if len(ks) > 1}
    for inv, ks in list(twice.items())[:MAX_EXAMPLES]:
        examples.append(f"invoice {inv} charged successfully {len(ks)} times at the gateway: {', '.join(ks)}")
    db_twice = conn.execute(db.WITNESS_CHARGED_TWICE).fetchall()
    for row in db_twice[:MAX_EXAMPLES]:
        examples.append(f"invoice {row['invoice_id']} has {row['n']} SUCCEEDED payment attempts in the database")
    if foreign:
        examples.append(f"{foreign} ledger keys are not invoice keys (<namespace>-inv-<id>-try-<n>)")
    ok = not dup_keys and not twice and not db_twice and not foreign
    return Check(
        "no invoice charged twice",
        promise="at most one successful gateway charge per invoice; every ledger key appears once",
        ok=ok,
        figures=f"{_fmt(len(charges))} gateway charges over {_fmt(len(set(keys)))} keys; "
        f"{_fmt(len(succeeded_per_invoice))} invoices charged successfully, {_fmt(len(twice))} of them more than once",
        examples=examples,
    )


def check_ledger_booked(conn, ledger: dict) -> Check:
    """Every successful gateway charge is a PAID invoice of the same amount, and every PAID invoice
    with something to pay was charged successfully at the gateway."""
    succeeded: dict[int, dict] = {}
    for c in ledger.get("charges", []):
        m = KEY.match(c["idempotencyKey"])
        if m and c["status"] == "succeeded":
            succeeded[int(m.group(1))] = c
    # What an invoice charges: its amount less what a cancellation took off as not served
    # (docs/money.md, "Unpaid is unpaid"); a charge sent before the cancellation collected
    # more, and the engine refunds the excess (SUBSCRIPTION_CANCELED).
    invoices = {r["id"]: r for r in conn.execute(db.WITNESS_INVOICES).fetchall()}
    examples: list[str] = []
    not_booked = wrong_amount = closed_refunds = 0
    for inv, c in succeeded.items():
        row = invoices.get(inv)
        # A success on a VOID or FAILED invoice leaves it closed, with RefundDue (docs/money.md).
        if row is not None and row["status"] in ("VOID", "FAILED"):
            closed_refunds += 1
            continue
        if row is None or row["status"] != "PAID":
            not_booked += 1
            if len(examples) < MAX_EXAMPLES:
                examples.append(f"gateway charged {c['idempotencyKey']} but invoice {inv} is "
                                f"{row['status'] if row else 'missing'}")
        elif row["excess_refunded"] and c["amount"] > row["amount"]:
            closed_refunds += 1  # charged before a cancellation cut the invoice: the excess is refunded
        elif (row["amount"], row["currency"].strip(), row["customer_id"]) != (c["amount"], c["currency"], c["customerId"]):
            wrong_amount += 1
            if len(examples) < MAX_EXAMPLES:
                examples.append(f"invoice {inv}: {row['amount']} {row['currency']} in the database, "
                                f"{c['amount']} {c['currency']} at the gateway")
    paid = [r for r in invoices.values() if r["status"] == "PAID"]
    paid_by_gateway = [r for r in paid if r["amount"] > 0]
    unpaid_at_gateway = [r["id"] for r in paid_by_gateway if r["id"] not in succeeded]
    for inv in unpaid_at_gateway[:MAX_EXAMPLES]:
        examples.append(f"invoice {inv} is PAID but the gateway never charged it")
    ok = not not_booked and not wrong_amount and not unpaid_at_gateway
    return Check(
        "gateway and database agree",
        promise="every successful charge is a PAID invoice of that amount, and every PAID invoice was charged",
        ok=ok,
        figures=f"{_fmt(len(succeeded))} successful charges; {_fmt(len(paid_by_gateway))} PAID invoices charged, "
        f"{_fmt(len(paid) - len(paid_by_gateway))} covered by credit; {closed_refunds} on closed invoices (refund due); "
        f"{not_booked} not booked, "
        f"{len(unpaid_at_gateway)} paid without a charge",
        examples=examples,
    )


def _add_months(naive: datetime, months: int) -> datetime:
    y, m = divmod(naive.month - 1 + months, 12)
    year, month = naive.year + y, m + 1
    day = min(naive.day, calendar.monthrange(year, month)[1])
    return naive.replace(year=year, month=month, day=day)


def boundary(anchor: datetime, interval: str, count: int, n: int, tz: str) -> datetime:
    """Boundary `n` from `anchor` in `tz`, computed here in Python (not by the SQL under test):
    local wall time plus n intervals, month ends clamped, local time of day kept; a local time
    that exists twice is the later instant, one that does not exist moves forward by the gap."""
    zone = ZoneInfo(tz)
    local = anchor.astimezone(zone).replace(tzinfo=None)
    if interval == "MONTH":
        target = _add_months(local, count * n)
    elif interval == "YEAR":
        target = _add_months(local, 12 * count * n)
    elif interval == "WEEK":
        target = local + timedelta(weeks=count * n)
    elif interval == "DAY":
        target = local + timedelta(days=count * n)
    else:
        raise ValueError(interval)
    a = target.replace(tzinfo=zone, fold=0).astimezone(timezone.utc)
    b = target.replace(tzinfo=zone, fold=1).astimezone(timezone.utc)
    return max(a, b)


def check_periods(conn, now: datetime) -> Check:
    """Per subscription, its INITIAL then RENEWAL invoices tile time from the first billed period to the
    current one: each starts where the previous ended, each ends on the calendar boundary, the last one
    is the current period, and nothing due is left unrenewed. The lifecycle (docs/lifecycle.md): a
    trial's first period starts at the trial's end; a resume (SubscriptionResumed) or a reactivation
    starts a new calendar at its instant, the only place a period may not follow the previous one (the
    paused rest was credited); a subscription still in its trial, or canceled in it, has no invoice."""
    rows = conn.execute(db.WITNESS_PERIODS).fetchall()
    # Where a new calendar may start: the period a resume or a reactivation began.
    restarts = {(r["subscription_id"], r["period_start"]) for r in conn.execute(db.WITNESS_RESTARTS).fetchall()}
    examples: list[str] = []
    bad: dict[str, int] = {}

    def fail(kind: str, text: str) -> None:
        bad[kind] = bad.get(kind, 0) + 1
        if len(examples) < MAX_EXAMPLES:
            examples.append(text)

    periods = 0
    for r in rows:
        sid, kinds, starts, ends = r["id"], r["kinds"], r["starts"], r["ends"]
        if not kinds or kinds[0] is None:
            # Still in its trial, or canceled in it (now, or at its end by the renewal job).
            in_trial = r["trial_end"] is not None and (
                r["status"] == "TRIALING"
                or (r["status"] == "CANCELED"
                    and (r["canceled_at"] <= r["trial_end"] or r["cancel_reason"] == "PERIOD_END")))
            if not in_trial:
                fail("no invoice", f"subscription {sid} has no INITIAL invoice")
            continue
        periods += len(kinds)
        if kinds[0] != "INITIAL" or kinds.count("INITIAL") != 1:
            fail("initial", f"subscription {sid}: invoice kinds {kinds}")
        if r["trial_end"] is not None and starts[0] != r["trial_end"]:
            fail("trial", f"subscription {sid}: first period starts {starts[0]}, its trial ended {r['trial_end']}")
        anchor, k = starts[0], 0
        for n in range(len(kinds)):
            if n > 0 and (sid, starts[n]) in restarts:
                anchor, k = starts[n], 0  # a new calendar from the resume
            elif n > 0 and starts[n] != ends[n - 1]:
                what = "gap" if starts[n] > ends[n - 1] else "overlap"
                fail(what, f"subscription {sid}: {what} between period {n} ending {ends[n - 1]:%Y-%m-%d %H:%M} "
                           f"and period {n + 1} starting {starts[n]:%Y-%m-%d %H:%M}")
            k += 1
            expected = boundary(anchor, r["billing_interval"], r["interval_count"], k, r["timezone"])
            if ends[n] != expected:
                fail("calendar", f"subscription {sid} ({r['timezone']}, {r['billing_interval']}): period {n + 1} "
                                 f"ends {ends[n]:%Y-%m-%d %H:%M:%S%z}, the calendar says {expected:%Y-%m-%d %H:%M:%S%z}")
        if anchor != r["billing_anchor"]:
            fail("initial", f"subscription {sid}: its calendar starts {anchor}, its anchor is {r['billing_anchor']}")
        if (starts[-1], ends[-1]) != (r["current_period_start"], r["current_period_end"]):
            fail("current", f"subscription {sid}: last invoiced period {starts[-1]}..{ends[-1]} is not its "
                            f"current period {r['current_period_start']}..{r['current_period_end']}")
        if r["status"] not in ("CANCELED", "PAUSED") and r["current_period_end"] <= now:
            fail("skipped", f"subscription {sid} is {r['status']} with a period that ended "
                            f"{r['current_period_end']:%Y-%m-%d %H:%M}, before the end of the run: not renewed")
    return Check(
        "no period skipped or overlapping",
        promise="per subscription, billed periods are contiguous calendar periods from the first billed one "
                "(after any trial) to the current one, a new calendar only where a pause ended",
        ok=not bad,
        figures=f"{_fmt(len(rows))} subscriptions, {_fmt(periods)} billed periods checked against the calendar; "
        + (", ".join(f"{k}: {v}" for k, v in sorted(bad.items())) if bad else "no gap, overlap or drift"),
        examples=examples,
    )


def check_announced(conn, events: Iterable[dict]) -> Check:
    events = list(events)
    ids = [e.get("id") for e in events]
    distinct = len(set(ids))
    paid_events: set[int] = set()
    canceled_events: set[int] = set()
    malformed = 0
    for e in events:
        subject = e.get("subject") or ""
        kind, _, ident = subject.partition("/")
        if e.get("specversion") != "1.0" or not ident.isdigit():
            malformed += 1
            continue
        if e.get("type") == "InvoicePaid" and kind == "invoice":
            paid_events.add(int(ident))
        elif e.get("type") == "SubscriptionCanceled" and kind == "subscription":
            canceled_events.add(int(ident))
    states = conn.execute(db.WITNESS_STATES).fetchall()
    paid = {r["id"] for r in states if r["aggregate"] == "invoice"}
    canceled = {r["id"] for r in states if r["aggregate"] == "subscription"}
    outbox = conn.execute(db.WITNESS_OUTBOX_LEFT).fetchone()
    missing_paid = sorted(paid - paid_events)
    phantom_paid = sorted(paid_events - paid)
    missing_canceled = sorted(canceled - canceled_events)
    examples = [f"invoice {i} is PAID but no InvoicePaid event says so" for i in missing_paid[:MAX_EXAMPLES]]
    examples += [f"InvoicePaid announced for invoice {i}, which is not PAID" for i in phantom_paid[:MAX_EXAMPLES]]
    examples += [f"subscription {s} is CANCELED but no SubscriptionCanceled event says so"
                 for s in missing_canceled[:MAX_EXAMPLES]]
    if malformed:
        examples.append(f"{malformed} events are not CloudEvents with a subject kind/<id>")
    ok = not missing_paid and not phantom_paid and not missing_canceled and not malformed
    return Check(
        "every paid invoice announced",
        promise="each PAID invoice has an InvoicePaid event (each CANCELED subscription a SubscriptionCanceled), "
                "none phantom",
        ok=ok,
        figures=f"{_fmt(len(paid))} PAID invoices, {_fmt(len(paid & paid_events))} announced; {_fmt(len(events))} events read "
        f"({_fmt(len(events) - distinct)} redeliveries); outbox left: {outbox['pending']} pending, {outbox['dead']} dead",
        examples=examples,
    )


def max_sliding_window(times: list[float], window: float = 1.0) -> int:
    """The most instants in any half-open window (t - window, t]."""
    best = 0
    for i, t in enumerate(times):
        j = bisect.bisect_right(times, t - window, 0, i + 1)
        best = max(best, i + 1 - j)
    return best


def check_rate(ledger: dict, rate: int, accepted_times: list[float] | None, reported_max: int | None) -> Check:
    limited = int(ledger.get("rateLimited", 0))
    examples: list[str] = []
    measured = max_sliding_window(sorted(accepted_times)) if accepted_times is not None else None
    worst = max(x for x in (measured, reported_max, 0) if x is not None)
    if limited:
        examples.append(f"the gateway answered 429 {limited} times")
    if worst > rate:
        examples.append(f"{worst} calls reached the gateway within one second (limit {rate})")
    figures = f"limit {rate}/s; busiest sliding second: {worst} calls; 429 answers: {limited}"
    if accepted_times is not None:
        figures += f"; {_fmt(len(accepted_times))} calls accepted"
    return Check("no rate-limit excess", promise="no second, sliding, ever saw more calls than the gateway's limit",
                 ok=limited == 0 and worst <= rate, figures=figures, examples=examples)


def check_schemas(events: Iterable[dict]) -> Check:
    """Every event read by the consumer matches the catalogue: the envelope, and its data against
    the JSON Schema its `dataschema` names (docs/events)."""
    from billing.events.schemas import catalogue

    events = list(events)
    count, problems = catalogue().check_all(events, limit=MAX_EXAMPLES)
    bad = sum(1 for e in events if catalogue().errors(e)) if problems else 0
    types = len({e.get("type") for e in events if isinstance(e, dict)})
    return Check("every event matches its schema", promise="each event's envelope and data validate against the "
                 "JSON Schema its dataschema names (docs/events)", ok=not problems,
                 figures=f"{_fmt(count)} events of {types} types validated; {_fmt(bad)} invalid", examples=problems)


def check_money(conn, ledger: dict) -> Check:
    """Per currency, the gateway's charges less its refunds equal the PAID invoices' cash; each
    refund executed once (billing.checks.money_balances)."""
    from billing.checks import money_balances

    # (the charge that paid it: an invoice a cancellation cut is paid what it still bills, or more
    # by a charge sent before, whose excess is refunded; one paid by credit brought no cash)
    paid = {r["currency"].strip(): int(r["cash"]) for r in conn.execute(db.WITNESS_CASH).fetchall()}
    refunds = conn.execute(db.WITNESS_REFUNDS).fetchall()
    return money_balances(ledger, paid, refunds)


def check_all(database_url: str, *, ledger: dict, events: Iterable[dict], rate: int, now: datetime,
              accepted_times: list[float] | None = None, reported_max_window: int | None = None) -> list[Check]:
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        return [
            check_charged_once(conn, ledger),
            check_periods(conn, now),
            check_announced(conn, events),
            check_schemas(events),
            check_rate(ledger, rate, accepted_times, reported_max_window),
            check_ledger_booked(conn, ledger),
            check_money(conn, ledger),
        ]
