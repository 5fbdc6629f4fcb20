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

from billing.clock import Clock
from billing.metrics import RELAY_ACTIVE
# The relay's two forms, each in its own module: the single-node relay of the advisory lock
# (relay_single) and the relay per shard group on Citus (relay_shards). Their names are imported here
# for the callers that find them in this module, as are the sinks (billing.worker.sinks).
from billing.worker.relay_shards import RELAY_GROUP_KEY, ShardRelay, _detect_distributed, is_distributed
from billing.worker.relay_single import RELAY_LOCK_KEY, Relay, RelayOptions
from billing.worker.sinks import EventSink, JsonlSink, KafkaSink

__all__ = ["RELAY_GROUP_KEY", "RELAY_LOCK_KEY", "EventSink", "JsonlSink", "KafkaSink", "Relay", "RelayOptions", "ShardRelay",
           "is_distributed", "run_relay"]


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
