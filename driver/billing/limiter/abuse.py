"""Limits by client address and failed authentications (issue 27, findings 3 and 7; docs/security.md).

* `AddressLimiter`: per client address, a GCRA (the same arithmetic as the per-key limit) on the
  requests that carry no valid credential (no key, an unknown one, the login form): an address
  that only knocks gets 429 with `Retry-After` past `rate` per second (bursts of `burst`), before
  any database lookup.
* `FailureThrottle`: per address, failed authentications with backoff: the first `free` failures
  within `window` seconds cost nothing; each one after them shuts the address out for twice as
  long as the previous (1 s, 2 s, 4 s ... at most `max_block` seconds); while it is shut out, every
  request of that address that does not carry a valid credential gets 429 with `Retry-After` and is
  not even looked up. A success does not clear it (a valid key does not vouch for its address).
* `report_failure`: the failure is logged (the key id when the token had a key's form, else only
  its kind; the address and the route; never the secret), counted
  (`billing_auth_failures_total{reason}`), and, when a known key id came with a wrong secret,
  audited in the database (`billing.record_auth_failure`: someone holds a real key's id and tries
  secrets). The audit is skipped while the address is shut out, so a flood writes nothing.

In-process state (each `billing serve` process throttles what it sees); the idle entries are
forgotten as they age.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

from billing.limiter.gcra import pace
from billing.metrics import AUTH_FAILURES

log = logging.getLogger("billing.api.auth")


class AddressLimiter:
    """GCRA per address: `check(address)` -> seconds to wait (0: allowed)."""

    def __init__(self, rate: float = 20.0, burst: int = 40, *, clock=time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("the per-address rate must be positive and the burst at least 1")
        self.interval_us = max(1, round(1_000_000 / rate))
        self.max_wait_us = self.interval_us * (burst - 1)
        self.clock = clock
        self._tat: dict[str, int] = {}

    def check(self, address: str, cost: float = 1.0) -> float:
        now = round(self.clock() * 1_000_000)
        # GCRA's pace step, the package's one arithmetic (billing.limiter.gcra), a call of `cost`
        # taking that many intervals.
        granted, wait_us, tat = pace(self._tat.get(address, 0), now, max(1, round(self.interval_us * cost)),
                                     self.max_wait_us)
        if not granted:
            return wait_us / 1_000_000
        self._tat[address] = tat
        if len(self._tat) > 100_000:
            self._tat = {a: t for a, t in self._tat.items() if t > now}
        return 0.0


@dataclass
class _Failures:
    times: list[float] = field(default_factory=list)
    blocked_until: float = 0.0
    block: float = 0.0


class FailureThrottle:
    def __init__(self, free: int = 10, window: float = 60.0, max_block: float = 900.0, *, clock=time.monotonic) -> None:
        self.free, self.window, self.max_block, self.clock = free, window, max_block, clock
        self._by_address: dict[str, _Failures] = {}

    def blocked_for(self, address: str) -> float:
        """Seconds this address is still shut out (0: not)."""
        f = self._by_address.get(address)
        return max(0.0, f.blocked_until - self.clock()) if f else 0.0

    def failed(self, address: str) -> float:
        """Counts a failure; the seconds the address is now shut out (0: not yet)."""
        now = self.clock()
        f = self._by_address.setdefault(address, _Failures())
        f.times = [t for t in f.times if now - t < self.window] + [now]
        if len(f.times) > self.free:
            f.block = min(self.max_block, max(1.0, f.block * 2))
            f.blocked_until = max(f.blocked_until, now + f.block)
        elif now > f.blocked_until + self.window:
            f.block = 0.0
        if len(self._by_address) > 100_000:
            self._by_address = {a: x for a, x in self._by_address.items()
                                if x.blocked_until > now or (x.times and now - x.times[-1] < self.window)}
        return max(0.0, f.blocked_until - now)


def retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))


def report_failure(reason: str, *, address: str, route: str, key_id: str | None) -> None:
    """Logs and counts one failed authentication; never the secret (docs/security.md)."""
    AUTH_FAILURES.labels(reason=reason).inc()
    log.warning("authentication failed", extra={"reason": reason, "keyId": key_id or "-", "address": address,
                                                "route": route[:200]})
