"""The limiter's algorithm, whatever stores its state: pace (GCRA), then use (a sliding log).

Why it holds the limit, and the figures: docs/limiter.md. The stores: `billing.limiter.local`
(this process) and `billing.limiter.redis_gcra` (every instance, through Redis).
"""


from __future__ import annotations

import asyncio
import itertools
import random
import time
import uuid
from collections import deque
from typing import Protocol

from billing import metrics

DEFAULT_GUARD_SECONDS = 0.010
DEFAULT_MAX_LATE_SECONDS = 0.004
DEFAULT_MAX_WAIT_SECONDS = 2.0
# Pacing offers callers this much faster than the log admits: pacing slots lost to a late pacer
# (a starved process) are then made up by the next callers, the log staying the only limit.
PACE_OVERSUBSCRIPTION = 0.10
WINDOW_SECONDS = 1.0
MIN_HORIZON_US = 5_000
# How far ahead a caller finding the log full may be granted the instant the log has room (it
# waits for it inside the request): every instant the log frees within this horizon is handed to a
# caller already waiting for it, so capacity freed in a bunch (calls granted together a second
# earlier) is not lost while the pacer hands out one caller per slot. Refused past it.
HORIZON_SECONDS = 0.250
MAX_BOUNDS = 64
# Logged on top of the lateness budget until the caller says when its bytes went out: a process
# descheduled between its check and its write (a starved host) is still inside its entry. Costs
# nothing once the entry is shortened (Grant.sent), a few ms after the grant.
SEND_MARGIN_SECONDS = 0.100


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


class ClockOffset:
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


class Lateness:
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


class Grant:
    """A go-ahead (true). Its caller may say when the call's bytes were handed to the kernel
    (`sent()`): the call then arrives by that instant (on the limiter's clock, at most its local
    time + hi) + post, the time left for the way to the gateway, and its entry in the log can hold
    that instead of grant + budget + SEND_MARGIN. The bound goes to the limiter with this
    process's next go-ahead (never raising an entry); without `sent()` the entry keeps it all."""

    __slots__ = ("_limiter", "token", "at_us", "_hi", "_logged_us")

    def __init__(self, limiter: "TwoStepLimiter", token: str, at_us: int, hi: float, logged_us: int) -> None:
        self._limiter = limiter
        self.token = token
        self.at_us = at_us  # the grant instant, on the limiter's clock
        self._hi = hi
        self._logged_us = logged_us

    def __bool__(self) -> bool:
        return True

    def sent(self) -> None:
        """Call right after the request's bytes were handed to the kernel (none left buffered)."""
        bound = int((time.monotonic() + self._hi + self._limiter.lateness.post) * 1_000_000) + 1
        if bound < self._logged_us:
            self._limiter._bounds.append((self.token, bound))


class TwoStepLimiter:
    """Pacing and the use check (docs/limiter.md), whatever stores them: a subclass provides
    `reserve` (the pacing slots) and `admit` (the sliding log), and closes its store in `close`."""

    def __init__(self, rate: float, *, guard_seconds: float, max_late_seconds: float, max_wait_seconds: float,
                 oversubscription: float = PACE_OVERSUBSCRIPTION, horizon_seconds: float = HORIZON_SECONDS):
        if rate < 1 or int(rate) != rate:
            raise ValueError("the rate must be a whole number of calls per second, at least 1")
        if not 0 < max_late_seconds < guard_seconds:
            raise ValueError("max_late must be positive and below the guard, which also covers the HTTP write")
        self.rate = int(rate)
        self.guard_seconds = guard_seconds
        self.max_late_seconds = max_late_seconds
        self.interval_us = pace_interval_us(rate, guard_seconds, oversubscription)
        self.max_wait_us = int(max_wait_seconds * 1_000_000)
        self.late_redos = 0
        self.refusals = 0
        self.lateness = Lateness(max_late_seconds, guard_seconds - max_late_seconds)
        # A caller finding the log full is granted the instant it has room, if that is within the
        # horizon (it waits for it inside the request); past the horizon it is refused and paces
        # again. At least two pacing intervals (the slot a refusal would lose to pacing's
        # granularity); HORIZON_SECONDS so that the log's free instants are each taken in advance.
        self.horizon_us = max(MIN_HORIZON_US, 2 * self.interval_us, int(horizon_seconds * 1_000_000))
        self._offset = ClockOffset()
        prefix = uuid.uuid4().hex[:12]
        self._tokens = (f"{prefix}:{n}" for n in itertools.count())
        # Calls made since this process last asked: (token, bound on their arrival, us on the
        # limiter's clock), sent with the next go-ahead to shorten their entries in the log.
        self._bounds: deque[tuple[str, int]] = deque(maxlen=MAX_BOUNDS)
        self._release: str | None = None
        self._waiters: deque[asyncio.Future] = deque()
        self._wake: asyncio.Event | None = None
        self._reserver: asyncio.Task | None = None

    # -- the store: what a subclass provides -------------------------------------------------------------------------------

    async def reserve(self, count: int) -> tuple[int, int]:
        """(granted, wait_us): `granted` consecutive slots, the first `wait_us` from now, T apart;
        (0, retry_us) when even the first would be more than max_wait ahead."""
        raise NotImplementedError

    async def admit(self, token: str, release: str | None, budget_us: int,
                    bounds: list[tuple[str, int]] = ()) -> tuple[bool, int, int]:
        """Grant and log `token` (dropping `release` first, lowering the entries named in `bounds`
        to the bound given, never raising one) at the first instant `at`, from now on and within
        the horizon, when fewer than `rate` logged calls may share a second with it: (True, at,
        now), instants in us on the limiter's clock; (False, retry_us, now) past the horizon."""
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

    async def use(self) -> "Grant | bool":
        """The go-ahead for one call, to be made at once: a Grant (true) when granted; False when refused
        (the log is full past the horizon) or when the grant came back too late to keep the
        promise: then pace again. One Redis round trip (two when the first reply is late); a
        grant a little ahead (the log has room within the horizon) is waited for here.

        Call it as close to the write as possible: GatewayClient runs it inside the request,
        right before the bytes go out (see `charge(..., gate=)`)."""
        release = self._release
        self._release = None
        for _ in range(2):  # one immediate retry when late
            token = next(self._tokens)
            budget = self.lateness.budget
            bounds = list(self._bounds)
            self._bounds.clear()
            asked = time.monotonic()
            logged_us = int((budget + SEND_MARGIN_SECONDS) * 1_000_000)
            granted, value, now = await self.admit(token, release, logged_us, bounds)
            answered = time.monotonic()
            release = None
            if not granted:
                self.refusals += 1
                metrics.LIMITER_REFUSALS.inc()
                return False
            # Our clock's place of the limiter's: offset in [lo, hi] (ClockOffset).
            lo, hi = self._offset.add(asked, answered, now / 1_000_000)
            at = value / 1_000_000
            # Granted at `at` on the limiter's clock: no call before it (wait until even the
            # smallest offset puts it past), and no later than `at` + budget - post (below).
            while (wait := at - lo - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            # How late we are, at most: the limiter's clock reads at most now + hi.
            checked = time.monotonic()
            late = checked - (at - hi)
            self.lateness.add(late)
            post = self.lateness.post
            if late <= budget - post:
                return Grant(self, token, value, hi, value + logged_us)
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
                    granted, micros = await self.reserve(count)
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

    async def close(self) -> None:
        """Stop the pacer task (subclasses close their store after this)."""
        if self._reserver is not None and not self._reserver.done():
            self._reserver.cancel()
            try:
                await self._reserver
            except BaseException:  # noqa: BLE001 - it was cancelled on purpose
                pass
