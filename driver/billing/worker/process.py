"""The one composition of the worker: what `billing worker` runs, and what the demo drives.

    worker = await build_worker(settings, clock=clock)      # pool, gateway client, limiter, charger
    tasks = worker.start(stop)                               # {"renewal": Task, "charging": ..., "relay": ...}
    ...
    stop.set(); await asyncio.gather(*tasks.values(), return_exceptions=True)
    await worker.close()                                     # what the builder opened, it closes

or, to supervise the parts as `billing worker` does (a part that crashes or ends on its own stops
the others; the exit code says so): ``code = await worker.run(stop)`` then ``await worker.close()``.

The builder decides, from `settings` and its keyword options:
* the connection pool (when renewal or charging runs);
* the payment provider (`billing.providers.provider_from_settings`: BILLING_GATEWAY_PROVIDER), its
  timeout well inside the charge lease:
  ``min(settings.gateway_timeout_seconds, settings.charge_lease_seconds / 3)``;
* the rate limiter, chosen in one place (`billing.limiter.limiter_from_settings`): the Redis GCRA
  limiter when `settings.redis_url` is set, else the in-process one (see `local_limiter`), unless
  a `limiter` is passed (then the caller owns it and closes it);
* the charger (`Charger`), at `settings.gateway_rate`, leases of `settings.charge_lease_seconds`, and
  the refund loop (`Refunder`) through the same provider and limiter;
* the outbox relay into `sink` (default: Kafka at `settings.kafka_bootstrap`, opened and closed
  by the relay itself; a sink that is passed is the caller's to close).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable, Literal

from billing.clock import Clock
from billing.config import Settings

if TYPE_CHECKING:  # the parts are imported when built, so that a switched-off part costs nothing
    from psycopg_pool import AsyncConnectionPool

    from billing.gateway.client import GatewayClient
    from billing.limiter import RateLimiter
    from billing.worker.charging import Charger
    from billing.worker.refunds import Refunder
    from billing.worker.relay import RelayOptions
    from billing.worker.shards import ShardLeases
    from billing.worker.sinks import EventSink

log = logging.getLogger("billing.worker")

Part = Callable[[asyncio.Event], Awaitable[None]]


@dataclass
class Worker:
    """The worker's parts, built by `build_worker`. Each of `pool`, `gateway`, `limiter`,
    `charger` is None when the part that needs it is switched off."""

    settings: Settings
    clock: Clock
    pool: AsyncConnectionPool | None = None
    gateway: GatewayClient | None = None
    limiter: RateLimiter | None = None
    limiter_name: str = ""  # what the limiter is, in words (for logs and reports)
    charger: Charger | None = None
    refunder: Refunder | None = None
    shards: ShardLeases | None = None  # the shard groups leased (Citus), None on the single-node path
    sink: EventSink | None = None  # the relay's sink when one was passed, else None (Kafka)
    # What to run: part name -> a coroutine function taking the stop event.
    parts: dict[str, Part] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task] = field(default_factory=dict)
    # What `close` closes, in this order: what the builder opened (not what was passed to it).
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list, repr=False)

    def start(self, stop: asyncio.Event) -> dict[str, asyncio.Task]:
        """Start every part as a task named after it; the tasks, by name (also in `self.tasks`)."""
        for name, part in self.parts.items():
            if name not in self.tasks:
                self.tasks[name] = asyncio.create_task(part(stop), name=name)
        return dict(self.tasks)

    async def run(self, stop: asyncio.Event) -> int:
        """Start the parts and supervise them until they all end: 0 when they ended because `stop`
        was set, 1 when one crashed or ended on its own (then `stop` is set for the others)."""
        if not self.parts:
            log.warning("nothing to run: renewal, charging and relay are all switched off")
            return 0
        self.start(stop)
        log.info("worker started", extra={"parts": ",".join(self.tasks), "pid": os.getpid()})
        failed = False
        pending = set(self.tasks.values())
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = task.exception() if not task.cancelled() else None
                if exc is not None:
                    failed = True
                    log.error("worker part crashed; stopping", extra={"part": task.get_name()}, exc_info=exc)
                elif not stop.is_set():
                    failed = True
                    log.error("worker part ended on its own; stopping", extra={"part": task.get_name()})
                stop.set()
        log.info("worker stopped", extra={"clean": not failed})
        return 1 if failed else 0

    async def close(self) -> None:
        """Cancel the parts still running, then close what the builder opened (the gateway client,
        the limiter it chose, the pool). Best effort: a failing close is logged and skipped."""
        for task in self.tasks.values():
            if not task.done():
                task.cancel()
        closers, self.closers = self.closers, []
        for close in closers:
            try:
                await close()
            except Exception:  # noqa: BLE001 - closing is best effort
                log.debug("close failed", exc_info=True)


async def build_worker(
    settings: Settings,
    *,
    clock: Clock,
    limiter: RateLimiter | None = None,
    sink: EventSink | None = None,
    renew: bool = True,
    charge: bool = True,
    relay: bool = True,
    webhooks: bool = False,
    retention: bool = False,
    notifications: bool = False,
    concurrency: int | None = None,
    limiter_key: str | None = None,
    local_limiter: Literal["warn", "quiet", "refuse"] = "warn",
    renewal_batch: int = 500,
    renewal_idle_seconds: float = 1.0,
    charge_poll_seconds: float = 1.0,
    relay_options: RelayOptions | None = None,
    pool_min_size: int = 1,
    pool_max_size: int = 10,
    pool_name: str = "billing-worker",
) -> Worker:
    """Build the worker's parts from `settings`; nothing runs until `Worker.start` or `Worker.run`.

    * `renew`, `charge`, `relay`: which parts to run (the pool is opened only for the first two).
    * `webhooks`: deliver outbound webhooks (`billing.worker.webhooks`, a pool of its own);
      `retention`: delete what is past `settings.retention_days` (`billing.worker.retention`).
      Both off unless asked for (`billing worker` asks): the demo's simulated months would
      otherwise age its own events out under it.
    * `notifications`: send the emails owed to customers (`billing.worker.notifications`, a pool
      of its own) when `settings.smtp_url` is set; without it they wait, PENDING, and a warning says so.
    * `limiter`: a ready limiter (the caller closes it); else chosen by `limiter_from_settings`
      with `limiter_key` (the Redis key prefix, default "billing:gateway") and `local_limiter`:
      without `settings.redis_url`, "warn" uses the in-process limiter with a warning that the
      limit holds for this process only (what `billing worker` does), "quiet" uses it without the
      warning (the demo's explicit choice), "refuse" raises ValueError.
    * `concurrency`: gateway calls in flight (default: `charging.default_concurrency(rate)`).
    * `charge_poll_seconds`: how often an idle charger looks for work (one `claim_charges` call).
    * `renewal_batch`, `renewal_idle_seconds`: the renewal loop's batch and its wait when idle.
    * `sink`: where the relay publishes (an `EventSink`); None: Kafka per `settings`.
    * `relay_options`: a `billing.worker.relay.RelayOptions` (lease, poll interval, ...).
    * `pool_min_size`, `pool_max_size`, `pool_name`: the connection pool.

    On failure, whatever was already opened is closed before the exception propagates.
    """
    worker = Worker(settings=settings, clock=clock, sink=sink)
    try:
        if renew or charge:
            from billing.db import async_pool

            worker.pool = await async_pool(settings.database_url, min_size=pool_min_size, max_size=pool_max_size,
                                           name=pool_name)
            worker.closers.append(worker.pool.close)
        pool = worker.pool
        worker_id = None
        if renew or charge:
            # Per shard group on Citus, or as asked (BILLING_SHARD_CLAIMS); else the single-node path.
            from billing.worker.charging import default_worker_id
            from billing.worker.shards import ShardLeases, shard_mode

            worker_id = default_worker_id()
            if await shard_mode(pool, settings.shard_claims, clock):
                worker.shards = ShardLeases(pool, settings.database_url, worker_id, clock=clock,
                                            lease_seconds=settings.shard_lease_seconds,
                                            max_groups=settings.shard_max_groups)
                worker.closers.insert(0, worker.shards.close)
                worker.parts["shards"] = worker.shards.run
        shards = worker.shards
        if renew:
            from billing.worker.renewal import run_renewal

            async def renewal(stop: asyncio.Event) -> None:
                await run_renewal(pool, stop, clock=clock, batch=renewal_batch, idle_seconds=renewal_idle_seconds,
                                  expiry_notice_days=settings.card_expiry_notice_days, shards=shards,
                                  usage_grace=settings.usage_grace, usage_workers=settings.usage_rating_workers)

            worker.parts["renewal"] = renewal
        if charge:
            from billing.limiter import describe_limiter, limiter_from_settings
            from billing.providers import provider_from_settings
            from billing.worker.charging import Charger
            from billing.worker.refunds import Refunder

            timeout = min(settings.gateway_timeout_seconds, settings.charge_lease_seconds / 3)
            # The payment provider BILLING_GATEWAY_PROVIDER names (docs/providers.md).
            worker.gateway = provider_from_settings(settings, timeout=timeout)
            # Closed before the limiter and the pool, as `billing worker` always did.
            worker.closers.insert(0, worker.gateway.close)
            if limiter is None:
                limiter = limiter_from_settings(settings, key=limiter_key, local=local_limiter)
                worker.closers.insert(1, limiter.close)
            worker.limiter = limiter
            worker.limiter_name = describe_limiter(limiter, settings)
            worker.charger = Charger(pool, worker.gateway, limiter, rate=settings.gateway_rate, clock=clock,
                                     concurrency=concurrency, lease_seconds=settings.charge_lease_seconds,
                                     poll_seconds=charge_poll_seconds,
                                     record_linger=settings.record_linger_ms / 1000, worker_id=worker_id,
                                     shards=shards)
            worker.parts["charging"] = worker.charger.run
            # Refunds go through the same provider and the same rate limit, on their own loop.
            worker.refunder = Refunder(pool, worker.gateway, limiter, clock=clock, worker_id=worker.charger.worker_id,
                                       lease_seconds=settings.charge_lease_seconds,
                                       poll_seconds=max(charge_poll_seconds, 0.5), shards=shards)
            worker.parts["refunds"] = worker.refunder.run
        if relay:
            try:
                from billing.worker.relay import run_relay
            except ImportError as exc:
                log.warning("outbox relay not available; skipped", extra={"error": repr(exc)})
            else:
                async def relay_part(stop: asyncio.Event) -> None:
                    await run_relay(settings, stop, sink=sink, clock=clock, options=relay_options)

                worker.parts["relay"] = relay_part
        if webhooks:
            from billing.worker.webhooks import run_webhooks

            async def webhooks_part(stop: asyncio.Event) -> None:
                await run_webhooks(settings, stop, clock=clock)

            worker.parts["webhooks"] = webhooks_part
        if notifications and settings.smtp_url:
            from billing.worker.notifications import run_notifications

            async def notifications_part(stop: asyncio.Event) -> None:
                await run_notifications(settings, stop, clock=clock)

            worker.parts["notifications"] = notifications_part
        elif notifications:
            log.warning("BILLING_SMTP_URL is not set: emails to customers wait, unsent (docs/customers.md)")
        if retention:
            from billing.worker.retention import run_retention

            async def retention_part(stop: asyncio.Event) -> None:
                await run_retention(settings, stop, clock=clock)

            worker.parts["retention"] = retention_part
    except BaseException:
        await worker.close()
        raise
    return worker
