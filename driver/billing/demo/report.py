"""The demo's report: figures read from the database after the run, drawn as inline SVG in one
self-contained HTML file, and summed up in the terminal. Money stays integer (smallest unit)."""

from __future__ import annotations

import html
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from billing.demo.scenario import PEAKS, major

UTC = timezone.utc
HOUR = timedelta(hours=1)

KIND_COLORS = {"INITIAL": "#4e79a7", "RENEWAL": "#f28e2b", "PRORATION": "#59a14f", "RETRY": "#b07aa1"}


# -- figures -----------------------------------------------------------------------------------

def _hour(dt: datetime) -> datetime:
    return dt.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def collect(url: str, result) -> dict:
    """Everything the report shows, from the tables (superuser), plus the run's own step samples."""
    with psycopg.connect(url, row_factory=dict_row) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        q = lambda text, params=None: conn.execute(text, params).fetchall()  # noqa: E731
        due = q("""SELECT date_trunc('hour', CASE WHEN kind = 'RENEWAL' THEN period_start ELSE due_at END) AS h,
                          kind, count(*) AS n
                     FROM billing.invoice WHERE subtotal > 0 GROUP BY 1, 2""")
        # A claim happens at a step's end instant: it belongs to the step that ends there.
        attempts = q("""SELECT date_trunc('hour', first_claimed_at - interval '1 microsecond') AS h,
                               attempt_number > 0 AS retry, count(*) AS n
                          FROM billing.payment_attempt GROUP BY 1, 2""")
        outcomes = {r["outcome"] or "IN FLIGHT": r["n"] for r in q(
            "SELECT outcome, count(*) AS n FROM billing.payment_attempt GROUP BY 1")}
        invoices = q("SELECT kind, status, count(*) AS n FROM billing.invoice GROUP BY 1, 2 ORDER BY 1, 2")
        subs = q("""SELECT s.status, coalesce(s.cancel_reason, '') AS reason, count(*) AS n
                      FROM billing.subscription s GROUP BY 1, 2 ORDER BY 1, 2""")
        plans = q("""SELECT p.billing_interval AS interval, count(*) AS n FROM billing.subscription s
                       JOIN billing.plan p ON p.id = s.plan_id GROUP BY 1 ORDER BY 2 DESC""")
        funnel = q("""
            WITH declined_first AS (
                SELECT i.id, i.status, pa.attempt_number AS paid_try
                  FROM billing.invoice i
                  LEFT JOIN billing.payment_attempt pa ON pa.id = i.paid_attempt_id
                 WHERE EXISTS (SELECT 1 FROM billing.payment_attempt a
                                WHERE a.invoice_id = i.id AND a.attempt_number = 0 AND a.outcome = 'DECLINED'))
            SELECT status, paid_try, count(*) AS n FROM declined_first GROUP BY 1, 2""")
        tries = {r["attempt_number"]: r["n"] for r in q(
            "SELECT attempt_number, count(*) AS n FROM billing.payment_attempt GROUP BY 1")}
        charged = q("SELECT count(DISTINCT invoice_id) AS n FROM billing.payment_attempt")[0]["n"]
        revenue = q("""
            SELECT currency,
                   sum(amount) FILTER (WHERE status = 'PAID') AS collected,
                   count(*) FILTER (WHERE status = 'PAID') AS paid,
                   sum(amount) FILTER (WHERE status = 'FAILED') AS failed,
                   sum(amount) FILTER (WHERE status = 'OPEN') AS open,
                   sum(amount) FILTER (WHERE status = 'VOID') AS void,
                   sum(credit_applied) AS credit_applied,
                   sum(amount) FILTER (WHERE status = 'PAID' AND kind = 'PRORATION') AS proration
              FROM billing.invoice GROUP BY currency ORDER BY currency""")
        credit = {r["currency"].strip(): r["granted"] for r in q(
            """SELECT currency, sum(amount) AS granted FROM billing.credit_entry
                WHERE reason = 'PRORATION' GROUP BY currency""")}
        events = {r["event_type"]: r["n"] for r in q(
            "SELECT event_type, count(*) AS n FROM billing.outbox_event GROUP BY 1 ORDER BY 1")}
        webhooks = q("SELECT count(*) AS n FROM billing.gateway_webhook")[0]["n"]
        changes = q("""SELECT count(*) FILTER (WHERE kind = 'PRORATION') AS prorations,
                              (SELECT count(*) FROM billing.credit_entry WHERE reason = 'PRORATION') AS credits
                         FROM billing.invoice""")[0]

    due_by_hour: dict[datetime, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in due:
        due_by_hour[r["h"]][r["kind"]] += r["n"]
    attempts_by_hour: dict[datetime, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in attempts:
        attempts_by_hour[r["h"]]["RETRY" if r["retry"] else "FIRST"] += r["n"]
    # Backlog at the end of each hour, from the run's samples (the last sample of that hour).
    backlog_by_hour: dict[datetime, int] = {}
    calls_by_hour: dict[datetime, int] = defaultdict(int)
    previous = 0
    for s in result.samples:
        hour = _hour(s.at - timedelta(microseconds=1))
        backlog_by_hour[hour] = s.backlog
        # Gateway calls answered during the step (as the charge workers counted them), put in
        # the step's last hour: exact for the hourly steps of the peak days.
        calls_by_hour[hour] += s.calls - previous
        previous = s.calls
    for r in revenue:
        r["currency"] = r["currency"].strip()
        r["credit_granted"] = credit.get(r["currency"], 0)
        for k in ("collected", "failed", "open", "void", "credit_applied", "proration", "credit_granted"):
            r[k] = int(r[k] or 0)  # sum(bigint) is numeric: back to an exact int
    return {
        "due_by_hour": due_by_hour, "attempts_by_hour": attempts_by_hour, "backlog_by_hour": backlog_by_hour,
        "calls_by_hour": calls_by_hour,
        "outcomes": outcomes, "invoices": invoices, "subscriptions": subs, "plans": plans, "funnel": funnel,
        "tries": tries, "charged": charged, "revenue": revenue, "events": events, "webhooks": webhooks,
        "changes": changes,
    }


def _peak(stats: dict, start: datetime, end: datetime) -> dict:
    """The busiest due hour in [start, end), the deepest backlog and when the queue was empty again."""
    hours = [h for h in _hours(start, end)]
    due = {h: sum(stats["due_by_hour"].get(h, {}).values()) for h in hours}
    busiest = max(hours, key=lambda h: due[h])
    backlog = {h: stats["backlog_by_hour"].get(h, 0) for h in hours}
    deepest = max(hours, key=lambda h: backlog[h])
    drained = next((h for h in hours if h > deepest and backlog[h] == 0), None)
    return {"busiest": busiest, "busiest_due": due[busiest], "deepest": deepest, "deepest_backlog": backlog[deepest],
            "drained": drained, "due_total": sum(due.values()),
            "charged_total": sum(stats["calls_by_hour"].get(h, 0) for h in hours)}


def pace(result) -> tuple[int, int, bool]:
    """(mean charges per simulated hour while a queue waited, how many such hours, whether that is
    the cap): over the hourly steps of the peak days that ended with invoices still queued."""
    s = result.stats
    cap = round(result.options.rate * result.options.hour_seconds)
    hours = [h for a, b in PEAKS for h in _hours(a, min(b, result.ended))
             if s["backlog_by_hour"].get(h, 0) > 0 and result.options.step_minutes == 60]
    if not hours:
        return 0, 0, True
    mean = sum(s["calls_by_hour"].get(h, 0) for h in hours) // len(hours)
    return mean, len(hours), mean >= 0.9 * cap


def _hours(start: datetime, end: datetime):
    h = _hour(start)
    while h < end:
        yield h
        h += HOUR


def _funnel(stats: dict) -> dict:
    declined = sum(r["n"] for r in stats["funnel"])
    recovered = defaultdict(int)
    out = {"declined_first": declined, "failed": 0, "void": 0, "open": 0}
    for r in stats["funnel"]:
        if r["status"] == "PAID":
            recovered[r["paid_try"] if r["paid_try"] is not None else -1] += r["n"]
        elif r["status"] == "FAILED":
            out["failed"] += r["n"]
        elif r["status"] == "VOID":
            out["void"] += r["n"]
        else:
            out["open"] += r["n"]
    out["recovered"] = dict(sorted(recovered.items()))
    return out


# -- SVG ---------------------------------------------------------------------------------------

def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _nice_max(value: int) -> int:
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
    t = _hour(start) if bucket <= HOUR else _hour(start).replace(hour=0)
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
    top = _nice_max(max([sum(d.values()) for d in due] + calls + backlog
                        + ([cap_b] if show_cap else [])))
    left, right, top_pad, bottom = 56, 12, 30, 44
    w, h = width - left - right, height - top_pad - bottom
    n = max(1, len(buckets))
    bw = w / n

    def y(v: float) -> float:
        return top_pad + h - (v * h / top)

    parts = [f'<svg viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="{_esc(title)}" '
             f'xmlns="http://www.w3.org/2000/svg" font-family="system-ui, sans-serif" font-size="11">']
    parts.append(f'<text x="{left}" y="16" font-size="13" font-weight="600">{_esc(title)}</text>')
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
        parts.append(f'<text x="{left + i * bw:.1f}" y="{top_pad + h + 14}" fill="#555">{_esc(label)}</text>')
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
        parts.append(f'<text x="{left - 8}" y="{yy + 15}" text-anchor="end">{_esc(label)}</text>')
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


# -- the HTML page ----------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:980px;color:#222;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem} h2{font-size:1.2rem;margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
.sub{color:#666;margin-top:0} table{border-collapse:collapse;width:100%;margin:.6rem 0;font-size:.92rem}
th,td{border-bottom:1px solid #eee;padding:.35rem .5rem;text-align:left;vertical-align:top} th{background:#fafafa}
td.num{text-align:right;font-variant-numeric:tabular-nums} .ok{color:#1a7f37;font-weight:700} .fail{color:#c62828;font-weight:700}
.verdict{font-size:1.1rem;padding:.7rem 1rem;border-radius:6px;margin:1rem 0} .verdict.ok{background:#e8f5e9} .verdict.fail{background:#ffebee}
.note{color:#555;font-size:.92rem} code{background:#f4f4f4;padding:0 .25rem;border-radius:3px}
.kpis{display:grid;grid-template-columns:repeat(4,1fr);gap:.6rem;margin:1rem 0}
.kpi{background:#f7f7f9;border-radius:6px;padding:.6rem .8rem} .kpi b{display:block;font-size:1.3rem}
"""


def _table(headers: list[str], rows: list[list], numeric: set[int] = frozenset()) -> str:
    out = ["<table><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in headers) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(
            f'<td class="num">{_esc(c)}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row)) + "</tr>")
    out.append("</table>")
    return "".join(out)


def _fmt_h(h: datetime | None) -> str:
    return f"{h:%d %b %H:00} UTC" if h else "-"


def _drained(p: dict) -> str:
    if not p["deepest_backlog"]:
        return "no queue"
    if p["drained"] is None:
        return "still queued at the end of these 48 h"
    return f"empty again by {_fmt_h(p['drained'])}"


def render_html(result) -> str:
    o = result.options
    s = result.stats
    cap = round(o.rate * o.hour_seconds)
    ok = all(c.ok for c in result.checks)
    start, end = result.started, result.ended
    campaign, renewal = PEAKS
    p1, p2 = _peak(s, *campaign), _peak(s, *renewal)
    f = _funnel(s)
    calls = result.simulator_stats.get("accepted", 0)
    achieved = calls / result.simulate_seconds if result.simulate_seconds else 0
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>billing demo report</title>"
             f"<style>{CSS}</style></head><body>"]
    parts.append("<h1>Billing demo: the first-of-the-month peak</h1>")
    parts.append(f"<p class='sub'>{o.subscriptions:,} subscriptions · seed {o.seed} · simulated "
                 f"{start:%d %b %Y %H:%M} → {end:%d %b %Y %H:%M} UTC · gateway limit {o.rate:,} calls/s · "
                 f"run took {result.real_seconds:.0f} s ({result.simulate_seconds:.0f} s simulating)</p>")
    verdict = "All invariants hold." if ok else "Some invariants FAILED: see the table below."
    parts.append(f"<div class='verdict {'ok' if ok else 'fail'}'>{'✔' if ok else '✘'} {verdict}</div>")
    paid = sum(r["paid"] or 0 for r in s["revenue"])
    parts.append("<div class='kpis'>" + "".join(
        f"<div class='kpi'><b>{v}</b>{_esc(k)}</div>" for k, v in (
            ("gateway calls", f"{calls:,}"), ("invoices paid", f"{paid:,}"),
            ("events published", f"{sum(s['events'].values()):,}"),
            ("busiest real second", f"{result.simulator_stats.get('maxWindow', 0):,} / {o.rate:,}"))) + "</div>")

    parts.append("<h2>Invariants</h2>")
    parts.append("<p class='note'>Computed after the run from three independent witnesses: the tables (read as "
                 "superuser, not through the SQL API), the gateway simulator's ledger and record of accepted calls, "
                 f"and the event stream as a consumer reads it ({_esc(result.events_source)}).</p>")
    rows = []
    for c in result.checks:
        mark = "<span class='ok'>✔ holds</span>" if c.ok else "<span class='fail'>✘ FAILS</span>"
        ex = "".join(f"<br><small>{_esc(e)}</small>" for e in c.examples)
        rows.append([f"<b>{_esc(c.name)}</b><br><small>{_esc(c.promise)}</small>", mark, _esc(c.figures) + ex])
    parts.append(_table(["invariant", "result", "figures"], rows))

    parts.append("<h2>The peaks: what falls due per hour against what the gateway lets through</h2>")
    busiest = result.simulator_stats.get("maxWindow", 0)
    mean, queued_hours, limited = pace(result)
    if not queued_hours:
        pace_text = "no queue formed: the cap was never reached"
    elif limited:
        pace_text = (f"while a queue waited ({queued_hours} simulated hours), {mean:,} charges per hour: "
                     f"the gateway's limit set the pace")
    else:
        pace_text = (f"while a queue waited ({queued_hours} simulated hours), only {mean:,} charges per hour, "
                     f"below the cap: this machine, not the gateway's limit, set the pace (busy with other work, "
                     f"or too slow for --rate {o.rate}; a lower --rate makes the limit the bottleneck)")
    parts.append(
        f"<p class='note'><b>How to read these charts.</b> Time is simulated: the SQL API gets <code>p_now</code> "
        f"from a clock that moves in steps of {o.step_minutes} simulated minutes on these days "
        f"({o.quiet_step_hours} h on the others). Within a step the charge workers call the gateway in real time, "
        f"through the real rate limiter ({_esc(result.limiter)}), at most {o.rate:,} calls per real second. A step "
        f"ends when every invoice due has reached the gateway, or after {o.hour_seconds:.3g} s of real time per simulated hour; then the "
        f"clock moves on and what is left waits in the queue. So at most {o.rate:,} × {o.hour_seconds:.3g} = "
        f"<b>{cap:,} charges fit in a simulated hour</b> (dashed line), whatever the demand; quiet hours take only "
        f"the real time their work needs. Bars: invoices falling due in the hour (a signup's INITIAL invoice at the "
        f"signup; a renewal at its period boundary, local midnight or the signup's time of day in the customer's "
        f"time zone; a PRORATION at the plan change). Line: gateway calls answered in the hour (first tries, dunning "
        f"retries, and replays of a key after a timeout or a 5xx). Shaded: the queue, due but not charged, at the end of the hour. Average "
        f"{achieved:,.0f} gateway calls per real second over the whole run, busiest second {busiest:,}; "
        f"{pace_text}.</p>")
    parts.append(svg_hourly(s, *campaign, cap, "Campaign day, 1 September: signups (INITIAL invoices) per hour"))
    parts.append(f"<p class='note'>Busiest hour {_fmt_h(p1['busiest'])}: {p1['busiest_due']:,} invoices due. "
                 f"Deepest queue {p1['deepest_backlog']:,} at {_fmt_h(p1['deepest'])}; {_drained(p1)}. "
                 f"{p1['due_total']:,} due and {p1['charged_total']:,} charged in these 48 h.</p>")
    parts.append(svg_hourly(s, *renewal, cap, "Renewal day, 1 October: renewals per hour"))
    parts.append(f"<p class='note'>Busiest hour {_fmt_h(p2['busiest'])}: {p2['busiest_due']:,} invoices due. "
                 f"Deepest queue {p2['deepest_backlog']:,} at {_fmt_h(p2['deepest'])}; {_drained(p2)}. "
                 f"{p2['due_total']:,} due and {p2['charged_total']:,} charged in these 48 h. "
                 f"The queue is the design: invoices wait in the table (a claimable OPEN row), the limiter spaces the "
                 f"calls, and nothing is lost or charged twice while it drains.</p>")
    parts.append(svg_hourly(s, start, end, cap, "The whole window, per day", bucket=timedelta(days=1)))

    parts.append("<h2>Dunning funnel</h2>")
    parts.append("<p class='note'>Invoices whose first charge was declined, and what became of them: retries follow "
                 "the schedule in <code>billing.dunning_step</code> (1, 3, 5 days plus a deterministic jitter); after "
                 "the last one the invoice is FAILED and the subscription CANCELED. Cards in the simulator behave like "
                 "customers' cards: a few are dead (always declined), some flaky, the rest rarely declined.</p>")
    parts.append(svg_funnel(f, s["charged"]))

    parts.append("<h2>Revenue by currency</h2>")
    parts.append("<p class='note'>Amounts are exact integers in each currency's smallest unit (shown in major units); "
                 "currencies are never added together. Credit: granted by downgrades, applied to later invoices.</p>")
    parts.append(svg_revenue(s["revenue"]))
    rows = [[r["currency"], f"{r['paid'] or 0:,}", major(r["collected"], r["currency"]),
             major(r["proration"], r["currency"]), major(r["open"], r["currency"]), major(r["failed"], r["currency"]),
             major(r["void"], r["currency"]), major(r["credit_granted"], r["currency"]),
             major(r["credit_applied"], r["currency"])] for r in s["revenue"]]
    parts.append(_table(["currency", "invoices paid", "collected", "of which prorations", "still open", "failed",
                         "voided", "credit granted", "credit applied"], rows, set(range(1, 9))))

    parts.append("<h2>What happened</h2>")
    counts = result.action_counts
    rej = ", ".join(f"{k}: {v}" for k, v in sorted(result.action_rejections.items()))
    rej = f"{rej} (an action on a subscription already canceled, by dunning for instance)" if rej else "none"
    sim = result.simulator_stats
    parts.append(_table(["", "figures"], [
        ["customer actions", _esc(", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())))],
        ["actions refused by the SQL API", _esc(rej)],
        ["subscriptions", _esc(", ".join(f"{r['status']}{' (' + r['reason'] + ')' if r['reason'] else ''} "
                                          f"{r['n']:,}" for r in s["subscriptions"]))],
        ["plans", _esc(", ".join(f"{r['interval']} {r['n']:,}" for r in s["plans"]))],
        ["invoices", _esc(", ".join(f"{r['kind']} {r['status']} {r['n']:,}" for r in s["invoices"]))],
        ["plan changes", _esc(f"{s['changes']['prorations']:,} upgrades billed a PRORATION invoice; "
                              f"{s['changes']['credits']:,} downgrades granted credit")],
        ["payment attempts by outcome", _esc(", ".join(f"{k} {v:,}" for k, v in sorted(s["outcomes"].items())))],
        ["attempts by try", _esc(", ".join(f"try {k}: {v:,}" for k, v in sorted(s["tries"].items())))],
        ["gateway", _esc(f"{sim.get('accepted', 0):,} calls accepted, {sim.get('charged', 0):,} keys charged, "
                         f"{sim.get('replays', 0):,} replays answered from the ledger, {sim.get('timeouts', 0):,} "
                         f"timeouts after charging, {sim.get('errors', 0):,} 5xx, {sim.get('rateLimited', 0):,} "
                         f"429, busiest sliding second {sim.get('maxWindow', 0):,}")],
        ["webhooks", _esc(f"{sim.get('webhooksDelivered', 0):,} deliveries accepted (late, out of order, "
                          f"some twice), {s['webhooks']:,} distinct stored, {sim.get('webhooksFailed', 0)} given up")],
        ["events", _esc(", ".join(f"{k} {v:,}" for k, v in s["events"].items()))],
        ["run", _esc(f"setup {result.setup_seconds:.1f} s, simulation {result.simulate_seconds:.1f} s, "
                     f"total {result.real_seconds:.1f} s; database {result.database_url.split('dbname=')[-1]}")],
    ]))
    parts.append("</body></html>")
    return "".join(parts)


def write_html(result, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(result), encoding="utf-8")


# -- the terminal ------------------------------------------------------------------------------

def terminal_summary(result) -> str:
    o = result.options
    s = result.stats
    cap = round(o.rate * o.hour_seconds)
    campaign, renewal = PEAKS
    f = _funnel(s)
    sim = result.simulator_stats
    lines = ["", f"billing demo: {o.subscriptions:,} subscriptions, {result.started:%d %b} .. {result.ended:%d %b %Y} "
                 f"simulated in {result.simulate_seconds:.0f} s (total {result.real_seconds:.0f} s)", ""]
    for name, (a, b) in (("campaign day (signups)", campaign), ("renewal day (1 Oct)", renewal)):
        p = _peak(s, a, b)
        lines.append(f"  {name:<24} busiest hour {_fmt_h(p['busiest'])}: {p['busiest_due']:,} due "
                     f"(cap {cap:,}/h); deepest queue {p['deepest_backlog']:,} at {_fmt_h(p['deepest'])}, {_drained(p)}")
    mean, queued_hours, limited = pace(result)
    if queued_hours:
        lines.append(f"  {'pace while queued':<24} {mean:,} charges per simulated hour over {queued_hours} hours "
                     f"(cap {cap:,}): " + ("the gateway's limit set the pace" if limited else
                                          "below the cap, this machine set the pace"))
    recovered = sum(f["recovered"].values())
    lines.append(f"  {'dunning':<24} {f['declined_first']:,} declined at first try: {recovered:,} recovered, "
                 f"{f['failed']:,} failed (canceled), {f['void']:,} voided, {f['open']:,} still in dunning")
    lines.append(f"  {'gateway':<24} {sim.get('accepted', 0):,} calls, {sim.get('timeouts', 0):,} timeouts after "
                 f"charging, {sim.get('errors', 0):,} 5xx, {sim.get('webhooksDelivered', 0):,} webhooks delivered; "
                 f"busiest second {sim.get('maxWindow', 0):,}/{o.rate:,}")
    lines.append("  revenue collected        " + ", ".join(
        f"{major(r['collected'], r['currency'])} {r['currency']}" for r in s["revenue"]))
    lines.append("")
    lines.append("  invariants")
    for c in result.checks:
        lines.append(f"   {'✔' if c.ok else '✘'} {c.name:<34} {c.figures}")
        for e in c.examples:
            lines.append(f"       - {e}")
    ok = all(c.ok for c in result.checks)
    lines.append("")
    lines.append("  ALL INVARIANTS HOLD" if ok else "  SOME INVARIANTS FAILED")
    return "\n".join(lines) + "\n"
