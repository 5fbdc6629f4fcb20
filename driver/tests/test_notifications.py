"""Emails to customers (docs/customers.md) end to end, against a real PostgreSQL and a real mail
server (Mailpit, STARTTLS required, its certificate verified): every kind of notification, each
in the five languages, sent by the worker's Notifier from what the SQL API wrote, read back through
Mailpit's HTTP API (recipient, subject, language, the invoice PDF parsed with pdftotext, the
portal link valid once); SMTP down -> retried with backoff -> sent once when it is back; opt-outs
and the legal kinds that cannot be turned off."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import shutil
import subprocess
import uuid
from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from psycopg.rows import dict_row

from billing.clock import SimulatedClock
from billing.config import Settings
from billing.db import async_pool
from billing.notifications import KINDS
from billing.notifications.i18n import Translator
from billing.worker.notifications import Notifier

from .mailpit import Inbox, PrivateMailpit, shared

pytestmark = pytest.mark.timeout(120)

T0 = datetime(2026, 3, 10, 12, tzinfo=timezone.utc)
CURRENCY = {"en": ("USD", 123456), "pt-BR": ("BRL", 123456), "es": ("EUR", 123456), "de": ("EUR", 123456),
            "zh-CN": ("JPY", 1235)}
# What the invoice PDF must say in each language (its "amount due" label).
AMOUNT_DUE = {"en": "Amount due", "pt-BR": "Valor devido", "es": "Importe a pagar", "de": "Zu zahlender Betrag",
              "zh-CN": "应付金额"}


@pytest.fixture(scope="module")
def mail():
    return shared()


@contextlib.contextmanager
def refused(code: str, match: str | None = None):
    with pytest.raises(psycopg.Error, match=match) as info:
        yield
    assert info.value.sqlstate == code, info.value


def connect(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, row_factory=dict_row)


def settings_for(db_url: str, smtp_url: str, ca: str) -> Settings:
    return Settings.from_env().with_overrides(
        database_url=db_url, smtp_url=smtp_url, smtp_ca_file=ca, smtp_username="billing", smtp_password="s3cret-on-tls",
        smtp_from="billing@shop.example", issuer_name="Acme Cloud", issuer_color="#0a7d4f",
        portal_url="https://billing.example/portal")


def customer(conn, cid: int, locale: str, name: str | None = "Ana Example") -> str:
    email = f"c{cid}-{uuid.uuid4().hex[:10]}@example.com"
    conn.execute("SELECT billing.upsert_customer(%s, 'America/Sao_Paulo')", (cid,))
    conn.execute("SELECT billing.set_customer_details(%s, %s, %s, 'Rua A 1', 'São Paulo', '01000-000', NULL, 'BR', NULL)",
                 (cid, name, email))
    conn.execute("SELECT billing.set_customer_preferences(%s, %s, NULL, %s)", (cid, locale, T0))
    return email


def charge(conn, now, outcome: str, reason: str | None = None, hard: bool = False) -> list[str]:
    keys = [r["idempotency_key"] for r in conn.execute(
        "SELECT idempotency_key FROM billing.claim_charges('t', 100, '5 minutes', %s, 'sim')", (now,))]
    for key in keys:
        conn.execute("SELECT billing.record_payment_result(%s, %s, %s, %s, %s, %s)",
                     (key, outcome, f"ch_{key}" if outcome == "SUCCEEDED" else None, reason, now, hard))
    return keys


NEXT_TRY: dict[int, datetime] = {}


def every_kind_for(conn, cid: int, locale: str) -> str:
    """One customer through every kind of email: returns its address."""
    email = customer(conn, cid, locale)
    currency, price = CURRENCY[locale]
    conn.execute("SELECT billing.upsert_plan(%s, %s, %s, 'MONTH', 1, %s)", (f"M{currency}", price, currency, T0))
    conn.execute("SELECT billing.upsert_plan(%s, %s, %s, 'YEAR', 1, %s)", (f"Y{currency}", price * 10, currency, T0))
    # a card that expires before the next renewal: CARD_EXPIRING
    conn.execute("SELECT billing.set_payment_method(%s, 'sim', 'cus_1', %s, 'visa', '4242', 3, 2026, %s)",
                 (cid, f"pm_{cid}", T0))
    sub = conn.execute("SELECT id FROM billing.create_subscription(%s, %s, %s, %s)",
                       (f"s{cid}", cid, f"M{currency}", T0)).fetchone()["id"]
    # a soft decline (PAYMENT_FAILED with the next try), then the retry pays (PAYMENT_SUCCEEDED)
    assert charge(conn, T0, "DECLINED", "insufficient_funds")
    retry = conn.execute("SELECT next_attempt_at FROM billing.invoice WHERE subscription_id = %s", (sub,)).fetchone()
    NEXT_TRY[cid] = retry["next_attempt_at"]
    assert charge(conn, retry["next_attempt_at"] + timedelta(minutes=1), "SUCCEEDED")
    inv = conn.execute("SELECT id FROM billing.invoice WHERE subscription_id = %s", (sub,)).fetchone()["id"]
    conn.execute("SELECT billing.finalize_invoice(%s, %s)", (inv, T0 + timedelta(days=2)))  # INVOICE_ISSUED
    conn.execute("SELECT billing.announce_expiring_payment_methods(40, 500, %s)", (T0 + timedelta(days=1),))
    # a yearly plan renewing soon (UPCOMING_RENEWAL), paid at its start (a second receipt)
    conn.execute("SELECT billing.create_subscription(%s, %s, %s, %s)", (f"y{cid}", cid, f"Y{currency}", T0 - timedelta(days=360)))
    assert charge(conn, T0 - timedelta(days=360), "SUCCEEDED")
    # a refund (REFUND_ISSUED)
    conn.execute("SELECT billing.refund_invoice(%s, %s, %s, %s)", (inv, price // 2, f"r{cid}", T0 + timedelta(days=2)))
    for r in conn.execute("SELECT idempotency_key FROM billing.claim_refunds('t', 10, '5 minutes', %s)",
                          (T0 + timedelta(days=2),)).fetchall():
        conn.execute("SELECT billing.record_refund_result(%s, 'SUCCEEDED', 're_1', NULL, %s)",
                     (r["idempotency_key"], T0 + timedelta(days=2)))
    # authentication required (ACTION_REQUIRED) on a second subscription
    conn.execute("SELECT billing.create_subscription(%s, %s, %s, %s)", (f"a{cid}", cid, f"M{currency}", T0 + timedelta(days=3)))
    assert charge(conn, T0 + timedelta(days=3), "DECLINED", "authentication_required", True)
    # a trial ending (TRIAL_ENDING), the yearly renewal's notice, a cancellation
    conn.execute("SELECT billing.create_subscription(%s, %s, %s, %s, 5)", (f"t{cid}", cid, f"M{currency}", T0))
    conn.execute("SELECT billing.create_due_invoices(500, %s)", (T0 + timedelta(days=3),))
    conn.execute("SELECT billing.announce_upcoming_renewals(14, 500, %s)", (T0,))
    conn.execute("SELECT billing.cancel_subscription(%s, false, %s)", (sub, T0 + timedelta(days=4)))
    return email


async def send_all(settings, clock) -> Notifier:
    pool = await async_pool(settings.database_url, min_size=1, max_size=4)
    try:
        notifier = Notifier(pool, settings, clock=clock, renewal_every_seconds=3600)
        while await notifier.send_due():
            pass
        return notifier
    finally:
        await pool.close()


def pdf_text(data: bytes) -> str:
    assert data.startswith(b"%PDF-")
    return subprocess.run(["pdftotext", "-", "-"], input=data, capture_output=True, check=True).stdout.decode()


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="pdftotext (make poppler) is needed to read the PDF")
def test_every_kind_of_email_in_every_language_through_mailpit(db_url, mail):
    smtp, http, ca = mail
    inbox = Inbox(http)
    addresses = {}
    with connect(db_url) as conn:
        for i, locale in enumerate(("en", "pt-BR", "es", "de", "zh-CN")):
            addresses[locale] = every_kind_for(conn, 100 + i, locale)
        owed = conn.execute("SELECT customer_id, kind, count(*) AS n FROM billing.notification GROUP BY 1, 2").fetchall()
        issued_n = {r["customer_id"]: r["n"] for r in conn.execute(
            "SELECT customer_id, count(*) AS n FROM billing.invoice WHERE number IS NOT NULL GROUP BY 1")}
    # each kind once per customer, the receipts twice (the monthly and the yearly plan), the invoice
    # once per invoice issued (each is finalized no later than its first charge: docs/invoices.md)
    expected = {(100 + i, k): 2 if k == "PAYMENT_SUCCEEDED" else issued_n[100 + i] if k == "INVOICE_ISSUED" else 1
                for i in range(5) for k in KINDS}
    assert {(r["customer_id"], r["kind"]): r["n"] for r in owed} == expected
    total = sum(expected.values())
    clock = SimulatedClock(T0 + timedelta(days=5))
    notifier = asyncio.run(send_all(settings_for(db_url, smtp, ca), clock))
    assert notifier.counts == {"sent": total, "failed": 0}
    with connect(db_url) as conn:
        rows = conn.execute("SELECT status, count(*) AS n FROM billing.notification GROUP BY 1").fetchall()
        assert rows == [{"status": "SENT", "n": total}]
        numbers = [r["number"] for r in conn.execute(
            "SELECT number FROM billing.invoice WHERE customer_id = 101 AND number IS NOT NULL")]
    samples, issued_subjects = {}, {}
    for i, (locale, address) in enumerate(addresses.items()):
        t = Translator.get(locale)
        messages = inbox.messages_to(address)
        assert len(messages) == 9 + issued_n[100 + i], (locale, [m["Subject"] for m in messages])
        seen = {}
        for m in messages:
            full = inbox.message(m["ID"])
            headers = inbox.headers(m["ID"])
            kind = headers["X-Billing-Notification"][0]
            if kind == "INVOICE_ISSUED":
                issued_subjects.setdefault(locale, []).append(full["Subject"])
            if kind == "PAYMENT_SUCCEEDED" and kind in seen and CURRENCY[locale][1] * 10 // 10 and \
                    Translator.get(locale).money(CURRENCY[locale][1] * 10, CURRENCY[locale][0]) in full["Text"]:
                continue  # the yearly plan's receipt; the monthly one is checked below
            seen[kind] = full
            assert [to["Address"] for to in full["To"]] == [address]
            assert headers["Content-Language"] == [locale]
            assert full["From"]["Address"] == "billing@shop.example" and full["From"]["Name"] == "Acme Cloud"
            assert headers["Message-Id"][0].startswith("notification.") or headers["Message-Id"][0].startswith("<notification.")
            # the subject is the catalog's, in the customer's language
            literal = re.split(r"\{[a-z0-9_]+\}", t(f"{kind.lower()}.subject").replace("{", "{").strip())[0].strip()
            assert full["Subject"].startswith(literal) or literal in full["Subject"], (locale, kind, full["Subject"])
            assert t("email.manage") in full["Text"] and t("email.manage") in full["HTML"]
            # every email carries one portal link, valid once
            url = re.search(r"https://billing\.example/portal/login\?\S+", full["Text"]).group(0)
            token = parse_qs(urlsplit(url).query)["token"][0]
            with connect(db_url) as conn:
                conn.execute("SELECT billing.use_portal_link(%s, %s, %s)",
                             (int(token.split("_")[1]), hashlib.sha256(token.encode()).digest(), T0 + timedelta(days=5)))
                with refused("BL404"):
                    conn.execute("SELECT billing.use_portal_link(%s, %s, %s)",
                                 (int(token.split("_")[1]), hashlib.sha256(token.encode()).digest(), T0 + timedelta(days=5)))
        assert set(seen) == set(KINDS)
        currency, price = CURRENCY[locale]
        money = t.money(price, currency)
        assert money in seen["PAYMENT_SUCCEEDED"]["Text"], (locale, money, seen["PAYMENT_SUCCEEDED"]["Text"])
        assert t.date(NEXT_TRY[100 + i], "America/Sao_Paulo") in seen["PAYMENT_FAILED"]["Text"]  # the next try
        assert "next=/payment-methods" in seen["PAYMENT_FAILED"]["Text"]
        assert re.search(r"next=/invoices/[0-9]+/pay", seen["ACTION_REQUIRED"]["Text"])
        # the invoice, attached as a PDF in the customer's language
        issued = seen["INVOICE_ISSUED"]
        pdfs = [a for a in issued["Attachments"] if a["ContentType"] == "application/pdf"]
        assert len(pdfs) == 1 and pdfs[0]["FileName"].startswith("invoice-")
        text = pdf_text(inbox.part(issued["ID"], pdfs[0]["PartID"]))
        assert AMOUNT_DUE[locale] in text, (locale, text)
        samples[locale] = seen
        for kind, full in seen.items():
            assert kind in KINDS and full["HTML"].startswith("<!doctype html>") and f'lang="{locale}"' in full["HTML"]
    # the figures of the brief: R$ 1.234,56 / 1.234,56 € / ¥1,235 (Babel's no-break spaces)
    assert "R$\xa01.234,56" in samples["pt-BR"]["PAYMENT_SUCCEEDED"]["Text"]
    assert "1.234,56\xa0€" in samples["de"]["PAYMENT_SUCCEEDED"]["Text"]
    assert numbers and all(any(n in subject for subject in issued_subjects["pt-BR"]) for n in numbers)


def test_smtp_down_retries_with_backoff_and_sends_once_when_back(db_url, mail, tmp_path):
    _, _, ca = mail
    private = PrivateMailpit(tmp_path)
    with connect(db_url) as conn:
        address = customer(conn, 7, "de")
        conn.execute("SELECT billing.upsert_plan('P', 990, 'EUR', 'MONTH', 1, %s)", (T0,))
        conn.execute("SELECT billing.create_subscription('s7', 7, 'P', %s)", (T0,))
        assert charge(conn, T0, "SUCCEEDED")
    settings = settings_for(db_url, private.smtp_url, ca)
    clock = SimulatedClock(T0 + timedelta(minutes=1))
    # Two emails: the receipt and the invoice (issued at its first charge, docs/invoices.md).
    notifier = asyncio.run(send_all(settings, clock))  # Mailpit is not running: refused
    assert notifier.counts == {"sent": 0, "failed": 2}
    with connect(db_url) as conn:
        row = conn.execute("SELECT status, attempts, available_at, last_error FROM billing.notification "
                           "WHERE kind = 'PAYMENT_SUCCEEDED'").fetchone()
    assert row["status"] == "PENDING" and row["attempts"] == 1 and "Connection" in row["last_error"]
    assert row["available_at"] == clock.now() + timedelta(seconds=30)
    private.start()
    try:
        # not due yet: nothing is sent before its backoff
        assert asyncio.run(send_all(settings, clock)).counts == {"sent": 0, "failed": 0}
        clock.advance(timedelta(seconds=31))
        assert asyncio.run(send_all(settings, clock)).counts == {"sent": 2, "failed": 0}
        clock.advance(timedelta(hours=2))
        assert asyncio.run(send_all(settings, clock)).counts == {"sent": 0, "failed": 0}  # once
        inbox = Inbox(private.http_url)
        messages = inbox.messages_to(address)
        assert len(messages) == 2 and inbox.count() == 2
        assert sum(m["Subject"].startswith("Beleg für Ihre Zahlung über 9,90") for m in messages) == 1
        with connect(db_url) as conn:
            row = conn.execute("SELECT status, attempts, sent_at, last_error FROM billing.notification "
                               "WHERE kind = 'PAYMENT_SUCCEEDED'").fetchone()
        assert row["status"] == "SENT" and row["attempts"] == 2 and row["last_error"] is None
    finally:
        private.stop()


def test_opt_outs_legal_kinds_and_customers_without_an_address(db_url, mail):
    smtp, http, ca = mail
    with connect(db_url) as conn:
        address = customer(conn, 8, "es")
        conn.execute("SELECT billing.upsert_customer(9)")  # no address: nothing is owed to it
        conn.execute("SELECT billing.upsert_plan('P', 990, 'EUR', 'MONTH', 1, %s)", (T0,))
        for c in (8, 9):
            conn.execute("SELECT billing.create_subscription(%s, %s, 'P', %s)", (f"s{c}", c, T0))
        with refused("BL422", "cannot be turned off"):
            conn.execute("SELECT billing.set_customer_preferences(8, NULL, ARRAY['PAYMENT_SUCCEEDED'], %s)", (T0,))
        with refused("BL422", "kinds of notification"):
            conn.execute("SELECT billing.set_customer_preferences(8, NULL, ARRAY['SPAM'], %s)", (T0,))
        with refused("BL422", "locale"):
            conn.execute("SELECT billing.set_customer_preferences(8, 'fr', NULL, %s)", (T0,))
        row = conn.execute("SELECT locale, notification_opt_outs FROM billing.set_customer_preferences("
                           "8, NULL, ARRAY['PAYMENT_FAILED', 'TRIAL_ENDING'], %s)", (T0,)).fetchone()
        assert row == {"locale": "es", "notification_opt_outs": ["PAYMENT_FAILED", "TRIAL_ENDING"]}
        assert charge(conn, T0, "DECLINED", "insufficient_funds")
        assert charge(conn, T0 + timedelta(days=2), "SUCCEEDED")
        audit = conn.execute("SELECT count(*) AS n FROM billing.audit_log WHERE function = 'set_customer_preferences'").fetchone()
        assert audit["n"] >= 2
    notifier = asyncio.run(send_all(settings_for(db_url, smtp, ca), SimulatedClock(T0 + timedelta(days=2))))
    # 8's receipt and invoice (its failure turned off; 9 has no address)
    assert notifier.counts == {"sent": 2, "failed": 0}
    with connect(db_url) as conn:
        rows = conn.execute("SELECT customer_id, kind, status, last_error FROM billing.notification ORDER BY id").fetchall()
    assert {(r["customer_id"], r["kind"], r["status"]) for r in rows} == {
        (8, "INVOICE_ISSUED", "SENT"), (8, "PAYMENT_FAILED", "SKIPPED"), (8, "PAYMENT_SUCCEEDED", "SENT")}
    assert [r["last_error"] for r in rows if r["status"] == "SKIPPED"] == ["turned off by the customer"]
    subjects = [m["Subject"] for m in Inbox(http).messages_to(address)]
    assert len(subjects) == 2 and "Recibo de tu pago de 9,90\xa0€" in subjects, subjects


def test_portal_links_over_the_api_single_use_scoped_and_audited(db_url):
    from .conftest import create_test_key
    from .test_api import api_client

    with connect(db_url) as conn:
        customer(conn, 21, "en")
    reader = create_test_key(db_url, "subscriptions:read", name="reader")

    async def scenario():
        out = {}
        async with api_client(db_url, clock=SimulatedClock(T0)) as client:
            r = await client.post("/customers/21/portal-links", json={"next": "/invoices"})
            out["made"] = (r.status_code, r.json())
            r = await client.post("/customers/21/portal-links", json={})  # the portal's home
            out["home"] = r.json()["url"]
            out["unknown"] = (await client.post("/customers/22/portal-links", json={})).status_code
            out["bad_next"] = (await client.post("/customers/21/portal-links", json={"next": "https://evil.example"})).status_code
            out["bad_next2"] = (await client.post("/customers/21/portal-links", json={"next": "//evil.example"})).status_code
            out["extra"] = (await client.post("/customers/21/portal-links", json={"customerId": 22})).status_code
            out["read_only"] = (await client.post("/customers/21/portal-links", json={},
                                                  headers={"Authorization": f"Bearer {reader}"})).status_code
        return out

    out = asyncio.run(scenario())
    status, body = out["made"]
    assert status == 201 and body["object"] == "portal_link" and body["customerId"] == 21
    assert body["url"].startswith("http://127.0.0.1:8080/portal/login?token=pl_21_") and body["url"].endswith("&next=/invoices")
    assert body["expiresAt"] == "2026-03-13T12:00:00Z"  # 72 hours
    assert "next=" not in out["home"]
    assert (out["unknown"], out["bad_next"], out["bad_next2"], out["extra"], out["read_only"]) == (404, 422, 422, 400, 403)
    token = parse_qs(urlsplit(body["url"]).query)["token"][0]
    with connect(db_url) as conn:
        use = "SELECT customer_id FROM billing.use_portal_link(%s, %s, %s)"
        assert conn.execute(use, (21, hashlib.sha256(token.encode()).digest(), T0)).fetchone() == {"customer_id": 21}
        with refused("BL404"):
            conn.execute(use, (21, hashlib.sha256(token.encode()).digest(), T0))
        audit = conn.execute("SELECT actor FROM billing.audit_log WHERE function = 'create_portal_link'").fetchall()
    assert len(audit) == 2 and all(a["actor"].startswith("api-key:") for a in audit)
