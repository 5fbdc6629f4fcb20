"""The HTTP API's per-key request rate (billing.api.security.ApiGuard, the console): GCRA per API
key, `rate` requests per second on average, bursts of `burst`. Its state is in Redis when
configured (gcra.lua's "pace" operation on `{billing:api:<key id>}:pace`, shared by every
`billing serve`), else in this process (billing.limiter.gcra.pace, the same arithmetic). Redis
unreachable: the in-process pace, with a warning once a minute (an API that answers beats one
that refuses everyone: the limit is a courtesy per key, not the gateway's contract, which
billing.limiter.redis_gcra keeps closed)."""

from __future__ import annotations

import logging
import time

from billing.limiter.gcra import pace
from billing.limiter.redis_gcra import GCRA_SCRIPT

log = logging.getLogger("billing.api.security")


class KeyRateLimiter:
    """GCRA per API key: `rate` requests per second on average, bursts of `burst`.

    `check(key_id)` -> seconds to wait before retrying (0: allowed). State in Redis
    (`{billing:api:<key id>}:pace`, shared by every `billing serve`), else in this process."""

    def __init__(self, rate: float, burst: int, redis_url: str | None = None) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("the per-key rate must be positive and the burst at least 1")
        self.interval_us = max(1, int(1_000_000 / rate))
        self.max_wait_us = self.interval_us * (burst - 1)
        self._local: dict[str, int] = {}
        self._redis = None
        self._script = None
        self._redis_down_logged = 0.0
        if redis_url:
            import redis.asyncio as aioredis

            self._redis = aioredis.Redis.from_url(redis_url, socket_timeout=0.5, socket_connect_timeout=0.5)
            self._script = self._redis.register_script(GCRA_SCRIPT)

    async def check(self, key_id: str) -> float:
        if self._redis is not None:
            import redis.exceptions as rexc

            try:
                granted, value = await self._script(keys=[f"{{billing:api:{key_id}}}:pace"],
                                                    args=["pace", self.interval_us, self.max_wait_us, 1])
                return 0.0 if int(granted) else int(value) / 1_000_000
            except (rexc.RedisError, OSError) as exc:
                if time.monotonic() - self._redis_down_logged > 60:
                    self._redis_down_logged = time.monotonic()
                    log.warning("per-key rate limit: Redis unreachable, limiting in this process",
                                extra={"error": repr(exc)})
        return self._check_local(key_id)

    def _check_local(self, key_id: str) -> float:
        now = time.monotonic_ns() // 1000
        granted, wait, self._local[key_id] = pace(self._local.get(key_id, 0), now, self.interval_us, self.max_wait_us)
        if not granted:
            return wait / 1_000_000
        if len(self._local) > 100_000:  # forget idle keys
            self._local = {k: v for k, v in self._local.items() if v > now}
        return 0.0

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
