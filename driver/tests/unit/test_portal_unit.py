"""The portal's words without services: every message its templates and code name is in every
catalog (a missing key fails here, not in front of a customer), each page renders in each language,
and its cookie and link forms are what the security checks expect."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from jinja2 import Environment, PackageLoader, select_autoescape

from billing.notifications.i18n import LOCALES, Translator, catalog
from billing.portal.web import FLASH, parse_session_token, new_session_token, safe_next

PORTAL = Path(__file__).resolve().parents[2] / "billing" / "portal"
# Keys built from a value: every value the schema allows (db/schema: the CHECK constraints).
DYNAMIC = {
    "portal.status.": ("TRIALING", "ACTIVE", "PAST_DUE", "PAUSED", "CANCELED"),
    "portal.invoice_status.": ("OPEN", "PAID", "FAILED", "VOID", "REVIEW"),
    "portal.interval.": ("DAY", "WEEK", "MONTH", "YEAR"),
    "portal.interval_n.": ("DAY", "WEEK", "MONTH", "YEAR"),
    "portal.option.": ("now", "period_end"),
}


def _named_keys() -> set[str]:
    keys: set[str] = set()
    for path in list(PORTAL.glob("templates/*.html")) + list(PORTAL.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        for key in re.findall(r"""["'](portal\.[a-z_.A-Z]+)["']""", text):
            if key == "portal.error.":  # error.html's test of its problem's prefix, not a message
                continue
            if key.endswith("."):
                assert key in DYNAMIC, (path.name, key)
                keys |= {key + value for value in DYNAMIC[key]}
            else:
                keys.add(key)
    keys |= set(FLASH.values())
    return keys


def test_every_message_the_portal_names_is_in_every_catalog():
    keys = _named_keys()
    assert len(keys) > 60
    for tag in LOCALES:
        missing = sorted(k for k in keys if k not in catalog(tag))
        assert not missing, (tag, missing)


HOME = {"customer": {"id": 7, "name": "Ana <b>", "email": "a@example.com", "locale": "pt-BR", "timezone": "America/Sao_Paulo"},
        "subscriptions": [
            {"id": 1, "status": status, "plan_code": "BASIC", "price_amount": 1000, "currency": "EUR",
             "billing_interval": interval, "interval_count": count, "quantity": 2, "current_period_start": "2026-03-01T00:00:00Z",
             "current_period_end": "2026-04-01T00:00:00Z", "trial_end": "2026-03-05T00:00:00Z", "cancel_at_period_end": flag,
             "scheduled_plan_code": "TEAM", "version": 1,
             "options": [{"plan_code": "PRO", "price_amount": 3000, "currency": "EUR", "billing_interval": "MONTH",
                          "interval_count": 1, "change_at": "now"},
                         {"plan_code": "TEAM", "price_amount": 9000, "currency": "EUR", "billing_interval": "YEAR",
                          "interval_count": 1, "change_at": "period_end"}]}
            for status, interval, count, flag in (("ACTIVE", "MONTH", 1, False), ("TRIALING", "WEEK", 2, True),
                                                  ("PAST_DUE", "YEAR", 1, False), ("PAUSED", "DAY", 3, False),
                                                  ("CANCELED", "MONTH", 1, False))],
        "invoices": [{"id": i, "number": f"2026-00000{i}", "status": st, "kind": "RENEWAL", "amount": 123456, "currency": "BRL",
                      "created_at": "2026-03-01T00:00:00Z", "action_required_until": "2026-03-04T00:00:00Z" if st == "OPEN" else None,
                      "has_document": True} for i, st in enumerate(("OPEN", "PAID", "FAILED", "VOID", "REVIEW"), 1)],
        "payment_methods": [{"id": 1, "brand": "visa", "last4": "4242", "exp_month": 3, "exp_year": 2030, "is_default": True}]}


@pytest.mark.parametrize("tag", LOCALES)
def test_every_page_renders_in_every_language(tag):
    env = Environment(loader=PackageLoader("billing.portal", "templates"), autoescape=select_autoescape(["html"]))
    t = Translator.get(tag)
    session = {"csrf": "c" * 64, "customer_id": 7, "locale": tag}
    home = env.get_template("home.html").render(t=t, session=session, brand="Acme", message="", home=HOME,
                                                section="invoices", zone="UTC")
    assert f'lang="{tag}"' in home and "Ana &lt;b&gt;" in home and home.count('name="csrf"') >= 6
    assert t("portal.status.PAST_DUE") in home and t("portal.invoice_status.REVIEW") in home
    assert "/portal/invoices/1/pay" in home and "/portal/invoices/2/pay" not in home  # only an invoice that waits
    for key in sorted(set(FLASH.values())):
        env.get_template("base.html").render(t=t, session=None, brand="Acme", message=t(key))
    for problem in ("portal.error.link", "portal.signed_out"):
        assert t(problem) in env.get_template("error.html").render(t=t, session=session, brand="A", message="", problem=problem)
    assert t("portal.login.button") in env.get_template("login.html").render(
        t=t, session=None, brand="A", message="", token="pl_1_x", login_csrf="n", next="/")
    pay = env.get_template("pay.html").render(t=t, session=session, brand="A", message="", invoice_id=3,
                                              action={"amount": 123456, "currency": "BRL"})
    assert t.money(123456, "BRL") in pay


def test_session_tokens_and_next_paths():
    token = new_session_token(42)
    assert parse_session_token(token) == 42 and parse_session_token(token + "x") is None
    assert parse_session_token("pl_42_" + token.split("_", 2)[2]) is None  # a link is not a session
    assert safe_next("/invoices") == "/portal/invoices" and safe_next("/") == "/portal/"
    for bad in ("https://evil.example", "//evil.example", "/a//b", "/x?y", "invoices", None, "/\\evil"):
        assert safe_next(bad) == "/portal/"
