"""Shard groups for the batch workers on Citus (docs/scaling.md, "Batch claims").

On Citus a batch claim cannot be one statement over the distributed tables; it runs inside one
shard group, on the node that holds the group. So a worker first leases groups (one call to
`lease_shard_groups` on the coordinator, renewed every third of the lease), then claims and works
in each group it holds with one call on that group's node (`renew_in_shard`,
`charge_claims_in_shard`), through a connection pool per node made with the user, password and
database of the configured URL and the node's host and port from the lease.

    shards = ShardLeases(pool, settings.database_url, worker_id, clock=clock, lease_seconds=30)
    task = asyncio.create_task(shards.run(stop))      # leases, renews, re-reads placements
    for group in shards.held():
        async with (await shards.pool_for(group)).connection() as conn: ...
        # a claim refused with BL409 (the lease was lost, or the group moved): shards.lost(group)

The lease only spreads the groups over the workers: a worker whose lease ran out while it was
claiming is refused at its next claim (BL409) and drops the group; rows it claimed meanwhile stay
locked or leased by their own claims, so the group's new holder never takes them twice. A group
that moved to another node (`citus_rebalance_start`) is refused the same way on the old node; the
next lease reads the placements again and names the new node.

`shard_mode` says which path a worker takes: the per-group claims when the database is
distributed (`billing.shard_groups` names nodes) or when asked (`BILLING_SHARD_CLAIMS=on`: on a
single PostgreSQL, its one group 0 through the configured pool), else the single-node batch
functions (`create_due_invoices`, `claim_charges`), unchanged.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg

from billing import db
from billing.clock import Clock, SystemClock

log = logging.getLogger("billing.shards")

# SQLSTATEs of a claim that must drop its group: BL409 (the lease is not ours, or the group is on
# another node), BL404 (the group no longer exists: the cluster's groups changed).
LOST = ("BL409", "BL404")


async def shard_mode(pool, setting: str, clock: Clock) -> bool:
    """Whether the worker claims per shard group: `setting` "on"/"off", or "auto": when the
    database is distributed (billing.shard_groups names a node)."""
    if setting == "on":
        return True
    if setting == "off":
        return False
    try:
        async with pool.connection() as conn:
            cur = await conn.execute(db.SHARD_GROUPS, {"now": clock.now()})
            rows = await cur.fetchall()
    except psycopg.errors.UndefinedFunction:
        return False  # a database migrated before the shard groups existed
    return any(r["node_name"] is not None for r in rows)


def node_url(url: str, host: str | None, port: int | None) -> str:
    """`url` with the node's host and port (the user, password, database and options kept)."""
    if host is None:
        return url
    info = psycopg.conninfo.conninfo_to_dict(url)
    info.update(host=host, port=str(port))
    return psycopg.conninfo.make_conninfo(**info)


@dataclass
class Lease:
    group: int
    until: datetime
    node: tuple[str, int] | None  # None: the configured database itself (a single PostgreSQL)


class ShardLeases:
    def __init__(self, pool, database_url: str, worker_id: str, *, clock: Clock | None = None,
                 lease_seconds: float = 30.0, max_groups: int = 10000, node_pool_size: int = 4) -> None:
        if lease_seconds <= 0:
            raise ValueError("the shard lease must be positive")
        self.pool = pool
        self.database_url = database_url
        self.worker_id = worker_id
        self.clock = clock or SystemClock()
        self.lease_seconds = lease_seconds
        self.max_groups = max_groups
        self.node_pool_size = node_pool_size
        self.leases: dict[int, Lease] = {}
        self._pools: dict[tuple[str, int], object] = {}
        self._wake = asyncio.Event()
        self.ready = asyncio.Event()  # set after the first lease call (successful or not)
        self.counts = {"leased": 0, "lost": 0, "released": 0}
        self._cursor = 0

    # -- leases ----------------------------------------------------------------------------------

    async def lease(self) -> dict[int, Lease]:
        """One call of lease_shard_groups: renews what the worker holds, gives back its surplus,
        takes free groups up to its share; the groups held now, by number."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(db.LEASE_SHARD_GROUPS, {
                "worker": self.worker_id, "max_groups": self.max_groups,
                "lease": timedelta(seconds=self.lease_seconds), "now": self.clock.now()})
            rows = await cur.fetchall()
        leases = {r["shard_group"]: Lease(r["shard_group"], r["lease_until"],
                                          None if r["node_name"] is None else (r["node_name"], r["node_port"]))
                  for r in rows}
        taken = sorted(set(leases) - set(self.leases))
        gone = sorted(set(self.leases) - set(leases))
        moved = sorted(g for g in set(leases) & set(self.leases) if leases[g].node != self.leases[g].node)
        self.leases = leases
        self.counts["leased"] += len(taken)
        self.counts["released"] += len(gone)
        if taken or gone or moved:
            log.info("shard groups", extra={"worker": self.worker_id, "held": sorted(leases), "taken": taken,
                                            "gone": gone, "moved": moved})
        return leases

    def held(self) -> list[int]:
        """The groups the worker may claim in now: leased, the lease not yet over on its clock.
        Rotated on each call, so that a batch taken across groups does not always start at the first."""
        now = self.clock.now()
        groups = sorted(g for g, lease in self.leases.items() if lease.until > now)
        if not groups:
            return []
        self._cursor = (self._cursor + 1) % len(groups)
        return groups[self._cursor:] + groups[:self._cursor]

    def lost(self, group: int, exc: BaseException | None = None) -> None:
        """A claim was refused in `group` (BL409/BL404): drop it and lease again soon (the next
        lease reads the placements again: a group that moved is found on its new node)."""
        if self.leases.pop(group, None) is not None:
            self.counts["lost"] += 1
            log.warning("shard group lost; leasing again",
                        extra={"worker": self.worker_id, "group": group, "error": str(exc) if exc else None})
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Lease until `stop` is set: every third of the lease, or at once after a group was lost.
        A failed call is retried with backoff; meanwhile the groups whose lease ran out on the
        worker's clock are no longer claimed in (`held`)."""
        backoff = 0.5
        log.info("leasing shard groups", extra={"worker": self.worker_id, "lease_s": self.lease_seconds,
                                                 "max_groups": self.max_groups})
        while not stop.is_set():
            try:
                await self.lease()
                wait = self.lease_seconds / 3
                backoff = 0.5
            except psycopg.Error as exc:
                log.warning("lease_shard_groups failed; retrying", extra={"error": repr(exc)})
                wait = backoff
                backoff = min(backoff * 2, self.lease_seconds / 3)
            self.ready.set()
            self._wake.clear()
            waiters = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())}
            await asyncio.wait(waiters, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            for w in waiters:
                w.cancel()

    # -- connections -------------------------------------------------------------------------------

    def on_coordinator(self, group: int) -> bool:
        """Whether `group` is served by the configured database itself: a single PostgreSQL (group
        0), or a Citus node that is the coordinator the configured URL names (same host and port)."""
        lease = self.leases.get(group)
        if lease is None or lease.node is None:
            return True
        info = psycopg.conninfo.conninfo_to_dict(self.database_url)
        host = info.get("host") or "localhost"
        port = int(info.get("port") or 5432)
        local = {"localhost", "127.0.0.1", "::1"}
        same_host = lease.node[0] == host or (lease.node[0] in local and host in local)
        return same_host and lease.node[1] == port

    async def pool_for(self, group: int):
        """The pool of the node holding `group` (the configured pool for group 0 of a single
        PostgreSQL); made on first use."""
        lease = self.leases.get(group)
        if lease is None or lease.node is None:
            return self.pool
        pool = self._pools.get(lease.node)
        if pool is None:
            pool = await db.async_pool(node_url(self.database_url, *lease.node), min_size=1,
                                       max_size=self.node_pool_size, name=f"billing-node-{lease.node[1]}")
            pool = self._pools.setdefault(lease.node, pool)
        return pool

    async def close(self) -> None:
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            try:
                await pool.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                log.debug("closing a node pool failed", exc_info=True)


async def in_each_group(shards: ShardLeases, query: str, params: dict, *, want: int | None = None,
                        stop: asyncio.Event | None = None) -> list[dict]:
    """Run `query` (a claim with %(group)s and %(batch)s) in the groups the worker holds, one call
    per group, until `want` rows came back (None: one call in every group); the rows. A group whose
    claim is refused with BL409/BL404 is dropped (`ShardLeases.lost`); other errors propagate."""
    rows: list[dict] = []
    for group in shards.held():
        if (want is not None and len(rows) >= want) or (stop is not None and stop.is_set()):
            break
        batch = params["batch"] if want is None else min(params["batch"], want - len(rows))
        try:
            pool = await shards.pool_for(group)
            async with pool.connection() as conn:
                cur = await conn.execute(query, {**params, "group": group, "batch": batch})
                rows.extend(await cur.fetchall())
        except psycopg.Error as exc:
            if exc.sqlstate in LOST:
                shards.lost(group, exc)
                continue
            raise
    return rows
