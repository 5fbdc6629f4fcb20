"""One relay in its own process, for bench/relay/citus.py: `billing` is whatever PYTHONPATH says
(the current tree or the baseline's). Stops on SIGTERM.

    python bench/relay/shard_proc.py DATABASE_URL SINK BATCH MODE [EVENTS]

SINK: `kafka:BOOTSTRAP/TOPIC` or a file path (the JSON-lines sink). MODE: `shard` (ShardRelay, the
relay per shard group on Citus) or `single` (Relay, the one active relay of a single PostgreSQL).
With EVENTS, prints `up <time>` once the relay is active and `drained <time>` once it has marked
EVENTS events published (wall clock), so the bench need not poll the database (a poll of a
distributed table is a query on every shard, which would count in the CPU measured).
"""

import asyncio
import signal
import sys
import time

from billing.worker.relay import Relay, RelayOptions, ShardRelay
from billing.worker.sinks import JsonlSink, KafkaSink


async def watch(relay, events: int) -> None:
    while not relay.active:
        await asyncio.sleep(0.002)
    print(f"up {time.time()}", flush=True)
    while relay.published < events:
        await asyncio.sleep(0.002)
    print(f"drained {time.time()}", flush=True)


async def main(url: str, sink_spec: str, batch: int, mode: str, events: int | None) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    if sink_spec.startswith("kafka:"):
        bootstrap, topic = sink_spec[len("kafka:"):].split("/", 1)
        sink = KafkaSink(bootstrap, topic)
    else:
        sink = JsonlSink(sink_spec)
    kind = ShardRelay if mode == "shard" else Relay
    relay = kind(url, sink, stop, options=RelayOptions(batch_size=batch, per_shard=mode == "shard",
                                                      poll_interval=0.05, worker_name="bench-relay"))
    watcher = asyncio.ensure_future(watch(relay, events)) if events else None
    try:
        await relay.run()
    finally:
        if watcher is not None:
            watcher.cancel()
        await asyncio.to_thread(sink.close)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]) if len(sys.argv) > 5 else None))
