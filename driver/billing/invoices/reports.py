"""`billing report mrr|churn|revenue`: the SQL reports (db/functions/75_reports.sql) as text or JSON.

Figures are per currency, never summed across currencies; amounts are printed in the currency's
major unit (billing.invoices.money). The reports only read: a billing_readonly login can run them.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal

import psycopg
from psycopg.rows import dict_row

from billing import db
from billing.invoices.money import format_amount

KINDS = ("mrr", "churn", "revenue")


def fetch(conn: psycopg.Connection, kind: str, start: date, end: date, currency: str | None = None,
          at: datetime | None = None) -> list[dict]:
    """The rows of one report (mrr: the month-by-month movements, or the figures at `at`)."""
    if kind == "mrr" and at is not None:
        rows = conn.execute(db.REPORT_MRR, {"at": at}).fetchall()
    else:
        query = {"mrr": db.REPORT_MRR_MOVEMENTS, "churn": db.REPORT_CHURN, "revenue": db.REPORT_REVENUE}[kind]
        rows = conn.execute(query, {"from": start, "to": end}).fetchall()
    return [r for r in rows if currency is None or r["currency"] == currency.upper()]


def _money(value, currency: str) -> str:
    return format_amount(Decimal(value).quantize(Decimal(1)), currency) if value is not None else "-"


def _pct(value) -> str:
    return "-" if value is None else f"{Decimal(value) * 100:.2f}%"


def render(kind: str, rows: list[dict], at: datetime | None = None) -> str:
    """A text table; amounts with their currency's decimals."""
    if kind == "mrr" and at is not None:
        head = f"MRR at {at.isoformat()}\n{'currency':<9}{'subscriptions':>14}{'customers':>10}{'MRR':>22}{'ARR':>22}"
        body = [f"{r['currency']:<9}{r['subscriptions']:>14}{r['customers']:>10}{_money(r['mrr'], r['currency']):>22}"
                f"{_money(r['arr'], r['currency']):>22}" for r in rows]
    elif kind == "mrr":
        head = (f"{'month':<9}{'cur':<5}{'starting MRR':>18}{'new':>16}{'expansion':>16}{'contraction':>16}"
                f"{'churned':>16}{'ending MRR':>18}{'ARR':>20}")
        body = [f"{r['month'].strftime('%Y-%m'):<9}{r['currency']:<5}" + "".join(
                    f"{_money(r[k], r['currency']):>{w}}" for k, w in (
                        ("starting_mrr", 18), ("new_mrr", 16), ("expansion_mrr", 16), ("contraction_mrr", 16),
                        ("churned_mrr", 16), ("ending_mrr", 18)))
                + f"{_money(Decimal(r['ending_mrr']) * 12, r['currency']):>20}" for r in rows]
    elif kind == "churn":
        head = (f"{'month':<9}{'cur':<5}{'customers':>10}{'churned':>8}{'volunt.':>8}{'dunning':>8}{'logo churn':>11}"
                f"{'churned MRR':>16}{'revenue churn':>14}{'net rev. churn':>15}{'dunning settled':>16}"
                f"{'recovered':>10}{'recovery':>10}")
        body = [f"{r['month'].strftime('%Y-%m'):<9}{r['currency']:<5}{r['customers_start']:>10}{r['customers_churned']:>8}"
                f"{r['churned_voluntary']:>8}{r['churned_dunning']:>8}{_pct(r['logo_churn_rate']):>11}"
                f"{_money(r['churned_mrr'], r['currency']):>16}{_pct(r['revenue_churn_rate']):>14}"
                f"{_pct(r['net_revenue_churn_rate']):>15}{r['dunning_settled']:>16}{r['dunning_recovered']:>10}"
                f"{_pct(r['dunning_recovery_rate']):>10}" for r in rows]
    else:
        head = (f"{'month':<9}{'cur':<5}{'recognized':>18}{'invoiced (net)':>18}{'tax':>16}{'cash collected':>18}"
                f"{'refunded':>16}{'net cash':>18}")
        body = [f"{r['month'].strftime('%Y-%m'):<9}{r['currency']:<5}" + "".join(
                    f"{_money(r[k], r['currency']):>{w}}" for k, w in (
                        ("recognized", 18), ("invoiced", 18), ("tax", 16), ("cash_collected", 18), ("refunded", 16),
                        ("net_cash", 18))) for r in rows]
    return "\n".join([head] + (body or ["(no figures in this span)"]))


def as_json(rows: list[dict]) -> str:
    def plain(v):
        if isinstance(v, Decimal):
            return str(v)
        if isinstance(v, (date, datetime)):
            return v.isoformat()
        return v
    return json.dumps([{k: plain(v) for k, v in r.items()} for r in rows], indent=2)


def run(database_url: str, kind: str, start: date, end: date, currency: str | None, at: datetime | None,
        fmt: str) -> str:
    with psycopg.connect(database_url, row_factory=dict_row, autocommit=True) as conn:
        rows = fetch(conn, kind, start, end, currency, at)
    return as_json(rows) if fmt == "json" else render(kind, rows, at)
