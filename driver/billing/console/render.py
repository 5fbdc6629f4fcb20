"""Formatting for the console's templates: money in minor units, times, and the inline SVG charts."""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape

from markupsafe import Markup

HTMX_FILE = "htmx-2.0.11.min.js"  # vendored from the htmx.org 2.0.11 package (static/README.md)

# ISO 4217 exponents that are not 2 (the ones a billing console is likely to meet).
_EXPONENT = {"JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0, "UGX": 0, "XAF": 0, "XOF": 0,
             "BHD": 3, "KWD": 3, "OMR": 3, "JOD": 3, "TND": 3}


def money(amount, currency) -> str:
    """12345, 'USD' -> '123.45 USD'; exact (integer arithmetic), never summed across currencies."""
    if amount is None:
        return ""
    amount = int(amount)
    currency = (currency or "").strip()
    exp = _EXPONENT.get(currency, 2)
    sign = "-" if amount < 0 else ""
    whole, frac = divmod(abs(amount), 10 ** exp)
    text = f"{whole:,}" + (f".{frac:0{exp}d}" if exp else "")
    return f"{sign}{text} {currency}".strip()


def when(value) -> str:
    """An ISO time (from jsonb) or a datetime, as 'YYYY-MM-DD HH:MM UTC'."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def count(value) -> str:
    return f"{int(value or 0):,}"


def label(value) -> str:
    return str(value).replace("_", " ")


FILTERS = {"money": money, "when": when, "count": count, "label": label}


def mrr_series(rows: list[dict]) -> list[dict]:
    """console_mrr rows -> per currency: the current MRR, the change over the window, a sparkline."""
    by: dict[str, list[tuple[datetime, int]]] = {}
    for r in rows:
        by.setdefault(r["currency"], []).append((r["at"], int(r["mrr"])))
    out = []
    for currency, points in sorted(by.items()):
        points.sort()
        current = points[-1][1]
        first = points[0][1]
        out.append({"currency": currency, "mrr": current, "first": first, "change": current - first,
                    "points": len(points), "svg": sparkline(points, currency)})
    return out


def sparkline(points: list[tuple[datetime, int]], currency: str, width: int = 240, height: int = 48) -> Markup:
    values = [v for _, v in points]
    lo, hi = min(values + [0]), max(values + [1])
    span = max(hi - lo, 1)
    n = max(len(values) - 1, 1)
    coords = [(round(i * (width - 4) / n + 2, 1), round(height - 2 - (v - lo) * (height - 4) / span, 1))
              for i, v in enumerate(values)]
    path = " ".join(f"{x},{y}" for x, y in coords)
    last_x, last_y = coords[-1]
    title = (f"MRR {currency}, {len(values)} points from {when(points[0][0])} to {when(points[-1][0])}: "
             f"{money(values[0], currency)} to {money(values[-1], currency)}")
    return Markup(
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
        f'<polyline fill="none" stroke="currentColor" stroke-width="2" points="{path}"/>'
        f'<circle cx="{last_x}" cy="{last_y}" r="3" fill="currentColor"/></svg>')


def funnel_svg(d: dict, width: int = 420) -> Markup:
    """The dunning funnel of the overview as horizontal bars, each labeled with its count."""
    rows = [("due (30 days)", d.get("invoices", 0)), ("paid at first try", d.get("paid_first_try", 0)),
            ("declined at least once", d.get("declined", 0)), ("recovered", d.get("recovered", 0)),
            ("still in dunning", d.get("in_dunning", 0)), ("failed", d.get("failed", 0)),
            ("voided after a decline", d.get("voided", 0))]
    top = max([int(v or 0) for _, v in rows] + [1])
    bar_h, gap, label_w = 18, 6, 170
    height = len(rows) * (bar_h + gap)
    parts = [f'<svg class="funnel" viewBox="0 0 {width} {height}" width="100%" role="img" '
             f'aria-label="Dunning funnel"><title>Dunning funnel of the invoices due in the last 30 days</title>']
    for i, (name, value) in enumerate(rows):
        value = int(value or 0)
        y = i * (bar_h + gap)
        w = round((width - label_w - 70) * value / top, 1)
        parts.append(f'<text x="0" y="{y + 13}" class="lbl">{escape(name)}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{max(w, 1)}" height="{bar_h}" class="bar b{i}"/>'
                     f'<text x="{label_w + w + 6}" y="{y + 13}" class="num">{value:,}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
