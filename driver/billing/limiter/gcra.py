"""GCRA's pace step, the one arithmetic of every pacer of the house: gcra.lua's `pace` operation
does the same in Redis (on Redis's clock), `pace` here in this process. Used by the gateway
limiter's in-process store (billing.limiter.local), the HTTP API's per-key limit
(billing.limiter.keyed) and its per-address limit (billing.limiter.abuse)."""

from __future__ import annotations


def pace(tat_us: int, now_us: int, interval_us: int, max_wait_us: int, wanted: int = 1) -> tuple[int, int, int]:
    """-> (granted, wait_us, new_tat_us). `tat_us`: the theoretical arrival time of the next caller.
    Granted 0: even the first slot is more than `max_wait_us` ahead, `wait_us` is how long until
    one is not. Else up to `wanted` slots, the first `wait_us` from now."""
    slot = max(tat_us, now_us)
    if slot - now_us > max_wait_us:
        return 0, slot - now_us - max_wait_us, tat_us
    granted = min(wanted, (max_wait_us - (slot - now_us)) // interval_us + 1)
    return granted, slot - now_us, slot + granted * interval_us
