"""The console over plain HTTP: what a browser test cannot easily show (forged requests, cookies'
flags, revocation, an action appearing the day its SQL function lands)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import httpx
import psycopg
import pytest

from billing.config import Settings

from .conftest import create_test_key
from .console_world import ConsoleServer, build_world


def _login(client: httpx.Client, key: str) -> httpx.Response:
    form = client.get("/console/login")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
    return client.post("/console/login", data={"csrf": token, "key": key, "next": "/console/"})


def _csrf(page: str) -> str:
    return re.search(r'name="csrf" value="([0-9a-f]{64})"', page).group(1)


@pytest.fixture
def served(db_url):
    world = build_world(db_url)
    with ConsoleServer(db_url) as server:
        yield world, server


def test_login_needs_its_csrf_token_and_a_same_site_origin(db_url, served):
    _, server = served
    key = create_test_key(db_url, "admin")
    with httpx.Client(timeout=30, base_url=server.url) as c:
        c.get("/console/login")
        r = c.post("/console/login", data={"key": key})
        assert r.status_code == 403 and "billing_console" not in c.cookies
        form = c.get("/console/login")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
        r = c.post("/console/login", data={"csrf": token, "key": key}, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403
        r = c.post("/console/login", data={"csrf": token, "key": key + "x"})
        assert r.status_code == 303 and "unknown" in r.headers["location"]
        r = c.post("/console/login", data={"csrf": token, "key": key})
        assert r.status_code == 303 and r.headers["location"] == "/console/"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Secure" not in cookie  # plain http
        with psycopg.connect(db_url) as conn:
            stored = conn.execute("SELECT token_hash FROM billing.console_session").fetchone()[0]
        assert c.cookies["billing_console"].encode() not in stored  # only its hash is kept


def test_a_key_without_the_scopes_cannot_log_in_and_api_routes_still_need_a_key(db_url, served):
    _, server = served
    writer = create_test_key(db_url, "subscriptions:write")
    with httpx.Client(timeout=30, base_url=server.url) as c:
        r = _login(c, writer)
        assert r.status_code == 303 and "error=" in r.headers["location"]
        assert c.get("/subscriptions/1").status_code == 401
        assert c.get("/console/", follow_redirects=False).status_code == 303


def test_forged_posts_are_refused(db_url, served):
    world, server = served
    key = create_test_key(db_url, "admin")
    with httpx.Client(timeout=30, base_url=server.url) as c:
        _login(c, key)
        page = c.get(f"/console/subscriptions/{world.subs['keep']}").text
        csrf = _csrf(page)
        base = {"id": str(world.subs["keep"]), "nonce": "n1", "back": "/console/"}
        assert c.post("/console/actions/cancel-now", data=base).status_code == 403
        assert c.post("/console/actions/cancel-now", data={**base, "csrf": csrf},
                      headers={"Origin": "https://evil.example"}).status_code == 403
        assert c.post("/console/actions/cancel-now", content=b'{"id": 1}',
                      headers={"Content-Type": "application/json"}).status_code == 415
        assert c.post("/console/actions/cancel-now", data={**base, "csrf": csrf, "pad": "x" * 20000}).status_code == 413
        with psycopg.connect(db_url) as conn:
            assert conn.execute("SELECT status FROM billing.subscription WHERE id = %s",
                                (world.subs["keep"],)).fetchone()[0] == "ACTIVE"
        r = c.post("/console/actions/cancel-now", data={**base, "csrf": csrf})
        assert r.status_code == 303 and "ok=" in r.headers["location"]


def test_revoking_the_key_ends_the_session(db_url, served):
    _, server = served
    key = create_test_key(db_url, "subscriptions:read")
    with httpx.Client(timeout=30, base_url=server.url) as c:
        _login(c, key)
        assert c.get("/console/events").status_code == 200
        from billing.api_keys import revoke_key

        revoke_key(db_url, "_".join(key.split("_")[:2]))
        r = c.get("/console/events", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/console/login")


def test_secure_cookies_behind_tls(db_url, monkeypatch):
    monkeypatch.setenv("BILLING_CONSOLE_COOKIE_SECURE", "true")
    assert Settings.from_env().console_cookie_secure == "true"
    with ConsoleServer(db_url, console_cookie_secure="true") as server:
        key = create_test_key(db_url, "admin")
        with httpx.Client(timeout=30, base_url=server.url) as c:
            form = c.get("/console/login")
            assert "Secure" in form.headers["set-cookie"]
            token = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
            c.cookies.set("billing_console_login", token)  # httpx keeps Secure cookies off plain http
            r = c.post("/console/login", data={"csrf": token, "key": key})
            assert r.status_code == 303 and "Secure" in r.headers["set-cookie"]


def test_invoice_actions_need_an_admin_session_and_the_csrf_token(db_url, served):
    """Retry, void and refund move money: a read session, a missing token or another site's form
    changes nothing; an admin session's form does, once per form (its nonce)."""
    world, server = served

    def invoice() -> tuple:
        with psycopg.connect(db_url) as conn:
            return conn.execute("SELECT status, next_attempt_at, (SELECT count(*) FROM billing.refund) "
                                "FROM billing.invoice WHERE id = %s", (world.open_invoice,)).fetchone()

    untouched = invoice()
    reader, admin = create_test_key(db_url, "subscriptions:read"), create_test_key(db_url, "admin")
    forms = [("retry-now", world.open_invoice, {}), ("void", world.open_invoice, {"p_reason": "x"}),
             ("refund", world.paid_invoice, {"p_amount": "100"})]
    with httpx.Client(timeout=30, base_url=server.url) as c:
        _login(c, reader)
        page = c.get("/console/invoices").text
        assert 'data-action="void"' in page and "disabled" in page  # shown, not usable
        for name, target, fields in forms:
            r = c.post(f"/console/actions/{name}", data={"csrf": _csrf(page), "id": str(target), "nonce": "n", **fields})
            assert r.status_code == 403 and "may look but not act" in r.text
    with httpx.Client(timeout=30, base_url=server.url) as c:
        _login(c, admin)
        page = c.get("/console/invoices").text
        for name, target, fields in forms:
            base = {"id": str(target), "nonce": "n", **fields}
            assert c.post(f"/console/actions/{name}", data=base).status_code == 403
            assert c.post(f"/console/actions/{name}", data={**base, "csrf": _csrf(page)},
                          headers={"Origin": "https://evil.example"}).status_code == 403
        assert invoice() == untouched
        refund = {"csrf": _csrf(page), "id": str(world.paid_invoice), "nonce": "same-form", "p_amount": "100",
                  "back": "/console/invoices"}
        for _ in range(2):  # the same form sent twice (a double click, a reload): one refund
            r = c.post("/console/actions/refund", data=refund)
            assert r.status_code == 303 and "ok=" in r.headers["location"], r.headers["location"]
        r = c.post("/console/actions/refund", data={**refund, "nonce": "other", "p_amount": "999999"})
        assert r.status_code == 303 and "error=" in r.headers["location"]  # more than was paid
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT array_agg(amount) FROM billing.refund").fetchone()[0] == [100]


def test_customers_are_found_by_email_or_name_and_their_invoices_link_their_documents(db_url, served):
    """The customer search reads the billing details (issue 15's email and name); every invoice row
    links its document, served to a logged-in session (a link cannot carry the API's bearer key)."""
    world, server = served
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.set_customer_details(7001, 'Acme Widgets Ltd', 'billing@acme.example', "
                     "'1 Main Street', 'Paris', '75001', NULL, 'FR', NULL, 'TAXABLE')")
        conn.execute("SELECT billing.set_customer_details(7002, 'Globex SA', 'ap@globex.example', "
                     "'2 Side Street', 'Lyon', '69001', NULL, 'FR', NULL, 'TAXABLE')")
        number = conn.execute("SELECT (billing.finalize_invoice(%s, %s)).number",
                              (world.paid_invoice, datetime(2026, 9, 11, tzinfo=timezone.utc))).fetchone()[0]
    assert number
    reader = create_test_key(db_url, "subscriptions:read", "customers:read")  # (personal data: customers:read)
    with httpx.Client(timeout=30, base_url=server.url) as c:
        assert c.get(f"/console/invoices/{world.paid_invoice}.html").status_code in (303, 401)  # no session
        _login(c, reader)
        for q in ("acme", "BILLING@ACME", "Widgets"):
            page = c.get("/console/customers", params={"q": q}).text
            assert 'href="/console/customers/7001"' in page and 'href="/console/customers/7002"' not in page, q
        page = c.get("/console/customers", params={"q": "globex"}).text
        assert 'href="/console/customers/7002"' in page and 'href="/console/customers/7001"' not in page
        page = c.get("/console/customers/7001").text
        html_link, pdf_link = (f"/console/invoices/{world.paid_invoice}.{ext}" for ext in ("html", "pdf"))
        assert f'href="{html_link}"' in page and f'href="{pdf_link}"' in page
        doc = c.get(html_link)
        # The invoice was paid, so finalized no later than its first charge (docs/invoices.md): its
        # bill-to is the one of that instant, and details set afterwards never rewrite the document.
        assert doc.status_code == 200 and number in doc.text and "Acme Widgets Ltd" not in doc.text
        pdf = c.get(pdf_link)
        assert pdf.status_code == 200 and pdf.headers["content-type"] == "application/pdf"
        assert pdf.content.startswith(b"%PDF") and number in pdf.headers["content-disposition"]


def test_a_login_without_customers_read_sees_no_personal_data_and_cannot_search_it(db_url, served):
    """As /v1 keeps names, emails, addresses, tax ids and events' payloads behind customers:read, so
    does the console: a subscriptions:read login sees ids and external ids, and its search by a name
    or an email answers exactly as for words nobody has (no oracle); a customers:read (or admin)
    login sees and searches them."""
    _, server = served
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.set_customer_details(7001, 'Acme Widgets Ltd', 'billing@acme.example', "
                     "'1 Main Street', 'Paris', '75001', NULL, 'FR', 'FR12345678901', 'TAXABLE')")
        conn.execute("SELECT billing.set_external_id('customer', 7001, 'cus_acme', now())")
    secrets = ("Acme Widgets", "billing@acme.example", "1 Main Street", "75001", "FR12345678901")
    reader = create_test_key(db_url, "subscriptions:read")
    people = create_test_key(db_url, "subscriptions:read", "customers:read")
    with httpx.Client(timeout=30, base_url=server.url) as c:
        _login(c, reader)
        pages = {path: c.get(path) for path in ("/console/customers", "/console/customers/7001", "/console/events",
                                                "/console/events?subject=customer/7001", "/console/")}
        for path, page in pages.items():
            assert page.status_code == 200, path
            leaked = [x for x in secrets if x in page.text]
            assert not leaked, f"{path} shows {leaked}"
        assert "cus_acme" in pages["/console/customers/7001"].text  # ids and external ids instead
        events = pages["/console/events"].text  # payloads: customers:read, as GET /v1/events
        assert "<summary>data</summary>" not in events and "needs customers:read" in events
        found = {q: c.get("/console/customers", params={"q": q}).text
                 for q in ("acme", "billing@acme.example", "@acme", "Widgets", "nobody-has-this", "cus_acme", "7001")}
        for q in ("acme", "billing@acme.example", "@acme", "Widgets"):
            rows = re.findall(r'href="/console/customers/(\d+)"', found[q])
            assert rows == [], (q, rows)  # no search by personal data ...
            assert found[q].replace(q, "Q") == found["nobody-has-this"].replace("nobody-has-this", "Q"), q  # ... same page
        assert 'href="/console/customers/7001"' in found["cus_acme"] and 'href="/console/customers/7001"' in found["7001"]
    with httpx.Client(timeout=30, base_url=server.url) as c:
        _login(c, people)
        assert "billing@acme.example" in c.get("/console/customers/7001").text
        assert 'href="/console/customers/7001"' in c.get("/console/customers", params={"q": "acme"}).text
        assert "<summary>data</summary>" in c.get("/console/events").text


def test_the_subscription_page_shows_its_usage_and_upcoming_invoice(db_url, served):
    """The usage panel (issue 29): the customer's usage per meter in the open period, from the
    rollups, and the preview of the next invoicing (the next period's price and the usage so far,
    priced by the plan's charge)."""
    from .console_world import NOW, T0

    _, server = served
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.upsert_customer(7090)")
        conn.execute("SELECT billing.upsert_meter('con_requests', 'con.request', 'count', NULL, '{}', %s)", (T0,))
        conn.execute("SELECT billing.upsert_plan('CON_API', 500, 'USD', 'MONTH', 1, %s)", (T0,))
        conn.execute("SELECT billing.upsert_plan_charge('CON_API', 'con_requests', 'per_unit', 7, NULL, '[]', 0, NULL, NULL, %s)",
                     (T0,))
        sub = conn.execute("SELECT id FROM billing.create_subscription('con-usage', 7090, 'CON_API', %s)", (T0,)).fetchone()[0]
        events = [{"specversion": "1.0", "id": f"con{i}", "source": "gw", "type": "con.request",
                   "time": (T0 + timedelta(days=2, hours=i)).isoformat().replace("+00:00", "Z"), "subject": "7090",
                   "data": {}} for i in range(3)]
        import json
        conn.execute("SELECT billing.ingest_usage(%s::jsonb, %s)", (json.dumps(events), NOW))
        plain = conn.execute("SELECT id FROM billing.subscription WHERE plan_id NOT IN (SELECT plan_id FROM billing.plan_charge) "
                             "ORDER BY id LIMIT 1").fetchone()[0]
    reader = create_test_key(db_url, "subscriptions:read")
    with httpx.Client(timeout=30, base_url=server.url) as c:
        _login(c, reader)
        page = c.get(f"/console/subscriptions/{sub}").text
        meters = re.search(r'<table id="usage-meters">(.*?)</table>', page, re.S).group(1)
        assert re.search(r"<code>con_requests</code></td><td>count</td><td class=\"num\">3</td><td class=\"num\">3</td>", meters), meters
        upcoming = re.search(r'<table id="upcoming-invoice">(.*?)</table>', page, re.S).group(1)
        assert "plan CON_API" in upcoming and "<code>con_requests</code> on CON_API" in upcoming
        assert re.search(r'id="upcoming-total">5\.21 USD<', upcoming), upcoming  # 500 + 3 x 7
        other = c.get(f"/console/subscriptions/{plain}").text
        assert 'id="usage-none"' in other and 'id="upcoming-invoice"' in other
