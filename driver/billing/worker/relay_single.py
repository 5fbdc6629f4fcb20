"""The single-node relay: the one active relay of the advisory lock (`Relay`) and its options.

Why it keeps each aggregate's order and loses no event: `billing.worker.relay`, which also holds
`run_relay` (the entry point that picks this relay or the one per shard group, `relay_shards`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

import psycopg
from psycopg.rows import dict_row

from billing import db
from billing.clock import Clock, SystemClock, sleep_or_stop
from billing.metrics import OUTBOX_FAILED, OUTBOX_PUBLISHED, RELAY_ACTIVE
from billing.worker.outbox_batch import Batch, Marker, OutboxRow
from billing.worker.sinks import EventSink

log = logging.getLogger("billing.relay")

# An arbitrary constant (ASCII "bilr"): the session advisory lock that elects the active relay.
RELAY_LOCK_KEY = 0x62696C72

# Client-side keepalives on the lock session: a vanished server is noticed in ~15 s.
_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 3, "keepalives_count": 3,
               "connect_timeout": 10}


class _LostLeadership(Exception):
    pass


@dataclass
class RelayOptions:
    batch_size: int = 5000
    lease: timedelta = timedelta(seconds=15)
    poll_interval: float = 1.0  # fallback poll when no NOTIFY comes
    standby_interval: float = 1.0  # how often a stand-by retries the lock
    liveness_interval: float = 1.0  # how often the leader checks its lock session while waiting on Kafka
    retry_pause: float = 1.0  # pause before resending after a transient delivery failure
    stop_grace: float = 5.0  # on stop, how long to wait for the batch in flight
    prefetch: bool = True  # with a backlog, claim the next batch while the current one is in flight
    lock_key: int = RELAY_LOCK_KEY
    # On Citus (ShardRelay): per shard group. None: detected (billing.customer distributed).
    per_shard: bool | None = None
    worker_name: str | None = None  # its name in the audit of its claims (default: relay:host:pid:random)
    shard_connections: int = 2  # ShardRelay: claims side by side per node


class Relay:
    def __init__(self, database_url: str, sink: EventSink, stop: asyncio.Event, *,
                 clock: Clock | None = None, options: RelayOptions | None = None) -> None:
        self.url = database_url
        self.sink = sink
        self.stop = stop
        self.clock = clock or SystemClock()
        self.opt = options or RelayOptions()
        self.published = 0  # rows marked published by this process (benchmarks, tests)
        self.active = False  # holds the lock (RELAY_ACTIVE, per instance)
        self._marker: Marker | None = None

    # -- leadership ------------------------------------------------------------------------

    async def run(self) -> None:
        backoff = 0.5
        while not self.stop.is_set():
            try:
                lock_conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True, **_KEEPALIVES)
                # The server side too: if this host vanishes without closing the socket, the
                # server drops the session (and the lock) in ~20 s instead of the OS's 2 hours.
                await lock_conn.execute(db.SERVER_KEEPALIVES)
            except psycopg.OperationalError as exc:
                log.warning("relay cannot reach the database, retrying", extra={"error": str(exc).strip()})
                await sleep_or_stop(self.stop, backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.5
            try:
                async with lock_conn:
                    if not await self._acquire(lock_conn):
                        return  # stopped while standing by
                    RELAY_ACTIVE.set(1)
                    self.active = True
                    log.info("relay is active (holds the advisory lock)", extra={"backend_pid": lock_conn.info.backend_pid})
                    try:
                        await self._lead(lock_conn)
                    finally:
                        self.active = False
                        RELAY_ACTIVE.set(0)
            except (psycopg.OperationalError, _LostLeadership) as exc:
                log.warning("relay lost its lock session; standing by", extra={"error": str(exc).strip()})
                await sleep_or_stop(self.stop, 0.2)

    async def _acquire(self, conn: psycopg.AsyncConnection) -> bool:
        announced = False
        while not self.stop.is_set():
            cur = await conn.execute(db.RELAY_LOCK, {"key": self.opt.lock_key})
            if (await cur.fetchone())[0]:
                return True
            if not announced:
                log.info("relay standing by: another instance holds the lock")
                announced = True
            await sleep_or_stop(self.stop, self.opt.standby_interval)
        return False

    # -- the active relay ------------------------------------------------------------------

    async def _lead(self, lock_conn: psycopg.AsyncConnection) -> None:
        await lock_conn.execute(db.LISTEN_OUTBOX)
        mark_conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True, row_factory=dict_row)
        self._marker = marker = Marker(mark_conn, self.mark_published)
        prefetch: asyncio.Task | None = None
        try:
            redo: list[OutboxRow] = []
            while not self.stop.is_set():
                # Delivered rows are marked in the background while we claim the next batch;
                # they are still PENDING meanwhile, so the claim holds back later events of the
                # same aggregates. A short claim made then is no sign that the backlog is empty.
                marking = marker.busy
                if redo:
                    rows, redo = redo, []
                elif prefetch is not None:
                    rows, prefetch = await prefetch, None
                else:
                    rows = await self._claim(lock_conn)
                if rows:
                    if len(rows) >= self.opt.batch_size and self.opt.prefetch:
                        # A backlog: claim the next batch while this one is in flight. Safe for
                        # the order: while this batch's rows are PENDING, the claim cannot hand
                        # out a later event of any of their aggregates.
                        prefetch = asyncio.ensure_future(self._claim(lock_conn))
                    batch = await self._publish(rows, lock_conn)
                    await self._settle(batch, mark_conn)
                    if batch.transient:
                        redo = sorted(batch.transient, key=lambda r: r.order)
                        log.warning("kafka delivery failed; resending from the earliest unacknowledged event",
                                    extra={"events": len(redo), "first_id": redo[0].id})
                        self._recover_sink()
                        await sleep_or_stop(self.stop, self.opt.retry_pause)
                    if len(rows) >= self.opt.batch_size or redo:
                        continue  # more is probably waiting: no need for a NOTIFY
                if marking:
                    await marker.drain()
                    continue
                await self._wait_for_work(lock_conn)
        finally:
            try:
                if prefetch is not None:
                    # Claimed but never produced: they come back when their lease lapses.
                    prefetch.cancel()
                    try:
                        await prefetch
                    except (asyncio.CancelledError, psycopg.Error):
                        pass
                try:
                    await marker.close()
                except psycopg.Error as exc:  # they will be published again: at least once
                    log.warning("could not mark the last delivered events", extra={"error": str(exc).strip()})
            finally:
                self._marker = None
                await mark_conn.close()

    async def _claim(self, conn: psycopg.AsyncConnection) -> list[OutboxRow]:
        cur = await conn.execute(
            db.CLAIM_OUTBOX_EVENTS_RAW,
            {"batch": self.opt.batch_size, "lease": self.opt.lease, "now": self.clock.now()},
        )
        return [OutboxRow(id_, (agg_type, agg_id), str(agg_id).encode(), payload.encode(), seq)
                for id_, agg_type, agg_id, payload, seq in await cur.fetchall()]

    async def _wait_for_work(self, conn: psycopg.AsyncConnection) -> None:
        """Until a NOTIFY, the fallback poll interval or stop. Raises if the lock session died."""
        if self.stop.is_set():
            return
        stop_wait = asyncio.ensure_future(self.stop.wait())
        try:
            async def notified() -> None:
                # Run the generator to its end, never `break`: it first hands out every
                # notification that arrived while the relay was busy (psycopg keeps them), and
                # breaking after the first one left the rest queued, each waking the relay for
                # one more claim that found nothing new (a third of all claims at 200 events/s).
                # One claim after the wake-up covers them all: each was sent after its COMMIT.
                async for _ in conn.notifies(timeout=self.opt.poll_interval, stop_after=1):
                    pass

            listen = asyncio.ensure_future(notified())
            await asyncio.wait({listen, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not listen.done():
                listen.cancel()
                try:
                    await listen
                except (asyncio.CancelledError, psycopg.Error):
                    pass
            else:
                listen.result()  # re-raise a dead connection
        finally:
            stop_wait.cancel()

    def _produce(self, batch: Batch) -> None:
        refused: set[tuple[str, int]] = set()
        for row in batch.rows:
            if row.aggregate in refused:
                batch.held_back += 1  # never ahead of its refused predecessor (see top)
                continue
            cb = batch.callback(row)
            while True:
                try:
                    self.sink.produce(row.key, row.value, cb)
                    batch.produced += 1
                    break
                except BufferError:  # local queue full: let it drain a little
                    self.sink.poll(0.05)
                except Exception as exc:  # noqa: BLE001 - the sink refused this one event
                    refused.add(row.aggregate)
                    batch.poison.append((row.id, f"{type(exc).__name__}: {exc}"))
                    break

    async def _publish(self, rows: list[OutboxRow], lock_conn: psycopg.AsyncConnection) -> Batch:
        batch = Batch(rows)
        self._produce(batch)
        started = last_check = last_warn = time.monotonic()
        stopping_since: float | None = None
        while batch.outstanding > 0:
            await asyncio.to_thread(self.sink.flush, 0.2)
            if batch.outstanding == 0:
                break
            now = time.monotonic()
            if self.stop.is_set():
                stopping_since = stopping_since or now
                if now - stopping_since >= self.opt.stop_grace:
                    log.warning("stopping with events unacknowledged; they stay in the outbox",
                                extra={"events": batch.outstanding})
                    self._purge()
                    break
            if now - last_check >= self.opt.liveness_interval:
                last_check = now
                try:
                    await lock_conn.execute(db.HEALTH)
                except psycopg.Error as exc:
                    self._purge()
                    await self._settle_quietly(batch)
                    raise _LostLeadership(str(exc)) from exc
            if now - last_warn >= 10:
                last_warn = now
                log.warning("kafka has not acknowledged the batch yet; events wait in the outbox",
                            extra={"unacknowledged": batch.outstanding, "seconds": round(now - started)})
        return batch

    def _purge(self) -> None:
        purge = getattr(self.sink, "purge", None)
        if purge is not None:
            purge()
            self.sink.poll(0)

    def _recover_sink(self) -> None:
        recover = getattr(self.sink, "recover", None)
        if recover is not None:
            recover()

    async def _settle(self, batch: Batch, conn: psycopg.AsyncConnection) -> None:
        """Hand the delivered rows to the marker; mark the poison ones failed (rare)."""
        self._marker.add(batch.delivered)
        for id_, error in batch.poison:
            log.error("event rejected by the sink; marked failed", extra={"outbox_id": id_, "error": error})
            await self._marker.drain()  # one statement at a time on the marker's connection
            await conn.execute(db.MARK_OUTBOX_FAILED, {"id": id_, "error": error[:1000], "now": self.clock.now()})
            OUTBOX_FAILED.inc()

    async def _settle_quietly(self, batch: Batch) -> None:
        """Best effort on the way out: what Kafka acknowledged is marked, to spare duplicates."""
        if not batch.delivered:
            return
        try:
            async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                await self.mark_published(conn, batch.delivered)
        except psycopg.Error:
            pass  # they will be published again: at least once

    async def mark_published(self, conn: psycopg.AsyncConnection, ids: list[int]) -> None:
        """Mark `ids` published (one `mark_outbox_published` on `conn`) and count them."""
        await conn.execute(db.MARK_OUTBOX_PUBLISHED, {"ids": ids, "now": self.clock.now()})
        self.published += len(ids)
        OUTBOX_PUBLISHED.inc(len(ids))
