"""A small world for the console's tests, made through the SQL API, and the console served on it."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import psycopg
import uvicorn
from psycopg.rows import dict_row

from billing.api.app import create_app
from billing.clock import SimulatedClock
from billing.config import Settings

T0 = datetime(2026, 9, 1, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(days=10)


@dataclass
class World:
    subs: dict[str, int]  # role in the test -> subscription id
    customers: list[int]
    paid_invoice: int
    open_invoice: int


def build_world(db_url: str) -> World:
    """Three customers: two paid their first invoice, the third was declined (in dunning);
    every event is published."""
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        for code, price, interval in (("PRO_M", 2000, "MONTH"), ("PRO_Y", 20000, "YEAR"), ("BASIC_M", 900, "MONTH")):
            conn.execute("SELECT billing.upsert_plan(%s, %s, 'USD', %s, 1)", (code, price, interval))
        conn.execute("SELECT billing.upsert_coupon('WELCOME10', 10, NULL, NULL, 'once', NULL, NULL, NULL, NULL)")
        subs = {}
        for i, role in enumerate(("keep", "change", "cancel")):
            cid = 7001 + i
            conn.execute("SELECT billing.upsert_customer(%s, 'Europe/Paris')", (cid,))
            subs[role] = conn.execute("SELECT (billing.create_subscription(%s, %s, 'PRO_M', %s)).id",
                                      (f"w-{role}", cid, T0 + timedelta(minutes=i))).fetchone()["id"]
        claimed = conn.execute("SELECT * FROM billing.claim_charges('w', 10, '5 minutes', %s)",
                               (T0 + timedelta(hours=1),)).fetchall()
        by_sub = {conn.execute("SELECT subscription_id FROM billing.invoice WHERE id = %s",
                               (c["invoice_id"],)).fetchone()["subscription_id"]: c for c in claimed}
        for role, sub in subs.items():
            c = by_sub[sub]
            outcome = "DECLINED" if role == "cancel" else "SUCCEEDED"
            conn.execute("SELECT * FROM billing.record_payment_result(%s, %s, %s, %s, %s)",
                         (c["idempotency_key"], outcome, f"ch_{role}", "card_declined" if outcome == "DECLINED" else None,
                          T0 + timedelta(hours=1)))
        while True:
            rows = conn.execute("SELECT id FROM billing.claim_outbox_events(1000, '1 minute', %s)",
                                (T0 + timedelta(hours=2),)).fetchall()
            if not rows:
                break
            conn.execute("SELECT billing.mark_outbox_published(%s, %s)", ([r["id"] for r in rows], T0 + timedelta(hours=2)))
        paid = conn.execute("SELECT id FROM billing.invoice WHERE subscription_id = %s", (subs["keep"],)).fetchone()["id"]
        open_ = conn.execute("SELECT id FROM billing.invoice WHERE subscription_id = %s", (subs["cancel"],)).fetchone()["id"]
    return World(subs, [7001, 7002, 7003], paid, open_)


class ConsoleServer:
    """`billing serve`'s app (API and console) on a free loopback port, in a thread."""

    def __init__(self, db_url: str, now: datetime = NOW, **overrides) -> None:
        settings = Settings().with_overrides(database_url=db_url, gateway_rate=200, **overrides)
        self.app = create_app(settings, clock=SimulatedClock(now), rate_limit=False)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                                   lifespan="on", access_log=False))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "ConsoleServer":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the console did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
