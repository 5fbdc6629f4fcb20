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
CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
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


class _Words:
    """Labels, amounts and dates: ISO dates and '12,345.67 EUR' without a locale (the operator's
    documents, as always), the customer's language through Babel with one (docs/customers.md)."""

    def __init__(self, locale: str | None, zone: str | None) -> None:
        from billing.notifications.i18n import Translator

        self.t = Translator.get(locale or "en")
        self.localized = locale is not None
        self.zone = zone

    def __call__(self, key: str, **values) -> str:
        return self.t(key, **values)

    def money(self, minor, currency: str) -> str:
        return self.t.money(minor, currency) if self.localized else format_amount(minor, currency)

    def date(self, text: str | None) -> str:
        if not self.localized:
            return _date(text, self.zone)
        return self.t.date(text, self.zone) if text else ""


def _bill_to_lines(bill_to: dict, w: "_Words | None" = None) -> list[str]:
    w = w or _Words(None, None)
    lines = [bill_to.get("name") or w("doc.customer", id=bill_to.get("customerId"))]
    lines += [x for x in (bill_to.get("address") or "").splitlines() if x.strip()]
    city = " ".join(x for x in (bill_to.get("postalCode"), bill_to.get("city")) if x)
    if city:
        lines.append(city)
    country = " ".join(x for x in (bill_to.get("region"), bill_to.get("country")) if x)
    if country:
        lines.append(country)
    if bill_to.get("taxId"):
        lines.append(w("doc.tax_id", tax_id=bill_to["taxId"]))
    if bill_to.get("email"):
        lines.append(bill_to["email"])
    return lines


def view(doc: dict, issuer: Issuer, locale: str | None = None) -> dict:
    """What both renderings print, already formatted (in `locale` when given: en, pt-BR, es, de, zh-CN)."""
    cur = doc["currency"]
    zone = doc.get("timezone")
    w = _Words(locale, zone)
    fmt = lambda minor: w.money(minor, cur)  # noqa: E731
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
    totals = [(w("doc.subtotal"), fmt(doc["subtotal"]))]
    for line in doc["lines"]:
        # Exclusive tax lines add to the total; a line at 0 without a rate (exempt, reverse
        # charge, no tax) says so among the lines only.
        if line["kind"] == "TAX" and not line.get("tax_inclusive") and (line["amount"] or line.get("tax_rate_code")):
            totals.append((line["description"], fmt(line["amount"])))
    totals.append((w("doc.total"), fmt(doc["total"])))
    if doc["creditApplied"]:
        totals.append((w("doc.credit_applied"), fmt(-doc["creditApplied"])))
    totals.append((w("doc.amount_due"), fmt(doc["amountDue"])))
    notes = []
    if doc["taxIncluded"]:
        notes.append(w("doc.tax_included", amount=fmt(doc["taxIncluded"])))
    # A change's invoice taxes each line at its own rate (house8): its breakdown, one entry per rate
    # and jurisdiction with its base (a reversal's negative, at the rate it was sold at).
    taxes = doc.get("taxes") or []
    if any(t.get("base") != doc["subtotal"] for t in taxes):
        for t in taxes:
            place = "-".join(x for x in (t.get("country"), t.get("region")) if x)
            notes.append(w("doc.tax_entry", name=" ".join(x for x in (t.get("name") or "", place) if x),
                           rate=f"{(t.get('rateBp') or 0) / 100:g}", base=fmt(t["base"]), amount=fmt(t["amount"])))
    treatment = (doc.get("billTo") or {}).get("taxStatus")
    if treatment == "REVERSE_CHARGE":
        notes.append(w("doc.reverse_charge"))
    elif treatment == "EXEMPT":
        notes.append(w("doc.exempt"))
    status = {"PAID": w("doc.paid_on", date=w.date(doc.get("paidAt"))), "VOID": w("doc.void"),
              "FAILED": w("doc.written_off"), "OPEN": w("doc.due"), "REVIEW": w("doc.review")}.get(doc["status"], doc["status"])
    if doc.get("amountRefunded"):
        status = w("doc.refunded", status=status, amount=fmt(doc["amountRefunded"]))
    return {
        "lang": w.t.tag,
        "labels": {k: w(f"doc.{k}") for k in ("from", "bill_to", "lines", "description", "qty", "unit_price",
                                               "amount", "credit_notes")},
        "title": w("doc.invoice", number=doc["number"]) if doc.get("number") else w("doc.draft", id=doc["id"]),
        "number": doc.get("number"),
        "issuer": {"name": issuer.name, "lines": [x for x in issuer.address.splitlines() if x.strip()]
                   + ([w("doc.tax_id", tax_id=issuer.tax_id)] if issuer.tax_id else []) + ([issuer.email] if issuer.email else [])},
        "bill_to": _bill_to_lines(doc.get("billTo") or {}, w),
        "facts": [(w("doc.invoice_date"), w.date(doc.get("issuedAt"))), (w("doc.service_period"),
                   w("doc.period_value", start=w.date(doc.get("periodStart")), end=w.date(doc.get("periodEnd")))),
                  (w("doc.currency"), cur), (w("doc.status"), status)],
        "lines": lines, "totals": totals, "notes": notes,
        "credit_notes": [{"number": n["number"], "reason": w("doc.reason_void") if n["reason"] == "VOID" else w("doc.reason_refund"),
                          "date": w.date(n.get("issuedAt")), "total": fmt(n["total"]),
                          "lines": [(x["description"], fmt(x["amount"])) for x in (n.get("lines") or [])]}
                         for n in doc.get("creditNotes") or []],
        "credit_note_titles": [w("doc.credit_note", number=n["number"],
                                 reason=w("doc.reason_void") if n["reason"] == "VOID" else w("doc.reason_refund"),
                                 date=w.date(n.get("issuedAt")), total=fmt(n["total"]))
                               for n in doc.get("creditNotes") or []],
    }


_HTML = Environment(autoescape=select_autoescape(default=True, default_for_string=True)).from_string("""<!doctype html>
<html lang="{{ v.lang }}"><head><meta charset="utf-8"><title>{{ v.title }}</title>
<style>
body { font-family: "DejaVu Sans", "WenQuanYi Micro Hei", "Noto Sans CJK SC", Helvetica, Arial, sans-serif; font-size: 11pt; color: #222; margin: 2em; }
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
  <div><div class="label">{{ v.labels.from }}</div><strong>{{ v.issuer.name }}</strong>{% for l in v.issuer.lines %}<br>{{ l }}{% endfor %}</div>
  <div><div class="label">{{ v.labels.bill_to }}</div><strong>{{ v.bill_to[0] }}</strong>{% for l in v.bill_to[1:] %}<br>{{ l }}{% endfor %}</div>
</div>
<table class="facts">{% for k, val in v.facts %}<tr><td>{{ k }}</td><td>{{ val }}</td></tr>{% endfor %}</table>
<h2>{{ v.labels.lines }}</h2>
<table class="lines"><thead><tr><th>{{ v.labels.description }}</th><th class="num">{{ v.labels.qty }}</th><th class="num">{{ v.labels.unit_price }}</th><th class="num">{{ v.labels.amount }}</th></tr></thead>
<tbody>{% for l in v.lines %}<tr{% if l.included %} class="included"{% endif %}><td>{{ l.description }}</td><td class="num">{{ l.quantity }}</td><td class="num">{{ l.unit }}</td><td class="num">{{ l.amount }}</td></tr>{% endfor %}</tbody></table>
<table class="totals">{% for k, val in v.totals %}<tr><td>{{ k }}</td><td class="num">{{ val }}</td></tr>{% endfor %}</table>
{% if v.notes %}<div class="notes">{% for n in v.notes %}<p>{{ n }}</p>{% endfor %}</div>{% endif %}
{% if v.credit_notes %}<h2>{{ v.labels.credit_notes }}</h2>
{% for n in v.credit_notes %}<p><strong>{{ v.credit_note_titles[loop.index0] }}</strong></p>
<table class="lines">{% for d, a in n.lines %}<tr><td>{{ d }}</td><td class="num">{{ a }}</td></tr>{% endfor %}</table>{% endfor %}{% endif %}
</body></html>
""")


def render_html(doc: dict, issuer: Issuer, locale: str | None = None) -> str:
    return _HTML.render(v=view(doc, issuer, locale))


def render_pdf(doc: dict, issuer: Issuer, locale: str | None = None) -> bytes:
    from fpdf import FPDF
    from fpdf.enums import XPos, YPos

    v = view(doc, issuer, locale)
    pdf = FPDF(format="A4", unit="mm")
    pdf.set_title(v["title"])
    pdf.set_author(issuer.name)
    pdf.set_creator("billing")
    issued = doc.get("issuedAt")
    if issued:  # the same document gives the same bytes
        pdf.set_creation_date(datetime.fromisoformat(issued.replace("Z", "+00:00")).astimezone(timezone.utc))
    if locale == "zh-CN" and CJK_FONT.exists():
        # Chinese: WenQuanYi Micro Hei (Debian's fonts-wqy-microhei, scripts/services/fonts.sh), which
        # has Latin glyphs too; it has no bold face, so bold is the same face.
        pdf.add_font("doc", "", str(CJK_FONT), collection_font_number=0)
        pdf.add_font("doc", "B", str(CJK_FONT), collection_font_number=0)
        family, clean = "doc", (lambda s: s)
    elif (DEJAVU / "DejaVuSans.ttf").exists():
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
    text(v["labels"]["from"].upper(), 8)
    text(v["issuer"]["name"], 10, "B")
    for line in v["issuer"]["lines"]:
        text(line)
    left_end = pdf.get_y()
    pdf.set_xy(pdf.l_margin + w / 2, top)
    for i, line in enumerate([v["labels"]["bill_to"].upper()] + v["bill_to"]):
        pdf.set_x(pdf.l_margin + w / 2)
        pdf.set_font(family, "B" if i == 1 else "", 8 if i == 0 else 10)
        pdf.cell(w / 2, 5.5, clean(line), new_x=XPos.LMARGIN, new_y=YPos.NEXT)
    pdf.set_y(max(left_end, pdf.get_y()) + 4)
    for k, val in v["facts"]:
        text(k, 10, width=40, ln=False)
        text(val)
    pdf.ln(4)
    cols = (w - 90, 15, 35, 40)
    for title, cw, align in zip((v["labels"]["description"], v["labels"]["qty"], v["labels"]["unit_price"], v["labels"]["amount"]), cols, "LRRR"):
        pdf.set_font(family, "B", 10)
        pdf.cell(cw, 7, clean(title), border="B", align=align)
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
        text(v["labels"]["credit_notes"], 12, "B", h=7)
        for title, n in zip(v["credit_note_titles"], v["credit_notes"]):
            text(title, 10, "B")
            for d, a in n["lines"]:
                text(d, 9, width=w - 45, ln=False)
                text(a, 9, width=45, align="R")
    return bytes(pdf.output())
