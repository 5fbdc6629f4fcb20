"""Two customers for the portal's tests (HTTP and Chromium): each with a subscription of plan
BASIC begun before NOW and its finalized invoice; BASIC offers PRO now and TEAM at period end."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import timedelta

import httpx
import psycopg

from billing.notifications.links import new_token, token_hash

from .console_world import NOW

START = NOW - timedelta(days=5)


@dataclass
class PortalWorld:
    subs: dict[int, int]       # customer -> subscription id
    invoices: dict[int, int]   # customer -> invoice id
    numbers: dict[int, str]    # customer -> invoice number


def build_portal_world(db_url: str) -> PortalWorld:
    with psycopg.connect(db_url, autocommit=True) as conn:
        for code, price in (("BASIC", 1000), ("PRO", 3000), ("TEAM", 9000), ("ENTERPRISE", 50000)):
            conn.execute("SELECT billing.upsert_plan(%s, %s, 'EUR', 'MONTH', 1, %s)", (code, price, START))
        conn.execute("SELECT billing.set_plan_change_options('BASIC', %s::jsonb)",
                     (json.dumps([{"plan": "PRO", "when": "now"}, {"plan": "TEAM", "when": "period_end"}]),))
        for cid, name, email, locale in ((1, "Ana Souza", "ana@example.com", "pt-BR"),
                                         (2, "Bernd Maier", "bernd@example.com", "de")):
            conn.execute("SELECT billing.upsert_customer(%s)", (cid,))
            conn.execute("SELECT billing.set_customer_details(%s, %s, %s, NULL, NULL, NULL, NULL, 'DE', NULL)",
                         (cid, name, email))
            conn.execute("SELECT billing.set_customer_preferences(%s, %s, NULL, %s)", (cid, locale, START))
            conn.execute("SELECT billing.create_subscription(%s, %s, 'BASIC', %s)", (f"portal-{cid}", cid, START))
        conn.execute("SELECT billing.finalize_invoices(100, %s)", (START + timedelta(minutes=1),))
        rows = conn.execute("SELECT customer_id, id, number FROM billing.invoice WHERE customer_id IN (1, 2)").fetchall()
        subs = dict(conn.execute("SELECT customer_id, id FROM billing.subscription WHERE customer_id IN (1, 2)").fetchall())
    return PortalWorld(subs=subs, invoices={r[0]: r[1] for r in rows}, numbers={r[0]: r[2] for r in rows})


def make_link(db_url: str, customer_id: int, *, now=NOW, ttl=timedelta(hours=72)) -> str:
    """A portal link's token made straight through the SQL API (the HTTP route is tested apart)."""
    token = new_token(customer_id)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT billing.create_portal_link(%s, %s, %s, %s)", (customer_id, token_hash(token), ttl, now))
    return token


def login(client: httpx.Client, token: str, next_path: str = "/") -> httpx.Response:
    """The two steps a customer makes: open the link (a page with one button), press it."""
    page = client.get("/portal/login", params={"token": token, "next": next_path})
    assert page.status_code == 200, page.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    return client.post("/portal/login", data={"token": token, "next": next_path, "csrf": csrf})


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf" value="([0-9a-f]{64})"', page).group(1)
