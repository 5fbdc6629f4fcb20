"""The limiter's two steps with their state in Redis, shared by every instance, on Redis's clock:
one Lua script (gcra.lua, shipped with the package) for both operations. Fails closed while Redis
is unreachable (docs/limiter.md, "Redis unreachable")."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from importlib import resources

from billing import metrics
from billing.limiter.two_step import (DEFAULT_GUARD_SECONDS, DEFAULT_MAX_LATE_SECONDS, DEFAULT_MAX_WAIT_SECONDS,
                                      PACE_OVERSUBSCRIPTION, SEND_MARGIN_SECONDS, TwoStepLimiter)

log = logging.getLogger("billing.limiter")

# The script's two operations and their arguments are described at its top.
GCRA_SCRIPT = resources.files("billing.limiter").joinpath("gcra.lua").read_text(encoding="utf-8")


class RedisGcraLimiter(TwoStepLimiter):
    """The limit in Redis, shared by every instance; fails closed while Redis is unreachable.

    Keys: ``{key}:pace`` (GCRA's TAT) and ``{key}:log`` (the sliding log), hash-tagged so they
    live in one Redis Cluster slot.
    """

    def __init__(self, redis_url: str, rate: float, key: str = "billing:gateway", *,
                 guard_seconds: float = DEFAULT_GUARD_SECONDS,
                 max_late_seconds: float = DEFAULT_MAX_LATE_SECONDS,
                 max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
                 oversubscription: float = PACE_OVERSUBSCRIPTION,
                 socket_timeout: float = 5.0, max_backoff_seconds: float = 5.0) -> None:
        import redis.asyncio as aioredis

        super().__init__(rate, guard_seconds=guard_seconds, max_late_seconds=max_late_seconds,
                         max_wait_seconds=max_wait_seconds, oversubscription=oversubscription)
        self.key = key
        self._keys = [f"{{{key}}}:pace", f"{{{key}}}:log"]
        # Waiting for a pooled connection is not an outage: wait (timeout=None). Only a failed
        # connect or a command past socket_timeout pauses charging.
        pool = aioredis.BlockingConnectionPool.from_url(
            redis_url, max_connections=64, timeout=None, socket_timeout=socket_timeout,
            socket_connect_timeout=min(socket_timeout, 2.0), health_check_interval=0)
        self._redis = aioredis.Redis(connection_pool=pool)
        self._script = self._redis.register_script(GCRA_SCRIPT)
        self._available = asyncio.Event()
        self._available.set()
        self._probe: asyncio.Task | None = None
        self._epoch = 0  # bumped at each recovery
        self._max_backoff = max_backoff_seconds
        self.paused = False

    async def _call(self, *args) -> list[int]:
        import redis.exceptions as rexc

        while True:
            await self._available.wait()
            epoch = self._epoch
            try:
                return [int(x) for x in await self._script(keys=self._keys, args=list(args))]
            except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
                if epoch == self._epoch:  # not a straggler sent before the last recovery
                    self._pause(exc)

    async def reserve(self, count: int) -> tuple[int, int]:
        granted, wait = await self._call("pace", self.interval_us, self.max_wait_us, count)
        return granted, wait

    async def admit(self, token: str, release: str | None, budget_us: int,
                    bounds: list[tuple[str, int]] = ()) -> tuple[bool, int, int]:
        args = ["use", self.rate, token, release or "", budget_us, self.horizon_us]
        for bound_token, bound_us in bounds:
            args += [bound_token, bound_us]
        granted, value, now = await self._call(*args)
        return bool(granted), value, now

    def _pause(self, exc: BaseException) -> None:
        if self._available.is_set():
            self._available.clear()
            self.paused = True
            metrics.LIMITER_PAUSES.inc()
            metrics.LIMITER_PAUSED.set(1)
            log.warning("rate limiter unreachable, charging paused until Redis answers",
                        extra={"key": self.key, "error": repr(exc)})
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._recover(), name="limiter-probe")

    async def _recover(self) -> None:
        import redis.exceptions as rexc

        backoff = 0.1
        paused_at = time.monotonic()
        while True:
            await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
            try:
                await self._redis.ping()
            except (rexc.ConnectionError, rexc.TimeoutError, OSError):
                backoff = min(backoff * 2, self._max_backoff)
                continue
            # A Redis that restarted has lost the log: stay quiet until every call granted before
            # the outage is more than a second (and its lateness budget) old.
            await asyncio.sleep(max(0.0, paused_at + 1.0 + self.lateness.budget + SEND_MARGIN_SECONDS
                                    - time.monotonic()))
            self.paused = False
            self._epoch += 1
            metrics.LIMITER_PAUSED.set(0)
            self._available.set()
            log.warning("rate limiter reachable again, charging resumed",
                        extra={"key": self.key, "paused_seconds": round(time.monotonic() - paused_at, 3)})
            return

    async def close(self) -> None:
        await super().close()
        if self._probe is not None:
            self._probe.cancel()
        await self._redis.aclose()
