"""The customer portal over plain HTTP, as an attacker at the port would use it (docs/customers.md,
"The portal"): a link logs in once; used, expired, revoked, edited and malformed links are refused
alike; a session reads and acts on its own customer only (every id of the other customer is "not
found", and nothing of theirs changes); forged forms are refused; every action can be repeated
without effect; a customer token cannot mint a link for another customer."""

from __future__ import annotations

import re
from datetime import timedelta

import httpx
import psycopg
import pytest

from billing.notifications.links import new_token

from .conftest import create_test_key
from .console_world import NOW, ConsoleServer
from .portal_world import build_portal_world, csrf_of, login, make_link


@pytest.fixture
def served(db_url):
    world = build_portal_world(db_url)
    with ConsoleServer(db_url, portal_url="http://127.0.0.1/portal") as server:
        yield world, server


def _state(db_url, customer_id):
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT s.status, s.cancel_at_period_end, p.code, sp.code, s.version FROM billing.subscription s "
            "JOIN billing.plan p ON p.id = s.plan_id LEFT JOIN billing.plan sp ON sp.id = s.scheduled_plan_id "
            "WHERE s.customer_id = %s", (customer_id,)).fetchone()


def test_a_link_logs_in_once_into_a_strict_http_only_cookie(db_url, served):
    world, server = served
    token = make_link(db_url, 1)
    with httpx.Client(base_url=server.url, timeout=30) as c:
        page = c.get("/portal/login", params={"token": token})
        assert page.status_code == 200 and 'lang="pt-BR"' not in page.text  # before login: the browser's language
        with psycopg.connect(db_url) as conn:  # a GET (a mail scanner's) does not use the link
            assert conn.execute("SELECT used_at FROM billing.portal_link WHERE customer_id = 1").fetchone()[0] is None
        r = login(c, token)
        assert r.status_code == 303 and r.headers["location"] == "/portal/"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/portal" in cookie
        home = c.get("/portal/")
        assert home.status_code == 200 and 'lang="pt-BR"' in home.text and "Ana Souza" in home.text
        assert world.numbers[1] in home.text and world.numbers[2] not in home.text and "Bernd" not in home.text
        assert "€\xa010,00" in home.text  # Babel: pt-BR writes euros this way
        for header in ("content-security-policy", "x-frame-options", "cache-control"):
            assert header in home.headers
        with psycopg.connect(db_url) as conn:
            stored = conn.execute("SELECT token_hash FROM billing.portal_session").fetchone()[0]
        assert c.cookies["billing_portal"].encode() not in bytes(stored)  # only its hash is kept
    with httpx.Client(base_url=server.url, timeout=30) as other:  # the same link again, from anywhere
        assert login(other, token).status_code == 404 and "billing_portal" not in other.cookies


def test_expired_revoked_edited_and_malformed_links_are_refused_alike(db_url, served):
    _, server = served
    expired = make_link(db_url, 1, now=NOW - timedelta(hours=3), ttl=timedelta(hours=2))
    revoked = make_link(db_url, 1)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.revoke_portal_links(1, %s)", (NOW,))
    edited = "pl_2_" + make_link(db_url, 1).split("_", 2)[2]  # names customer 2 with customer 1's secret
    for token in (expired, revoked, edited, new_token(1)):
        with httpx.Client(base_url=server.url, timeout=30) as c:
            r = login(c, token)
            assert r.status_code == 404 and "billing_portal" not in c.cookies, token
            assert c.get("/portal/").status_code == 401
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert c.get("/portal/login", params={"token": "pl_1_short"}).status_code == 404
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM billing.portal_session").fetchone()[0] == 0


def test_a_session_never_reads_or_changes_another_customers_data(db_url, served):
    world, server = served
    before = _state(db_url, 2)
    with httpx.Client(base_url=server.url, timeout=30) as c:
        login(c, make_link(db_url, 1))
        csrf = csrf_of(c.get("/portal/").text)
        own = c.get(f"/portal/invoices/{world.invoices[1]}.pdf")
        assert own.status_code == 200 and own.content.startswith(b"%PDF") and "attachment" in own.headers["content-disposition"]
        assert c.get(f"/portal/invoices/{world.invoices[1]}.html").status_code == 200
        theirs = world.invoices[2]
        for path in (f"/portal/invoices/{theirs}.pdf", f"/portal/invoices/{theirs}.html", f"/portal/invoices/{theirs}/pay"):
            r = c.get(path)
            assert r.status_code == 404 and world.numbers[2] not in r.text, path
        sub = world.subs[2]
        for action, form in (("cancel", {}), ("uncancel", {}), ("change-plan", {"plan": "PRO"})):
            r = c.post(f"/portal/subscriptions/{sub}/{action}", data={"csrf": csrf, **form})
            assert r.status_code == 404, action
        assert c.post(f"/portal/invoices/{theirs}/pay", data={"csrf": csrf}).status_code == 404
    assert _state(db_url, 2) == before
    with psycopg.connect(db_url) as conn:  # nothing was even attempted on customer 2 in its name
        assert conn.execute("SELECT count(*) FROM billing.audit_log WHERE actor LIKE 'portal-session:%%' "
                            "AND customer_id = 2").fetchone()[0] == 0


def test_forged_forms_and_missing_sessions_are_refused(db_url, served):
    world, server = served
    sub = world.subs[1]
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert c.post(f"/portal/subscriptions/{sub}/cancel", data={}).status_code == 401  # no session
        login(c, make_link(db_url, 1))
        csrf = csrf_of(c.get("/portal/").text)
        assert c.post(f"/portal/subscriptions/{sub}/cancel", data={"x": "1"}).status_code == 403
        assert c.post(f"/portal/subscriptions/{sub}/cancel", data={"csrf": "0" * 64}).status_code == 403
        assert c.post(f"/portal/subscriptions/{sub}/cancel", data={"csrf": csrf},
                      headers={"Origin": "https://evil.example"}).status_code == 403
        assert c.post(f"/portal/subscriptions/{sub}/cancel", content=b'{"csrf": 1}',
                      headers={"Content-Type": "application/json"}).status_code == 415
    assert _state(db_url, 1)[1] is False
    with httpx.Client(base_url=server.url, timeout=30) as c:  # a login form posted without its own nonce cookie
        token = make_link(db_url, 1)
        assert c.post("/portal/login", data={"token": token, "csrf": "x"}).status_code == 403


def test_actions_are_repeatable_and_limited_to_what_the_operator_offers(db_url, served):
    world, server = served
    sub = world.subs[1]
    with httpx.Client(base_url=server.url, timeout=30) as c:
        login(c, make_link(db_url, 1))
        csrf = csrf_of(c.get("/portal/").text)
        for _ in range(2):
            r = c.post(f"/portal/subscriptions/{sub}/cancel", data={"csrf": csrf})
            assert r.status_code == 303 and r.headers["location"] == "/portal/?ok=canceled"
        assert _state(db_url, 1)[:2] == ("ACTIVE", True)
        v = _state(db_url, 1)[4]
        for _ in range(2):
            assert c.post(f"/portal/subscriptions/{sub}/uncancel", data={"csrf": csrf}).status_code == 303
        assert _state(db_url, 1)[1] is False and _state(db_url, 1)[4] == v + 1  # changed once
        # Not offered: ENTERPRISE exists but BASIC does not offer it; unknown plans alike.
        for plan in ("ENTERPRISE", "NOPE"):
            assert c.post(f"/portal/subscriptions/{sub}/change-plan", data={"csrf": csrf, "plan": plan}).status_code == 422
        assert _state(db_url, 1)[2] == "BASIC"
        for _ in range(2):
            assert c.post(f"/portal/subscriptions/{sub}/change-plan", data={"csrf": csrf, "plan": "PRO"}).status_code == 303
        assert _state(db_url, 1)[2] == "PRO"
        with psycopg.connect(db_url) as conn:
            prorations = conn.execute("SELECT count(*), min(amount) FROM billing.invoice WHERE customer_id = 1 "
                                      "AND kind = 'PRORATION'").fetchone()
            actor = conn.execute("SELECT actor FROM billing.audit_log WHERE function = 'change_plan' "
                                 "ORDER BY id DESC LIMIT 1").fetchone()[0]
        assert prorations[0] == 1 and prorations[1] > 0  # billed once, never free
        assert actor == "portal-session:1"
        # PRO offers nothing: the page offers no change; a forged one is refused.
        page = c.get("/portal/").text
        assert "change-plan" not in page
        assert c.post(f"/portal/subscriptions/{sub}/change-plan", data={"csrf": csrf, "plan": "BASIC"}).status_code == 422


def test_a_plan_offered_at_period_end_is_scheduled_not_switched(db_url, served):
    world, server = served
    with httpx.Client(base_url=server.url, timeout=30) as c:
        login(c, make_link(db_url, 2))
        csrf = csrf_of(c.get("/portal/").text)
        r = c.post(f"/portal/subscriptions/{world.subs[2]}/change-plan", data={"csrf": csrf, "plan": "TEAM"})
        assert r.headers["location"] == "/portal/?ok=plan_scheduled"
        assert c.post(f"/portal/subscriptions/{world.subs[2]}/change-plan",
                      data={"csrf": csrf, "plan": "TEAM"}).status_code == 303
        page = c.get("/portal/?ok=plan_scheduled").text
        assert 'lang="de"' in page and "TEAM" in page
    assert _state(db_url, 2)[2:4] == ("BASIC", "TEAM")
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM billing.invoice WHERE customer_id = 2 AND kind = 'PRORATION'").fetchone()[0] == 0


def test_logout_ends_the_session_and_uncancel_after_the_period_end_is_refused(db_url, served):
    world, server = served
    sub = world.subs[1]
    with httpx.Client(base_url=server.url, timeout=30) as c:
        login(c, make_link(db_url, 1))
        csrf = csrf_of(c.get("/portal/").text)
        c.post(f"/portal/subscriptions/{sub}/cancel", data={"csrf": csrf})
        kept = c.cookies["billing_portal"]
        assert c.post("/portal/logout", data={"csrf": csrf}).status_code == 200
    with httpx.Client(timeout=30, base_url=server.url, cookies={"billing_portal": kept}) as c:
        assert c.get("/portal/").status_code == 401  # the cookie kept by an attacker is dead too
    server.app.state.api.clock.advance(timedelta(days=40))  # past the period end: the subscription ended
    later = server.app.state.api.clock.now()
    with httpx.Client(base_url=server.url, timeout=30) as c:
        login(c, make_link(db_url, 1, now=later))
        csrf = csrf_of(c.get("/portal/").text)
        assert c.post(f"/portal/subscriptions/{sub}/uncancel", data={"csrf": csrf}).status_code == 422
    # the refusal rolls back: the cancellation stays pending and the renewal job ends it (no period for free)
    assert _state(db_url, 1)[1] is True


def test_the_http_route_makes_links_and_a_customer_token_only_for_its_own_customer(db_url, served):
    _, server = served
    admin = create_test_key(db_url, "admin")
    opener = create_test_key(db_url, "customer-sessions:write", "subscriptions:write")
    with httpx.Client(base_url=server.url, timeout=30) as c:
        r = c.post("/customers/1/portal-links", json={"next": "/invoices"}, headers={"Authorization": f"Bearer {admin}"})
        assert r.status_code == 201
        url = r.json()["url"]
        assert url.startswith("http://127.0.0.1/portal/login?token=pl_1_") and "next=/invoices" in url
        assert c.post("/customers/1/portal-links", json={"next": "https://evil.example"},
                      headers={"Authorization": f"Bearer {admin}"}).status_code == 422
        cs = c.post("/customer-sessions", json={"customerId": 1, "ttlSeconds": 300},
                    headers={"Authorization": f"Bearer {opener}"}).json()["token"]
        assert c.post("/customers/2/portal-links", json={}, headers={"Authorization": f"Bearer {cs}"}).status_code == 404
        assert c.post("/customers/1/portal-links", json={}, headers={"Authorization": f"Bearer {cs}"}).status_code == 201
        assert c.post("/customers/1/portal-links", json={}).status_code == 401
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM billing.portal_link WHERE customer_id = 2").fetchone()[0] == 0


def _methods(db_url, customer_id):
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT provider, payment_method_ref, brand, last4, is_default FROM billing.payment_method "
                            "WHERE customer_id = %s AND detached_at IS NULL ORDER BY id", (customer_id,)).fetchall()


def test_a_card_is_added_through_a_setup_intent_once_and_for_its_own_customer(db_url, stripe_fake):
    import re

    world = build_portal_world(db_url)
    with ConsoleServer(db_url, stripe_api_key="sk_test_portal", stripe_api_base=stripe_fake.url) as server:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            login(c, make_link(db_url, 1))
            page = c.get("/portal/payment-methods/new").text
            csrf, nonce = csrf_of(page), re.search(r'name="nonce" value="([^"]+)"', page).group(1)
            assert 'value="pm_card_visa"' in page
            for _ in range(2):  # the same form twice: one SetupIntent, one card
                r = c.post("/portal/payment-methods", data={"csrf": csrf, "nonce": nonce, "payment_method": "pm_card_visa"})
                assert r.headers["location"] == "/portal/payment-methods?ok=card_added"
            assert _methods(db_url, 1) == [("stripe", "pm_card_visa", "visa", "4242", True)]
            assert len(stripe_fake.setups) == 1
            r = c.post("/portal/payment-methods", data={"csrf": csrf, "nonce": "n" * 16,
                                                        "payment_method": "pm_card_chargeDeclinedInsufficientFunds"})
            assert r.headers["location"] == "/portal/payment-methods?ok=card_declined"
            assert len(_methods(db_url, 1)) == 1
            assert c.post("/portal/payment-methods", data={"csrf": csrf, "nonce": "m" * 16,
                                                           "payment_method": "pm_anything"}).status_code == 422
            home = c.get("/portal/payment-methods").text
            assert "4242" in home
        with httpx.Client(base_url=server.url, timeout=30) as other:  # customer 2: a card its bank must confirm
            login(other, make_link(db_url, 2))
            csrf2 = csrf_of(other.get("/portal/").text)
            # (a test card the page does not offer is refused: only the listed ones)
            assert other.post("/portal/payment-methods", data={"csrf": csrf2, "nonce": "a" * 16,
                                                               "payment_method": "pm_card_authenticationRequired"}).status_code == 422
        seti = stripe_fake._setup("k-2", {"customer": "cus_2", "payment_method": "pm_card_authenticationRequired",
                                          "metadata[customer_id]": "2", "return_url": "x"}, {})[1]["id"]
        with httpx.Client(base_url=server.url, timeout=30) as c:
            login(c, make_link(db_url, 1))
            assert c.get("/portal/payment-methods/return", params={"setup_intent": seti}).status_code == 404
        with httpx.Client(base_url=server.url, timeout=30) as other:
            login(other, make_link(db_url, 2))
            r = other.get("/portal/payment-methods/return", params={"setup_intent": seti})
            assert r.headers["location"] == "/portal/payment-methods?ok=pending"
            stripe_fake.authenticate_setup(seti)
            r = other.get("/portal/payment-methods/return", params={"setup_intent": seti})
            assert r.headers["location"] == "/portal/payment-methods?ok=card_added"
        assert [m[1] for m in _methods(db_url, 2)] == ["pm_card_authenticationRequired"]
        assert [m[1] for m in _methods(db_url, 1)] == ["pm_card_visa"]  # customer 1's untouched
    assert stripe_fake.rejected == []  # stripe-mock accepted every request's shape
    assert world.subs


def test_without_a_test_key_the_portal_offers_no_test_cards(db_url, served):
    _, server = served
    with httpx.Client(base_url=server.url, timeout=30) as c:
        login(c, make_link(db_url, 1))
        page = c.get("/portal/payment-methods/new").text
        assert "pm_card_visa" not in page and 'role="alert"' in page
        r = c.post("/portal/payment-methods", data={"csrf": csrf_of(c.get("/portal/").text), "nonce": "n" * 16,
                                                    "payment_method": "pm_card_visa"})
        assert r.status_code == 422


def test_the_simulators_authentication_page_pays_once_through_the_portal(db_url):
    """The simulator asks for authentication; the portal's payment page sends the customer to the
    simulator's own page, which approves; back on the portal the invoice is paid, once."""
    import asyncio
    import threading

    from billing.clock import SimulatedClock
    from billing.db import async_pool
    from billing.gateway.client import GatewayClient
    from billing.gateway.decisions import DecisionModel
    from billing.gateway.simulator import GatewaySimulator
    from billing.providers import SimProvider

    from .test_stripe import charger_for

    class AskForAuthentication(DecisionModel):
        def decline_code(self, key, customer_id, amount, currency):
            return "authentication_required"

    world = build_portal_world(db_url)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    sim = GatewaySimulator(rate=100, decisions=AskForAuthentication())
    sim_url = asyncio.run_coroutine_threadsafe(sim.start(), loop).result(30)
    try:
        async def charge():
            pool = await async_pool(db_url, max_size=2)
            provider = SimProvider(GatewayClient(sim_url))
            try:
                return await charger_for(pool, provider, SimulatedClock(NOW)).charge_due()
            finally:
                await provider.close()
                await pool.close()

        assert asyncio.run(charge()) == 2
        inv = world.invoices[1]
        with psycopg.connect(db_url) as conn:
            assert conn.execute("SELECT status, action_required_until IS NOT NULL FROM billing.invoice WHERE id = %s",
                                (inv,)).fetchone() == ("OPEN", True)
        with ConsoleServer(db_url, gateway_url=sim_url) as server:
            with httpx.Client(base_url=server.url, timeout=30) as other:  # customer 2 cannot pay (or see) customer 1's
                login(other, make_link(db_url, 2))
                assert other.post(f"/portal/invoices/{inv}/pay", data={"csrf": csrf_of(other.get("/portal/").text)}
                                  ).status_code == 404
            with httpx.Client(base_url=server.url, timeout=30) as c:
                login(c, make_link(db_url, 1))
                home = c.get("/portal/invoices").text
                assert f"/portal/invoices/{inv}/pay" in home
                page = c.get(f"/portal/invoices/{inv}/pay")
                assert page.status_code == 200 and "€\xa010,00" in page.text
                r = c.post(f"/portal/invoices/{inv}/pay", data={"csrf": csrf_of(page.text)})
                assert r.status_code == 303 and r.headers["location"].startswith(f"{sim_url}/authenticate/")
                bank = httpx.get(r.headers["location"])
                assert bank.status_code == 200 and "Approve" in bank.text
                back_url = re.search(r'name="returnUrl" value="([^"]+)"', bank.text).group(1).replace("&amp;", "&")
                approved = httpx.post(r.headers["location"].split("?")[0],
                                      data={"decision": "approve", "returnUrl": back_url})
                assert approved.status_code == 303 and approved.headers["location"] == back_url
                assert back_url == f"{server.url}/portal/invoices/{inv}/pay/return"
                for _ in range(2):  # back on the portal; a reload: paid once
                    done = c.get(back_url.removeprefix(server.url))
                    assert done.headers["location"] == "/portal/invoices?ok=paid"
        with psycopg.connect(db_url) as conn:
            assert conn.execute("SELECT status FROM billing.invoice WHERE id = %s", (inv,)).fetchone()[0] == "PAID"
            paid = conn.execute("SELECT count(*) FROM billing.outbox_event WHERE event_type = 'InvoicePaid' "
                                "AND customer_id = 1").fetchone()[0]
        assert paid == 1
        ledger = sim.ledger()
        assert [c["status"] for c in ledger["charges"] if c["customerId"] == 1] == ["succeeded"]
        assert sim.stats()["authenticated"] == 1
    finally:
        asyncio.run_coroutine_threadsafe(sim.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
