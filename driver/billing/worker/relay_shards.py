"""The relay on Citus, per shard group (`ShardRelay`), its node connections and its markers.

Built on the single-node relay (`relay_single.Relay`); `billing.worker.relay.run_relay` picks it on a
Citus coordinator. docs/scaling.md, "Events, webhooks and reads on Citus".
"""

from __future__ import annotations

import asyncio
import logging

import psycopg
from psycopg.conninfo import make_conninfo

from billing import db
from billing.clock import Clock, sleep_or_stop
from billing.metrics import OUTBOX_FAILED, OUTBOX_PUBLISHED, RELAY_ACTIVE
from billing.worker.outbox_batch import Batch, Marker, OutboxRow
from billing.worker.relay_single import _KEEPALIVES, Relay, RelayOptions, _LostLeadership
from billing.worker.sinks import EventSink

log = logging.getLogger("billing.relay")

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
    workers' shard leases, which a relay would keep them out of), then claim in every group it
    holds, on the node holding it (`claim_outbox_events_in_shards`, one call per node for its
    groups: each group's due events, each aggregate's in order, none while an earlier one of its
    aggregate is held elsewhere), produce everything claimed, wait for every delivery report, and
    hand the groups' delivered rows to the node's marker (`mark_outbox_published_in_shards`, one
    call per node for its groups, in the background on its own connection).
    No NOTIFY on Citus (a worker would raise it): an idle relay polls every `poll_interval`.

    Pipelined (issue 32): a node's groups are claimed in at most `shard_connections` calls side by
    side (one connection each; one call per node and round when it is 1, whatever the number of
    groups: the catalog read once per call, one audit row), and under a backlog (a group's claim came back full) the next round's claims are
    made while the current round is in flight, and marks are made in the background, as the
    single-node relay does. Safe for the order for the same reason: while a round's rows are
    PENDING (in flight, or delivered and not yet marked), the claim does not hand out a later
    event of any of their aggregates.

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
        # Per node: its claim connections (a queue: a claim takes one, gives it back) and its marker.
        self._nodes: dict[tuple[str | None, int | None], _Node] = {}
        self._redo: dict[int, list[OutboxRow]] = {}
        self._claimed_on: dict[int, tuple[str | None, int | None]] = {}  # group -> node of its last claim

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
        prefetch: asyncio.Task | None = None
        try:
            while not self.stop.is_set():
                await self._lease(coord)
                if prefetch is not None:
                    claimed, prefetch = await prefetch, None
                else:
                    claimed = await self._claim_groups(sorted(self.groups))
                # Rows to send again first (a transient failure: in their order, before anything new
                # of their group; the claims above could not take later events of their aggregates).
                for group in sorted(self._redo):
                    claimed[group] = self._redo.pop(group) + claimed.get(group, [])
                claimed = {g: rows for g, rows in claimed.items() if rows}
                if not claimed:
                    if any(node.marker is not None and node.marker.busy for node in self._nodes.values()):
                        await self._drain_markers()  # marked rows may free held-back events
                        continue
                    await sleep_or_stop(self.stop, self.opt.poll_interval)
                    continue
                if self.opt.prefetch and any(len(rows) >= self.opt.batch_size for rows in claimed.values()):
                    # A backlog: the next round's claims while this one is in flight.
                    prefetch = asyncio.ensure_future(self._claim_groups(sorted(self.groups)))
                rows = [r for group in sorted(claimed) for r in claimed[group]]
                batch = await self._publish(rows, coord)
                await self._settle_groups(claimed, batch)
                if batch.transient:
                    self._recover_sink()
                    await sleep_or_stop(self.stop, self.opt.retry_pause)
        finally:
            if prefetch is not None:
                # Claimed but never produced: they come back when their lease lapses.
                prefetch.cancel()
                try:
                    await prefetch
                except (asyncio.CancelledError, psycopg.Error):
                    pass

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

    async def _node(self, node: tuple[str | None, int | None]) -> "_Node":
        state = self._nodes.get(node)
        if state is None:
            host, port = node
            url = self.url if host is None else make_conninfo(self.url, host=host, port=port)
            state = self._nodes[node] = _Node(url)
        return state

    async def _claim_groups(self, groups: list[int]) -> dict[int, list[OutboxRow]]:
        """Claim in every group at once: a node's groups in at most shard_connections calls of
        `claim_outbox_events_in_shards`, side by side (one connection each)."""
        nodes = {g: self.groups[g] for g in groups if g in self.groups}
        self._claimed_on.update(nodes)
        by_node: dict[tuple[str | None, int | None], list[int]] = {}
        for group, node in nodes.items():
            by_node.setdefault(node, []).append(group)
        parts = []
        for node, node_groups in by_node.items():
            calls = max(1, min(self.opt.shard_connections, len(node_groups)))
            parts += [(node, node_groups[i::calls]) for i in range(calls)]

        async def one(node: tuple[str | None, int | None], part: list[int]) -> dict[int, list[OutboxRow]]:
            try:
                return await self._claim_part(node, part)
            except psycopg.Error as exc:
                await self._node_failed(node, ",".join(map(str, part)), exc)
                return {}

        claimed: dict[int, list[OutboxRow]] = {g: [] for g in nodes}
        for found in await asyncio.gather(*(one(node, part) for node, part in parts)):
            claimed.update(found)
        return claimed

    async def _claim_part(self, node: tuple[str | None, int | None], groups: list[int]) -> dict[int, list[OutboxRow]]:
        state = await self._node(node)
        conn = await state.take(self.opt.shard_connections)
        try:
            cur = await conn.execute(db.CLAIM_OUTBOX_EVENTS_IN_SHARDS, {
                "worker": self.worker, "groups": groups, "batch": self.opt.batch_size, "lease": self.opt.lease,
                "now": self.clock.now()})
            rows: dict[int, list[OutboxRow]] = {g: [] for g in groups}
            for group, id_, agg_type, agg_id, payload, seq in await cur.fetchall():
                rows[group].append(OutboxRow(id_, (agg_type, agg_id), str(agg_id).encode(), payload.encode(), seq))
        except BaseException:
            await conn.close()
            raise
        state.give(conn)
        return rows

    async def _node_failed(self, node: tuple[str | None, int | None] | None, group: int | str, exc: Exception) -> None:
        # A node away, or a group moved (BL409 naming its new node): its rows come back after their
        # lease; the next round leases again and reads the placements afresh.
        log.warning("relay: shard group unavailable this round", extra={"group": group, "error": str(exc).strip()})
        state = self._nodes.pop(node, None)
        if state is not None:
            await state.close(quietly=True)

    async def _settle_groups(self, claimed: dict[int, list[OutboxRow]], batch: Batch) -> None:
        delivered = set(batch.delivered)
        poison = dict(batch.poison)
        transient = {r.id for r in batch.transient}
        for group, rows in claimed.items():
            node = self.groups.get(group) or self._claimed_on.get(group)  # given away since its claim
            ids = [r.id for r in rows if r.id in delivered]
            try:
                state = await self._node(node)
                marker = await state.marker_for(self)
                if ids:
                    marker.add_group(group, ids)
                for row in rows:
                    if row.id in poison:
                        log.error("event rejected by the sink; marked failed", extra={"outbox_id": row.id})
                        await marker.drain()  # one statement at a time on the marker's connection
                        await marker.conn.execute(db.MARK_OUTBOX_FAILED_IN_SHARD, {
                            "group": group, "id": row.id, "error": poison[row.id][:1000], "now": self.clock.now()})
                        OUTBOX_FAILED.inc()
            except psycopg.Error as exc:  # published but not marked: published again (at least once)
                await self._node_failed(node, group, exc)
                continue
            redo = sorted((r for r in rows if r.id in transient), key=lambda r: r.order)
            if redo:
                self._redo[group] = redo

    async def _mark_groups(self, conn: psycopg.AsyncConnection, by_group: dict[int, list[int]]) -> None:
        """One `mark_outbox_published_in_shards` for the delivered ids of a node's groups."""
        groups = [g for g, ids in sorted(by_group.items()) for _ in ids]
        ids = [i for _, group_ids in sorted(by_group.items()) for i in group_ids]
        if not ids:
            return
        await conn.execute(db.MARK_OUTBOX_PUBLISHED_IN_SHARDS, {"groups": groups, "ids": ids, "now": self.clock.now()})
        self.published += len(ids)
        OUTBOX_PUBLISHED.inc(len(ids))

    async def _drain_markers(self) -> None:
        for node, state in list(self._nodes.items()):
            if state.marker is None:
                continue
            try:
                await state.marker.drain()
            except psycopg.Error as exc:
                await self._node_failed(node, -1, exc)

    async def _close_nodes(self) -> None:
        nodes, self._nodes = self._nodes, {}
        for state in nodes.values():
            await state.close(quietly=True)


class _GroupMarker(Marker):
    """A node's marker: the delivered ids of each group it holds, marked by one
    `mark_outbox_published_in_shards` for all its groups, in the background on the node's own
    connection."""

    def __init__(self, conn: psycopg.AsyncConnection, relay: ShardRelay) -> None:
        self.relay = relay
        self.by_group: dict[int, list[int]] = {}
        super().__init__(conn, self._mark_all)

    def add_group(self, group: int, ids: list[int]) -> None:
        self.by_group.setdefault(group, []).extend(ids)
        self.add(ids)

    async def _mark_all(self, conn: psycopg.AsyncConnection, ids: list[int]) -> None:
        by_group, self.by_group = self.by_group, {}
        await self.relay._mark_groups(conn, by_group)


class _Node:
    """One node's connections for a ShardRelay: claim connections (made as needed, at most
    `limit` at a time) and the marker's own connection."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.idle: list[psycopg.AsyncConnection] = []
        self.opened = 0
        self.freed = asyncio.Condition()
        self.marker: _GroupMarker | None = None
        self.mark_conn: psycopg.AsyncConnection | None = None

    async def take(self, limit: int) -> psycopg.AsyncConnection:
        async with self.freed:
            while not self.idle and self.opened >= max(limit, 1):
                await self.freed.wait()
            if self.idle:
                return self.idle.pop()
            self.opened += 1
        try:
            return await psycopg.AsyncConnection.connect(self.url, autocommit=True, **_KEEPALIVES)
        except BaseException:
            self.opened -= 1
            raise

    def give(self, conn: psycopg.AsyncConnection) -> None:
        self.idle.append(conn)
        asyncio.ensure_future(self._notify())

    async def _notify(self) -> None:
        async with self.freed:
            self.freed.notify()

    async def marker_for(self, relay: ShardRelay) -> _GroupMarker:
        if self.marker is not None and self.marker.task.done():
            # Its connection failed: what it had not marked is published again after its lease.
            failed = self.marker.task.exception() if not self.marker.task.cancelled() else None
            log.warning("relay: marking failed on a node; reconnecting", extra={"error": str(failed).strip()})
            self.marker = None
            if self.mark_conn is not None:
                await self.mark_conn.close()
                self.mark_conn = None
        if self.marker is None:
            self.mark_conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True, **_KEEPALIVES)
            self.marker = _GroupMarker(self.mark_conn, relay)
        return self.marker

    async def close(self, *, quietly: bool) -> None:
        if self.marker is not None:
            try:
                await self.marker.close()
            except psycopg.Error as exc:  # published again by the group's next holder: at least once
                log.warning("could not mark the last delivered events", extra={"error": str(exc).strip()})
            self.marker = None
        for conn in [*self.idle, *([self.mark_conn] if self.mark_conn else [])]:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self.idle, self.mark_conn = [], None
