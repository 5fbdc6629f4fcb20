"""`billing import csv`: plans, customers and subscriptions from CSV files (format: docs/import.md,
samples in docs/import/).

Files are UTF-8 with a header row; columns may come in any order; unknown columns are refused (a
typo must not silently drop a value); an empty cell is NULL. Instants are ISO 8601 (UTC when no
offset). Each file is optional: plans.csv, customers.csv, subscriptions.csv.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from billing.importer import Customer, PaymentMethod, Plan, Source, Unmapped, as_utc

PLAN_COLUMNS = {"external_id", "code", "price", "currency", "interval", "interval_count"}
CUSTOMER_COLUMNS = {"external_id", "id", "name", "email", "timezone", "payment_provider", "payment_customer_ref",
                    "payment_method_ref", "card_brand", "card_last4", "card_exp_month", "card_exp_year"}
SUBSCRIPTION_COLUMNS = {"external_id", "customer_external_id", "plan_code", "plan_external_id", "status",
                        "current_period_start", "current_period_end", "quantity", "coupon_code", "coupon_until",
                        "cancel_at_period_end"}


class CsvFormatError(ValueError):
    pass


def _rows(path: Path, columns: set[str]) -> Iterator[tuple[int, dict]]:
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        unknown = set(reader.fieldnames or ()) - columns
        if unknown:
            raise CsvFormatError(f"{path}: unknown column(s) {', '.join(sorted(unknown))}; "
                                 f"known: {', '.join(sorted(columns))}")
        for n, row in enumerate(reader, start=2):
            yield n, {k: (v.strip() if v is not None and v.strip() != "" else None) for k, v in row.items()}


def _int(value: str | None) -> int | None:
    return None if value is None else int(value)


def _plans(path: Path) -> Iterator[Plan | Unmapped]:
    for n, r in _rows(path, PLAN_COLUMNS):
        try:
            yield Plan(code=r["code"] or r["external_id"], price=int(r["price"]), currency=(r["currency"] or "").upper(),
                       interval=(r["interval"] or "").upper(), count=_int(r.get("interval_count")) or 1,
                       external_id=r["external_id"])
        except (KeyError, TypeError, ValueError) as exc:
            yield Unmapped("plan", r.get("external_id") or f"line {n}", f"line {n}: {exc}")


def _customers(path: Path) -> Iterator[Customer | Unmapped]:
    for n, r in _rows(path, CUSTOMER_COLUMNS):
        try:
            row = {"external_id": r.get("external_id"), "id": _int(r.get("id")), "name": r.get("name"),
                   "email": r.get("email"), "timezone": r.get("timezone")}
            method = None
            if r.get("payment_method_ref"):
                method = PaymentMethod(provider=r.get("payment_provider") or "stripe",
                                       customer_ref=r.get("payment_customer_ref"),
                                       payment_method_ref=r["payment_method_ref"], brand=r.get("card_brand"),
                                       last4=r.get("card_last4"), exp_month=int(r["card_exp_month"]),
                                       exp_year=int(r["card_exp_year"]))
            yield Customer(row={k: v for k, v in row.items() if v is not None}, payment_method=method)
        except (KeyError, TypeError, ValueError) as exc:
            yield Unmapped("customer", r.get("external_id") or f"line {n}", f"line {n}: {exc}")


def _subscriptions(path: Path) -> Iterator[dict | Unmapped]:
    for n, r in _rows(path, SUBSCRIPTION_COLUMNS):
        try:
            row = dict(r)
            row["current_period_start"] = as_utc(r.get("current_period_start"))
            row["current_period_end"] = as_utc(r.get("current_period_end"))
            row["coupon_until"] = as_utc(r.get("coupon_until"))
            row["quantity"] = _int(r.get("quantity"))
            flag = (r.get("cancel_at_period_end") or "false").lower()
            if flag not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"cancel_at_period_end is true or false, not {flag!r}")
            row["cancel_at_period_end"] = flag in ("true", "1", "yes")
            yield {k: v for k, v in row.items() if v is not None}
        except (TypeError, ValueError) as exc:
            yield Unmapped("subscription", r.get("external_id") or f"line {n}", f"line {n}: {exc}")


def read(plans: Path | None, customers: Path | None, subscriptions: Path | None) -> Source:
    return Source(plans=_plans(plans) if plans else [], coupons=[],
                  customers=_customers(customers) if customers else [],
                  subscriptions=_subscriptions(subscriptions) if subscriptions else [])


def count_rows(path: Path | None) -> int:
    if path is None:
        return 0
    with path.open(newline="", encoding="utf-8-sig") as f:
        return max(sum(1 for _ in csv.reader(f)) - 1, 0)
