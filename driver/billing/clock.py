"""Time as a parameter: every SQL call gets `p_now` from a Clock, so the demo and tests drive it."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)


class SimulatedClock:
    """A clock that only moves when told to (tests, the demo)."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("a simulated clock needs an aware datetime (UTC)")
        self._now = start.astimezone(timezone.utc)

    def now(self) -> datetime:
        return self._now

    def set(self, when: datetime) -> None:
        self._now = when.astimezone(timezone.utc)

    def advance(self, delta: timedelta) -> datetime:
        self._now += delta
        return self._now


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep up to `seconds`; True when `stop` was set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
        return True
    except asyncio.TimeoutError:
        return False
