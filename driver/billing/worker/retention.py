"""Retention: every `settings.retention_interval_seconds`, deletes what is older than
`settings.retention_days` (published events no webhook still needs, finished webhook deliveries,
stored gateway webhooks) with `billing.purge_expired`, one batch per transaction, pausing between
batches so the relay's claims and marks never queue behind a long delete. Any number of workers
may run it (the batches skip each other's locked rows)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import psycopg

from billing import db
from billing.clock import Clock, SystemClock, sleep_or_stop

log = logging.getLogger("billing.retention")


async def purge_once(conn: psycopg.AsyncConnection, keep: timedelta, now, *, batch: int = 5000,
                     pause: float = 0.05, stop: asyncio.Event | None = None) -> dict[str, int]:
    """Batches until nothing more is due; the totals deleted, by kind."""
    totals = {"outbox_events": 0, "webhook_deliveries": 0, "gateway_webhooks": 0}
    while stop is None or not stop.is_set():
        row = await (await conn.execute(db.PURGE_EXPIRED, {"keep": keep, "batch": batch, "now": now})).fetchone()
        counts = dict(zip(("outbox_events", "webhook_deliveries", "gateway_webhooks"), row))
        for k, v in counts.items():
            totals[k] += v
        if max(counts.values()) < batch:
            break
        await asyncio.sleep(pause)
    return totals


async def run_retention(settings, stop: asyncio.Event, *, clock: Clock | None = None) -> None:
    clock = clock or SystemClock()
    keep = timedelta(days=settings.retention_days)
    while not stop.is_set():
        try:
            async with await psycopg.AsyncConnection.connect(settings.database_url, autocommit=True) as conn:
                totals = await purge_once(conn, keep, clock.now(), stop=stop)
            if any(totals.values()):
                log.info("retention: deleted what is past the window", extra={**totals, "days": settings.retention_days})
        except psycopg.Error as exc:
            log.warning("retention: database error; trying again later", extra={"error": str(exc).strip()})
        await sleep_or_stop(stop, settings.retention_interval_seconds)
