"""One relay in its own process, for bench/relay/run.py: `billing` is whatever PYTHONPATH says
(the current tree or the baseline's), so both run the same way. Stops on SIGTERM.

    python bench/relay/relay_proc.py DATABASE_URL BOOTSTRAP TOPIC BATCH
"""

import asyncio
import signal
import sys

from billing.worker.relay import Relay, RelayOptions
from billing.worker.sinks import KafkaSink


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
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
