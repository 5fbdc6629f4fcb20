"""The renewal loop: `create_due_invoices` until it reports nothing due, then `rate_usage` (usage in
arrears onto USAGE invoices once a period's grace is over, docs/usage.md) and `check_usage_alerts`,
then `finalize_invoices`
(legal numbers and document lines, docs/invoices.md) until none waits, then a short wait.

Several instances may run it at once: the SQL function claims with SKIP LOCKED, so they share
the due subscriptions instead of fighting over them.

On Citus (`shards` given: billing.worker.shards) the renewals go per shard group instead:
`renew_in_shard` in each group the worker leases, on the node holding it, until the group has
nothing due; so does the usage rating (`rate_due_usage_in_shards`: the claim and the set-based rating
on the group's node, the customers' usage locks held on the coordinator meanwhile); the other steps
(finalizing, cards, waiting invoices, keys, usage alerts) stay calls on the coordinator, each on its
own, so that one failing does not hold the renewals back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AsyncExitStack

import psycopg

from billing import db, metrics
from billing.clock import Clock, SystemClock, sleep_or_stop

log = logging.getLogger("billing.renewal")

EXPIRY_INTERVAL_SECONDS = 3600.0  # how often the loop forgets idempotency keys older than a day
CARDS_INTERVAL_SECONDS = 60.0  # how often it looks for cards expiring before their next renewal


async def renew_due(pool, clock: Clock, *, batch: int = 500, stop: asyncio.Event | None = None) -> int:
    """Call create_due_invoices until it returns 0 (or `stop` is set); how many subscriptions it handled."""
    total = 0
    while stop is None or not stop.is_set():
        async with pool.connection() as conn:
            cur = await conn.execute(db.CREATE_DUE_INVOICES, {"batch": batch, "now": clock.now()})
            handled = (await cur.fetchone())["handled"]
        if not handled:
            break
        total += handled
        metrics.RENEWALS.inc(handled)
        metrics.RENEWAL_BATCHES.inc()
    return total


async def renew_due_in_shards(shards, clock: Clock, *, batch: int = 500, stop: asyncio.Event | None = None) -> int:
    """Call renew_in_shard in every shard group the worker leases, each until it returns 0 (or
    `stop` is set); how many subscriptions it handled. A group whose claim is refused (BL409: the
    lease was lost or the group moved) is dropped and left to its next lease."""
    from billing.worker.shards import LOST

    total = 0
    for group in shards.held():
        while stop is None or not stop.is_set():
            try:
                pool = await shards.pool_for(group)
                async with pool.connection() as conn:
                    cur = await conn.execute(db.RENEW_IN_SHARD, {"worker": shards.worker_id, "group": group,
                                                                 "batch": batch, "now": clock.now()})
                    handled = (await cur.fetchone())["handled"]
            except psycopg.Error as exc:
                if exc.sqlstate in LOST:
                    shards.lost(group, exc)
                    break
                raise
            if not handled:
                break
            total += handled
            metrics.RENEWALS.inc(handled)
            metrics.RENEWAL_BATCHES.inc()
    return total


async def rate_due_usage(pool, clock: Clock, *, batch: int = 500, grace: float = 3600.0,
                         stop: asyncio.Event | None = None, workers: int = 1) -> int:
    """Call rate_usage until it looks at less than a batch, in `workers` loops at once (each call
    takes the due cursors no other call holds: FOR UPDATE SKIP LOCKED, docs/usage.md), then check
    the usage alerts (UsageThresholdReached once per period); how many USAGE invoices it made."""

    async def loop(k: int) -> int:
        made = 0
        follow = k == 0  # the subscriptions not followed yet: looked for once a round (every cursor read)
        while stop is None or not stop.is_set():
            async with pool.connection() as conn:
                cur = await conn.execute(db.RATE_USAGE, {"batch": batch, "now": clock.now(), "grace": grace,
                                                         "follow": follow})
                row = await cur.fetchone()
            follow = False
            made += row["invoiced"]
            if row["looked"] < batch:
                break
        return made

    total = sum(await asyncio.gather(*(loop(k) for k in range(max(1, workers)))))
    await check_usage_alerts(pool, clock, batch=batch, stop=stop)
    return total


async def check_usage_alerts(pool, clock: Clock, *, batch: int = 500, stop: asyncio.Event | None = None) -> None:
    """check_usage_alerts until it fires less than a batch (UsageThresholdReached once per period)."""
    while stop is None or not stop.is_set():
        async with pool.connection() as conn:
            cur = await conn.execute(db.CHECK_USAGE_ALERTS, {"batch": batch, "now": clock.now()})
            if (await cur.fetchone())["fired"] < batch:
                break


async def rate_group_usage(pool, shards, group: int, clock: Clock, *, batch: int = 500, grace: float = 3600.0,
                           follow: bool = True) -> tuple[int, int]:
    """One batch of the usage rating inside one shard group (docs/usage.md "Per shard group"): on the
    group's node, in one transaction, claim_usage_in_shard (its due subscriptions, locked SKIP
    LOCKED); their customers' usage locks on the coordinator (lock_usage_customers: where the
    ingestion takes them), in a transaction that commits only after the node's; then
    rate_usage_in_shard for the customers locked. (How many it claimed, how many USAGE invoices.)
    On a single PostgreSQL, or a group on the coordinator itself, the node's call takes the locks."""
    node_pool = await shards.pool_for(group)
    now = clock.now()
    params = {"worker": shards.worker_id, "group": group, "batch": batch, "now": now, "grace": grace}
    async with AsyncExitStack() as stack:
        node = await stack.enter_async_context(node_pool.connection())
        coordinator = None
        if not shards.on_coordinator(group):
            coordinator = await stack.enter_async_context(pool.connection())
            # entered first, left last: the locks are released after the node's commit
            await stack.enter_async_context(coordinator.transaction())
        await stack.enter_async_context(node.transaction())
        cur = await node.execute(db.CLAIM_USAGE_IN_SHARD, {**params, "follow": follow})
        claimed = await cur.fetchall()
        if not claimed:
            return 0, 0
        customers = [r["customer_id"] for r in claimed]
        subscriptions = [r["subscription_id"] for r in claimed]
        if coordinator is not None:
            cur = await coordinator.execute(db.LOCK_USAGE_CUSTOMERS, {"customers": sorted(set(customers))})
            locked = {r["customer_id"] for r in await cur.fetchall()}
            keep = [i for i, c in enumerate(customers) if c in locked]
            customers = [customers[i] for i in keep]
            subscriptions = [subscriptions[i] for i in keep]
        cur = await node.execute(db.RATE_USAGE_IN_SHARD, {**params, "customers": customers,
                                                          "subscriptions": subscriptions})
        row = await cur.fetchone()
    return len(claimed), row["invoiced"]


async def rate_due_usage_in_shards(pool, shards, clock: Clock, *, batch: int = 500, grace: float = 3600.0,
                                   stop: asyncio.Event | None = None, workers: int = 1) -> int:
    """The usage rating on Citus: `rate_group_usage` in every shard group the worker leases, each
    until a batch claims less than `batch` (the subscriptions not followed yet looked for by a group's
    first batch of the round), the groups shared by `workers` loops at once (BILLING_USAGE_RATING_WORKERS:
    groups are independent, each loop on its own connections), then the usage alerts on the
    coordinator; how many USAGE invoices it made. A group whose claim is refused (BL409: the lease
    was lost or the group moved) is dropped."""
    from billing.worker.shards import LOST

    async def loop(groups: list[int]) -> int:
        made = 0
        for group in groups:
            follow = True
            while stop is None or not stop.is_set():
                try:
                    claimed, invoiced = await rate_group_usage(pool, shards, group, clock, batch=batch, grace=grace,
                                                               follow=follow)
                except psycopg.Error as exc:
                    if exc.sqlstate in LOST:
                        shards.lost(group, exc)
                        break
                    raise
                follow = False
                made += invoiced
                if claimed < batch:
                    break
        return made

    groups = shards.held()
    loops = max(1, min(workers, len(groups)))
    made = sum(await asyncio.gather(*(loop(groups[k::loops]) for k in range(loops))))
    await check_usage_alerts(pool, clock, batch=batch, stop=stop)
    return made


async def finalize_waiting(pool, clock: Clock, *, batch: int = 500, stop: asyncio.Event | None = None) -> int:
    """Call finalize_invoices until it returns less than a batch; how many invoices were finalized.
    One series counter serialises concurrent callers, so several loops are harmless but not faster."""
    total = 0
    while stop is None or not stop.is_set():
        async with pool.connection() as conn:
            cur = await conn.execute(db.FINALIZE_INVOICES, {"batch": batch, "now": clock.now()})
            done = (await cur.fetchone())["finalized"]
        total += done
        if done < batch:
            break
    return total


async def announce_expiring_cards(pool, clock: Clock, *, days: int, batch: int = 500) -> int:
    """PaymentMethodExpiring for each default card that expires before its customer's next
    renewal, `days` ahead of that renewal (once per card); how many were announced."""
    total = 0
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(db.ANNOUNCE_EXPIRING_PAYMENT_METHODS, {"days": days, "batch": batch,
                                                                            "now": clock.now()})
            announced = (await cur.fetchone())["announced"]
        total += announced
        if announced < batch:
            return total


async def give_up_waiting(pool, clock: Clock, *, batch: int = 500) -> int:
    """Ends the invoices that waited for a payment method past their dunning span, as exhausted
    dunning does (FAILED; the subscription canceled, an upgrade reverted or the period written off);
    how many were given up."""
    total = 0
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(db.GIVE_UP_WAITING_INVOICES, {"batch": batch, "now": clock.now()})
            given_up = (await cur.fetchone())["given_up"]
        total += given_up
        if given_up < batch:
            return total


async def run_renewal(pool, stop: asyncio.Event, *, clock: Clock | None = None, batch: int = 500,
                      idle_seconds: float = 1.0, expiry_notice_days: int = 7, shards=None,
                      usage_grace: float = 3600.0, usage_workers: int = 1) -> None:
    """Renew until `stop` is set; a database error is logged and retried with backoff. Once a
    minute, announce the default cards that expire before their next renewal; every round, give
    up the invoices that waited for a payment method past their dunning span. With `shards`
    (a billing.worker.shards.ShardLeases), per shard group (`run_renewal_in_shards`)."""
    if shards is not None:
        await run_renewal_in_shards(pool, shards, stop, clock=clock, batch=batch, idle_seconds=idle_seconds,
                                    expiry_notice_days=expiry_notice_days, usage_grace=usage_grace,
                                    usage_workers=usage_workers)
        return
    clock = clock or SystemClock()
    backoff = 0.5
    next_expiry = time.monotonic()
    next_cards = time.monotonic()
    log.info("renewal loop started", extra={"batch": batch})
    while not stop.is_set():
        try:
            if time.monotonic() >= next_expiry:
                # Idempotency keys of create_subscription live a day (docs/security.md).
                async with pool.connection() as conn:
                    cur = await conn.execute(db.EXPIRE_IDEMPOTENCY_KEYS,
                                             {"max_age": "24 hours", "batch": 10000, "now": clock.now()})
                    expired = (await cur.fetchone())["expired"]
                if expired:
                    log.info("idempotency keys expired", extra={"keys": expired})
                next_expiry = time.monotonic() + (1 if expired == 10000 else EXPIRY_INTERVAL_SECONDS)
            if time.monotonic() >= next_cards:
                announced = await announce_expiring_cards(pool, clock, days=expiry_notice_days)
                if announced:
                    log.info("expiring cards announced", extra={"cards": announced})
                next_cards = time.monotonic() + CARDS_INTERVAL_SECONDS
            given_up = await give_up_waiting(pool, clock)
            if given_up:
                log.info("invoices given up after waiting for a payment method", extra={"invoices": given_up})
            handled = await renew_due(pool, clock, batch=batch, stop=stop)
            if handled:
                log.info("renewed", extra={"subscriptions": handled})
            rated = await rate_due_usage(pool, clock, batch=batch, grace=usage_grace, stop=stop, workers=usage_workers)
            if rated:
                log.info("usage rated", extra={"invoices": rated})
            finalized = await finalize_waiting(pool, clock, batch=batch, stop=stop)
            if finalized:
                log.info("invoices finalized", extra={"invoices": finalized})
            backoff = 0.5
            wait = idle_seconds
        except psycopg.Error as exc:
            log.warning("create_due_invoices failed; retrying", extra={"error": repr(exc)})
            wait = backoff
            backoff = min(backoff * 2, 10.0)
        if await sleep_or_stop(stop, wait):
            return


async def run_renewal_in_shards(pool, shards, stop: asyncio.Event, *, clock: Clock | None = None, batch: int = 500,
                                idle_seconds: float = 1.0, expiry_notice_days: int = 7,
                                usage_grace: float = 3600.0, usage_workers: int = 1) -> None:
    """`run_renewal` on Citus: the renewals per shard group (`renew_due_in_shards`), the other
    steps on the coordinator as before, each retried on its own (a step that fails is logged and
    tried again next round; it never holds the renewals back)."""
    clock = clock or SystemClock()
    backoff = 0.5
    next_expiry = time.monotonic()
    next_cards = time.monotonic()
    log.info("renewal loop started, per shard group", extra={"batch": batch, "worker": shards.worker_id})

    async def step(name: str, call):
        try:
            return await call()
        except psycopg.Error as exc:
            log.warning("renewal step failed; retried next round", extra={"step": name, "error": repr(exc)})
            return None

    async def expire_keys() -> int:
        async with pool.connection() as conn:
            cur = await conn.execute(db.EXPIRE_IDEMPOTENCY_KEYS,
                                     {"max_age": "24 hours", "batch": 10000, "now": clock.now()})
            return (await cur.fetchone())["expired"]

    await shards.ready.wait()
    while not stop.is_set():
        if time.monotonic() >= next_expiry:
            expired = await step("expire_idempotency_keys", expire_keys)
            next_expiry = time.monotonic() + (1 if expired == 10000 else EXPIRY_INTERVAL_SECONDS)
        if time.monotonic() >= next_cards:
            await step("announce_expiring_payment_methods",
                       lambda: announce_expiring_cards(pool, clock, days=expiry_notice_days))
            next_cards = time.monotonic() + CARDS_INTERVAL_SECONDS
        await step("give_up_waiting_invoices", lambda: give_up_waiting(pool, clock))
        try:
            handled = await renew_due_in_shards(shards, clock, batch=batch, stop=stop)
            if handled:
                log.info("renewed", extra={"subscriptions": handled})
            backoff = 0.5
            wait = idle_seconds
        except psycopg.Error as exc:
            log.warning("renew_in_shard failed; retrying", extra={"error": repr(exc)})
            wait = backoff
            backoff = min(backoff * 2, 10.0)
        # the usage rating per shard group too (several worker processes share the groups by lease)
        await step("rate_usage_in_shard", lambda: rate_due_usage_in_shards(pool, shards, clock, batch=batch,
                                                                           grace=usage_grace, stop=stop,
                                                                           workers=usage_workers))
        await step("finalize_invoices", lambda: finalize_waiting(pool, clock, batch=batch, stop=stop))
        if await sleep_or_stop(stop, wait):
            return
