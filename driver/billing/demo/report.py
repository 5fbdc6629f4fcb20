"""The demo's report: the figures and charts in one self-contained HTML file, and a summary for
the terminal. Money stays integer (smallest unit)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from billing.demo.charts import esc, svg_funnel, svg_hourly, svg_revenue
from billing.demo.figures import funnel, pace, peak
from billing.demo.model import RunResult
from billing.demo.scenario import API_INCLUDED, PEAKS, major


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
    out = ["<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(
            f'<td class="num">{esc(c)}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row)) + "</tr>")
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


def render_html(result: RunResult) -> str:
    o = result.options
    s = result.stats
    cap = o.cap
    ok = all(c.ok for c in result.checks)
    start, end = result.started, result.ended
    campaign, renewal = PEAKS
    p1, p2 = peak(s, *campaign), peak(s, *renewal)
    f = funnel(s)
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
        f"<div class='kpi'><b>{v}</b>{esc(k)}</div>" for k, v in (
            ("gateway calls", f"{calls:,}"), ("invoices paid", f"{paid:,}"),
            ("events published", f"{sum(s['events'].values()):,}"),
            ("busiest real second", f"{result.simulator_stats.get('maxWindow', 0):,} / {o.rate:,}"))) + "</div>")

    parts.append("<h2>Invariants</h2>")
    parts.append("<p class='note'>Computed after the run from three independent witnesses: the tables (read as "
                 "superuser, not through the SQL API), the gateway simulator's ledger and record of accepted calls, "
                 f"and the event stream as a consumer reads it ({esc(result.events_source)}).</p>")
    rows = []
    for c in result.checks:
        mark = "<span class='ok'>✔ holds</span>" if c.ok else "<span class='fail'>✘ FAILS</span>"
        ex = "".join(f"<br><small>{esc(e)}</small>" for e in c.examples)
        rows.append([f"<b>{esc(c.name)}</b><br><small>{esc(c.promise)}</small>", mark, esc(c.figures) + ex])
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
        f"through the real rate limiter ({esc(result.limiter)}), at most {o.rate:,} calls per real second. A step "
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
        ["customer actions", esc(", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())))],
        ["actions refused by the SQL API", esc(rej)],
        ["subscriptions", esc(", ".join(f"{r['status']}{' (' + r['reason'] + ')' if r['reason'] else ''} "
                                          f"{r['n']:,}" for r in s["subscriptions"]))],
        ["plans", esc(", ".join(f"{r['interval']} {r['n']:,}" for r in s["plans"]))],
        ["invoices", esc(", ".join(f"{r['kind']} {r['status']} {r['n']:,}" for r in s["invoices"]))],
        ["plan changes", esc(f"{s['changes']['prorations']:,} upgrades billed a PRORATION invoice; "
                              f"{s['changes']['credits']:,} downgrades granted credit")],
        ["lifecycle", esc(f"{s['lifecycle']['trials']:,} trials ({s['events'].get('SubscriptionTrialWillEnd', 0):,} "
                           f"told of their end), {s['lifecycle']['redemptions']:,} coupon redemptions discounting "
                           f"{s['lifecycle']['discounted']:,} invoices, {s['lifecycle']['seats']:,} subscriptions "
                           f"with several seats, {s['events'].get('SubscriptionPaused', 0):,} pauses and "
                           f"{s['events'].get('SubscriptionResumed', 0):,} resumes ({s['lifecycle']['paused']:,} "
                           f"still paused)")],
        ["payment attempts by outcome", esc(", ".join(f"{k} {v:,}" for k, v in sorted(s["outcomes"].items())))],
        ["attempts by try", esc(", ".join(f"try {k}: {v:,}" for k, v in sorted(s["tries"].items())))],
        ["gateway", esc(f"{sim.get('accepted', 0):,} calls accepted, {sim.get('charged', 0):,} keys charged, "
                         f"{sim.get('replays', 0):,} replays answered from the ledger, {sim.get('timeouts', 0):,} "
                         f"timeouts after charging, {sim.get('errors', 0):,} 5xx, {sim.get('rateLimited', 0):,} "
                         f"429, busiest sliding second {sim.get('maxWindow', 0):,}")],
        ["webhooks", esc(f"{sim.get('webhooksDelivered', 0):,} deliveries accepted (late, out of order, "
                          f"some twice), {s['webhooks']:,} distinct stored, {sim.get('webhooksFailed', 0)} given up")],
        ["events", esc(", ".join(f"{k} {v:,}" for k, v in s["events"].items()))],
        ["run", esc(f"setup {result.setup_seconds:.1f} s, simulation {result.simulate_seconds:.1f} s, "
                     f"total {result.real_seconds:.1f} s; database {result.database_url.split('dbname=')[-1]}")],
        ["wall clock by phase (s)", esc(result.phases.line())],
    ]))
    parts.append(board_html(result))
    parts.append(usage_html(result))
    if result.emails:
        parts.append("<h2>Emails (a sample of customers, one per language, sent to Mailpit)</h2>")
        parts.append(_table(["language", "to", "subject"], [
            [esc(e["locale"]), esc(e["to"]), f'<a href="{esc(e["url"])}">{esc(e["subject"])}</a>']
            for e in result.emails]))
        parts.append(f'<p>All of them: <a href="{esc(result.mailpit_url)}">{esc(result.mailpit_url)}</a> '
                     "(Mailpit's web page, while it runs).</p>")
    parts.append("</body></html>")
    return "".join(parts)


def usage_html(result: RunResult) -> str:
    """The API product (billing.demo.usage): its requests, how they came in, its USAGE invoices."""
    u = result.stats.get("usage")
    if not u:
        return ""
    ans = u.get("answers", {})
    parts = ["<h2>Usage: the API product</h2>",
             f"<p>{u['customers']:,} customers on <code>API_MONTHLY</code> (a monthly fee plus graduated tiers per "
             f"request, the first {API_INCLUDED} free) sent {u['requests']:,} requests as {u['messages']:,} messages "
             f"({u['duplicates']:,} sent twice) through {esc(u['source'])}: {ans.get('accepted', 0):,} accepted, "
             f"{ans.get('duplicate', 0):,} answered duplicate, {ans.get('rejected', 0):,} rejected "
             f"({u['ingest_seconds']:.1f} s of the run waiting for the consumer). Each ended month was rated onto a "
             "USAGE invoice once its grace was over (docs/usage.md); rating calls tried again at the next step: "
             f"{esc(', '.join(f'{k} {v}' for k, v in u.get('rating_retries', {}).items()) or 'none')}.</p>"]
    rows = [[esc(r["currency"]), f"{r['invoices']:,}", f"{r['paid']:,}", f"{r['quantity']:,}",
             major(r["amount"], r["currency"])] for r in u.get("invoices", [])]
    parts.append(_table(["currency", "USAGE invoices", "paid", "requests billed", "amount"], rows, {1, 2, 3, 4}))
    return "".join(parts)


def usage_line(result: RunResult) -> str | None:
    u = result.stats.get("usage")
    if not u:
        return None
    invoices = u.get("invoices", [])
    return (f"  {'usage (API product)':<24} {u['requests']:,} requests of {u['customers']:,} customers via "
            f"{'Kafka' if 'Kafka' in u['source'] else 'the database call'} ({u['duplicates']:,} sent twice); "
            f"{sum(r['invoices'] for r in invoices):,} USAGE invoices: "
            + (", ".join(f"{major(r['amount'], r['currency'])} {r['currency']}" for r in invoices) or "none"))


def _money(value, currency: str) -> str:
    from decimal import Decimal

    from billing.invoices.money import format_amount
    return format_amount(Decimal(value).quantize(Decimal(1)), currency) if value is not None else "-"


def _pct(value) -> str:
    return "-" if value is None else f"{float(value) * 100:.1f}%"


def board_html(result: RunResult) -> str:
    """Invoices as documents and the board figures (docs/invoices.md, docs/reports.md)."""
    s = result.stats
    r = s.get("reports")
    if not r:
        return ""
    d = s["documents"]
    parts = ["<h2>Invoices and board figures</h2>",
             f"<p>{d['finalized']:,} invoices finalized with a gapless number ({d['unfinalized']:,} waiting), "
             f"{d['taxed']:,} with tax added and {d['tax_included']:,} with tax included; credit notes: "
             f"{d['void_notes']:,} for voided invoices, {d['refund_notes']:,} for refunds.</p>"]
    samples = s.get("sample_invoices") or []
    if samples:
        parts.append("<p>Sample invoices: " + ", ".join(
            f"{esc(x['what'])}: <a href='{esc(Path(x['html']).parent.name + '/' + Path(x['html']).name)}'>{esc(x['number'])}</a> "
            f"(<a href='{esc(Path(x['pdf']).parent.name + '/' + Path(x['pdf']).name)}'>PDF</a>)" for x in samples) + "</p>")
    parts.append(f"<h3>MRR and ARR at {result.ended:%Y-%m-%d %H:%M} UTC</h3>")
    parts.append(_table(["currency", "subscriptions", "customers", "MRR", "ARR"],
                        [[x["currency"], f"{x['subscriptions']:,}", f"{x['customers']:,}", _money(x["mrr"], x["currency"]),
                          _money(x["arr"], x["currency"])] for x in r["mrr"]], {1, 2, 3, 4}))
    parts.append("<h3>MRR movements per month</h3>")
    parts.append(_table(["month", "currency", "starting", "new", "expansion", "contraction", "churned", "ending"],
                        [[f"{x['month']:%Y-%m}", x["currency"]] + [_money(x[k], x["currency"]) for k in (
                            "starting_mrr", "new_mrr", "expansion_mrr", "contraction_mrr", "churned_mrr", "ending_mrr")]
                         for x in r["movements"]], {2, 3, 4, 5, 6, 7}))
    parts.append("<h3>Churn per month</h3>")
    parts.append(_table(["month", "currency", "customers at start", "churned", "voluntary", "dunning", "logo churn",
                         "revenue churn", "net revenue churn", "dunning settled", "recovered", "recovery rate"],
                        [[f"{x['month']:%Y-%m}", x["currency"], f"{x['customers_start']:,}", f"{x['customers_churned']:,}",
                          f"{x['churned_voluntary']:,}", f"{x['churned_dunning']:,}", _pct(x["logo_churn_rate"]),
                          _pct(x["revenue_churn_rate"]), _pct(x["net_revenue_churn_rate"]), f"{x['dunning_settled']:,}",
                          f"{x['dunning_recovered']:,}", _pct(x["dunning_recovery_rate"])] for x in r["churn"]],
                        set(range(2, 12))))
    parts.append("<h3>Revenue per month: recognized (straight line) next to cash</h3>")
    parts.append(_table(["month", "currency", "recognized", "invoiced (net)", "tax", "cash collected", "refunded",
                         "net cash"],
                        [[f"{x['month']:%Y-%m}", x["currency"]] + [_money(x[k], x["currency"]) for k in (
                            "recognized", "invoiced", "tax", "cash_collected", "refunded", "net_cash")]
                         for x in r["revenue"]], {2, 3, 4, 5, 6, 7}))
    return "".join(parts)


def board_lines(result: RunResult) -> list[str]:
    s = result.stats
    r = s.get("reports")
    if not r:
        return []
    lines = ["  MRR at the end           " + ", ".join(
        f"{_money(x['mrr'], x['currency'])} (ARR {_money(x['arr'], x['currency'])})" for x in r["mrr"])]
    for x in r["churn"]:
        if x["customers_start"]:
            lines.append(f"  churn {x['month']:%Y-%m} {x['currency']}     logo {_pct(x['logo_churn_rate'])} "
                         f"({x['customers_churned']:,} of {x['customers_start']:,}: {x['churned_voluntary']:,} voluntary, "
                         f"{x['churned_dunning']:,} dunning), revenue {_pct(x['revenue_churn_rate'])}, "
                         f"dunning recovery {_pct(x['dunning_recovery_rate'])}")
    d = s["documents"]
    lines.append(f"  {'invoices':<24} {d['finalized']:,} finalized and numbered, credit notes {d['void_notes']:,} void "
                 f"+ {d['refund_notes']:,} refund; samples: " + ", ".join(
                     x["number"] for x in s.get("sample_invoices") or []))
    return lines


def write_html(result: RunResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(result), encoding="utf-8")


# -- the terminal ------------------------------------------------------------------------------

def terminal_summary(result: RunResult) -> str:
    o = result.options
    s = result.stats
    cap = o.cap
    campaign, renewal = PEAKS
    f = funnel(s)
    sim = result.simulator_stats
    lines = ["", f"billing demo: {o.subscriptions:,} subscriptions, {result.started:%d %b} .. {result.ended:%d %b %Y} "
                 f"simulated in {result.simulate_seconds:.0f} s (total {result.real_seconds:.0f} s)", ""]
    for name, (a, b) in (("campaign day (signups)", campaign), ("renewal day (1 Oct)", renewal)):
        p = peak(s, a, b)
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
    lines += board_lines(result)
    if usage_line(result):
        lines.append(usage_line(result))
    if result.mailpit_url:
        lines.append(f"  {'emails':<24} {len(result.emails)} to five customers, one per language: {result.mailpit_url}")
    lines.append(f"  {'wall clock by phase (s)':<24} {result.phases.line()}")
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
