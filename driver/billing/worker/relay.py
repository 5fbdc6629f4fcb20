"""The outbox relay: billing.outbox_event -> Kafka, at least once, in commit order per aggregate.

One active publisher at a time. Leadership is a PostgreSQL session advisory lock held on a
dedicated connection; the same connection LISTENs on `billing_outbox` and runs the claims, so a
claim can only ever run while the lock is held (if the session dies, the lock and the claim die
with it). A stand-by retries the lock every second and takes over when the holder's session ends.

The loop: claim a batch (in id order) -> produce every row -> wait for every delivery report ->
hand the delivered ids to a background marker, which marks everything acknowledged since its
last call with one `mark_outbox_published` on its own connection. Rows are marked from delivery
reports only, never from "we sent it". Woken by NOTIFY on `billing_outbox`, with a fallback poll
every second (a lost notification costs latency, never an event). Under a backlog (a full
batch) the next claim is made while the current batch is in flight.

Why per-aggregate order holds (docs/sql-api.md, outbox_event, "Order"):
* the key is the aggregate id, so one aggregate's events share a partition;
* `claim_outbox_events` hands out a batch in id order (= commit order within an aggregate) and
  never an event while an earlier PENDING event of its aggregate is outside the claim (leased by
  a dead relay, backing off after a failure): an aggregate's events cannot overtake each other
  across batches or across a takeover;
* within a batch, the idempotent producer (`enable.idempotence`, `acks=all`) writes a partition
  in produce order without duplicates or gaps across its own retries;
* `message.timeout.ms=0`: a broker outage never *fails* a message. librdkafka keeps retrying in
  order, the relay stops claiming while its batch is unacknowledged, and the rest of the backlog
  waits in the table. So an outage never yields "event N failed, event N+1 got through";
* when the producer does give up on messages (a fatal idempotence error, a write error of the
  JSON-lines sink), it gives up on everything queued behind them as well. The relay then
  resends the unacknowledged rows of the batch itself, in id order, before claiming anything new
  (rather than `mark_outbox_failed`, whose backoff counts towards DEAD: an outage must not kill
  events);
* an event the sink refuses outright (a poison event: too large, unserialisable) goes to
  `mark_outbox_failed` (backoff, DEAD after 10 tries), and the later events of its aggregate in
  the same batch are held back, not produced: they are claimed again once it is published or
  DEAD. The one gap left: a broker that *accepts* the connection but rejects a single message
  asynchronously (policy, corrupt record) while later messages of the same key are already in
  flight; librdkafka reports that after the fact. It cannot happen with our own payloads short
  of a misconfigured topic, and is logged as an error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from billing import db
from billing.clock import Clock, SystemClock, sleep_or_stop
from billing.metrics import OUTBOX_FAILED, OUTBOX_PUBLISHED, RELAY_ACTIVE
from billing.worker.outbox_batch import Batch, Marker, OutboxRow
# The sinks live in billing.worker.sinks; JsonlSink and KafkaSink are imported here too for the
# callers that used to find them in this module.
from billing.worker.sinks import EventSink, JsonlSink, KafkaSink

__all__ = ["RELAY_LOCK_KEY", "EventSink", "JsonlSink", "KafkaSink", "Relay", "RelayOptions", "ShardRelay",
           "is_distributed", "run_relay"]

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
                        redo = sorted(batch.transient, key=lambda r: r.id)
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
        return [OutboxRow(id_, (agg_type, agg_id), str(agg_id).encode(), payload.encode())
                for id_, agg_type, agg_id, payload in await cur.fetchall()]

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


async def run_relay(settings, stop: asyncio.Event, *, sink: EventSink | None = None, clock: Clock | None = None,
                    options: RelayOptions | None = None) -> None:
    """Relay the outbox until `stop` is set. Without a sink, publishes to the configured Kafka.

    On a Citus coordinator (detected, or `options.per_shard`) the relay works per shard group
    (`ShardRelay`); on a single PostgreSQL it is the one active relay of the advisory lock."""
    own_sink = sink is None
    if sink is None:
        if not settings.kafka_bootstrap:
            raise ValueError("the outbox relay needs Kafka: set BILLING_KAFKA_BOOTSTRAP (or run the worker "
                             "with --no-relay; events wait in the outbox meanwhile)")
        sink = KafkaSink(settings.kafka_bootstrap, settings.kafka_topic, config=settings.kafka_config())
    try:
        per_shard = options.per_shard if options is not None else None
        if per_shard is None:
            per_shard = await _detect_distributed(settings.database_url, stop)
        kind = ShardRelay if per_shard else Relay
        await kind(settings.database_url, sink, stop, clock=clock, options=options).run()
    finally:
        RELAY_ACTIVE.set(0)
        if own_sink:
            await asyncio.to_thread(sink.close)


# -- On Citus: the relay per shard group ----------------------------------------------------------

# Whether billing.customer is distributed: readable by any login (Citus' catalog is public). Two
# statements: without Citus the second one cannot even be planned.
# A relay instance is "up" while its coordinator session holds the advisory lock (RELAY_LOCK_KEY,
# instance): pg_locks counts them, and a dead relay's lock goes with its session. A relay publishes
# from a shard group while the same session holds (RELAY_GROUP_KEY, group). These locks only spread
# the groups over the relays; the claim keeps the order whoever calls it.
RELAY_GROUP_KEY = 0x62696C67  # "bilg"


async def is_distributed(database_url: str) -> bool:
    """Whether the database is a Citus coordinator with the engine distributed by customer: the SQL
    API's one answer (billing._distributed, through relay_shard_groups: a node named for a group),
    as the worker's shard_mode asks it."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True, connect_timeout=10) as conn:
        rows = await (await conn.execute(db.RELAY_SHARD_GROUPS)).fetchall()
    return any(node is not None for _group, node, _port in rows)


async def _detect_distributed(database_url: str, stop: asyncio.Event) -> bool | None:
    """is_distributed, asked again until the database answers (None: stopped meanwhile)."""
    backoff = 0.5
    while not stop.is_set():
        try:
            return await is_distributed(database_url)
        except psycopg.OperationalError as exc:
            log.warning("relay cannot reach the database to choose its mode, retrying", extra={"error": str(exc).strip()})
            await sleep_or_stop(stop, backoff)
            backoff = min(backoff * 2, 5.0)
    return None


class ShardRelay(Relay):
    """The relay on Citus (docs/scaling.md, "Events, webhooks and reads on Citus").

    Each round: count the relays that are up (their presence locks), hold this relay's share of
    the shard groups (one advisory lock per group on the coordinator session: not the batch
    workers' shard leases, which a relay would keep them out of), then in every group it holds, on
    the node holding it, claim (`claim_outbox_events_in_shard`: the group's due events, each
    aggregate's in order, none while an earlier one of its aggregate is held elsewhere), produce
    everything claimed,
    wait for every delivery report, and mark the group's delivered rows published on that node.
    No NOTIFY on Citus (a worker would raise it): an idle relay polls every `poll_interval`.

    Order per aggregate: an aggregate's events are all in its customer's shard group; the claim
    hands them out in the aggregate's order and holds an event back while an earlier one is leased
    by another claim (a relay that lost the group, or died). No loss: rows are marked from delivery
    reports only; a relay that dies leaves its claimed rows leased (they come back when the row
    lease runs out) and its groups (its locks go with its session: the others take them at their
    next round)."""

    def __init__(self, database_url: str, sink: EventSink, stop: asyncio.Event, *,
                 clock: Clock | None = None, options: RelayOptions | None = None) -> None:
        super().__init__(database_url, sink, stop, clock=clock, options=options)
        import os
        import random
        import socket

        self.instance = random.randint(1, 2**31 - 1)
        self.worker = self.opt.worker_name or f"relay:{socket.gethostname()}:{os.getpid()}:{self.instance}"
        self.groups: dict[int, tuple[str | None, int | None]] = {}  # group -> node (None: this database)
        self._nodes: dict[tuple[str | None, int | None], psycopg.AsyncConnection] = {}
        self._redo: dict[int, list[OutboxRow]] = {}

    async def run(self) -> None:
        backoff = 0.5
        while not self.stop.is_set():
            try:
                coord = await psycopg.AsyncConnection.connect(self.url, autocommit=True, **_KEEPALIVES)
            except psycopg.OperationalError as exc:
                log.warning("relay cannot reach the coordinator, retrying", extra={"error": str(exc).strip()})
                await sleep_or_stop(self.stop, backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.5
            try:
                async with coord:
                    await coord.execute(db.RELAY_PRESENCE, {"key": self.opt.lock_key, "instance": self.instance})
                    RELAY_ACTIVE.set(1)
                    self.active = True
                    log.info("relay is up, per shard group", extra={"worker": self.worker})
                    await self._rounds(coord)
            except (psycopg.OperationalError, _LostLeadership) as exc:
                log.warning("relay lost the coordinator; starting again", extra={"error": str(exc).strip()})
                await sleep_or_stop(self.stop, 0.2)
            finally:
                self.active = False
                RELAY_ACTIVE.set(0)
                self.groups = {}  # the group locks went with the session
                self._redo.clear()  # those rows come back when their leases run out
                await self._close_nodes()

    async def _rounds(self, coord: psycopg.AsyncConnection) -> None:
        while not self.stop.is_set():
            await self._lease(coord)
            claimed: dict[int, list[OutboxRow]] = {}
            for group in sorted(self.groups):
                try:
                    rows = self._redo.pop(group, None) or await self._claim_group(group)
                except psycopg.Error as exc:
                    await self._node_failed(group, exc)
                    continue
                if rows:
                    claimed[group] = rows
            if not claimed:
                await sleep_or_stop(self.stop, self.opt.poll_interval)
                continue
            rows = [r for group in sorted(claimed) for r in claimed[group]]
            batch = await self._publish(rows, coord)
            await self._settle_groups(claimed, batch)
            if batch.transient:
                self._recover_sink()
                await sleep_or_stop(self.stop, self.opt.retry_pause)

    async def _lease(self, coord: psycopg.AsyncConnection) -> None:
        """Hold this relay's share of the groups: ceil(groups / relays up) group locks."""
        relays = (await (await coord.execute(db.RELAYS_UP, {"key": self.opt.lock_key})).fetchone())[0]
        nodes = {g: (name, port) for g, name, port in await (await coord.execute(db.RELAY_SHARD_GROUPS)).fetchall()}
        share = -(-len(nodes) // max(int(relays), 1))
        held = sorted(g for g in self.groups if g in nodes)
        for group in held[share:]:  # another relay came up: the highest groups go to it
            await coord.execute(db.RELAY_GIVE_GROUP, {"key": RELAY_GROUP_KEY, "group": group})
        held = held[:share]
        for group in sorted(nodes):
            if len(held) >= share:
                break
            if group not in held and (await (await coord.execute(
                    db.RELAY_TAKE_GROUP, {"key": RELAY_GROUP_KEY, "group": group})).fetchone())[0]:
                held.append(group)
        held_nodes = {g: nodes[g] for g in sorted(held)}
        if held_nodes.keys() != self.groups.keys():
            log.info("relay shard groups", extra={"worker": self.worker, "groups": ",".join(map(str, held_nodes))})
        for group in set(self._redo) - set(held_nodes):
            self._redo.pop(group)  # no longer ours: the rows come back to the new holder after their lease
        self.groups = held_nodes

    async def _node(self, group: int) -> psycopg.AsyncConnection:
        node = self.groups[group]
        conn = self._nodes.get(node)
        if conn is None or conn.closed:
            host, port = node
            url = self.url if host is None else make_conninfo(self.url, host=host, port=port)
            conn = await psycopg.AsyncConnection.connect(url, autocommit=True, **_KEEPALIVES)
            self._nodes[node] = conn
        return conn

    async def _claim_group(self, group: int) -> list[OutboxRow]:
        conn = await self._node(group)
        cur = await conn.execute(db.CLAIM_OUTBOX_EVENTS_IN_SHARD, {
            "worker": self.worker, "group": group, "batch": self.opt.batch_size, "lease": self.opt.lease,
            "now": self.clock.now()})
        return [OutboxRow(id_, (agg_type, agg_id), str(agg_id).encode(), payload.encode(), seq)
                for id_, agg_type, agg_id, payload, seq in await cur.fetchall()]

    async def _node_failed(self, group: int, exc: Exception) -> None:
        # A node away, or a group moved (BL409 naming its new node): its rows come back after their
        # lease; the next round leases again and reads the placements afresh.
        log.warning("relay: shard group unavailable this round", extra={"group": group, "error": str(exc).strip()})
        conn = self._nodes.pop(self.groups.get(group), None)
        if conn is not None:
            await conn.close()

    async def _settle_groups(self, claimed: dict[int, list[OutboxRow]], batch: Batch) -> None:
        delivered = set(batch.delivered)
        poison = dict(batch.poison)
        transient = {r.id for r in batch.transient}
        now = self.clock.now()
        for group, rows in claimed.items():
            ids = [r.id for r in rows if r.id in delivered]
            try:
                conn = await self._node(group)
                if ids:
                    await conn.execute(db.MARK_OUTBOX_PUBLISHED_IN_SHARD, {"group": group, "ids": ids, "now": now})
                    self.published += len(ids)
                    OUTBOX_PUBLISHED.inc(len(ids))
                for row in rows:
                    if row.id in poison:
                        log.error("event rejected by the sink; marked failed", extra={"outbox_id": row.id})
                        await conn.execute(db.MARK_OUTBOX_FAILED_IN_SHARD, {"group": group, "id": row.id,
                                                                  "error": poison[row.id][:1000], "now": now})
                        OUTBOX_FAILED.inc()
            except psycopg.Error as exc:  # published but not marked: published again (at least once)
                await self._node_failed(group, exc)
                continue
            redo = sorted((r for r in rows if r.id in transient), key=lambda r: r.order)
            if redo:
                self._redo[group] = redo

    async def _close_nodes(self) -> None:
        nodes, self._nodes = self._nodes, {}
        for conn in nodes.values():
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
