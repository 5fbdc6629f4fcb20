"""What the simulated gateway decides for each charging call (a 5xx without charging, a decline
and its code, a timeout after charging), and the ids it gives: every choice a hash of the seed
and the call, so a run is reproducible."""

from __future__ import annotations

import hashlib

# Soft declines (the dunning schedule retries them); a test or the demo asks for hard ones
# (stolen_card, expired_card, ...: billing.providers.stripe.HARD_DECLINES) through its own model.
DECLINE_CODES = ("insufficient_funds", "card_declined", "try_again_later", "do_not_honor")


def chance(seed, *parts) -> float:
    """A number in [0, 1) decided by a hash of (seed, *parts): the same run makes the same choices."""
    digest = hashlib.sha256(":".join(str(p) for p in (seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class DecisionModel:
    """What the simulated gateway decides for a charging call: a 5xx without charging, a decline
    (and its code), a timeout after charging. Each choice is a hash of (seed, key, ...) so a run is
    reproducible. Subclass and override `decline_code` (or the others) for other behaviours; pass
    the instance as `GatewaySimulator(decisions=...)`.

    `calls` is how many calls this key has had, this one included: faults may differ per call,
    declines depend on the key only (a replay answers the stored result anyway).
    """

    def __init__(self, *, seed: int = 0, decline_rate: float = 0.0, timeout_rate: float = 0.0,
                 error_rate: float = 0.0) -> None:
        for name, value in (("decline_rate", decline_rate), ("timeout_rate", timeout_rate),
                            ("error_rate", error_rate)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1")
        self.seed = seed
        self.decline_rate = decline_rate
        self.timeout_rate = timeout_rate
        self.error_rate = error_rate

    def chance(self, *parts) -> float:
        return chance(self.seed, *parts)

    def fails(self, key: str, calls: int) -> bool:
        """Answer 500 without charging."""
        return self.chance(key, calls, "error") < self.error_rate

    def decline_code(self, key: str, customer_id: int, amount: int, currency: str) -> str | None:
        """None: the charge succeeds; else the decline code."""
        if self.chance(key, "decline") < self.decline_rate:
            return self.random_code(key)
        return None

    def random_code(self, key: str) -> str:
        return DECLINE_CODES[int(self.chance(key, "code") * len(DECLINE_CODES))]

    def lookup_fails(self, key: str, lookups: int) -> bool:
        """Answer 500 to a key lookup (`GET /v1/charges?idempotencyKey=`); never by default."""
        return False

    def times_out(self, key: str, calls: int) -> bool:
        """Charge, then hold the answer past the client's timeout."""
        return self.chance(key, calls, "timeout") < self.timeout_rate


def charge_id(seed, key: str) -> str:
    """The gateway's id of the charge made for `key` (stable for a seed)."""
    return "ch_" + hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()[:20]
