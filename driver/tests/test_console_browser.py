"""The operator console in a real browser: Debian's chromium driven by Selenium (chromedriver).

Logs in, visits every page (a screenshot of each, at 1280 px and the overview on a phone, under
$BILLING_CONSOLE_ARTIFACTS, default .cache/artifacts/console/), performs each action the SQL API
of this database offers and checks its effect in the database and the audit log, sends forms
without their CSRF token (refused, nothing changed), and checks that a read-only session sees
but cannot act. scripts/services/chromium.sh installs the browser (`make test` runs it first).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from billing.config import REPO_ROOT

from .conftest import create_test_key
from .console_world import NOW, T0, ConsoleServer, build_world

ARTIFACTS = Path(os.environ.get("BILLING_CONSOLE_ARTIFACTS", REPO_ROOT / ".cache" / "artifacts" / "console"))


def _chromedriver() -> str:
    path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not os.path.exists(path):
        pytest.fail("chromedriver is missing: run scripts/services/chromium.sh (make test does)")
    return path


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--lang=en-US"):
        options.add_argument(arg)
    binary = shutil.which("chromium")
    if binary:
        options.binary_location = binary
    driver = webdriver.Chrome(service=Service(_chromedriver()), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def shot(driver, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return Math.max(document.body.scrollHeight, 600)")
    width = driver.get_window_size()["width"]
    driver.set_window_size(width, min(height + 140, 4000))
    assert driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    driver.set_window_size(width, 900)


def navigates(driver, act) -> None:
    """Do `act` (a click, a submit) and wait until the browser has left the current page."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element(By.TAG_NAME, "html")
    act()

    def gone(_) -> bool:
        try:
            old.is_enabled()
            return False
        except WebDriverException:  # stale, or chromium's "node does not belong to the document"
            return True

    WebDriverWait(driver, 20).until(gone)


def login(driver, url: str, key: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/console/")
    assert "/console/login" in driver.current_url
    box = driver.find_element(By.ID, "key")
    box.send_keys(key)
    navigates(driver, box.submit)
    assert driver.find_element(By.ID, "who").text.startswith(key.split("_")[0] + "_")


def one(db_url: str, query: str, params=()) -> dict:
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(query, params).fetchone()


def submit_action(driver, action: str, target_id: int, *, accept: bool = True) -> None:
    from selenium.webdriver.common.by import By

    form = driver.find_element(By.CSS_SELECTOR, f'form[data-action="{action}"] input[name="id"][value="{target_id}"]') \
        .find_element(By.XPATH, "..")
    confirm = form.get_attribute("data-confirm")
    button = form.find_element(By.CSS_SELECTOR, "button[type=submit]")
    if confirm and not accept:
        button.click()
        driver.switch_to.alert.dismiss()
        return

    def act():
        button.click()
        if confirm:
            driver.switch_to.alert.accept()

    navigates(driver, act)


def test_console_in_a_browser(db_url, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    world = build_world(db_url)
    admin = create_test_key(db_url, "admin", name="console-admin")
    admin_id = "_".join(admin.split("_")[:2])
    with ConsoleServer(db_url) as server:
        d = browser
        url = server.url
        # -- logging in: the key is checked, a session cookie is set (HttpOnly, SameSite=Strict).
        d.get(f"{url}/console/login")
        shot(d, "01-login")
        login(d, url, admin)
        cookie = d.get_cookie("billing_console")
        assert cookie and cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
        assert d.execute_script("return document.cookie").find("billing_console=") < 0  # not readable by scripts

        # -- overview: figures, MRR, funnel; refreshed by htmx.
        assert d.find_element(By.ID, "active-subscriptions").text == "2"  # the third is past due
        assert "USD" in d.find_element(By.ID, "mrr").text
        assert d.find_element(By.CSS_SELECTOR, "svg.funnel") and d.find_element(By.CSS_SELECTOR, "svg.spark")
        assert d.find_element(By.ID, "outbox-dead").text == "0 DEAD"
        first = d.find_element(By.ID, "figures")
        WebDriverWait(d, 15).until(ec.staleness_of(first))  # htmx replaced the figures
        assert d.find_element(By.ID, "active-subscriptions").text == "2"  # the third is past due
        shot(d, "02-overview")
        d.set_window_size(390, 844)
        d.get(f"{url}/console/")
        overflow = d.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 1, f"the overview scrolls sideways on a phone by {overflow}px"
        d.save_screenshot(str(ARTIFACTS / "03-overview-phone.png"))
        d.set_window_size(1280, 900)

        # -- customers: list, search by id, a customer's page.
        d.get(f"{url}/console/customers")
        assert len(d.find_elements(By.CSS_SELECTOR, "#customers tbody tr")) == 3
        box = d.find_element(By.ID, "q")
        box.send_keys("7002")
        navigates(d, box.submit)
        rows = d.find_elements(By.CSS_SELECTOR, "#customers tbody tr")
        assert len(rows) == 1 and rows[0].text.startswith("7002")
        shot(d, "04-customers")
        navigates(d, rows[0].find_element(By.TAG_NAME, "a").click)
        assert d.find_element(By.TAG_NAME, "h1").text == "Customer 7002"
        assert d.find_elements(By.CSS_SELECTOR, "#customer-subscriptions tbody tr a")
        assert "InvoicePaid" in d.find_element(By.ID, "customer-timeline").text
        assert "charge attempt" in d.find_element(By.ID, "customer-timeline").text
        shot(d, "05-customer")

        # -- a subscription: actions of the SQL API, each checked in the database and the audit log.
        d.get(f"{url}/console/subscriptions/{world.subs['keep']}")
        shot(d, "06-subscription")
        offered = {f.get_attribute("data-action") for f in d.find_elements(By.CSS_SELECTOR, "#main form.action")
                   if f.find_elements(By.CSS_SELECTOR, f'input[name="id"][value="{world.subs["keep"]}"]')}
        assert {"cancel-now", "cancel-at-period-end", "change-plan"} <= offered
        submit_action(d, "cancel-at-period-end", world.subs["keep"])
        assert "done" in d.find_element(By.ID, "flash-ok").text
        assert one(db_url, "SELECT cancel_at_period_end FROM billing.subscription WHERE id = %s",
                   (world.subs["keep"],))["cancel_at_period_end"] is True
        audit = one(db_url, "SELECT actor, args FROM billing.audit_log WHERE function = 'cancel_subscription' "
                            "ORDER BY id DESC LIMIT 1")
        assert audit["actor"] == f"api-key:{admin_id}" and audit["args"]["at_period_end"] is True

        # The lifecycle, on the same subscription: each action through its form, its effect in the database.
        keep = world.subs["keep"]

        def done(action: str, target: int, **fields) -> None:
            form = d.find_element(By.CSS_SELECTOR, f'form[data-action="{action}"] input[name="id"][value="{target}"]') \
                .find_element(By.XPATH, "..")
            for name, value in fields.items():
                box = form.find_element(By.NAME, name)
                if box.tag_name == "select":
                    Select(box).select_by_value(value)
                else:  # also a datetime-local input, whose typing depends on the locale
                    d.execute_script("arguments[0].value = arguments[1]", box, value)
            submit_action(d, action, target)
            flash = d.find_elements(By.ID, "flash-ok")
            assert flash and "done" in flash[0].text, (action, d.find_element(By.TAG_NAME, "main").text[:600])

        def sub_row(sub_id: int) -> dict:
            return one(db_url, "SELECT status, cancel_at_period_end, coupon_code, quantity, paused_at, resume_at, "
                               "billing.plan_code(plan_id) AS plan, billing.plan_code(scheduled_plan_id) AS scheduled "
                               "FROM billing.subscription WHERE id = %s", (sub_id,))

        def audited(function: str) -> dict:
            row = one(db_url, "SELECT actor, args FROM billing.audit_log WHERE function = %s ORDER BY id DESC LIMIT 1",
                      (function,))
            assert row and row["actor"] == f"api-key:{admin_id}", (function, row)
            return row["args"]

        from selenium.webdriver.support.ui import Select

        assert not d.find_elements(By.CSS_SELECTOR, 'form[data-action="pause"]')  # it ends at period end: no pause
        done("uncancel", keep)
        assert sub_row(keep)["cancel_at_period_end"] is False
        audited("uncancel_subscription")
        done("apply-coupon", keep, p_code="WELCOME10")
        assert sub_row(keep)["coupon_code"] == "WELCOME10" and audited("apply_coupon")["code"] == "WELCOME10"
        done("set-quantity", keep, p_quantity="3")
        assert sub_row(keep)["quantity"] == 3 and audited("set_quantity")["quantity"] == 3
        done("change-plan", keep, p_plan_code="BASIC_M", p_when="period_end", p_prorate="true")
        row = sub_row(keep)
        assert (row["plan"], row["scheduled"]) == ("PRO_M", "BASIC_M"), row
        assert audited("change_plan")["when"] == "period_end"
        assert d.find_element(By.ID, "scheduled-plan").text == "BASIC_M"
        done("pause", keep, p_resume_at="2026-09-20T09:30")
        row = sub_row(keep)
        assert row["status"] == "PAUSED" and row["resume_at"] == T0.replace(day=20, minute=30), row
        assert "PAUSED" in d.find_element(By.TAG_NAME, "h1").text
        shot(d, "11-subscription-paused")
        done("resume", keep)
        row = sub_row(keep)
        assert row["status"] == "ACTIVE" and row["plan"] == "BASIC_M" and row["resume_at"] is None, row
        audited("resume_subscription")

        d.get(f"{url}/console/subscriptions/{world.subs['change']}")
        form = d.find_element(By.CSS_SELECTOR, 'form[data-action="change-plan"]')

        Select(form.find_element(By.TAG_NAME, "select")).select_by_value("PRO_Y")
        submit_action(d, "change-plan", world.subs["change"])
        assert "done" in d.find_element(By.ID, "flash-ok").text, d.find_element(By.TAG_NAME, "main").text
        assert d.find_element(By.ID, "plan-code").text.startswith("PRO_Y")
        assert one(db_url, "SELECT billing.plan_code(plan_id) AS code FROM billing.subscription WHERE id = %s",
                   (world.subs["change"],))["code"] == "PRO_Y"

        # A stale version (another change since the page was read) is refused; nothing changes.
        d.get(f"{url}/console/subscriptions/{world.subs['cancel']}")
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("SELECT billing.change_plan(%s, 'BASIC_M', %s)", (world.subs["cancel"], NOW))
        submit_action(d, "cancel-now", world.subs["cancel"])
        assert "version" in d.find_element(By.ID, "flash-error").text
        assert one(db_url, "SELECT status FROM billing.subscription WHERE id = %s", (world.subs["cancel"],))["status"] \
            != "CANCELED"
        d.get(f"{url}/console/subscriptions/{world.subs['cancel']}")
        submit_action(d, "cancel-now", world.subs["cancel"], accept=False)  # dismissed: nothing sent
        assert one(db_url, "SELECT status FROM billing.subscription WHERE id = %s", (world.subs["cancel"],))["status"] != "CANCELED"
        submit_action(d, "cancel-now", world.subs["cancel"])
        assert "done" in d.find_element(By.ID, "flash-ok").text
        row = one(db_url, "SELECT status FROM billing.subscription WHERE id = %s", (world.subs["cancel"],))
        assert row["status"] == "CANCELED"
        # Its invoice was declined once: in dunning, it stays OPEN and collectible (docs/money.md).
        assert one(db_url, "SELECT status FROM billing.invoice WHERE id = %s", (world.open_invoice,))["status"] == "OPEN"

        # -- invoices: filter by state; the invoice actions that exist in this database.
        d.get(f"{url}/console/invoices?status=PAID")
        states = {r.get_attribute("data-status") for r in d.find_elements(By.CSS_SELECTOR, "#invoices-table tbody tr")}
        assert states == {"PAID"}
        shot(d, "07-invoices")
        invoice_actions = {f.get_attribute("data-action") for f in d.find_elements(By.CSS_SELECTOR, "form.action")}
        with psycopg.connect(db_url, autocommit=True) as conn:
            existing = {r[0] for r in conn.execute(
                "SELECT proname FROM pg_proc WHERE pronamespace = 'billing'::regnamespace "
                "AND proname IN ('refund_invoice', 'void_invoice', 'retry_invoice')")}
        assert ("refund" in invoice_actions) == ("refund_invoice" in existing)
        assert not {"void", "retry-now"} & invoice_actions  # they apply to OPEN invoices only

        # Refund part of a paid invoice: a REQUESTED refund, by this operator, the worker executes it.
        done("refund", world.paid_invoice, p_amount="500")
        refund = one(db_url, "SELECT amount, status, requested_by FROM billing.refund WHERE invoice_id = %s",
                     (world.paid_invoice,))
        assert refund == {"amount": 500, "status": "REQUESTED", "requested_by": f"api-key:{admin_id}"}, refund

        # The invoice in dunning (its subscription canceled above, it stays owed): retry it now, then void it.
        with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:  # the worker's second try: declined
            for c in conn.execute("SELECT * FROM billing.claim_charges('w', 10, '5 minutes', %s)", (NOW,)).fetchall():
                if c["invoice_id"] == world.open_invoice:
                    conn.execute("SELECT billing.record_payment_result(%s, 'DECLINED', NULL, 'card_declined', %s)",
                                 (c["idempotency_key"], NOW))
        d.get(f"{url}/console/invoices?status=OPEN")
        assert d.find_element(By.ID, f"invoice-{world.open_invoice}").get_attribute("data-status") == "OPEN"
        assert {"retry-now", "void"} <= {f.get_attribute("data-action") for f in
                                         d.find_elements(By.CSS_SELECTOR, f"#invoice-{world.open_invoice} form.action")}
        shot(d, "12-invoices-open")
        before = one(db_url, "SELECT next_attempt_at FROM billing.invoice WHERE id = %s", (world.open_invoice,))
        assert before["next_attempt_at"] > NOW
        done("retry-now", world.open_invoice)
        assert one(db_url, "SELECT next_attempt_at FROM billing.invoice WHERE id = %s",
                   (world.open_invoice,))["next_attempt_at"] == NOW
        assert d.find_element(By.CSS_SELECTOR, f"#invoice-{world.open_invoice} .next-try").text \
            == "next try 2026-09-11 09:00 UTC"  # the page it came back to shows it
        assert audited("retry_invoice")["invoice_id"] == world.open_invoice
        done("void", world.open_invoice, p_reason="goodwill after the outage")
        voided = one(db_url, "SELECT status, next_attempt_at FROM billing.invoice WHERE id = %s", (world.open_invoice,))
        assert voided == {"status": "VOID", "next_attempt_at": None}, voided
        assert one(db_url, "SELECT payload -> 'data' ->> 'reason' AS reason FROM billing.outbox_event "
                           "WHERE event_type = 'InvoiceVoided' AND aggregate_id = %s",
                   (world.open_invoice,))["reason"] == "goodwill after the outage"
        assert audited("void_invoice")["reason"] == "goodwill after the outage"
        d.get(f"{url}/console/invoices?status=VOID")
        assert d.find_element(By.ID, f"invoice-{world.open_invoice}").get_attribute("data-status") == "VOID"
        shot(d, "13-invoices-void")

        # -- events: search by subject and type, replay one.
        d.get(f"{url}/console/events")
        box = d.find_element(By.ID, "subject")
        box.send_keys(f"invoice/{world.paid_invoice}")
        d.find_element(By.ID, "type").send_keys("InvoicePaid")
        navigates(d, box.submit)
        rows = d.find_elements(By.CSS_SELECTOR, "#events-table tbody tr")
        assert len(rows) == 1 and rows[0].get_attribute("data-status") == "PUBLISHED"
        outbox_id = int(rows[0].get_attribute("id").removeprefix("event-"))
        shot(d, "08-events")
        submit_action(d, "replay", outbox_id)
        assert "done" in d.find_element(By.ID, "flash-ok").text
        assert one(db_url, "SELECT status FROM billing.outbox_event WHERE id = %s", (outbox_id,))["status"] == "PENDING"
        assert d.find_element(By.ID, f"event-{outbox_id}").get_attribute("data-status") == "PENDING"
        assert one(db_url, "SELECT actor FROM billing.audit_log WHERE function = 'replay_outbox_event'")["actor"] \
            == f"api-key:{admin_id}"

        # -- a form without its CSRF token is refused (403) and changes nothing.
        d.get(f"{url}/console/subscriptions/{world.subs['change']}")
        version = one(db_url, "SELECT version FROM billing.subscription WHERE id = %s", (world.subs["change"],))["version"]
        d.execute_script("document.querySelector('form[data-action=\"cancel-at-period-end\"] input[name=csrf]').remove()")
        submit_action(d, "cancel-at-period-end", world.subs["change"])
        assert d.find_element(By.TAG_NAME, "h1").text.startswith("the form's CSRF token is missing")
        shot(d, "09-csrf-refused")
        assert one(db_url, "SELECT version FROM billing.subscription WHERE id = %s", (world.subs["change"],))["version"] \
            == version
        # ...and so is a wrong one.
        d.get(f"{url}/console/subscriptions/{world.subs['change']}")
        d.execute_script("document.querySelector('form[data-action=\"cancel-at-period-end\"] input[name=csrf]')"
                         ".value = 'f'.repeat(64)")
        submit_action(d, "cancel-at-period-end", world.subs["change"])
        assert "CSRF" in d.find_element(By.TAG_NAME, "h1").text
        assert one(db_url, "SELECT version FROM billing.subscription WHERE id = %s", (world.subs["change"],))["version"] \
            == version

        # -- logging out ends the session on the server too.
        token = d.get_cookie("billing_console")["value"]
        d.get(f"{url}/console/")
        navigates(d, d.find_element(By.CSS_SELECTOR, "form.who button").click)
        assert "/console/login" in d.current_url
        import httpx

        r = httpx.get(f"{url}/console/", cookies={"billing_console": token}, follow_redirects=False)
        assert r.status_code == 303 and "/console/login" in r.headers["location"]

        # -- a read-only session sees everything and can do nothing.
        reader = create_test_key(db_url, "subscriptions:read", name="console-reader")
        login(d, url, reader)
        assert "read only" in d.find_element(By.ID, "who").text
        d.get(f"{url}/console/subscriptions/{world.subs['change']}")
        shot(d, "10-subscription-read-only")
        button = d.find_element(By.CSS_SELECTOR, 'form[data-action="cancel-now"] button')
        assert button.get_attribute("disabled") is not None
        d.execute_script("arguments[0].removeAttribute('disabled'); arguments[0].form.removeAttribute('data-confirm')",
                         button)
        navigates(d, button.click)
        assert d.find_element(By.TAG_NAME, "h1").text.startswith("this session may look but not act")
        assert one(db_url, "SELECT status FROM billing.subscription WHERE id = %s", (world.subs["change"],))["status"] \
            == "ACTIVE"
        for path in ("/console/customers/7001", "/console/invoices", "/console/events"):
            d.get(url + path)
            assert d.find_element(By.TAG_NAME, "h1").text  # each page renders for a reader

