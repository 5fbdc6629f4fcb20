"""The gateway rate limit: GCRA shared by every instance through one Redis Lua script.

Promise (CONTRACT section 5): in any sliding one-second window the gateway never receives more
than `rate` calls, whatever the number of worker processes.

## The algorithm and why it is strict

GCRA keeps one number per limit, the theoretical arrival time TAT, and grants a call at
``slot = max(TAT, now)`` then sets ``TAT = slot + T``. With a burst tolerance of zero, every two
grants are at least ``T`` apart. This limiter *reserves*: a caller asked to wait is already given
its slot (TAT moves on), sleeps until it, and calls. No capacity is lost to polling or lateness, so
under backlog it grants exactly one call per ``T``.

Counting: n grants spaced at least T apart span at least (n-1)*T. A half-open window of length W
holds n of them only if (n-1)*T < W, so at most ``ceil(W/T)`` grants; with ``T = W/rate`` that is
at most ``rate``. A general tolerance tau would allow ``1 + floor((W+tau)/T)`` in some window,
which is why tau is 0 here: any burst allowance must be paid for with a longer T.

The gateway, though, counts *arrivals*, not grants: a call arrives ``d >= 0`` after its slot
(the caller's wake-up, the HTTP write, the gateway's own scheduling). If every call's delay d lies
in ``[0, g)``, the arrivals in a window ``(a-1, a]`` were granted in ``(a-1-g, a]``, a half-open
window of length ``1+g``. So the limiter spaces grants by ``T = (1 s + g) / rate`` (``g`` is the
*guard*, default 10 ms, i.e. about 99% of the limit at saturation) and the gateway sees at most
``rate`` calls in any sliding second. Delays are never negative: the caller only learns its slot
after Redis took ``now``, so it cannot wake before the slot.

The caller enforces its share of ``g``: it measures, on its own monotonic clock, the time from
*sending* the script (before Redis read its clock, so this over-estimates) to waking up, minus the
wait Redis asked for. A caller that wakes more than ``max_late`` past its slot (event-loop stall,
GC pause) drops the slot and queues again: a lost slot costs throughput, never the limit.
The rest of the guard, ``g - max_late``, covers the network and the gateway's own scheduling.

Redis's own clock (``TIME``) is the only clock that matters, so instances with skewed clocks
still share one schedule. A reservation is refused when it would be more than ``max_wait`` ahead;
the caller then sleeps and asks again, so a crowd of callers does not book the next minute.

Redis unreachable: ``acquire`` fails closed. Charging pauses (one warning in the log,
``billing_limiter_paused`` = 1, ``billing_limiter_pauses_total`` + 1), one probe retries with
backoff, and every waiting caller resumes when Redis answers again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from typing import Protocol

from billing import metrics

log = logging.getLogger("billing.limiter")

DEFAULT_GUARD_SECONDS = 0.010
DEFAULT_MAX_LATE_SECONDS = 0.004
DEFAULT_MAX_WAIT_SECONDS = 2.0
WINDOW_SECONDS = 1.0


class RateLimiter(Protocol):
    async def acquire(self) -> None:
        """Wait until this caller may make one gateway call now."""
        ...


def emission_interval_us(rate: float, guard_seconds: float) -> int:
    """Microseconds between two grants: (1 s + guard) / rate, rounded up so the bound stays exact."""
    if rate <= 0:
        raise ValueError("the rate must be positive")
    if guard_seconds < 0:
        raise ValueError("the guard cannot be negative")
    return max(1, math.ceil((WINDOW_SECONDS + guard_seconds) * 1_000_000 / rate))


class _Gcra:
    """What both GCRA limiters share: sleeping until the slot and dropping late wake-ups."""

    def __init__(self, rate: float, *, guard_seconds: float, max_late_seconds: float, max_wait_seconds: float):
        if max_late_seconds > guard_seconds:
            raise ValueError("max_late cannot exceed the guard: a late caller would break the window")
        self.rate = rate
        self.interval_us = emission_interval_us(rate, guard_seconds)
        self.guard_seconds = guard_seconds
        self.max_late_seconds = max_late_seconds
        self.max_wait_us = int(max_wait_seconds * 1_000_000)
        self.late_drops = 0

    async def _reserve(self) -> tuple[bool, int]:
        """(granted, microseconds): the wait until the granted slot, or the retry hint when refused."""
        raise NotImplementedError

    async def acquire(self) -> None:
        started = time.monotonic()
        while True:
            asked_at = time.monotonic()
            granted, micros = await self._reserve()
            if not granted:
                await asyncio.sleep(micros / 1_000_000 + random.uniform(0, 0.02))
                continue
            wait = micros / 1_000_000
            if wait > 0:
                await asyncio.sleep(wait)
            # An upper bound on how late we are: the slot cannot be earlier than asked_at + wait.
            late = time.monotonic() - asked_at - wait
            if late > self.max_late_seconds:
                self.late_drops += 1
                metrics.LIMITER_LATE_DROPS.inc()
                log.debug("woke %.1f ms past the slot; dropping it", late * 1000)
                continue
            metrics.LIMITER_WAIT.observe(time.monotonic() - started)
            return


class LocalGcraLimiter(_Gcra):
    """The same GCRA in this process only (the demo without Redis, one worker process)."""

    def __init__(self, rate: float, *, guard_seconds: float = DEFAULT_GUARD_SECONDS,
                 max_late_seconds: float = DEFAULT_MAX_LATE_SECONDS,
                 max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS) -> None:
        super().__init__(rate, guard_seconds=guard_seconds, max_late_seconds=max_late_seconds,
                         max_wait_seconds=max_wait_seconds)
        self._tat_us = 0

    async def _reserve(self) -> tuple[bool, int]:
        now = time.monotonic_ns() // 1000
        slot = max(self._tat_us, now)
        wait = slot - now
        if wait > self.max_wait_us:
            return False, wait - self.max_wait_us
        self._tat_us = slot + self.interval_us
        return True, wait

    async def close(self) -> None:
        return None


# KEYS[1]: the TAT key. ARGV[1]: emission interval (us). ARGV[2]: max reservation ahead (us).
# Returns {1, wait_us} when a slot was reserved, {0, retry_after_us} when it would be too far ahead.
# Numbers are written with %d: Lua's default number format (%.14g) would round a microsecond clock.
GCRA_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local max_wait = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local slot = tat
if now > slot then slot = now end
local wait = slot - now
if wait > max_wait then
  return {0, wait - max_wait}
end
local new_tat = slot + interval
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.floor((new_tat - now) / 1000) + 1000)
return {1, wait}
"""


class RedisGcraLimiter(_Gcra):
    """GCRA in Redis, shared by every instance; fails closed while Redis is unreachable."""

    def __init__(self, redis_url: str, rate: float, key: str = "billing:gateway", *,
                 guard_seconds: float = DEFAULT_GUARD_SECONDS,
                 max_late_seconds: float = DEFAULT_MAX_LATE_SECONDS,
                 max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
                 socket_timeout: float = 1.0, max_backoff_seconds: float = 5.0) -> None:
        import redis.asyncio as aioredis

        super().__init__(rate, guard_seconds=guard_seconds, max_late_seconds=max_late_seconds,
                         max_wait_seconds=max_wait_seconds)
        self.key = key
        self._redis = aioredis.Redis.from_url(
            redis_url, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout,
            retry_on_timeout=False, health_check_interval=0,
        )
        self._script = self._redis.register_script(GCRA_SCRIPT)
        self._available = asyncio.Event()
        self._available.set()
        self._probe: asyncio.Task | None = None
        self._max_backoff = max_backoff_seconds
        self.paused = False

    async def _reserve(self) -> tuple[bool, int]:
        import redis.exceptions as rexc

        while True:
            await self._available.wait()
            try:
                granted, micros = await self._script(keys=[self.key], args=[self.interval_us, self.max_wait_us])
                return bool(granted), int(micros)
            except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
                self._pause(exc)

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
            self.paused = False
            metrics.LIMITER_PAUSED.set(0)
            self._available.set()
            log.warning("rate limiter reachable again, charging resumed",
                        extra={"key": self.key, "paused_seconds": round(time.monotonic() - paused_at, 3)})
            return

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
        await self._redis.aclose()


class FixedWindowLimiter:
    """The seed article's limiter, kept for the benchmark only: INCR on a key per wall-clock second.

    Each instance uses its own clock to name the second; a denied caller waits for the next second.
    Calls at the end of one second and the start of the next can exceed the limit in a sliding
    window, which is what the benchmark shows. Fails closed like the GCRA limiter, without the
    metrics.
    """

    def __init__(self, redis_url: str, rate: int, key: str = "rl:gateway") -> None:
        import redis.asyncio as aioredis

        self.rate = rate
        self.key = key
        self._redis = aioredis.Redis.from_url(redis_url, socket_timeout=1.0, socket_connect_timeout=1.0)

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


def limiter_from_settings(settings, *, rate: float | None = None) -> RateLimiter:
    """The Redis GCRA limiter when Redis is configured, else the in-process one.

    BILLING_LIMITER=fixed-window selects the seed's counter (benchmarks only).
    """
    import os

    rate = rate or settings.gateway_rate
    guard = float(os.environ.get("BILLING_LIMITER_GUARD_MS", DEFAULT_GUARD_SECONDS * 1000)) / 1000
    max_late = min(guard, float(os.environ.get("BILLING_LIMITER_MAX_LATE_MS", DEFAULT_MAX_LATE_SECONDS * 1000)) / 1000)
    kind = os.environ.get("BILLING_LIMITER", "gcra")
    if kind == "fixed-window":
        if not settings.redis_url:
            raise ValueError("the fixed-window limiter needs BILLING_REDIS_URL")
        return FixedWindowLimiter(settings.redis_url, int(rate))
    if kind != "gcra":
        raise ValueError(f"BILLING_LIMITER must be gcra or fixed-window, got {kind!r}")
    if settings.redis_url:
        return RedisGcraLimiter(settings.redis_url, rate, guard_seconds=guard, max_late_seconds=max_late)
    log.warning("no BILLING_REDIS_URL: using an in-process limiter; the limit holds for this process only")
    return LocalGcraLimiter(rate, guard_seconds=guard, max_late_seconds=max_late)
