"""The gateway simulator's records (billing.gateway.simulator): a charge, a refund, as it answers and
lists them in its ledger, and the sliding one-second window its rate limit counts accepted calls in."""

from __future__ import annotations

import bisect
from dataclasses import dataclass


def parse_latency(text: str) -> tuple[int, int]:
    """'50-300' -> (50, 300); '100' -> (100, 100)."""
    parts = str(text).split("-")
    try:
        lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) in (1, 2) else (None, None)
    except ValueError:
        lo = hi = None
    if lo is None or lo < 0 or hi < lo:
        raise ValueError(f"latency must be MIN-MAX milliseconds, got {text!r}")
    return lo, hi


@dataclass
class Charge:
    idempotency_key: str
    customer_id: int
    amount: int
    currency: str
    status: str  # succeeded | declined
    id: str
    decline_code: str | None
    created: str

    def answer(self) -> dict:
        return {"id": self.id, "status": self.status, "declineCode": self.decline_code}

    def ledger_entry(self) -> dict:
        return {"idempotencyKey": self.idempotency_key, "customerId": self.customer_id, "amount": self.amount,
                "currency": self.currency, "status": self.status, "id": self.id}


@dataclass
class Refund:
    idempotency_key: str
    charge_key: str
    amount: int
    currency: str
    id: str

    def answer(self) -> dict:
        return {"id": self.id, "status": "succeeded", "amount": self.amount, "chargeKey": self.charge_key,
                "failureReason": None}

    def ledger_entry(self) -> dict:
        return {"idempotencyKey": self.idempotency_key, "chargeKey": self.charge_key, "amount": self.amount,
                "currency": self.currency, "status": "succeeded", "id": self.id}


class _Window:
    """Accepted calls of the last second or so (sorted), the worst second seen, and the excess.

    Calls are stamped when their bytes are read from the socket, so two handlers can run in the
    other order than their stamps: admitting a call at t checks every window that contains t
    (the one ending at t, and those ending at the few later stamps already admitted).
    """

    def __init__(self, rate: int, strict: bool) -> None:
        self.rate = rate
        self.strict = strict
        self.times: list[float] = []
        self.max_window = 0
        self.excess = 0

    def _worst_with(self, t: float) -> int:
        times = self.times
        ends = [t] + times[bisect.bisect_right(times, t):]
        return max(bisect.bisect_right(times, x) - bisect.bisect_right(times, x - 1.0) + 1 for x in ends)

    def admit(self, now: float) -> bool:
        times = self.times
        if times and times[0] < times[-1] - 2.0:
            del times[:bisect.bisect_left(times, times[-1] - 2.0)]
        worst = self._worst_with(now)
        if self.rate > 0 and worst > self.rate:
            if self.strict:
                return False
            self.excess += 1
        bisect.insort(times, now)
        if worst > self.max_window:
            self.max_window = worst
        return True

    def retry_after(self, now: float) -> float:
        inside = [x for x in self.times if x > now - 1.0]
        return max(0.0, inside[0] + 1.0 - now) if inside else 1.0
