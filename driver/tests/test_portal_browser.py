"""The customer portal in a real browser: Debian's chromium driven by Selenium (chromedriver), as
the console's test (scripts/services/chromium.sh installs it).

A customer opens the link of an email, presses "continue", sees their subscription and invoices
in their language (pt-BR), downloads an invoice's PDF, changes plan within what the operator
offers, cancels at period end and uncancels; everything is checked in the database and the audit
log. Keyboard: the skip link is the first stop and every control is reachable by Tab. Screenshots
under $BILLING_PORTAL_ARTIFACTS (default .cache/artifacts/portal/), one on a phone's width."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg
import pytest
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

from billing.config import REPO_ROOT

from .console_world import ConsoleServer
from .portal_world import build_portal_world, make_link
from .test_console_browser import _chromedriver

ARTIFACTS = Path(os.environ.get("BILLING_PORTAL_ARTIFACTS", REPO_ROOT / ".cache" / "artifacts" / "portal"))


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--lang=pt-BR"):
        options.add_argument(arg)
    options.add_experimental_option("prefs", {"download.default_directory": str(tmp_path),
                                              "download.prompt_for_download": False,
                                              "plugins.always_open_pdf_externally": True,
                                              "intl.accept_languages": "pt-BR,pt"})
    binary = "/usr/bin/chromium"
    if os.path.exists(binary):
        options.binary_location = binary
    driver = webdriver.Chrome(service=Service(_chromedriver()), options=options)
    driver.set_page_load_timeout(30)
    driver.downloads = tmp_path
    yield driver
    driver.quit()


def shot(driver, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return Math.max(document.body.scrollHeight, 600)")
    width = driver.get_window_size()["width"]
    driver.set_window_size(width, min(height + 140, 4000))
    assert driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    driver.set_window_size(width, 900)


def submit(driver, css: str) -> None:
    """Clicks a form's button and waits for the page it leads to: a click returns before the browser
    has navigated, so the next read could still see the old page (found by a run under load)."""
    old = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.CSS_SELECTOR, css).click()
    WebDriverWait(driver, 20).until(lambda _: _gone(old))
    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.readyState") == "complete")


def _gone(element) -> bool:
    """The element's page was replaced. Chromium says so either as a stale reference or, when the
    old document is being torn down, as "Node with given id does not belong to the document" (a plain
    WebDriverException, which EC.staleness_of does not take for staleness: seen once in make test)."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as e:
        if "does not belong to the document" in str(e):
            return True
        raise
    return False


def _state(db_url):
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT s.cancel_at_period_end, p.code FROM billing.subscription s JOIN billing.plan p ON p.id = s.plan_id "
            "WHERE s.customer_id = 1").fetchone()


def test_a_customer_uses_the_portal_in_chromium(db_url, browser, stripe_fake):
    world = build_portal_world(db_url)
    with ConsoleServer(db_url, stripe_api_key="sk_test_portal", stripe_api_base=stripe_fake.url) as server:
        token = make_link(db_url, 1)
        browser.get(f"{server.url}/portal/login?token={token}")
        shot(browser, "01-login")
        submit(browser, "form[action='/portal/login'] button")
        assert browser.current_url.endswith("/portal/"), browser.page_source
        assert browser.find_element(By.TAG_NAME, "html").get_attribute("lang") == "pt-BR"
        assert "Assinaturas" in browser.find_element(By.ID, "subscriptions-h").text
        assert world.numbers[1] in browser.page_source and world.numbers[2] not in browser.page_source
        shot(browser, "02-home")

        # Keyboard: the first Tab reaches the skip link; Tab reaches the plan select and the buttons.
        body = browser.find_element(By.TAG_NAME, "body")
        body.send_keys(Keys.TAB)
        assert browser.switch_to.active_element.get_attribute("class") == "skip"
        seen = set()
        for _ in range(30):
            browser.switch_to.active_element.send_keys(Keys.TAB)
            el = browser.switch_to.active_element
            seen.add((el.tag_name, el.get_attribute("name") or el.text))
        assert ("select", "plan") in seen
        # every form control has a label or is a button with text
        for select in browser.find_elements(By.TAG_NAME, "select"):
            assert browser.find_element(By.CSS_SELECTOR, f"label[for='{select.get_attribute('id')}']").text

        # Download the invoice's PDF.
        browser.find_element(By.CSS_SELECTOR, f"a[href='/portal/invoices/{world.invoices[1]}.pdf']").click()
        deadline = time.monotonic() + 20
        pdfs = []
        while time.monotonic() < deadline and not pdfs:
            pdfs = [p for p in browser.downloads.glob("*.pdf")]
            time.sleep(0.2)
        assert pdfs and pdfs[0].read_bytes().startswith(b"%PDF"), list(browser.downloads.iterdir())

        # Its HTML in the customer's language.
        browser.get(f"{server.url}/portal/invoices/{world.invoices[1]}.html")
        assert world.numbers[1] in browser.page_source
        shot(browser, "03-invoice")
        browser.get(f"{server.url}/portal/")

        # Change plan within the offered set: PRO now (prorated).
        select = Select(browser.find_element(By.NAME, "plan"))
        assert [o.get_attribute("value") for o in select.options] == ["PRO", "TEAM"]
        select.select_by_value("PRO")
        submit(browser, "form.change button")
        assert "ok=plan_changed" in browser.current_url
        assert browser.find_element(By.CSS_SELECTOR, "p.flash").text == "Seu plano foi alterado."
        assert _state(db_url) == (False, "PRO")
        shot(browser, "04-plan-changed")

        # Cancel at period end, then keep it.
        submit(browser, "form.cancel button")
        assert _state(db_url) == (True, "PRO")
        assert "Cancelada" in browser.find_element(By.CSS_SELECTOR, "p.canceling").text
        shot(browser, "05-canceled")
        submit(browser, "form[action$='/uncancel'] button")
        assert _state(db_url) == (False, "PRO")
        shot(browser, "06-uncanceled")

        # Add a card (a SetupIntent, stripe-mock behind the fake): it becomes the default.
        browser.get(f"{server.url}/portal/payment-methods/new")
        Select(browser.find_element(By.ID, "payment_method")).select_by_value("pm_card_mastercard")
        shot(browser, "07-add-card")
        submit(browser, "form.card-form button")
        assert browser.find_element(By.CSS_SELECTOR, "p.flash").text == "Seu cartão foi adicionado."
        assert "Mastercard final 4444" in browser.find_element(By.CSS_SELECTOR, "ul.methods").text
        shot(browser, "08-card-added")
        assert stripe_fake.rejected == []

        # On a phone's width.
        browser.set_window_size(390, 844)
        browser.get(f"{server.url}/portal/invoices#invoices")
        assert browser.execute_script("return document.documentElement.scrollWidth") <= 390 + 1
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "09-phone.png"))
        browser.set_window_size(1280, 900)

        # Sign out: the session is over.
        browser.get(f"{server.url}/portal/")
        submit(browser, "form.logout button")
        browser.get(f"{server.url}/portal/")
        assert "Você não está conectado" in browser.page_source
        shot(browser, "10-signed-out")
    with psycopg.connect(db_url) as conn:
        actors = {r[0] for r in conn.execute(
            "SELECT DISTINCT actor FROM billing.audit_log WHERE function IN ('change_plan', 'cancel_subscription', "
            "'uncancel_subscription')")}
    assert actors == {"portal-session:1"}
