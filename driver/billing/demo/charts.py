"""The demo report's charts: inline SVG drawn by hand (no dependency), from the figures."""

from __future__ import annotations

import html
from collections import defaultdict
from datetime import datetime, timedelta

from billing.demo.figures import HOUR, hour_of
from billing.demo.scenario import major

KIND_COLORS = {"INITIAL": "#4e79a7", "RENEWAL": "#f28e2b", "PRORATION": "#59a14f", "RETRY": "#b07aa1"}


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def nice_max(value: int) -> int:
    if value <= 0:
        return 1
    magnitude = 1
    while magnitude * 10 <= value:
        magnitude *= 10
    for m in (1, 2, 2.5, 5, 10):
        if value <= m * magnitude:
            return int(m * magnitude)
    return value


def svg_hourly(stats: dict, start: datetime, end: datetime, cap: int, title: str, *, width: int = 920,
               height: int = 300, bucket: timedelta = HOUR) -> str:
    """Stacked bars: invoices falling due per bucket (by kind); line: payment attempts per bucket
    (first tries + dunning retries); shaded: the queue at the bucket's end; dashed: the cap."""
    buckets = []
    t = hour_of(start) if bucket <= HOUR else hour_of(start).replace(hour=0)
    while t < end:
        buckets.append(t)
        t += bucket
    per_hour = int(bucket / HOUR)

    def in_bucket(series: dict, b: datetime) -> dict[str, int]:
        acc: dict[str, int] = defaultdict(int)
        for k in range(per_hour):
            for kind, n in series.get(b + k * HOUR, {}).items():
                acc[kind] += n
        return acc

    due = [in_bucket(stats["due_by_hour"], b) for b in buckets]
    tries = [in_bucket(stats["attempts_by_hour"], b) for b in buckets]
    calls = [sum(stats["calls_by_hour"].get(b + k * HOUR, 0) for k in range(per_hour)) for b in buckets]
    backlog = [stats["backlog_by_hour"].get(b + (per_hour - 1) * HOUR, 0) for b in buckets]
    cap_b = cap * per_hour
    show_cap = per_hour == 1
    top = nice_max(max([sum(d.values()) for d in due] + calls + backlog
                        + ([cap_b] if show_cap else [])))
    left, right, top_pad, bottom = 56, 12, 30, 44
    w, h = width - left - right, height - top_pad - bottom
    n = max(1, len(buckets))
    bw = w / n

    def y(v: float) -> float:
        return top_pad + h - (v * h / top)

    parts = [f'<svg viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="{esc(title)}" '
             f'xmlns="http://www.w3.org/2000/svg" font-family="system-ui, sans-serif" font-size="11">']
    parts.append(f'<text x="{left}" y="16" font-size="13" font-weight="600">{esc(title)}</text>')
    for i in range(5):
        v = top * i // 4
        parts.append(f'<line x1="{left}" x2="{left + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e4e4e4"/>')
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" fill="#555">{v:,}</text>')
    # the queue
    if any(backlog):
        pts = [f"{left:.1f},{y(0):.1f}"]
        for i, v in enumerate(backlog):
            pts.append(f"{left + (i + 1) * bw:.1f},{y(v):.1f}")
        pts.append(f"{left + n * bw:.1f},{y(0):.1f}")
        parts.append(f'<polygon points="{" ".join(pts)}" fill="#e15759" fill-opacity="0.18" stroke="#e15759" '
                     f'stroke-opacity="0.5"/>')
    # due bars
    for i, d in enumerate(due):
        base = 0
        for kind in ("INITIAL", "RENEWAL", "PRORATION"):
            v = d.get(kind, 0)
            if not v:
                continue
            parts.append(f'<rect x="{left + i * bw + bw * 0.12:.1f}" y="{y(base + v):.1f}" width="{bw * 0.76:.1f}" '
                         f'height="{y(base) - y(base + v):.1f}" fill="{KIND_COLORS[kind]}">'
                         f'<title>{b_label(buckets[i])}: {v:,} {kind} due</title></rect>')
            base += v
    if show_cap:
        parts.append(f'<line x1="{left}" x2="{left + w}" y1="{y(cap_b):.1f}" y2="{y(cap_b):.1f}" stroke="#333" '
                     f'stroke-dasharray="5,4"/>')
        parts.append(f'<text x="{left + w - 4}" y="{y(cap_b) - 4:.1f}" text-anchor="end" fill="#333">gateway cap '
                     f'{cap_b:,} charges per simulated hour</text>')
    # gateway calls line
    pts = " ".join(f"{left + (i + 0.5) * bw:.1f},{y(v):.1f}" for i, v in enumerate(calls))
    parts.append(f'<polyline points="{pts}" fill="none" stroke="#222" stroke-width="1.8"/>')
    for i, v in enumerate(calls):
        if v:
            parts.append(f'<circle cx="{left + (i + 0.5) * bw:.1f}" cy="{y(v):.1f}" r="1.8" fill="#222">'
                         f'<title>{b_label(buckets[i])}: {v:,} gateway calls; {sum(tries[i].values()):,} payment '
                         f'attempts claimed ({tries[i].get("RETRY", 0):,} dunning retries); queue {backlog[i]:,}'
                         f'</title></circle>')
    # x axis
    step = max(1, n // 12)
    for i in range(0, n, step):
        b = buckets[i]
        label = f"{b:%d %b}" if per_hour >= 24 else (f"{b:%d %b %Hh}" if b.hour == 0 or i == 0 else f"{b:%Hh}")
        parts.append(f'<text x="{left + i * bw:.1f}" y="{top_pad + h + 14}" fill="#555">{esc(label)}</text>')
    parts.append(f'<line x1="{left}" x2="{left + w}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="#999"/>')
    # legend
    lx = left
    ly = height - 10
    for label, color in (("INITIAL due", KIND_COLORS["INITIAL"]), ("RENEWAL due", KIND_COLORS["RENEWAL"]),
                         ("PRORATION due", KIND_COLORS["PRORATION"])):
        parts.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{lx + 14}" y="{ly}">{label}</text>')
        lx += 110
    parts.append(f'<line x1="{lx}" x2="{lx + 18}" y1="{ly - 4}" y2="{ly - 4}" stroke="#222" stroke-width="1.8"/>'
                 f'<text x="{lx + 22}" y="{ly}">gateway calls (first tries, retries)</text>')
    lx += 235
    parts.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="#e15759" fill-opacity="0.3"/>'
                 f'<text x="{lx + 14}" y="{ly}">queue (due, not yet charged)</text>')
    parts.append("</svg>")
    return "".join(parts)


def b_label(b: datetime) -> str:
    return f"{b:%d %b %H:%M} UTC"


def svg_funnel(f: dict, charged: int, *, width: int = 920) -> str:
    rows = [("invoices charged", charged, "#4e79a7"),
            ("declined at the first try", f["declined_first"], "#e15759")]
    names = {0: "paid at the first try (a webhook or late answer)", 1: "recovered at retry 1 (+1 day)",
             2: "recovered at retry 2 (+3 days)", 3: "recovered at retry 3 (+5 days)", -1: "paid otherwise"}
    for k, v in f["recovered"].items():
        rows.append((names.get(k, f"recovered at retry {k}"), v, "#59a14f"))
    rows += [("dunning exhausted: FAILED, subscription canceled", f["failed"], "#9c2a2a"),
             ("voided: subscription canceled meanwhile", f["void"], "#bab0ac"),
             ("still in dunning at the end of the window", f["open"], "#f28e2b")]
    top = max(1, max(v for _, v, _ in rows[1:]) if len(rows) > 1 else 1)
    bar_h, gap, left = 22, 8, 330
    height = len(rows) * (bar_h + gap) + 10
    w = width - left - 90
    parts = [f'<svg viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="dunning funnel" '
             f'xmlns="http://www.w3.org/2000/svg" font-family="system-ui, sans-serif" font-size="12">']
    for i, (label, v, color) in enumerate(rows):
        yy = 5 + i * (bar_h + gap)
        # The first row (all charged invoices) is off the scale of the others: drawn full width.
        bw = w if i == 0 else v * w // top
        parts.append(f'<text x="{left - 8}" y="{yy + 15}" text-anchor="end">{esc(label)}</text>')
        opacity = ' fill-opacity="0.35"' if i == 0 else ""
        parts.append(f'<rect x="{left}" y="{yy}" width="{max(bw, 1)}" height="{bar_h}" fill="{color}"{opacity}/>')
        parts.append(f'<text x="{left + max(bw, 1) + 6}" y="{yy + 15}">{v:,}</text>')
    parts.append("</svg>")
    return "".join(parts)


def svg_revenue(revenue: list[dict], *, width: int = 920) -> str:
    """Per currency, one bar split into collected / still open / failed / voided (shares of what was
    billed, integer arithmetic), with the collected amount written in that currency."""
    bar_h, gap, left, right = 24, 10, 60, 250
    height = len(revenue) * (bar_h + gap) + 34
    w = width - left - right
    colors = (("collected", "#59a14f"), ("open", "#f28e2b"), ("failed", "#e15759"), ("void", "#bab0ac"))
    parts = [f'<svg viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="revenue by currency" '
             f'xmlns="http://www.w3.org/2000/svg" font-family="system-ui, sans-serif" font-size="12">']
    for i, r in enumerate(revenue):
        yy = 5 + i * (bar_h + gap)
        billed = sum(r[k] for k, _ in colors) or 1
        x = left
        parts.append(f'<text x="{left - 8}" y="{yy + 16}" text-anchor="end" font-weight="600">{r["currency"]}</text>')
        for k, color in colors:
            bw = r[k] * w // billed
            if bw:
                parts.append(f'<rect x="{x}" y="{yy}" width="{bw}" height="{bar_h}" fill="{color}">'
                             f'<title>{k}: {major(r[k], r["currency"])} {r["currency"]}</title></rect>')
                x += bw
        parts.append(f'<text x="{left + w + 8}" y="{yy + 16}">{major(r["collected"], r["currency"])} {r["currency"]} '
                     f'collected</text>')
    ly = height - 8
    lx = left
    for k, color in colors:
        parts.append(f'<rect x="{lx}" y="{ly - 10}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{lx + 14}" y="{ly}">{k}</text>')
        lx += 100
    parts.append("</svg>")
    return "".join(parts)
