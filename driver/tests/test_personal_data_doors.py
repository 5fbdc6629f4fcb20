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


def keys_of_each_reader(db_url: str) -> tuple[dict, str]:
    """A key of each scope that reads documents, and a key that opens customer sessions."""
    return ({"subscriptions:read": create_test_key(db_url, "subscriptions:read"),
             "subscriptions:write": create_test_key(db_url, "subscriptions:read", "subscriptions:write"),
             "customers:read": create_test_key(db_url, "subscriptions:read", "customers:read"),
             "admin": create_test_key(db_url, "admin")},
            create_test_key(db_url, "customer-sessions:write", "subscriptions:read"))


async def with_session(client, keys: dict, opener: str, customer: int) -> dict:
    """keys and a customer session's token for customer."""
    token = (await client.post("/customer-sessions", json={"customerId": customer}, headers=bearer(opener))).json()["token"]
    return {**keys, "customer session": token}


def pdf_text(content: bytes) -> str:
    return subprocess.run(["pdftotext", "-layout", "-", "-"], input=content, capture_output=True, check=True).stdout.decode()


def test_bill_to_and_cards_need_customers_read_in_the_api(db_url):
    invoice = seed(db_url)
    keys, opener = keys_of_each_reader(db_url)

    async def body():
        out = {}
        async with client_for(db_url) as client:
            for who, key in (await with_session(client, keys, opener, CUSTOMER)).items():
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


# The tax's jurisdiction (adv11): the country and region an invoice's tax was computed for are the
# customer's billing address (where they live), personal data as the rest of it: a document's `taxes`
# entries carry them (and its HTML and PDF print them in the breakdown of a change's invoice, "Sales tax
# CA-QC 10%") only for customers:read, admin or the customer's own session; for another reader an entry
# is the tax charged (the operator's rate: code, name, rate, inclusive; base, amount), the rest the same.
MOVER = 7302
PLACE = "CA-QC"  # the printed jurisdiction (the first address)
TAX_KEYS = {"code", "name", "rateBp", "inclusive", "base", "amount"}


def seed_mover(db_url: str) -> int:
    """Sells at CA/QC (a regional rate), moves to NZ, upgrades: the change's invoice has an entry per place."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_plan('PD_S', 1000, 'GBP', 'MONTH', 1)")
        conn.execute("SELECT billing.upsert_plan('PD_L', 3000, 'GBP', 'MONTH', 1)")
        conn.execute("SELECT billing.upsert_tax_rate('PD_RATE_A', 'CA', 'QC', 'Sales tax', 1000, false)")
        conn.execute("SELECT billing.upsert_tax_rate('PD_RATE_B', 'NZ', NULL, 'Goods tax', 1500, false)")
        conn.execute("SELECT billing.set_customer_details(%s, 'Mover', NULL, NULL, NULL, NULL, 'QC', 'CA', NULL, 'TAXABLE')",
                     (MOVER,))
        sub = conn.execute("SELECT id FROM billing.create_subscription('pd-move', %s, 'PD_S', %s)", (MOVER, T0)).fetchone()[0]
        conn.execute("SELECT billing.finalize_invoices(100, %s)", (T0 + timedelta(minutes=1),))
        conn.execute("SELECT billing.set_customer_details(%s, 'Mover', NULL, NULL, NULL, NULL, NULL, 'NZ', NULL, 'TAXABLE')",
                     (MOVER,))
        conn.execute("SELECT billing.change_plan(%s, 'PD_L', %s)", (sub, T0 + timedelta(days=10)))
        conn.execute("SELECT billing.finalize_invoices(100, %s)", (T0 + timedelta(days=10, minutes=1),))
        return conn.execute("SELECT id FROM billing.invoice WHERE customer_id = %s AND kind = 'PRORATION'",
                            (MOVER,)).fetchone()[0]


def test_the_tax_jurisdiction_needs_customers_read_in_the_api(db_url):
    invoice = seed_mover(db_url)
    keys, opener = keys_of_each_reader(db_url)

    async def body():
        out = {}
        async with client_for(db_url) as client:
            for who, key in (await with_session(client, keys, opener, MOVER)).items():
                out[who] = {suffix: await client.get(f"/invoices/{invoice}{suffix}", headers=bearer(key))
                            for suffix in ("", ".html", ".pdf")}
        return out

    out = asyncio.run(body())
    amounts = {}
    for who, got in out.items():
        assert all(a.status_code == 200 for a in got.values()), (who, [a.status_code for a in got.values()])
        taxes = got[""].json()["taxes"]
        html, pdf = got[".html"].text, pdf_text(got[".pdf"].content)
        assert len(taxes) == 2, (who, taxes)
        amounts[who] = sorted((t["code"], t["rateBp"], t["base"], t["amount"]) for t in taxes)
        if who in ("subscriptions:read", "subscriptions:write"):
            assert all(set(t) == TAX_KEYS for t in taxes), (who, taxes)
            assert PLACE not in html and PLACE not in pdf and "QC" not in str(got[""].json()["taxes"]), who
            assert "Sales tax" in html, who  # the tax charged is printed, without its place
        else:
            assert {(t["country"], t["region"]) for t in taxes} == {("CA", "QC"), ("NZ", None)}, (who, taxes)
            assert PLACE in html and PLACE in pdf, who
    assert len({str(a) for a in amounts.values()}) == 1, amounts  # the money is the same for every reader


def test_the_tax_jurisdiction_needs_customers_read_on_the_console(db_url):
    invoice = seed_mover(db_url)
    seen = {}
    with ConsoleServer(db_url) as server:
        for who, scopes in (("subscriptions:read", ("subscriptions:read",)),
                            ("customers:read", ("subscriptions:read", "customers:read"))):
            with httpx.Client(timeout=30, base_url=server.url) as c:
                _login(c, create_test_key(db_url, *scopes))
                html = c.get(f"/console/invoices/{invoice}.html")
                pdf = c.get(f"/console/invoices/{invoice}.pdf")
                assert html.status_code == pdf.status_code == 200, who
                seen[who] = (html.text, pdf_text(pdf.content))
    assert all(PLACE not in text for text in seen["subscriptions:read"])
    assert "Sales tax" in seen["subscriptions:read"][0]
    assert all(PLACE in text for text in seen["customers:read"])


def test_the_tax_jurisdiction_of_a_void_s_credit_note_needs_customers_read(db_url):
    # The credit note of a void reverses the document's lines, its TAX lines' descriptions with them.
    invoice = seed_mover(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.void_invoice(%s, 'pd test', %s)", (invoice, T0 + timedelta(days=10, minutes=2)))
    keys = {"subscriptions:read": create_test_key(db_url, "subscriptions:read"),
            "customers:read": create_test_key(db_url, "subscriptions:read", "customers:read")}

    async def body():
        async with client_for(db_url) as client:
            return {who: (await client.get(f"/invoices/{invoice}", headers=bearer(key))).json() for who, key in keys.items()}

    docs = asyncio.run(body())
    notes = {who: [x["description"] for n in doc["creditNotes"] for x in n["lines"]] for who, doc in docs.items()}
    assert any(PLACE in d for d in notes["customers:read"]), notes
    assert not any(PLACE in d for d in notes["subscriptions:read"]) and any("Sales tax" in d for d in notes["subscriptions:read"]), notes
