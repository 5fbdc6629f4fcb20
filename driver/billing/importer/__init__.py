"""Bulk import from another billing system (`billing import stripe|csv`, docs/import.md).

A source (billing.importer.stripe, billing.importer.csv) reads plans, coupons, customers with their
default payment method, and subscriptions, and maps each to the SQL API's rows; what it cannot map
it reports as `Unmapped` (never guessed). `run_import` then writes them through the SQL API in
batches, each batch one transaction:

1. plans (`upsert_plan` with the source's id as external id) and coupons (`upsert_coupon`);
2. customers (`import_customers`, keyed by external id) and, in the same transaction, the default
   payment method of each customer the batch created (a re-run never touches a method again);
3. subscriptions (`import_subscriptions`), each in the period its source billed: the first renewal
   here is that period's end.

Resumable: every object is keyed by its external id, so a re-run skips what is here and imports the
rest. `dry_run` runs the same steps in one transaction rolled back at the end, with the import
functions in their reporting mode: the report lists every row that would be refused, and why.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from billing import db

log = logging.getLogger("billing.importer")

BATCH = 1000  # rows per import call (the SQL functions take up to 10,000)


@dataclass
class Plan:
    code: str
    price: int
    currency: str
    interval: str
    count: int
    external_id: str


@dataclass
class Coupon:
    code: str
    duration: str
    percent_off: float | None = None
    amount_off: int | None = None
    currency: str | None = None
    duration_periods: int | None = None
    max_redemptions: int | None = None
    redeem_by: datetime | None = None


@dataclass
class PaymentMethod:
    provider: str
    customer_ref: str | None
    payment_method_ref: str
    brand: str | None
    last4: str | None
    exp_month: int
    exp_year: int


@dataclass
class Customer:
    row: dict  # import_customers' row: external_id, name, email, timezone (id: ours, optional)
    payment_method: PaymentMethod | None = None


@dataclass
class Unmapped:
    kind: str
    source_id: str
    reason: str


@dataclass
class Source:
    """What a source read, already mapped. Iterables may be lazy (read page by page)."""
    plans: Iterable[Plan | Unmapped]
    coupons: Iterable[Coupon | Unmapped]
    customers: Iterable[Customer | Unmapped]
    subscriptions: Iterable[dict | Unmapped]  # import_subscriptions' rows


@dataclass
class Report:
    dry_run: bool
    counts: Counter = field(default_factory=Counter)  # (kind, outcome) -> n
    problems: list[Unmapped] = field(default_factory=list)

    def add(self, kind: str, outcome: str, n: int = 1) -> None:
        self.counts[(kind, outcome)] += n

    def refuse(self, item: Unmapped) -> None:
        self.problems.append(item)
        self.add(item.kind, "cannot be mapped" if self.dry_run else "not imported")

    def text(self) -> str:
        lines = [f"billing import{' (dry run: nothing written)' if self.dry_run else ''}"]
        for kind in ("plan", "coupon", "customer", "payment method", "subscription"):
            parts = [f"{n:,} {outcome}" for (k, outcome), n in sorted(self.counts.items()) if k == kind]
            if parts:
                lines.append(f"  {kind + 's':<16} " + ", ".join(parts))
        if self.problems:
            lines.append(f"  what cannot be imported ({len(self.problems)}):")
            for p in self.problems:
                lines.append(f"    {p.kind} {p.source_id}: {p.reason}")
        return "\n".join(lines)

    def ok(self) -> bool:
        return not self.problems


def _batches(items: Iterable, size: int) -> Iterator[list]:
    batch: list = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _json(rows: list[dict]) -> str:
    return json.dumps(rows, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v))


def run_import(database_url: str, source: Source, now: datetime, *, dry_run: bool = False,
               batch: int = BATCH, progress: Callable[[str, int], None] | None = None) -> Report:
    """Writes what `source` maps (see the module's doc). `progress(kind, n)` is told of each n
    objects handled. Returns the report; nothing is half-written: each batch is one transaction."""
    report = Report(dry_run=dry_run)
    tick = progress or (lambda kind, n: None)
    with psycopg.connect(database_url, row_factory=dict_row, autocommit=not dry_run) as conn:
        outer = conn.transaction() if dry_run else None
        if outer is not None:
            outer.__enter__()
        try:
            _plans(conn, source, now, report, tick)
            _customers(conn, source, now, report, tick, dry_run, batch)
            _subscriptions(conn, source, now, report, tick, dry_run, batch)
        finally:
            if outer is not None:
                # A dry run writes nothing: everything it did is rolled back.
                outer.__exit__(psycopg.Rollback, psycopg.Rollback(), None)
    return report


def _sql_problem(exc: psycopg.Error) -> str:
    diag = exc.diag
    return (diag.message_primary or str(exc)).strip()


def _plans(conn, source: Source, now, report: Report, tick) -> None:
    for item in source.plans:
        if isinstance(item, Unmapped):
            report.refuse(item)
        else:
            try:
                with conn.transaction():
                    conn.execute(db.IMPORT_PLAN, {"code": item.code, "price": item.price, "currency": item.currency,
                                                  "interval": item.interval, "count": item.count, "now": now,
                                                  "external_id": item.external_id})
                report.add("plan", _outcome(report, "upserted"))
            except psycopg.Error as exc:
                report.refuse(Unmapped("plan", item.external_id, _sql_problem(exc)))
        tick("plan", 1)
    for item in source.coupons:
        if isinstance(item, Unmapped):
            report.refuse(item)
        else:
            try:
                with conn.transaction():
                    conn.execute(db.IMPORT_COUPON, {
                        "code": item.code, "percent_off": item.percent_off, "amount_off": item.amount_off,
                        "currency": item.currency, "duration": item.duration, "duration_periods": item.duration_periods,
                        "max_redemptions": item.max_redemptions, "redeem_by": item.redeem_by})
                report.add("coupon", _outcome(report, "upserted"))
            except psycopg.Error as exc:
                report.refuse(Unmapped("coupon", item.code, _sql_problem(exc)))
        tick("coupon", 1)


def _checked(conn, query: str, kind: str, rows: list[dict], now, report: Report) -> list[dict]:
    """The rows the import function accepts: each batch is first checked (the function's reporting
    mode), the refused rows reported, and only the others sent, so that one bad row never blocks
    the rest of its batch (the import call itself is all or nothing)."""
    checked = conn.execute(query, {"rows": _json(rows), "now": now, "dry_run": True}).fetchall()
    refused = {r["external_id"]: r["problem"] for r in checked if r["outcome"] == "refused"}
    for external_id, problem in refused.items():
        report.refuse(Unmapped(kind, str(external_id), problem))
    return [row for row in rows if row.get("external_id") not in refused]


def _outcome(report: Report, outcome: str) -> str:
    return f"would be {outcome}" if report.dry_run else outcome


def _customers(conn, source: Source, now, report: Report, tick, dry_run: bool, size: int) -> None:
    for chunk in _batches(source.customers, size):
        good: dict[str, Customer] = {}
        for item in chunk:
            if isinstance(item, Unmapped):
                report.refuse(item)
            else:
                good[item.row.get("external_id")] = item
        rows = _checked(conn, db.IMPORT_CUSTOMERS, "customer", [c.row for c in good.values()], now, report)
        if rows:
            # (A dry run writes them too, inside its transaction rolled back at the end, so that its
            # subscriptions are checked against them.)
            with conn.transaction():
                for r in conn.execute(db.IMPORT_CUSTOMERS, {"rows": _json(rows), "now": now, "dry_run": False}).fetchall():
                    report.add("customer", _outcome(report, r["outcome"]))
                    pm = good[r["external_id"]].payment_method
                    if pm is None or r["outcome"] != "created":
                        continue  # a customer imported before keeps the method it got then
                    try:
                        with conn.transaction():
                            conn.execute(db.IMPORT_PAYMENT_METHOD, {
                                "customer_id": r["customer_id"], "provider": pm.provider, "customer_ref": pm.customer_ref,
                                "payment_method_ref": pm.payment_method_ref, "brand": pm.brand, "last4": pm.last4,
                                "exp_month": pm.exp_month, "exp_year": pm.exp_year, "now": now})
                        report.add("payment method", _outcome(report, "set"))
                    except psycopg.Error as exc:
                        # The customer is imported without it (its invoices then wait for a method).
                        report.refuse(Unmapped("payment method", pm.payment_method_ref, _sql_problem(exc)))
        tick("customer", len(chunk))


def _subscriptions(conn, source: Source, now, report: Report, tick, dry_run: bool, size: int) -> None:
    for chunk in _batches(source.subscriptions, size):
        rows = []
        for item in chunk:
            if isinstance(item, Unmapped):
                report.refuse(item)
            else:
                rows.append(item)
        rows = _checked(conn, db.IMPORT_SUBSCRIPTIONS, "subscription", rows, now, report) if rows else rows
        if rows:
            with conn.transaction():
                for r in conn.execute(db.IMPORT_SUBSCRIPTIONS, {"rows": _json(rows), "now": now, "dry_run": False}):
                    report.add("subscription", _outcome(report, r["outcome"]))
        tick("subscription", len(chunk))


def as_utc(value: Any) -> datetime | None:
    """An instant from a Unix timestamp (Stripe) or an ISO 8601 text (CSV); None for empty."""
    from datetime import timezone

    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, tz=timezone.utc)
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
