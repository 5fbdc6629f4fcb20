"""One batch of the outbox relay in flight: its rows, their delivery reports, and the marker.

* `classify` sorts a failed delivery report: 'purged' (the relay dropped it), 'transient' (the
  relay resends it itself, in order) or 'poison' (the event itself is refused: `mark_outbox_failed`);
* `Batch` collects a batch's reports as the sink delivers them (`Batch.callback(row)` is the
  `on_delivery` of each produced row);
* `Marker` marks delivered rows published from the background, on its own connection.

Why this keeps per-aggregate order and loses no event: `billing.worker.relay`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import psycopg

from billing.worker.sinks import DeliveryCallback

log = logging.getLogger("billing.relay")

_PURGED = {"_PURGE_QUEUE", "_PURGE_INFLIGHT"}


def classify(err) -> str:
    """'purged' (we dropped it), 'transient' (resend it ourselves) or 'poison' (mark failed)."""
    if isinstance(err, OSError):
        return "transient"
    name = getattr(err, "name", None)
    if callable(name):
        name = name()
        if name in _PURGED:
            return "purged"
        if err.fatal() or err.retriable() or name.startswith("_"):
            # librdkafka's local errors (timed out, transport, all brokers down, fatal...) are
            # about the connection, not the event.
            return "transient"
        if name in ("UNKNOWN_TOPIC_OR_PART", "LEADER_NOT_AVAILABLE", "NOT_LEADER_OR_FOLLOWER",
                    "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REQUEST_TIMED_OUT"):
            return "transient"
    return "poison"


@dataclass
class OutboxRow:
    id: int
    aggregate: tuple[str, int]
    key: bytes
    value: bytes
    # The row's place in its claim, which returns events in the outbox's order (billing._outbox_order,
    # db/functions/64_outbox.sql): the one rule lives in SQL, the relay only keeps the claim's order.
    seq: int = 0

    @property
    def order(self) -> tuple[int, int]:
        return (self.seq, self.id)


@dataclass
class Batch:
    rows: list[OutboxRow]
    delivered: list[int] = field(default_factory=list)
    poison: list[tuple[int, str]] = field(default_factory=list)
    transient: list[OutboxRow] = field(default_factory=list)
    produced: int = 0
    reported: int = 0
    held_back: int = 0

    def callback(self, row: OutboxRow) -> DeliveryCallback:
        def on_delivery(err) -> None:
            self.reported += 1
            if err is None:
                self.delivered.append(row.id)
                return
            kind = classify(err)
            if kind == "poison":
                log.error("the broker rejected an event after it was sent; later events of its "
                          "aggregate may already be ahead of it", extra={"outbox_id": row.id, "error": str(err)})
                self.poison.append((row.id, str(err)))
            elif kind == "transient":
                self.transient.append(row)

        return on_delivery

    @property
    def outstanding(self) -> int:
        return self.produced - self.reported


class Marker:
    """Marks delivered rows published from the background, one `mark_outbox_published` call for
    everything acknowledged since the previous call (batches coalesce under load), on its own
    connection, so a slow mark never delays the next claim or publish."""

    def __init__(self, conn: psycopg.AsyncConnection,
                 mark: Callable[[psycopg.AsyncConnection, list[int]], Awaitable[None]]) -> None:
        self.conn, self.mark = conn, mark
        self.pending: list[int] = []
        self.wake = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self.task = asyncio.ensure_future(self._run())

    def add(self, ids: list[int]) -> None:
        if ids:
            self.pending.extend(ids)
            self.idle.clear()
            self.wake.set()

    @property
    def busy(self) -> bool:
        return not self.idle.is_set()

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.pending:
                ids, self.pending = self.pending, []
                await self.mark(self.conn, ids)
            self.idle.set()

    async def drain(self) -> None:
        """Until everything handed over is marked; re-raises the marker's failure."""
        if self.task.done():
            self.task.result()
        idle = asyncio.ensure_future(self.idle.wait())
        try:
            await asyncio.wait({idle, self.task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            idle.cancel()
        if self.task.done():
            self.task.result()

    async def close(self) -> None:
        try:
            await self.drain()
        finally:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
