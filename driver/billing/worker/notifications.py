"""Emails to customers: the worker's notification loop (docs/customers.md).

    notifier = Notifier(pool, settings, clock=clock)
    await notifier.run(stop)           # or: await notifier.send_due() (tests, demo)

Each round claims a batch of due notifications (`claim_notifications`: a lease, the address and
language read at claim time, those the customer turned off become SKIPPED), composes each in the
customer's language (an invoice's PDF attached when it is issued; a fresh single-use portal link
in every email), sends it over SMTP outside any transaction (each statement on the autocommit
pool is its own transaction) and records the result (`record_notification_result`): SENT, or
FAILED retried after 30 s, 1 min, 2 min ... capped at an hour, DEAD after 12 tries. A crash
between the send and the record sends that one email again after its lease, with the same
Message-ID (mail clients fold the two into one). Once a minute it also owes the yearly renewal
notices (`announce_upcoming_renewals`, BILLING_RENEWAL_NOTICE_DAYS ahead).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta

from billing import db
from billing.clock import Clock, SystemClock, sleep_or_stop
from billing.invoices.documents import Issuer, render_pdf
from billing.notifications.compose import Brand, compose, environment
from billing.notifications.mailer import SmtpTarget, build_message, message_id_for, send
from billing.notifications.links import login_url, new_token, token_hash

log = logging.getLogger("billing.notifications")


# Which portal page each email's button opens (after the link's login).
def _pages(row: dict) -> dict[str, str]:
    invoice = row["data"].get("invoiceId")
    return {"manage": "/", "invoices": "/invoices", "payment_methods": "/payment-methods",
            "pay": f"/invoices/{invoice}/pay" if invoice else "/invoices"}


class Notifier:
    def __init__(self, pool, settings, *, clock: Clock | None = None, batch: int = 50,
                 lease: timedelta = timedelta(minutes=5), poll_seconds: float = 1.0, concurrency: int = 4,
                 renewal_every_seconds: float = 60.0, target: SmtpTarget | None = None) -> None:
        self.pool = pool
        self.settings = settings
        self.clock = clock or SystemClock()
        self.batch = batch
        self.lease = lease
        self.poll_seconds = poll_seconds
        self.semaphore = asyncio.Semaphore(concurrency)
        self.renewal_every = renewal_every_seconds
        self.target = target or SmtpTarget.from_settings(settings)
        self.brand = Brand.from_settings(settings)
        self.issuer = Issuer.from_settings(settings)
        self.env = environment(settings.notification_templates)
        self.backoff = timedelta(seconds=settings.notification_backoff_seconds)
        self.counts = {"sent": 0, "failed": 0}
        self._renewals_at = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                if time.monotonic() >= self._renewals_at:
                    await self.announce_renewals()
                    self._renewals_at = time.monotonic() + self.renewal_every
                done = await self.send_due()
            except Exception as exc:  # noqa: BLE001 - a database hiccup: try again next round
                log.warning("notification round failed", extra={"error": repr(exc)})
                done = 0
            if done == 0:
                await sleep_or_stop(stop, self.poll_seconds)

    async def announce_renewals(self) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute(db.ANNOUNCE_UPCOMING_RENEWALS, {"days": self.settings.renewal_notice_days, "now": self.clock.now()})
            return (await cur.fetchone())["n"]

    async def send_due(self) -> int:
        """Claim one batch and send it; how many were claimed."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(db.CLAIM_NOTIFICATIONS, {"batch": self.batch, "lease": self.lease, "now": self.clock.now()})
            rows = await cur.fetchall()
        await asyncio.gather(*(self._deliver(r) for r in rows))
        return len(rows)

    async def _deliver(self, row: dict) -> None:
        async with self.semaphore:
            message_id = message_id_for(row["customer_id"], row["id"], self.settings.smtp_from)
            try:
                msg = await self._message(row, message_id)
                await asyncio.to_thread(send, self.target, msg)
            except Exception as exc:  # noqa: BLE001 - any failure is recorded and retried with backoff
                outcome, error = "FAILED", f"{type(exc).__name__}: {exc}"[:1000]
                self.counts["failed"] += 1
                log.warning("notification not sent: %s", error, extra={"customer_id": row["customer_id"], "id": row["id"],
                                                              "kind": row["kind"], "error": error})
            else:
                outcome, error = "SENT", None
                self.counts["sent"] += 1
            await self._record(row, outcome, error, message_id)

    async def _message(self, row: dict, message_id: str):
        doc = pdf = None
        invoice_id = row["data"].get("invoiceId")
        async with self.pool.connection() as conn:
            if invoice_id is not None:
                cur = await conn.execute(db.NOTIFICATION_DOCUMENT, {"id": invoice_id})
                doc = (await cur.fetchone())["doc"]
            token = new_token(row["customer_id"])
            await conn.execute(db.CREATE_PORTAL_LINK, {"customer_id": row["customer_id"], "hash": token_hash(token),
                                                       "ttl": timedelta(hours=self.settings.portal_link_hours),
                                                       "now": self.clock.now()})
        if row["kind"] == "INVOICE_ISSUED" and doc is not None:
            pdf = await asyncio.to_thread(render_pdf, doc, self.issuer, row.get("locale") or "en")
        pages = _pages(row)
        # One link per email (single use): every button goes through the login, then to its page.
        links = {name: login_url(self.settings.portal_url, token, path) for name, path in pages.items()}
        email = compose(row, brand=self.brand, env=self.env, links=links, doc=doc, pdf=pdf,
                        zone=(doc or {}).get("timezone") or row.get("timezone"))
        return build_message(email, sender=self.settings.smtp_from, sender_name=self.brand.name, message_id=message_id)

    async def _record(self, row: dict, outcome: str, error: str | None, message_id: str) -> None:
        params = {"customer": row["customer_id"], "id": row["id"], "outcome": outcome, "error": error,
                  "message_id": message_id, "now": self.clock.now(), "backoff": self.backoff,
                  "cap": timedelta(hours=1), "max": self.settings.notification_max_attempts}
        delay = 0.2
        for _ in range(6):
            try:
                async with self.pool.connection() as conn:
                    await conn.execute(db.RECORD_NOTIFICATION_RESULT, params)
                return
            except Exception as exc:  # noqa: BLE001 - the row comes back after its lease if this never lands
                log.warning("recording a notification failed; retrying", extra={"error": repr(exc)})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)


async def run_notifications(settings, stop: asyncio.Event, *, clock: Clock | None = None) -> None:
    from billing.db import async_pool

    pool = await async_pool(settings.database_url, min_size=1, max_size=4, name="billing-notifications")
    try:
        await Notifier(pool, settings, clock=clock).run(stop)
    finally:
        await pool.close()
