"""Emails to customers without services: every catalog complete (a missing translation fails here),
Babel's formats, every kind composed in every language, templates overridable, the brand and the
SMTP settings refused when unsafe, portal link tokens."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from billing.notifications import KINDS, LEGAL_KINDS
from billing.notifications.compose import Brand, compose, environment
from billing.notifications.i18n import CATALOG_DIR, LOCALES, Translator, catalog, placeholders
from billing.notifications.mailer import SmtpConfigError, SmtpTarget, build_message, message_id_for
from billing.notifications.links import login_url, new_token, parse_token, token_hash

REPO = Path(__file__).resolve().parents[3]
LINKS = {"manage": "https://b.example/portal/login?token=t", "invoices": "https://b.example/portal/login?token=t&next=/invoices",
         "payment_methods": "https://b.example/portal/login?token=t&next=/payment-methods",
         "pay": "https://b.example/portal/login?token=t&next=/invoices/9/pay"}
DATA = {"invoiceId": 9, "customerId": 4, "amount": 123456, "currency": "BRL", "number": "2026-000009",
        "periodStart": "2026-03-01T03:00:00Z", "periodEnd": "2026-04-01T03:00:00Z", "paidAt": "2026-03-01T03:00:05Z",
        "nextAttemptAt": "2026-03-04T03:00:00Z", "final": False, "hardDecline": False, "brand": "visa", "last4": "4242",
        "expMonth": 3, "expYear": 2026, "renewalAt": "2026-04-01T03:00:00Z", "planCode": "PRO",
        "trialEnd": "2026-03-05T03:00:00Z", "canceledAt": "2026-03-02T00:00:00Z"}


def test_every_catalog_has_every_message_with_the_same_placeholders():
    reference = catalog("en")
    assert sorted(p.stem for p in CATALOG_DIR.glob("*.json")) == sorted(LOCALES)
    for tag in LOCALES:
        messages = json.loads((CATALOG_DIR / f"{tag}.json").read_text(encoding="utf-8"))
        assert set(messages) == set(reference), (tag, set(reference) ^ set(messages))
        for key, text in reference.items():
            assert placeholders(messages[key]) == placeholders(text), (tag, key)
            assert messages[key].strip(), (tag, key)
        if tag != "en":  # translated, not copied (names and numbers aside)
            same = [k for k in reference if messages[k] == reference[k] and placeholders(reference[k]) != {*()}
                    and not reference[k].startswith("{") and k not in ("doc.subtotal", "doc.total", "doc.status", "label.plan")]
            assert not same, (tag, same)


def test_every_kind_has_its_messages_and_the_sql_list_matches():
    reference = catalog("en")
    for kind in KINDS:
        assert f"{kind.lower()}.subject" in reference and f"{kind.lower()}.intro" in reference
    sql = (REPO / "db" / "functions" / "69_notifications.sql").read_text()
    for kind in KINDS:
        assert f"('{kind}', {'true' if kind in LEGAL_KINDS else 'false'})" in sql
    assert "ARRAY['en', 'pt-BR', 'es', 'de', 'zh-CN']" in sql and LOCALES == ("en", "pt-BR", "es", "de", "zh-CN")


@pytest.mark.parametrize("tag,minor,currency,expected", [
    ("pt-BR", 123456, "BRL", "R$\xa01.234,56"), ("de", 123456, "EUR", "1.234,56\xa0€"), ("es", 123456, "EUR", "1.234,56\xa0€"),
    ("en", 1235, "JPY", "¥1,235"), ("en", 123456, "USD", "$1,234.56"), ("zh-CN", 123450, "CNY", "¥1,234.50"),
    ("en", 1234, "KWD", "KWD1.234"), ("de", -500, "EUR", "-5,00\xa0€"),
])
def test_amounts_in_each_language(tag, minor, currency, expected):
    assert Translator.get(tag).money(minor, currency) == expected


def test_dates_in_each_language_and_zone():
    instant = datetime(2026, 12, 5, 1, 30, tzinfo=timezone.utc)  # still December 4 in São Paulo
    assert Translator.get("en").date(instant) == "December 5, 2026"
    assert Translator.get("pt-BR").date(instant, "America/Sao_Paulo") == "4 de dezembro de 2026"
    assert Translator.get("de").date("2026-12-05T01:30:00Z") == "5. Dezember 2026"
    assert Translator.get("es").date(instant) == "5 de diciembre de 2026"
    assert Translator.get("zh-CN").date(instant) == "2026年12月5日"
    assert Translator.get("xx").tag == "en"  # an unknown locale falls back to English


@pytest.mark.parametrize("tag", LOCALES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_composes_in_every_language(kind, tag):
    row = {"kind": kind, "data": dict(DATA), "locale": tag, "customer_name": "Ana <b>", "recipient": "a@example.com"}
    email = compose(row, brand=Brand("Acme & Co", "#0a7d4f"), env=environment(), links=LINKS, zone="America/Sao_Paulo",
                    pdf=b"%PDF-1.4" if kind == "INVOICE_ISSUED" else None)
    t = Translator.get(tag)
    assert email.subject and email.locale == tag and email.kind == kind
    assert t("email.manage") in email.text and t("email.footer", issuer="Acme & Co") in email.text
    assert "Ana &lt;b&gt;" in email.html and "Ana <b>" in email.text  # escaped in HTML only
    assert "Acme &amp; Co" in email.html
    assert (t("email.legal") if kind in LEGAL_KINDS else t("email.preferences")) in email.text
    if kind in ("PAYMENT_SUCCEEDED", "PAYMENT_FAILED", "ACTION_REQUIRED", "REFUND_ISSUED"):
        assert t.money(123456, "BRL") in email.subject + email.text
    if kind == "INVOICE_ISSUED":
        assert email.attachments[0][:2] == ("invoice-2026-000009.pdf", "application/pdf")
    msg = build_message(email, sender="billing@acme.example", sender_name="Acme & Co",
                        message_id=message_id_for(4, 17, "billing@acme.example"))
    assert msg["Content-Language"] == tag and msg["Message-ID"] == "<notification.4.17@acme.example>"
    assert msg["X-Billing-Notification"] == kind


def test_a_failed_payment_says_when_it_is_tried_again_or_that_it_is_not():
    t = Translator.get("de")
    soft = compose({"kind": "PAYMENT_FAILED", "data": dict(DATA, currency="EUR"), "locale": "de", "recipient": "a@x.de"},
                   brand=Brand("A"), env=environment(), links=LINKS, zone="Europe/Berlin")
    assert t("payment_failed.next", date="4. März 2026") in soft.text and "next=/payment-methods" in soft.text
    hard = compose({"kind": "PAYMENT_FAILED", "data": dict(DATA, hardDecline=True), "locale": "de", "recipient": "a@x.de"},
                   brand=Brand("A"), env=environment(), links=LINKS)
    assert t("payment_failed.final") in hard.text


def test_templates_are_overridden_from_a_directory_per_kind(tmp_path):
    (tmp_path / "payment_failed.txt").write_text("CUSTOM {{ subject }} / {{ action.url }}\n")
    env = environment(tmp_path)
    row = {"kind": "PAYMENT_FAILED", "data": dict(DATA), "locale": "es", "recipient": "a@x.es"}
    email = compose(row, brand=Brand("A"), env=env, links=LINKS)
    assert email.text.startswith("CUSTOM Tu pago de") and LINKS["payment_methods"] in email.text
    assert email.html.startswith("<!doctype html>")  # the HTML one is still the package's
    other = compose(dict(row, kind="REFUND_ISSUED"), brand=Brand("A"), env=env, links=LINKS)
    assert not other.text.startswith("CUSTOM")


def test_brand_and_smtp_settings_refuse_what_is_unsafe():
    class S:
        issuer_name, issuer_color, issuer_logo_url = "A", "red;background:url(x)", None
    with pytest.raises(ValueError, match="BILLING_ISSUER_COLOR"):
        Brand.from_settings(S)
    S.issuer_color, S.issuer_logo_url = "#aabbcc", "http://logo.example/a.png"
    with pytest.raises(ValueError, match="https"):
        Brand.from_settings(S)
    assert SmtpTarget.from_url("smtp://mailer@smtp.example").__dict__ | {} == {
        "host": "smtp.example", "port": 587, "mode": "starttls", "username": "mailer", "password": None,
        "ca_file": None, "timeout": 20.0}
    assert SmtpTarget.from_url("smtps://smtp.example").port == 465
    with pytest.raises(SmtpConfigError, match="PASSWORD_FILE"):
        SmtpTarget.from_url("smtp://u:p@smtp.example")
    with pytest.raises(SmtpConfigError, match="loopback"):
        SmtpTarget.from_url("smtp+insecure://smtp.example")
    with pytest.raises(SmtpConfigError):
        SmtpTarget.from_url("http://smtp.example")


def test_portal_link_tokens():
    token = new_token(42)
    assert parse_token(token) == 42 and len(token_hash(token)) == 32
    assert parse_token(token.replace("pl_42_", "pl_43_")) == 43 and token_hash(token) != token_hash(token.replace("pl_42_", "pl_43_"))
    for bad in ("", "pl_0_" + "a" * 43, "pl_42_" + "a" * 42, "pl_42_" + "a" * 43 + "=", "cs_42_" + "a" * 43, None):
        assert parse_token(bad) is None
    assert new_token(42) != new_token(42)
    assert login_url("https://b.example/portal/", "pl_1_x", "/invoices/3/pay") == \
        "https://b.example/portal/login?token=pl_1_x&next=/invoices/3/pay"
