"""A customer's personal data in every door (money10; docs/security.md, "The console and customers'
personal data"): an invoice document's bill-to (name, e-mail, address, tax id) and a payment method's
card and references are read with customers:read or admin, or by a customer session on its own
customer, never with subscriptions:read (or subscriptions:write) alone. Each route with a key of
each scope: the JSON, HTML and PDF documents, the payment methods of /v1 and of PUT
/customers/{id}/payment-method, and the console's document and customer page."""

from __future__ import annotations

import asyncio
import re
import subprocess
from datetime import timedelta

import httpx
import psycopg

from .conftest import create_test_key
from .console_world import ConsoleServer
from .test_doors import T0, bearer, client_for

CUSTOMER = 7301
SECRETS = ("Secret Widgets Ltd", "ap@secret.example", "7 Hidden Lane", "SW1A9ZZ", "GB999999973", "4242", "pm_secret_ref",
           "cus_secret_ref")
CARD_FIELDS = ("brand", "last4", "expMonth", "expYear", "customerRef", "paymentMethodRef")


def seed(db_url: str) -> int:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PD_PLAN', 1500, 'GBP', 'MONTH', 1)")
        conn.execute("SELECT billing.set_customer_details(%s, 'Secret Widgets Ltd', 'ap@secret.example', "
                     "'7 Hidden Lane', 'London', 'SW1A9ZZ', NULL, 'GB', 'GB999999973', 'TAXABLE')", (CUSTOMER,))
        conn.execute("SELECT billing.create_subscription('pd-1', %s, 'PD_PLAN', %s)", (CUSTOMER, T0))
        conn.execute("SELECT billing.set_payment_method(%s, 'sim', 'cus_secret_ref', 'pm_secret_ref', 'visa', '4242', "
                     "12, 2031, %s)", (CUSTOMER, T0))
        conn.execute("SELECT billing.finalize_invoices(100, %s)", (T0 + timedelta(minutes=5),))
        return conn.execute("SELECT id FROM billing.invoice WHERE customer_id = %s", (CUSTOMER,)).fetchone()[0]


def pdf_text(content: bytes) -> str:
    return subprocess.run(["pdftotext", "-layout", "-", "-"], input=content, capture_output=True, check=True).stdout.decode()


def test_bill_to_and_cards_need_customers_read_in_the_api(db_url):
    invoice = seed(db_url)
    keys = {"subscriptions:read": create_test_key(db_url, "subscriptions:read"),
            "subscriptions:write": create_test_key(db_url, "subscriptions:read", "subscriptions:write"),
            "customers:read": create_test_key(db_url, "subscriptions:read", "customers:read"),
            "admin": create_test_key(db_url, "admin")}
    opener = create_test_key(db_url, "customer-sessions:write", "subscriptions:read")

    async def body():
        out = {}
        async with client_for(db_url) as client:
            keys["customer session"] = (await client.post("/customer-sessions", json={"customerId": CUSTOMER},
                                                          headers=bearer(opener))).json()["token"]
            for who, key in keys.items():
                got = {}
                for path in (f"/invoices/{invoice}", f"/invoices/{invoice}.html", f"/invoices/{invoice}.pdf",
                             f"/v1/customers/{CUSTOMER}/payment-methods"):
                    got[path] = await client.get(path, headers=bearer(key))
                methods = got[f"/v1/customers/{CUSTOMER}/payment-methods"].json()["data"]
                got["one method"] = await client.get(f"/v1/customers/{CUSTOMER}/payment-methods/{methods[0]['id']}",
                                                     headers=bearer(key))
                if who in ("subscriptions:write", "admin"):
                    got["put"] = await client.put(f"/customers/{CUSTOMER}/payment-method", headers=bearer(key), json={
                        "provider": "sim", "paymentMethodRef": "pm_secret_ref", "customerRef": "cus_secret_ref",
                        "brand": "visa", "last4": "4242", "expMonth": 12, "expYear": 2031})
                out[who] = got
        return out

    out = asyncio.run(body())
    for who, got in out.items():
        sees = who != "subscriptions:read" and who != "subscriptions:write"
        for name, answer in got.items():
            assert answer.status_code == 200, (who, name, answer.status_code, answer.text[:300])
        doc = got[f"/invoices/{invoice}"].json()
        html = got[f"/invoices/{invoice}.html"].text
        pdf = pdf_text(got[f"/invoices/{invoice}.pdf"].content)
        methods = got[f"/v1/customers/{CUSTOMER}/payment-methods"].json()["data"] + [got["one method"].json()]
        if "put" in got:
            methods.append(got["put"].json())
        if sees:
            assert doc["billTo"]["name"] == "Secret Widgets Ltd" and doc["billTo"]["taxId"] == "GB999999973", (who, doc)
            assert "Secret Widgets Ltd" in html and "GB999999973" in pdf, who
            assert all(m["last4"] == "4242" and m["paymentMethodRef"] == "pm_secret_ref" for m in methods), (who, methods)
        else:
            assert doc["billTo"] == {"customerId": CUSTOMER, "taxStatus": "TAXABLE"}, (who, doc["billTo"])
            for text, where in ((html, "html"), (pdf, "pdf"), (str(doc), "json"), (str(methods), "methods")):
                leaked = [s for s in SECRETS if s in text]
                assert not leaked, (who, where, leaked)
            assert f"Customer {CUSTOMER}" in html or str(CUSTOMER) in html, who
            assert all(m[f] is None for m in methods for f in CARD_FIELDS), (who, methods)
            assert all(m["id"] and m["provider"] == "sim" and m["isDefault"] for m in methods), (who, methods)
        # the rest of the document is the same for every reader
        assert doc["total"] == 1500 and [line["kind"] for line in doc["lines"]][:1] == ["PLAN"], (who, doc)


def _login(client: httpx.Client, key: str) -> httpx.Response:
    form = client.get("/console/login")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
    return client.post("/console/login", data={"csrf": token, "key": key, "next": "/console/"})


def test_bill_to_and_cards_need_customers_read_on_the_console(db_url):
    invoice = seed(db_url)
    reader = create_test_key(db_url, "subscriptions:read")
    people = create_test_key(db_url, "subscriptions:read", "customers:read")
    seen = {}
    with ConsoleServer(db_url) as server:
        for who, key in (("subscriptions:read", reader), ("customers:read", people)):
            with httpx.Client(timeout=30, base_url=server.url) as c:
                _login(c, key)
                html = c.get(f"/console/invoices/{invoice}.html")
                pdf = c.get(f"/console/invoices/{invoice}.pdf")
                page = c.get(f"/console/customers/{CUSTOMER}")
                assert html.status_code == pdf.status_code == page.status_code == 200, who
                seen[who] = (html.text, pdf_text(pdf.content), page.text)
    for where, text in zip(("html", "pdf", "customer page"), seen["subscriptions:read"]):
        leaked = [s for s in SECRETS if s in text]
        assert not leaked, (where, leaked)
    assert 'id="payment-methods-table"' in seen["subscriptions:read"][2]  # the method is listed, by id
    html, pdf, page = seen["customers:read"]
    assert "Secret Widgets Ltd" in html and "GB999999973" in pdf and "4242" in page
