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
from collections import deque
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


class _ClockOffset:
    """The limiter's clock minus this process's monotonic clock, bracketed by round trips.

    A reply read at local time `answered` with the limiter's clock at `remote`, asked at local
    time `asked`, proves ``remote - answered <= offset <= remote - asked``. Intersecting the last
    few seconds of such brackets gives an interval about one fast round trip wide, so one slow
    round trip (a busy event loop, a loaded Redis) does not blur every slot it reserved. Samples
    expire after a few seconds, so a drift between the two clocks cannot accumulate.
    """

    HORIZON = 2.0

    def __init__(self) -> None:
        self._samples: deque[tuple[float, float, float]] = deque(maxlen=32)

    def width(self) -> float:
        """How uncertain the offset is now (infinite before the first round trip)."""
        if not self._samples:
            return float("inf")
        return min(x[2] for x in self._samples) - max(x[1] for x in self._samples)

    def add(self, asked: float, answered: float, remote: float) -> tuple[float, float]:
        samples = self._samples
        samples.append((answered, remote - answered, remote - asked))
        while samples[0][0] < answered - self.HORIZON:
            samples.popleft()
        lo = max(x[1] for x in samples)
        hi = min(x[2] for x in samples)
        if lo > hi:  # the clocks stepped or drifted apart: trust only this round trip
            samples.clear()
            samples.append((answered, remote - answered, remote - asked))
            lo, hi = remote - answered, remote - asked
        return lo, hi


class _Gcra:
    """What both GCRA limiters share: one reserver per process, sleeping until the slot, dropping
    late wake-ups.

    Callers queue up; a single reserver task asks for as many consecutive slots as there are
    callers waiting, in one round trip (one script call per batch, not per call, and one Redis
    connection per process), and hands slot i to the i-th caller in line.
    """

    def __init__(self, rate: float, *, guard_seconds: float, max_late_seconds: float, max_wait_seconds: float):
        if max_late_seconds > guard_seconds:
            raise ValueError("max_late cannot exceed the guard: a late caller would break the window")
        self.rate = rate
        self.interval_us = emission_interval_us(rate, guard_seconds)
        self.guard_seconds = guard_seconds
        self.max_late_seconds = max_late_seconds
        self.max_wait_us = int(max_wait_seconds * 1_000_000)
        self.late_drops = 0
        self._offset = _ClockOffset()
        self._waiters: deque[asyncio.Future] = deque()
        self._wake: asyncio.Event | None = None
        self._reserver: asyncio.Task | None = None

    async def _clock_us(self) -> int | None:
        """The limiter's clock, read in one round trip (None when it is this process's clock)."""
        return None

    async def _calibrate(self) -> None:
        """A few clock reads so the first slots are not wasted on the first, slow, round trip."""
        for _ in range(3):
            if self._offset.width() <= self.max_late_seconds / 4:
                return
            asked = time.monotonic()
            remote = await self._clock_us()
            if remote is None:
                return
            self._offset.add(asked, time.monotonic(), remote / 1_000_000)

    async def _reserve(self, count: int) -> tuple[int, int, int]:
        """(granted, first_slot_us, clock_us): `granted` consecutive slots from `first_slot_us`
        on the limiter's clock, which read `clock_us`; granted = 0 when even the first slot would
        be more than max_wait ahead (then first_slot_us is that slot)."""
        raise NotImplementedError

    async def acquire(self) -> None:
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        while True:
            future = loop.create_future()
            self._waiters.append(future)
            if self._reserver is None or self._reserver.done():
                self._wake = asyncio.Event()
                self._reserver = loop.create_task(self._reserve_loop(), name="limiter-reserver")
            self._wake.set()
            # In local monotonic time, the slot lies in [earliest, wake_at]: waking at wake_at is
            # never early, and now - earliest bounds how late we are.
            earliest, wake_at = await future
            delay = wake_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            late = time.monotonic() - earliest
            if late > self.max_late_seconds:
                self.late_drops += 1
                metrics.LIMITER_LATE_DROPS.inc()
                log.debug("woke %.1f ms past the slot; dropping it", late * 1000)
                continue
            metrics.LIMITER_WAIT.observe(time.monotonic() - started)
            return

    async def _reserve_loop(self) -> None:
        waiters = self._waiters
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while waiters:
                    while waiters and waiters[0].done():  # given up (cancelled) before a slot
                        waiters.popleft()
                    count = sum(1 for f in waiters if not f.done())
                    if not count:
                        break
                    await self._calibrate()
                    asked_at = time.monotonic()
                    granted, first_us, clock_us = await self._reserve(count)
                    answered_at = time.monotonic()
                    if not granted:
                        retry = (first_us - clock_us - self.max_wait_us) / 1_000_000
                        await asyncio.sleep(retry + random.uniform(0, 0.005))
                        continue
                    lo, hi = self._offset.add(asked_at, answered_at, clock_us / 1_000_000)
                    first = first_us / 1_000_000
                    step = self.interval_us / 1_000_000
                    i = 0
                    while i < granted and waiters:
                        future = waiters.popleft()
                        if not future.done():
                            slot = first + i * step
                            future.set_result((slot - hi, slot - lo))
                            i += 1
        except BaseException as exc:
            while waiters:
                future = waiters.popleft()
                if not future.done():
                    if isinstance(exc, asyncio.CancelledError):
                        future.cancel()
                    else:
                        future.set_exception(exc)
            raise

    async def _stop_reserver(self) -> None:
        if self._reserver is not None and not self._reserver.done():
            self._reserver.cancel()
            try:
                await self._reserver
            except BaseException:  # noqa: BLE001 - it was cancelled on purpose
                pass


class LocalGcraLimiter(_Gcra):
    """The same GCRA in this process only (the demo without Redis, one worker process)."""

    def __init__(self, rate: float, *, guard_seconds: float = DEFAULT_GUARD_SECONDS,
                 max_late_seconds: float = DEFAULT_MAX_LATE_SECONDS,
                 max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS) -> None:
        super().__init__(rate, guard_seconds=guard_seconds, max_late_seconds=max_late_seconds,
                         max_wait_seconds=max_wait_seconds)
        self._tat_us = 0

    async def _reserve(self, count: int) -> tuple[int, int, int]:
        now = int(time.monotonic() * 1_000_000)
        slot = max(self._tat_us, now)
        if slot - now > self.max_wait_us:
            return 0, slot, now
        granted = min(count, (self.max_wait_us - (slot - now)) // self.interval_us + 1)
        self._tat_us = slot + granted * self.interval_us
        return granted, slot, now

    async def close(self) -> None:
        await self._stop_reserver()


# KEYS[1]: the TAT key. ARGV[1]: emission interval (us). ARGV[2]: max reservation ahead (us).
# ARGV[3]: slots wanted. Returns {granted, first_slot_us, now_us} on Redis's clock: `granted`
# consecutive slots from first_slot_us (granted = 0: even the first is too far ahead).
# Numbers are written with %d: Lua's default number format (%.14g) would round a microsecond clock.
GCRA_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local max_wait = tonumber(ARGV[2])
local wanted = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local slot = tat
if now > slot then slot = now end
if slot - now > max_wait then
  return {0, slot, now}
end
local granted = math.min(wanted, math.floor((max_wait - (slot - now)) / interval) + 1)
local new_tat = slot + granted * interval
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.floor((new_tat - now) / 1000) + 1000)
return {granted, slot, now}
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

    async def _clock_us(self) -> int | None:
        import redis.exceptions as rexc

        await self._available.wait()
        try:
            seconds, micros = await self._redis.time()
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
            self._pause(exc)
            return None
        return seconds * 1_000_000 + micros

    async def _reserve(self, count: int) -> tuple[int, int, int]:
        import redis.exceptions as rexc

        while True:
            await self._available.wait()
            try:
                granted, slot, now = await self._script(keys=[self.key],
                                                        args=[self.interval_us, self.max_wait_us, count])
                return int(granted), int(slot), int(now)
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
        await self._stop_reserver()
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
