"""The worker's parts as the demo runs them in its own process: the pool, the gateway client, the
limiter, the charge workers and the outbox relay, on the demo's simulated clock."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta

from billing.config import Settings
from billing.demo.model import Options
from billing.demo.services import EventTarget
from billing.metrics import CHARGES_IN_FLIGHT

# Claims stay with their worker for this long on the simulated clock: several steps, so that a
# call still on the wire when the clock moves on is never re-claimed (its key would be, harmlessly).
CHARGE_LEASE = timedelta(days=2)
RELAY_LEASE = timedelta(days=1)
# How often an idle charge worker looks for work (real time); each look is one claim_charges call.
CHARGE_POLL_SECONDS = 0.02


@dataclass
class DemoWorker:
    pool: object
    charger: object
    limiter_name: str
    stop: asyncio.Event
    tasks: list[asyncio.Task] = field(default_factory=list)
    closers: list = field(default_factory=list)

    def waiting(self) -> int:
        """Charges claimed by this process and not yet on the wire (held minus in flight)."""
        return self.charger.held() - _gauge(CHARGES_IN_FLIGHT)

    async def close(self) -> None:
        self.stop.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for close in self.closers:
            result = close()
            if asyncio.iscoroutine(result):
                await result


def _gauge(metric) -> int:
    return int(sum(sample.value for family in metric.collect() for sample in family.samples))


async def start_worker(settings: Settings, clock, options: Options, run_id: str, events: EventTarget) -> DemoWorker:
    """Start the charge workers and the relay (the renewal pass runs at each clock step)."""
    from billing.db import async_pool
    from billing.gateway.client import GatewayClient
    from billing.limiter import LocalGcraLimiter, RedisGcraLimiter
    from billing.worker.charging import Charger
    from billing.worker.relay import JsonlSink, KafkaSink, RelayOptions, run_relay

    rate = options.rate
    if settings.redis_url:
        limiter = RedisGcraLimiter(settings.redis_url, rate, key=f"billing:demo:{run_id}")
        limiter_name = f"Redis GCRA ({settings.redis_url})"
    else:
        limiter = LocalGcraLimiter(rate)
        limiter_name = "in-process GCRA (no BILLING_REDIS_URL)"
    if events.topic:
        sink = KafkaSink(settings.kafka_bootstrap, events.topic)
    else:
        sink = JsonlSink(events.path)
    pool = await async_pool(settings.database_url, min_size=2, max_size=12, name="billing-demo-worker")
    client = GatewayClient(settings.gateway_url, timeout=settings.gateway_timeout_seconds)
    concurrency = options.concurrency or max(16, min(512, rate // 12))
    charger = Charger(pool, client, limiter, rate=rate, clock=clock, concurrency=concurrency,
                      lease_seconds=CHARGE_LEASE.total_seconds(), poll_seconds=CHARGE_POLL_SECONDS)
    stop = asyncio.Event()
    worker = DemoWorker(pool, charger, limiter_name, stop)
    worker.tasks.append(asyncio.create_task(charger.run(stop), name="charging"))
    worker.tasks.append(asyncio.create_task(
        run_relay(settings, stop, sink=sink, clock=clock, options=RelayOptions(lease=RELAY_LEASE, poll_interval=0.2)),
        name="relay"))
    worker.closers += [pool.close, client.close]
    close = getattr(limiter, "close", None)
    if close is not None:
        worker.closers.append(close)
    if not events.topic:
        worker.closers.append(sink.close)
    return worker
