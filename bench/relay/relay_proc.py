"""One relay in its own process, for bench/relay/run.py: `billing` is whatever PYTHONPATH says
(the current tree or the baseline's), so both run the same way. Stops on SIGTERM.

    python bench/relay/relay_proc.py DATABASE_URL BOOTSTRAP TOPIC BATCH [TRACE_FILE]

With TRACE_FILE, every claim and every publish is stamped (wall clock, with the benchSeq of each
event) and written there as JSON at exit: run.py --trace splits each event's latency into its
stages (waiting to be claimed, the claim, Kafka) from it. The stamps wrap the relay's own methods,
so they cost the same on both sides.
"""

import asyncio
import json
import signal
import sys
import time

from billing.worker.relay import Relay, RelayOptions
from billing.worker.sinks import KafkaSink

_MARK = b'"benchSeq": '


def _seq(value: bytes) -> int | None:
    at = value.find(_MARK)
    if at < 0:
        return None
    end = at + len(_MARK)
    stop = end
    while stop < len(value) and value[stop:stop + 1] in b"-0123456789":
        stop += 1
    return int(value[end:stop])


def trace(records: list) -> None:
    """Wrap Relay._claim and Relay._publish to stamp them (both exist on every side compared)."""
    claim, publish = Relay._claim, Relay._publish

    async def traced_claim(self, conn):
        t0 = time.time()
        rows = await claim(self, conn)
        records.append(["claim", t0, time.time(), [_seq(r.value) for r in rows]])
        return rows

    async def traced_publish(self, rows, lock_conn):
        t0 = time.time()
        batch = await publish(self, rows, lock_conn)
        records.append(["publish", t0, time.time(), [_seq(r.value) for r in rows]])
        return batch

    Relay._claim, Relay._publish = traced_claim, traced_publish


async def main(url: str, bootstrap: str, topic: str, batch: int) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    sink = KafkaSink(bootstrap, topic)
    relay = Relay(url, sink, stop, options=RelayOptions(batch_size=batch))
    try:
        await relay.run()
    finally:
        await asyncio.to_thread(sink.close)


if __name__ == "__main__":
    records: list = []
    if len(sys.argv) > 5:
        trace(records)
    try:
        asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
    finally:
        if len(sys.argv) > 5:
            with open(sys.argv[5], "w") as f:
                json.dump(records, f)
