"""The gateway rate limit: shared by every instance through one Redis Lua script, on Redis's clock.

Promise (CONTRACT section 5): in any sliding one-second window the gateway never receives more
than `rate` calls, whatever the number of worker processes, and whatever their clocks say.

## The math, and why GCRA alone is not enough

GCRA keeps one number per limit, the theoretical arrival time TAT, with emission interval T and
tolerance tau: a call at t conforms if ``t >= TAT - tau``, and then ``TAT = max(TAT, t) + T``.
Conforming calls satisfy ``t_n - t_1 >= (n-1)*T - tau``, so a half-open window of length L holds
n of them only if ``(n-1)*T - tau < L``: at most ``ceil((L + tau) / T)``. With ``T = 1/rate``
and ``tau = 0`` that is at most `rate` per sliding second (any tau > 0 would have to be paid for
with a longer T). That bounds *grants*. The gateway counts *arrivals*, and a call arrives
``d >= 0`` after its grant: a caller that sleeps until its slot may wake late (a busy event
loop, a process the OS did not run for 20 ms), and a late call bunches up with the calls
granted a second after it. Pure GCRA must then drop late slots, and every drop is capacity
lost: on a loaded host we measured half the slots lost that way. Hence two steps:

1. **Pace** (GCRA, tau = 0, in Redis): slots ``T`` apart for every instance, reserved in batches
   (one round trip per process for all its waiting callers) and handed out one per slot by a
   pacer task. Pacing spreads the calls and keeps callers from stampeding Redis; it runs 10%
   faster than the limit (BILLING_LIMITER_PACE_OVERSUBSCRIPTION) and is *not* what makes the
   limit strict.
2. **Use** (a log of calls, in Redis): right before the HTTP call the caller asks for the
   go-ahead, declaring a lateness budget ``D`` (default 10 ms): how long after the grant its call
   may reach the gateway. The log holds, for each recent call i, ``s_i + D_i`` (grant instant on
   Redis's clock plus its budget). The script drops entries with ``s_i + D_i <= now - 1 s``,
   grants only if fewer than `rate` remain, and logs ``now + D``.

Why the gateway sees at most `rate` per sliding second: call i arrives at
``a_i in [s_i, s_i + D_i]`` (never before the grant: the caller learns of it after Redis read
its clock). Take any window ``(x - 1, x]`` and, of the calls arriving in it, the last one
granted, j. Every other one, i, has ``s_i + D_i >= a_i > x - 1 >= s_j - 1`` (as ``s_j <= a_j
<= x``), so it was still in the log when j asked, and j was granted only if fewer than `rate`
were: at most `rate` calls arrive in the window. With every ``D_i = g`` this is the plain sliding
log over ``1 s + g``.

The caller keeps its promise ``a <= s + D``: it places the grant on its own clock (Redis returns
the instant it logged; the offset between the two clocks is bracketed by recent round trips, like
NTP, to about one fast round trip) and calls only if it is at most ``D - post`` past it, where
``post`` (6 ms by default: guard 10 ms minus max_late 4 ms) is left for the way to the gateway.
The charge workers ask for the go-ahead inside the HTTP request, right before its bytes are
handed to the kernel (GatewayClient's ``gate``), so nothing else runs in between. Otherwise it gives the grant back and asks again, in the same script.
``D`` adapts: it is ``post`` plus 1.25 x the 95th percentile of the lateness this process saw
lately, at least ``max_late`` and at most 250 ms. On a quiet host D stays at the 10 ms guard; on
a starved one (the OS not running the worker for tens of ms) the calls declare more lateness, the
log holds them longer and throughput degrades smoothly instead of every late call being refused.

Throughput: since pacing offers a caller 10% more often than the log admits, whenever the log has
room a caller is at most one pacing interval away; a late or refused caller does not waste the
log's capacity, the next one takes it. At saturation that is about ``rate / (1 s + D + T/2)``:
98.8% of the limit at 200/s and 99.0% at 1,000/s with D = 10 ms. A refused caller goes back to
the pacing queue.

Redis unreachable: ``acquire`` fails closed. Charging pauses (one warning in the log,
``billing_limiter_paused`` = 1, ``billing_limiter_pauses_total`` + 1), one probe retries with
backoff, and every waiting caller resumes when Redis answers again, but not before a second
(plus the lateness budget) has passed since the pause began: a restarted Redis has lost the log,
and the calls granted just before the outage must have left the gateway's window first.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import os
import random
import time
import uuid
from collections import deque
from typing import Protocol

from billing import metrics

log = logging.getLogger("billing.limiter")

DEFAULT_GUARD_SECONDS = 0.010
DEFAULT_MAX_LATE_SECONDS = 0.004
DEFAULT_MAX_WAIT_SECONDS = 2.0
# Pacing offers callers this much faster than the log admits: pacing slots lost to a late pacer
# (a starved process) are then made up by the next callers, the log staying the only limit.
PACE_OVERSUBSCRIPTION = float(os.environ.get("BILLING_LIMITER_PACE_OVERSUBSCRIPTION", "0.10"))
WINDOW_SECONDS = 1.0


class RateLimiter(Protocol):
    async def acquire(self) -> None:
        """Wait until this caller may make one gateway call now."""
        ...


def window_us(guard_seconds: float) -> int:
    """The log's window: one second plus the guard, in microseconds."""
    if guard_seconds < 0:
        raise ValueError("the guard cannot be negative")
    return int(round((WINDOW_SECONDS + guard_seconds) * 1_000_000))


def pace_interval_us(rate: float, guard_seconds: float, oversubscription: float = PACE_OVERSUBSCRIPTION) -> int:
    """Microseconds between two paced callers: a little faster than the log lets through."""
    if rate <= 0:
        raise ValueError("the rate must be positive")
    return max(1, int(window_us(guard_seconds) / (rate * (1 + oversubscription))))


class _ClockOffset:
    """The limiter's clock minus this process's monotonic clock, bracketed by round trips.

    A reply read at local time `answered`, carrying the limiter's clock `remote`, for a request
    sent at local time `asked`, proves ``remote - answered <= offset <= remote - asked``.
    Intersecting the brackets of the last two seconds gives an interval about one fast round trip
    wide; samples expire, so a drift between the clocks cannot accumulate.
    """

    HORIZON = 2.0

    def __init__(self) -> None:
        self._samples: deque[tuple[float, float, float]] = deque(maxlen=64)

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


class _Lateness:
    """How late this process's callers find their grants: the budget to declare for the next one."""

    def __init__(self, floor: float, post: float, ceiling: float = 0.25) -> None:
        self.floor = floor
        self.post = post
        self.ceiling = ceiling
        self._seen: deque[float] = deque(maxlen=256)
        self._since = 0
        self.budget = post + floor

    def add(self, late: float) -> None:
        self._seen.append(late)
        self._since += 1
        if self._since >= 32 or late + self.post > self.budget:
            self._since = 0
            ordered = sorted(self._seen)
            p95 = ordered[int(0.95 * (len(ordered) - 1))]
            self.budget = self.post + min(self.ceiling, max(self.floor, 1.25 * p95, late))


class _TwoStep:
    """Pacing and the use check, whatever stores them (Redis, or this process)."""

    def __init__(self, rate: float, *, guard_seconds: float, max_late_seconds: float, max_wait_seconds: float):
        if rate < 1 or int(rate) != rate:
            raise ValueError("the rate must be a whole number of calls per second, at least 1")
        if not 0 < max_late_seconds < guard_seconds:
            raise ValueError("max_late must be positive and below the guard, which also covers the HTTP write")
        self.rate = int(rate)
        self.guard_seconds = guard_seconds
        self.max_late_seconds = max_late_seconds
        self.interval_us = pace_interval_us(rate, guard_seconds)
        self.max_wait_us = int(max_wait_seconds * 1_000_000)
        self.late_redos = 0
        self.refusals = 0
        self.lateness = _Lateness(max_late_seconds, guard_seconds - max_late_seconds)
        self._offset = _ClockOffset()
        self._tokens = (f"{uuid.uuid4().hex[:12]}:{n}" for n in itertools.count())
        self._release: str | None = None
        self._waiters: deque[asyncio.Future] = deque()
        self._wake: asyncio.Event | None = None
        self._reserver: asyncio.Task | None = None

    # -- storage ---------------------------------------------------------------------------------

    async def _pace(self, count: int) -> tuple[int, int]:
        """(granted, wait_us): `granted` consecutive slots, the first `wait_us` from now, T apart;
        (0, retry_us) when even the first would be more than max_wait ahead."""
        raise NotImplementedError

    async def _use(self, token: str, release: str | None, budget_us: int) -> tuple[bool, int]:
        """Grant and log `token` if fewer than `rate` logged calls may share a second with it
        (dropping `release` first); (True, the limiter's clock in us at the grant) or
        (False, retry_us)."""
        raise NotImplementedError

    # -- callers ---------------------------------------------------------------------------------

    async def acquire(self) -> None:
        """Wait until this caller may make one gateway call now (pace, then use)."""
        started = time.monotonic()
        while True:
            await self.pace()
            if await self.use():
                metrics.LIMITER_WAIT.observe(time.monotonic() - started)
                return

    async def pace(self) -> None:
        """Wait for this caller's pacing slot (the long wait; nothing is granted yet)."""
        await self._paced()

    async def use(self) -> bool:
        """The go-ahead for one call, to be made at once: True when granted; False when refused
        (the log is full) or when the grant came back too late to keep the promise: then pace
        again. One Redis round trip (two when the first reply is late).

        Call it as close to the write as possible: GatewayClient runs it inside the request,
        right before the bytes go out (see `charge(..., gate=)`)."""
        release = self._release
        self._release = None
        for _ in range(2):  # one immediate retry when late
            token = next(self._tokens)
            budget = self.lateness.budget
            asked = time.monotonic()
            granted, value = await self._use(token, release, int(budget * 1_000_000))
            answered = time.monotonic()
            release = None
            if not granted:
                self.refusals += 1
                metrics.LIMITER_REFUSALS.inc()
                return False
            # The grant happened at `value` on the limiter's clock, no earlier than
            # value - hi on ours: how late we already are, at most.
            _, hi = self._offset.add(asked, answered, value / 1_000_000)
            late = time.monotonic() - (value / 1_000_000 - hi)
            self.lateness.add(late)
            if late <= budget - self.lateness.post:
                return True
            # Later than the budget declared: the call might land outside it. Ask again,
            # giving this grant back in the same script, with a budget that knows better.
            self.late_redos += 1
            metrics.LIMITER_LATE_DROPS.inc()
            release = token
        self._release = release  # given back by the next use() of this process
        return False

    async def _paced(self) -> None:
        """Wait for a pacing slot: the pacer task wakes exactly one caller per slot."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._waiters.append(future)
        if self._reserver is None or self._reserver.done():
            self._wake = asyncio.Event()
            self._reserver = loop.create_task(self._reserve_loop(), name="limiter-pacer")
        self._wake.set()
        await future

    async def _reserve_loop(self) -> None:
        """Reserve slots for every caller waiting in this process (one round trip), then wake one
        caller per slot, at its time: no burst of wake-ups to stall the event loop."""
        waiters = self._waiters
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while waiters:
                    count = sum(1 for f in waiters if not f.done())
                    if not count:
                        waiters.clear()
                        break
                    granted, micros = await self._pace(count)
                    answered = time.monotonic()
                    if not granted:
                        await asyncio.sleep(micros / 1_000_000 + random.uniform(0, 0.005))
                        continue
                    for i in range(granted):
                        delay = answered + (micros + i * self.interval_us) / 1_000_000 - time.monotonic()
                        if delay > 0:
                            await asyncio.sleep(delay)
                        while waiters and waiters[0].done():  # given up (cancelled) meanwhile
                            waiters.popleft()
                        if not waiters:
                            break  # the rest of the batch goes unused
                        waiters.popleft().set_result(None)
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


class LocalGcraLimiter(_TwoStep):
    """The same two steps in this process only (the demo without Redis, a single worker)."""

    def __init__(self, rate: float, *, guard_seconds: float = DEFAULT_GUARD_SECONDS,
                 max_late_seconds: float = DEFAULT_MAX_LATE_SECONDS,
                 max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS) -> None:
        super().__init__(rate, guard_seconds=guard_seconds, max_late_seconds=max_late_seconds,
                         max_wait_seconds=max_wait_seconds)
        self._tat = 0
        self._log: list[tuple[int, str]] = []  # heap of (grant + budget, token)

    @staticmethod
    def _now() -> int:
        return time.monotonic_ns() // 1000

    async def _pace(self, count: int) -> tuple[int, int]:
        now = self._now()
        slot = max(self._tat, now)
        if slot - now > self.max_wait_us:
            return 0, slot - now - self.max_wait_us
        granted = min(count, (self.max_wait_us - (slot - now)) // self.interval_us + 1)
        self._tat = slot + granted * self.interval_us
        return granted, slot - now

    async def _use(self, token: str, release: str | None, budget_us: int) -> tuple[bool, int]:
        now = self._now()
        entries = self._log
        if release is not None:
            kept = [e for e in entries if e[1] != release]
            if len(kept) != len(entries):
                heapq.heapify(kept)
                self._log = entries = kept
        while entries and entries[0][0] <= now - 1_000_000:
            heapq.heappop(entries)
        if len(entries) >= self.rate:
            return False, entries[0][0] + 1_000_000 - now
        heapq.heappush(entries, (now + budget_us, token))
        return True, now

    async def close(self) -> None:
        await self._stop_reserver()


# One script, two operations, Redis's clock. Numbers go back to Redis with %d: Lua's default
# number format (%.14g) would round a microsecond clock.
#   pace: KEYS[1] TAT; ARGV: 'pace', interval_us, max_wait_us, wanted
#         -> {granted, wait_us} ({0, retry_us}: even the first slot is more than max_wait ahead)
#   use:  KEYS[2] log (sorted set: token -> grant + budget, us); ARGV: 'use', limit, token,
#         release token or '', budget_us
#         -> {1, now_us} granted and logged; {0, retry_us} a second's worth is already logged
GCRA_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if ARGV[1] == 'pace' then
  local interval = tonumber(ARGV[2])
  local max_wait = tonumber(ARGV[3])
  local wanted = tonumber(ARGV[4])
  local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
  local slot = tat
  if now > slot then slot = now end
  if slot - now > max_wait then
    return {0, slot - now - max_wait}
  end
  local granted = math.min(wanted, math.floor((max_wait - (slot - now)) / interval) + 1)
  local new_tat = slot + granted * interval
  redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.floor((new_tat - now) / 1000) + 1000)
  return {granted, slot - now}
end
local limit = tonumber(ARGV[2])
local budget = tonumber(ARGV[5])
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[2], ARGV[4]) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now - 1000000))
if redis.call('ZCARD', KEYS[2]) >= limit then
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {0, tonumber(oldest[2]) + 1000000 - now}
end
redis.call('ZADD', KEYS[2], string.format('%d', now + budget), ARGV[3])
redis.call('PEXPIRE', KEYS[2], math.floor(budget / 1000) + 2000)
return {1, now}
"""


class RedisGcraLimiter(_TwoStep):
    """The limit in Redis, shared by every instance; fails closed while Redis is unreachable.

    Keys: ``{key}:pace`` (GCRA's TAT) and ``{key}:log`` (the sliding log), hash-tagged so they
    live in one Redis Cluster slot.
    """

    def __init__(self, redis_url: str, rate: float, key: str = "billing:gateway", *,
                 guard_seconds: float = DEFAULT_GUARD_SECONDS,
                 max_late_seconds: float = DEFAULT_MAX_LATE_SECONDS,
                 max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
                 socket_timeout: float = 5.0, max_backoff_seconds: float = 5.0) -> None:
        import redis.asyncio as aioredis

        super().__init__(rate, guard_seconds=guard_seconds, max_late_seconds=max_late_seconds,
                         max_wait_seconds=max_wait_seconds)
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

    async def _call(self, *args) -> tuple[int, int]:
        import redis.exceptions as rexc

        while True:
            await self._available.wait()
            epoch = self._epoch
            try:
                a, b = await self._script(keys=self._keys, args=list(args))
                return int(a), int(b)
            except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
                if epoch == self._epoch:  # not a straggler sent before the last recovery
                    self._pause(exc)

    async def _pace(self, count: int) -> tuple[int, int]:
        return await self._call("pace", self.interval_us, self.max_wait_us, count)

    async def _use(self, token: str, release: str | None, budget_us: int) -> tuple[bool, int]:
        granted, value = await self._call("use", self.rate, token, release or "", budget_us)
        return bool(granted), value

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
            await asyncio.sleep(max(0.0, paused_at + 1.0 + self.lateness.budget - time.monotonic()))
            self.paused = False
            self._epoch += 1
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


def limiter_from_settings(settings, *, rate: float | None = None, key: str | None = None,
                          local: str = "warn") -> RateLimiter:
    """The one place where the limiter is chosen: the Redis limiter when Redis is configured,
    else the in-process one.

    `key`: the Redis key prefix (default "billing:gateway"). `local`, when there is no Redis:
    "warn" uses the in-process limiter and says in the log that the limit then holds for this
    process only (`billing worker`), "quiet" uses it without a word (the demo), "refuse" raises
    ValueError. BILLING_LIMITER_GUARD_MS / BILLING_LIMITER_MAX_LATE_MS tune the guard (see the
    module's docstring); BILLING_LIMITER=fixed-window selects the seed's counter (benchmarks only).
    """
    if local not in ("warn", "quiet", "refuse"):
        raise ValueError(f"local must be warn, quiet or refuse, got {local!r}")
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
        return RedisGcraLimiter(settings.redis_url, rate, key=key or "billing:gateway", guard_seconds=guard,
                                max_late_seconds=max_late)
    if local == "refuse":
        raise ValueError("no BILLING_REDIS_URL: the shared rate limiter needs Redis")
    if local == "warn":
        log.warning("no BILLING_REDIS_URL: using an in-process limiter; the limit holds for this process only")
    return LocalGcraLimiter(rate, guard_seconds=guard, max_late_seconds=max_late)


def describe_limiter(limiter, settings=None) -> str:
    """The limiter in words, for logs and reports."""
    if isinstance(limiter, RedisGcraLimiter):
        url = getattr(settings, "redis_url", None)
        return f"Redis GCRA ({url})" if url else "Redis GCRA"
    if isinstance(limiter, LocalGcraLimiter):
        return "in-process GCRA (no BILLING_REDIS_URL)"
    return type(limiter).__name__
