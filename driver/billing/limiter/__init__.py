"""The gateway rate limit: in any sliding one-second window the gateway never receives more than
`rate` calls, whatever the number of worker processes and whatever their clocks say.

The algorithm (pace with GCRA, then check a sliding log at the instant of use) is in `two_step`;
its state lives in Redis (`redis_gcra`, shared by every instance, one Lua script `gcra.lua`) or in
this process (`local`). Why it holds the limit, and its throughput: docs/limiter.md.
`limiter_from_settings` is the one place where the worker's limiter is chosen.

The HTTP API's per-key request rate (`KeyRateLimiter`, `keyed`) is the same GCRA pace step
(`gcra.pace` here, gcra.lua's "pace" in Redis) per API key.
"""

from __future__ import annotations

import logging

from billing.limiter.keyed import KeyRateLimiter
from billing.limiter.local import LocalGcraLimiter
from billing.limiter.redis_gcra import RedisGcraLimiter
from billing.limiter.two_step import (DEFAULT_GUARD_SECONDS, DEFAULT_MAX_LATE_SECONDS, PACE_OVERSUBSCRIPTION,
                                      RateLimiter, TwoStepLimiter, pace_interval_us, window_us)

__all__ = ["KeyRateLimiter", "LocalGcraLimiter", "RateLimiter", "RedisGcraLimiter", "TwoStepLimiter", "describe_limiter",
           "limiter_from_settings", "pace_interval_us", "window_us"]

log = logging.getLogger("billing.limiter")


def limiter_from_settings(settings, *, rate: float | None = None, key: str | None = None,
                          local: str = "warn") -> TwoStepLimiter:
    """The one place where the limiter is chosen: the Redis limiter when `settings.redis_url` is
    set, else the in-process one; tuned by the settings' `limiter_*` fields (docs/limiter.md).

    `rate`: default `settings.gateway_rate`. `key`: the Redis key prefix (default
    "billing:gateway"). `local`, when there is no Redis: "warn" uses the in-process limiter and
    says in the log that the limit then holds for this process only (`billing worker`), "quiet"
    uses it without a word (the demo), "refuse" raises ValueError.
    """
    if local not in ("warn", "quiet", "refuse"):
        raise ValueError(f"local must be warn, quiet or refuse, got {local!r}")
    rate = rate or settings.gateway_rate
    guard_ms = settings.limiter_guard_ms
    guard = DEFAULT_GUARD_SECONDS if guard_ms is None else guard_ms / 1000
    max_late_ms = settings.limiter_max_late_ms
    max_late = min(guard, DEFAULT_MAX_LATE_SECONDS if max_late_ms is None else max_late_ms / 1000)
    over = settings.limiter_pace_oversubscription
    tuning = {"guard_seconds": guard, "max_late_seconds": max_late,
              "oversubscription": PACE_OVERSUBSCRIPTION if over is None else over}
    if settings.redis_url:
        if key:
            tuning["key"] = key
        return RedisGcraLimiter(settings.redis_url, rate, **tuning)
    if local == "refuse":
        raise ValueError("no BILLING_REDIS_URL: the shared rate limiter needs Redis")
    if local == "warn":
        log.warning("no BILLING_REDIS_URL: using an in-process limiter; the limit holds for this process only")
    return LocalGcraLimiter(rate, **tuning)


def describe_limiter(limiter, settings=None) -> str:
    """The limiter in words, for logs and reports."""
    if isinstance(limiter, RedisGcraLimiter):
        url = getattr(settings, "redis_url", None)
        return f"Redis GCRA ({url})" if url else "Redis GCRA"
    if isinstance(limiter, LocalGcraLimiter):
        return "in-process GCRA (no BILLING_REDIS_URL)"
    return type(limiter).__name__
