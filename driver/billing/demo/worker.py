"""The worker's parts as the demo runs them in its own process, built by the one composition of
the worker (`billing.worker.process.build_worker`) on the demo's simulated clock: the charge
workers and the outbox relay run all along; the renewal pass is called at each clock step."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from billing.config import Settings
from billing.demo.model import Options
from billing.demo.services import EventTarget
from billing.metrics import CHARGES_IN_FLIGHT
from billing.worker.process import Worker, build_worker
from billing.worker.relay import RelayOptions
from billing.worker.sinks import JsonlSink, KafkaSink

# Claims stay with their worker for this long on the simulated clock: several steps, so that a
# call still on the wire when the clock moves on is never re-claimed (its key would be, harmlessly),
# and short enough that a retry a quiet step (6 h) later still sends its key rather than looking it
# up (a key is looked up once a call could end within an hour of its 23 h lifetime, docs/gateway.md).
CHARGE_LEASE = timedelta(hours=12)
RELAY_LEASE = timedelta(days=1)
# How often an idle charge worker looks for work (real time); each look is one claim_charges call.
CHARGE_POLL_SECONDS = 0.02


@dataclass
class DemoWorker:
    worker: Worker
    sink: object  # the relay's sink: the demo's own, so the demo closes the file one
    stop: asyncio.Event

    @property
    def pool(self):
        return self.worker.pool

    @property
    def charger(self):
        return self.worker.charger

    @property
    def limiter_name(self) -> str:
        return self.worker.limiter_name

    def waiting(self) -> int:
        """Charges claimed by this process and not yet on the wire (held minus in flight)."""
        return self.worker.charger.held() - _gauge(CHARGES_IN_FLIGHT)

    async def close(self) -> None:
        self.stop.set()
        await asyncio.gather(*self.worker.tasks.values(), return_exceptions=True)
        await self.worker.close()
        if isinstance(self.sink, JsonlSink):
            self.sink.close()


def _gauge(metric) -> int:
    return int(sum(sample.value for family in metric.collect() for sample in family.samples))


async def start_worker(settings: Settings, clock, options: Options, run_id: str, events: EventTarget) -> DemoWorker:
    """Build the worker (no renewal loop: the demo renews at each step) and start its charge
    workers and relay. The limiter is the builder's choice (Redis GCRA with a key of the run's own
    when BILLING_REDIS_URL is set, else the in-process GCRA, without a warning)."""
    sink = KafkaSink(settings.kafka_bootstrap, events.topic) if events.topic else JsonlSink(events.path)
    worker = await build_worker(
        settings.with_overrides(charge_lease_seconds=CHARGE_LEASE.total_seconds()), clock=clock, sink=sink,
        renew=False, concurrency=options.concurrency or max(16, min(512, options.rate // 12)),
        limiter_key=f"billing:demo:{run_id}", local_limiter="quiet", charge_poll_seconds=CHARGE_POLL_SECONDS,
        relay_options=RelayOptions(lease=RELAY_LEASE, poll_interval=0.2),
        pool_min_size=2, pool_max_size=12, pool_name="billing-demo-worker")
    stop = asyncio.Event()
    worker.start(stop)
    return DemoWorker(worker, sink, stop)
