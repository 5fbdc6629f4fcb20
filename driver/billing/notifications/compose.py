"""One notification row -> one email (subject, text, HTML, attachments) in the customer's language.

Templates are Jinja2 (`templates/email.html` and `email.txt`); a directory given by
BILLING_NOTIFICATION_TEMPLATES overrides them, as a whole (`email.html`) or per kind
(`payment_failed.html`, `payment_failed.txt`): it is searched first. Every template gets
`lang`, `subject`, `brand` (name, logo_url, color), `greeting`, `paragraphs`, `facts` (label,
value pairs), `action` (label, url, or None), `attachment_note`, `manage_url`, `manage_label`,
`note` and `footer`, all already in the customer's language; the HTML one escapes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PackageLoader, StrictUndefined, select_autoescape

from billing.notifications import LEGAL_KINDS
from billing.notifications.i18n import Translator

_COLOR = re.compile(r"^#[0-9a-fA-F]{6}$")


@dataclass(frozen=True)
class Brand:
    name: str
    color: str = "#1a56db"
    logo_url: str | None = None

    @classmethod
    def from_settings(cls, settings) -> "Brand":
        color = getattr(settings, "issuer_color", None) or cls.color
        if not _COLOR.match(color):  # it goes into style attributes: a colour and nothing else
            raise ValueError(f"BILLING_ISSUER_COLOR must look like #1a56db, got {color!r}")
        logo = getattr(settings, "issuer_logo_url", None) or None
        if logo and not logo.startswith("https://"):
            raise ValueError("BILLING_ISSUER_LOGO_URL must be an https:// URL")
        return cls(settings.issuer_name, color, logo)


@dataclass
class Email:
    to: str
    subject: str
    text: str
    html: str
    locale: str
    kind: str = ""
    attachments: list[tuple[str, str, bytes]] = field(default_factory=list)  # (filename, mime type, bytes)


def environment(override_dir: str | Path | None = None) -> Environment:
    loaders = [FileSystemLoader(str(override_dir))] if override_dir else []
    loaders.append(PackageLoader("billing.notifications", "templates"))
    return Environment(loader=ChoiceLoader(loaders), autoescape=select_autoescape(["html"]),
                       undefined=StrictUndefined, keep_trailing_newline=True)


def _number(doc: dict | None, data: dict) -> str:
    if doc and doc.get("number"):
        return doc["number"]
    return data.get("number") or f"#{data.get('invoiceId')}"


def content(kind: str, data: dict, t: Translator, *, issuer: str, zone: str | None, doc: dict | None,
            links: dict[str, str]) -> dict:
    """The localized words of one email: subject, paragraphs, facts, action (label and url)."""
    key = kind.lower()
    currency = (data.get("currency") or (doc or {}).get("currency") or "").strip()
    money = (lambda minor: t.money(minor, currency)) if currency else str
    amount = money(data["amount"]) if data.get("amount") is not None else ""
    facts: list[tuple[str, str]] = []
    paragraphs: list[str] = []
    subject_values: dict = {}
    action_url = links["manage"]
    if kind == "INVOICE_ISSUED":
        number = _number(doc, data)
        amount = money(doc["amountDue"]) if doc else amount
        subject_values = {"number": number, "issuer": issuer}
        paragraphs.append(t("invoice_issued.intro", number=number, amount=amount))
        facts += [(t("label.invoice"), number), (t("label.amount"), amount)]
        if data.get("periodStart") and data.get("periodEnd"):
            facts.append((t("label.period"), t("label.period_value", start=t.date(data["periodStart"], zone),
                                                end=t.date(data["periodEnd"], zone))))
        action_url = links["invoices"]
    elif kind == "PAYMENT_SUCCEEDED":
        number = _number(doc, data)
        subject_values = {"amount": amount}
        paragraphs.append(t("payment_succeeded.intro", amount=amount, number=number))
        facts += [(t("label.invoice"), number), (t("label.amount"), amount),
                  (t("label.paid_on"), t.date(data.get("paidAt"), zone))]
        action_url = links["invoices"]
    elif kind == "PAYMENT_FAILED":
        number = _number(doc, data)
        subject_values = {"amount": amount}
        paragraphs.append(t("payment_failed.intro", amount=amount, number=number))
        if data.get("nextAttemptAt") and not data.get("final") and not data.get("hardDecline"):
            paragraphs.append(t("payment_failed.next", date=t.date(data["nextAttemptAt"], zone)))
            facts.append((t("label.next_attempt"), t.date(data["nextAttemptAt"], zone)))
        else:
            paragraphs.append(t("payment_failed.final"))
        facts[:0] = [(t("label.invoice"), number), (t("label.amount"), amount)]
        action_url = links["payment_methods"]
    elif kind == "ACTION_REQUIRED":
        number = _number(doc, data)
        subject_values = {"amount": amount}
        paragraphs.append(t("action_required.intro", amount=amount, number=number))
        facts += [(t("label.invoice"), number), (t("label.amount"), amount)]
        action_url = links["pay"]
    elif kind == "CARD_EXPIRING":
        brand, last4 = (data.get("brand") or "card").title(), data.get("last4") or "????"
        renewal = t.date(data.get("renewalAt"), zone)
        subject_values = {"last4": last4}
        paragraphs.append(t("card_expiring.intro", brand=brand, last4=last4, date=renewal))
        facts += [(t("label.card"), t("label.card_value", brand=brand, last4=last4)),
                  (t("label.expires"), f"{int(data.get('expMonth') or 0):02d}/{data.get('expYear')}"),
                  (t("label.renewal_date"), renewal)]
        action_url = links["payment_methods"]
    elif kind == "TRIAL_ENDING":
        end = t.date(data.get("trialEnd"), zone)
        subject_values = {"date": end}
        paragraphs.append(t("trial_ending.intro", plan=data.get("planCode"), date=end))
        facts += [(t("label.plan"), data.get("planCode")), (t("label.trial_end"), end)]
    elif kind == "UPCOMING_RENEWAL":
        when = t.date(data.get("renewalAt"), zone)
        subject_values = {"date": when}
        paragraphs.append(t("upcoming_renewal.intro", plan=data.get("planCode"), date=when, amount=amount))
        facts += [(t("label.plan"), data.get("planCode")), (t("label.renewal_date"), when), (t("label.amount"), amount)]
    elif kind == "SUBSCRIPTION_CANCELED":
        subject_values = {"plan": data.get("planCode")}
        paragraphs.append(t("subscription_canceled.intro", plan=data.get("planCode")))
        facts.append((t("label.plan"), data.get("planCode")))
        end = data.get("canceledAt") or data.get("currentPeriodEnd")
        if end:
            facts.append((t("label.ends_on"), t.date(end, zone)))
    elif kind == "REFUND_ISSUED":
        number = _number(doc, data)
        subject_values = {"amount": amount}
        paragraphs.append(t("refund_issued.intro", amount=amount, number=number))
        facts += [(t("label.invoice"), number), (t("label.amount"), amount)]
        action_url = links["invoices"]
    else:
        raise ValueError(f"unknown notification kind {kind!r}")
    return {"subject": t(f"{key}.subject", **subject_values), "paragraphs": paragraphs, "facts": facts,
            "action": {"label": t(f"{key}.action"), "url": action_url} if f"{key}.action" in t.messages else None}


def compose(row: dict, *, brand: Brand, env: Environment, links: dict[str, str], doc: dict | None = None,
            pdf: bytes | None = None, zone: str | None = None) -> Email:
    """The email of one claimed notification (`billing.claim_notifications` row)."""
    t = Translator.get(row.get("locale"))
    kind = row["kind"]
    words = content(kind, row["data"], t, issuer=brand.name, zone=zone, doc=doc, links=links)
    name = row.get("customer_name")
    context = {
        "lang": t.tag, "subject": words["subject"], "brand": brand,
        "greeting": t("email.greeting_name", name=name) if name else t("email.greeting"),
        "paragraphs": words["paragraphs"], "facts": words["facts"], "action": words["action"],
        "attachment_note": t("email.attachment") if pdf else None,
        "manage_url": links["manage"], "manage_label": t("email.manage"),
        "note": t("email.legal") if kind in LEGAL_KINDS else t("email.preferences"),
        "footer": t("email.footer", issuer=brand.name),
    }
    base = kind.lower()
    html = env.select_template([f"{base}.html", "email.html"]).render(context)
    text = env.select_template([f"{base}.txt", "email.txt"]).render(context)
    attachments = []
    if pdf:
        attachments.append((f"invoice-{_number(doc, row['data'])}.pdf", "application/pdf", pdf))
    return Email(row["recipient"], words["subject"], text, html, t.tag, kind, attachments)
