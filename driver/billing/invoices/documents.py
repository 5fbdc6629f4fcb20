"""The invoice document (`billing.get_invoice_document`) as HTML and as PDF.

Both renderings show the same things: the issuer (configuration: BILLING_ISSUER_*), the number
(or "draft" before finalization), the bill-to details as finalized, the lines, the totals
(subtotal, exclusive taxes, total, credit applied, amount due; included taxes noted), the status
and the credit notes. Amounts are formatted with the currency's minor unit (billing.invoices.money).

PDF: fpdf2, pure Python (bench/pdf measured it against WeasyPrint on Debian's Pango; docs/invoices.md
has the figures). It draws with DejaVu Sans (Debian's fonts-dejavu-core) when present, so any
name prints; without it, the PDF core font Helvetica, and characters outside Latin-1 become "?".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jinja2 import Environment, select_autoescape

from billing.invoices.money import format_amount

DEJAVU = Path("/usr/share/fonts/truetype/dejavu")
# fontTools (fpdf2's font subsetter) logs every table it touches at INFO.
logging.getLogger("fontTools").setLevel(logging.WARNING)


@dataclass(frozen=True)
class Issuer:
    name: str
    address: str
    tax_id: str | None = None
    email: str | None = None

    @classmethod
    def from_settings(cls, settings) -> "Issuer":
        return cls(settings.issuer_name, settings.issuer_address, settings.issuer_tax_id, settings.issuer_email)


def _date(text: str | None, zone: str | None = None) -> str:
    """The local date of an instant of the document, in the subscription's zone when known."""
    if not text:
        return ""
    if zone:
        try:
            instant = datetime.fromisoformat(text.replace("Z", "+00:00"))
            return instant.astimezone(ZoneInfo(zone)).date().isoformat()
        except (ValueError, ZoneInfoNotFoundError):
            pass
    return text[:10]


def _bill_to_lines(bill_to: dict) -> list[str]:
    lines = [bill_to.get("name") or f"Customer {bill_to.get('customerId')}"]
    lines += [x for x in (bill_to.get("address") or "").splitlines() if x.strip()]
    city = " ".join(x for x in (bill_to.get("postalCode"), bill_to.get("city")) if x)
    if city:
        lines.append(city)
    country = " ".join(x for x in (bill_to.get("region"), bill_to.get("country")) if x)
    if country:
        lines.append(country)
    if bill_to.get("taxId"):
        lines.append(f"Tax id: {bill_to['taxId']}")
    if bill_to.get("email"):
        lines.append(bill_to["email"])
    return lines


def view(doc: dict, issuer: Issuer) -> dict:
    """What both renderings print, already formatted."""
    cur = doc["currency"]
    fmt = lambda minor: format_amount(minor, cur)  # noqa: E731
    lines = []
    for line in doc["lines"]:
        if line["kind"] == "CREDIT":
            continue
        lines.append({
            "description": line["description"],
            "quantity": "" if line.get("quantity") is None else str(line["quantity"]),
            "unit": "" if line.get("unit_amount") is None else fmt(line["unit_amount"]),
            "amount": fmt(line["amount"]),
            "included": bool(line.get("tax_inclusive")),
        })
    totals = [("Subtotal", fmt(doc["subtotal"]))]
    for line in doc["lines"]:
        # Exclusive tax lines add to the total; a line at 0 without a rate (exempt, reverse
        # charge, no tax) says so among the lines only.
        if line["kind"] == "TAX" and not line.get("tax_inclusive") and (line["amount"] or line.get("tax_rate_code")):
            totals.append((line["description"], fmt(line["amount"])))
    totals.append(("Total", fmt(doc["total"])))
    if doc["creditApplied"]:
        totals.append(("Customer credit applied", fmt(-doc["creditApplied"])))
    totals.append(("Amount due", fmt(doc["amountDue"])))
    notes = []
    if doc["taxIncluded"]:
        notes.append(f"Prices include {fmt(doc['taxIncluded'])} of tax.")
    treatment = (doc.get("billTo") or {}).get("taxStatus")
    if treatment == "REVERSE_CHARGE":
        notes.append("Reverse charge: the recipient accounts for the tax.")
    elif treatment == "EXEMPT":
        notes.append("The customer is exempt from tax.")
    zone = doc.get("timezone")
    status = {"PAID": f"Paid on {_date(doc.get('paidAt'), zone)}", "VOID": "Void (see the credit note)",
              "FAILED": "Unpaid (written off)", "OPEN": "Due", "REVIEW": "Payment under review"}.get(doc["status"], doc["status"])
    if doc.get("amountRefunded"):
        status += f"; refunded {fmt(doc['amountRefunded'])}"
    return {
        "title": f"Invoice {doc['number']}" if doc.get("number") else f"Invoice (draft, not yet finalized; id {doc['id']})",
        "number": doc.get("number"),
        "issuer": {"name": issuer.name, "lines": [x for x in issuer.address.splitlines() if x.strip()]
                   + ([f"Tax id: {issuer.tax_id}"] if issuer.tax_id else []) + ([issuer.email] if issuer.email else [])},
        "bill_to": _bill_to_lines(doc.get("billTo") or {}),
        "facts": [("Invoice date", _date(doc.get("issuedAt"), zone)), ("Service period",
                   f"{_date(doc.get('periodStart'), zone)} to {_date(doc.get('periodEnd'), zone)}"),
                  ("Currency", cur), ("Status", status)],
        "lines": lines, "totals": totals, "notes": notes,
        "credit_notes": [{"number": n["number"], "reason": "Void" if n["reason"] == "VOID" else "Refund",
                          "date": _date(n.get("issuedAt"), zone), "total": fmt(n["total"]),
                          "lines": [(x["description"], fmt(x["amount"])) for x in (n.get("lines") or [])]}
                         for n in doc.get("creditNotes") or []],
    }


_HTML = Environment(autoescape=select_autoescape(default=True, default_for_string=True)).from_string("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ v.title }}</title>
<style>
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; font-size: 11pt; color: #222; margin: 2em; }
h1 { font-size: 18pt; margin: 0 0 .5em; }
.parties { display: flex; justify-content: space-between; margin-bottom: 1.5em; }
.parties div { width: 45%; } .label { color: #666; font-size: 9pt; text-transform: uppercase; }
table { border-collapse: collapse; width: 100%; } th, td { padding: .3em .5em; text-align: left; }
th { border-bottom: 1px solid #999; } td.num, th.num { text-align: right; white-space: nowrap; }
.lines td { border-bottom: 1px solid #eee; } .included { color: #666; }
.totals { width: 50%; margin-left: 50%; margin-top: 1em; } .totals tr:last-child td { font-weight: bold; border-top: 1px solid #999; }
.facts td:first-child { color: #666; } .notes { margin-top: 1em; color: #444; }
</style></head><body>
<h1>{{ v.title }}</h1>
<div class="parties">
  <div><div class="label">From</div><strong>{{ v.issuer.name }}</strong>{% for l in v.issuer.lines %}<br>{{ l }}{% endfor %}</div>
  <div><div class="label">Bill to</div><strong>{{ v.bill_to[0] }}</strong>{% for l in v.bill_to[1:] %}<br>{{ l }}{% endfor %}</div>
</div>
<table class="facts">{% for k, val in v.facts %}<tr><td>{{ k }}</td><td>{{ val }}</td></tr>{% endfor %}</table>
<h2>Lines</h2>
<table class="lines"><thead><tr><th>Description</th><th class="num">Qty</th><th class="num">Unit price</th><th class="num">Amount</th></tr></thead>
<tbody>{% for l in v.lines %}<tr{% if l.included %} class="included"{% endif %}><td>{{ l.description }}</td><td class="num">{{ l.quantity }}</td><td class="num">{{ l.unit }}</td><td class="num">{{ l.amount }}</td></tr>{% endfor %}</tbody></table>
<table class="totals">{% for k, val in v.totals %}<tr><td>{{ k }}</td><td class="num">{{ val }}</td></tr>{% endfor %}</table>
{% if v.notes %}<div class="notes">{% for n in v.notes %}<p>{{ n }}</p>{% endfor %}</div>{% endif %}
{% if v.credit_notes %}<h2>Credit notes</h2>
{% for n in v.credit_notes %}<p><strong>Credit note {{ n.number }}</strong> ({{ n.reason }}, {{ n.date }}): {{ n.total }}</p>
<table class="lines">{% for d, a in n.lines %}<tr><td>{{ d }}</td><td class="num">{{ a }}</td></tr>{% endfor %}</table>{% endfor %}{% endif %}
</body></html>
""")


def render_html(doc: dict, issuer: Issuer) -> str:
    return _HTML.render(v=view(doc, issuer))


def render_pdf(doc: dict, issuer: Issuer) -> bytes:
    from fpdf import FPDF
    from fpdf.enums import XPos, YPos

    v = view(doc, issuer)
    pdf = FPDF(format="A4", unit="mm")
    pdf.set_title(v["title"])
    pdf.set_author(issuer.name)
    pdf.set_creator("billing")
    issued = doc.get("issuedAt")
    if issued:  # the same document gives the same bytes
        pdf.set_creation_date(datetime.fromisoformat(issued.replace("Z", "+00:00")).astimezone(timezone.utc))
    if (DEJAVU / "DejaVuSans.ttf").exists():
        pdf.add_font("doc", "", str(DEJAVU / "DejaVuSans.ttf"))
        pdf.add_font("doc", "B", str(DEJAVU / "DejaVuSans-Bold.ttf"))
        family, clean = "doc", (lambda s: s)
    else:
        family, clean = "helvetica", (lambda s: s.encode("latin-1", "replace").decode("latin-1"))
    pdf.set_auto_page_break(True, margin=15)
    pdf.add_page()
    w = pdf.epw

    def text(s: str, size: float = 10, style: str = "", width: float = 0, align: str = "L", ln: bool = True,
             h: float = 5.5) -> None:
        pdf.set_font(family, style, size)
        pdf.cell(width or w, h, clean(s), align=align,
                 new_x=XPos.LMARGIN if ln else XPos.RIGHT, new_y=YPos.NEXT if ln else YPos.TOP)

    text(v["title"], 16, "B", h=9)
    pdf.ln(2)
    top = pdf.get_y()
    text("FROM", 8)
    text(v["issuer"]["name"], 10, "B")
    for line in v["issuer"]["lines"]:
        text(line)
    left_end = pdf.get_y()
    pdf.set_xy(pdf.l_margin + w / 2, top)
    for i, line in enumerate(["BILL TO"] + v["bill_to"]):
        pdf.set_x(pdf.l_margin + w / 2)
        pdf.set_font(family, "B" if i == 1 else "", 8 if i == 0 else 10)
        pdf.cell(w / 2, 5.5, clean(line), new_x=XPos.LMARGIN, new_y=YPos.NEXT)
    pdf.set_y(max(left_end, pdf.get_y()) + 4)
    for k, val in v["facts"]:
        text(k, 10, width=40, ln=False)
        text(val)
    pdf.ln(4)
    cols = (w - 90, 15, 35, 40)
    for title, cw, align in zip(("Description", "Qty", "Unit price", "Amount"), cols, "LRRR"):
        pdf.set_font(family, "B", 10)
        pdf.cell(cw, 7, title, border="B", align=align)
    pdf.ln(7)
    for line in v["lines"]:
        pdf.set_font(family, "", 9.5)
        for value, cw, align in zip((line["description"], line["quantity"], line["unit"], line["amount"]), cols, "LRRR"):
            pdf.cell(cw, 6.5, clean(value), align=align)
        pdf.ln(6.5)
    pdf.ln(3)
    for i, (k, val) in enumerate(v["totals"]):
        last = i == len(v["totals"]) - 1
        pdf.set_x(pdf.l_margin + w / 2)
        pdf.set_font(family, "B" if last else "", 10)
        pdf.cell(w / 2 - 45, 6.5, clean(k), border="T" if last else "")
        pdf.cell(45, 6.5, clean(val), align="R", border="T" if last else "", new_x=XPos.LMARGIN, new_y=YPos.NEXT)
    if v["notes"]:
        pdf.ln(3)
        for note in v["notes"]:
            text(note, 9)
    if v["credit_notes"]:
        pdf.ln(4)
        text("Credit notes", 12, "B", h=7)
        for n in v["credit_notes"]:
            text(f"Credit note {n['number']} ({n['reason']}, {n['date']}): {n['total']}", 10, "B")
            for d, a in n["lines"]:
                text(d, 9, width=w - 45, ln=False)
                text(a, 9, width=45, align="R")
    return bytes(pdf.output())
