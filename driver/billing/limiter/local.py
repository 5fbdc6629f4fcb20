"""The limiter's two steps with their state in this process only (the demo without Redis, a
single worker): the same algorithm as the Redis store, on this process's monotonic clock."""

from __future__ import annotations

import heapq
import time

from billing.limiter.gcra import pace
from billing.limiter.two_step import (DEFAULT_GUARD_SECONDS, DEFAULT_MAX_LATE_SECONDS, DEFAULT_MAX_WAIT_SECONDS,
                                      PACE_OVERSUBSCRIPTION, TwoStepLimiter)


class LocalGcraLimiter(TwoStepLimiter):
    """The same two steps in this process only (the demo without Redis, a single worker)."""

    def __init__(self, rate: float, *, guard_seconds: float = DEFAULT_GUARD_SECONDS,
                 max_late_seconds: float = DEFAULT_MAX_LATE_SECONDS,
                 max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS,
                 oversubscription: float = PACE_OVERSUBSCRIPTION) -> None:
        super().__init__(rate, guard_seconds=guard_seconds, max_late_seconds=max_late_seconds,
                         max_wait_seconds=max_wait_seconds, oversubscription=oversubscription)
        self._tat = 0
        self._log: list[tuple[int, str]] = []  # heap of (grant + budget, token)

    @staticmethod
    def _now() -> int:
        return time.monotonic_ns() // 1000

    async def reserve(self, count: int) -> tuple[int, int]:
        granted, wait, self._tat = pace(self._tat, self._now(), self.interval_us, self.max_wait_us, count)
        return granted, wait

    async def admit(self, token: str, release: str | None, budget_us: int,
                    bounds: list[tuple[str, int]] = ()) -> tuple[bool, int, int]:
        now = self._now()
        entries = self._log
        changed = False
        if release is not None or bounds:
            lower = dict(bounds)
            kept = []
            for score, entry_token in entries:
                if entry_token == release:
                    changed = True
                    continue
                bound = lower.get(entry_token)
                if bound is not None and bound < score:
                    score, changed = bound, True
                kept.append((score, entry_token))
            if changed:
                heapq.heapify(kept)
                self._log = entries = kept
        while entries and entries[0][0] <= now - 1_000_000:
            heapq.heappop(entries)
        at = now
        if len(entries) >= self.rate:
            # A second after the (n - rate + 1)-th smallest entry, as in gcra.lua.
            at = heapq.nsmallest(len(entries) - self.rate + 1, entries)[-1][0] + 1_000_000
            if at - now > self.horizon_us:
                return False, at - now - self.horizon_us, now
        heapq.heappush(entries, (at + budget_us, token))
        return True, at, now

    async def close(self) -> None:
        await super().close()
