"""The seed article's fixed-window limiter, for the charge benchmark only (never the worker's).

    python -m bench.charge.fixed_window [--concurrency N]

runs `billing worker --no-renew --no-relay` with this limiter instead of the one the worker
chooses (billing.limiter.limiter_from_settings): the settings come from the environment as for
`billing worker` (BILLING_DATABASE_URL, BILLING_REDIS_URL, BILLING_GATEWAY_URL,
BILLING_GATEWAY_RATE, BILLING_WORKER_METRICS_PORT...). Why this counter lets bursts through:
docs/limiter.md, last section.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time


class FixedWindowLimiter:
    """The seed article's limiter, kept for the benchmark only: INCR on a key per wall-clock second.

    Each instance uses its own clock to name the second; a denied caller waits for the next second.
    Calls at the end of one second and the start of the next can exceed the limit in a sliding
    window, which is what the benchmark shows. Waits while Redis is unreachable, without metrics.
    """

    def __init__(self, redis_url: str, rate: int, key: str = "rl:gateway") -> None:
        import redis.asyncio as aioredis

        self.rate = rate
        self.key = key
        pool = aioredis.BlockingConnectionPool.from_url(redis_url, max_connections=64, timeout=None,
                                                        socket_timeout=1.0, socket_connect_timeout=1.0)
        self._redis = aioredis.Redis(connection_pool=pool)

    async def acquire(self) -> None:
        import redis.exceptions as rexc

        while True:
            second = int(time.time())
            key = f"{self.key}:{second}"
            try:
                count = await self._redis.incr(key)
                if count == 1:
                    await self._redis.expire(key, 2)
            except (rexc.ConnectionError, rexc.TimeoutError, OSError):
                await asyncio.sleep(0.5)
                continue
            if count <= self.rate:
                return
            # Denied: leave it for the next round (the next second), as the seed does.
            await asyncio.sleep(max(0.0, second + 1 - time.time()) + random.uniform(0, 0.005))

    async def close(self) -> None:
        await self._redis.aclose()


def main() -> int:
    from billing.config import Settings
    from billing.logs import setup_logging
    from billing.worker import run_worker

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=None)
    ap.add_argument("--log-level", default=None)
    args = ap.parse_args()
    settings = Settings.from_env()
    setup_logging(args.log_level or settings.log_level, json_lines=settings.log_json)
    if not settings.redis_url:
        raise SystemExit("the fixed-window limiter needs BILLING_REDIS_URL")
    limiter = FixedWindowLimiter(settings.redis_url, settings.gateway_rate)
    return run_worker(settings, concurrency=args.concurrency, renew=False, relay=False, limiter=limiter)


if __name__ == "__main__":
    sys.exit(main())
