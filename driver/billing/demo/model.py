"""The demo's model: its options, the state sampled at the end of each clock step, and what a run
returns (read by the report and the tests)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from billing.checks import Check, all_hold


@dataclass
class Options:
    subscriptions: int = 20000
    rate: int = 250
    seed: int = 1
    report: str = "demo-report.html"
    hour_seconds: float | None = None  # None: sized so that the cap is subscriptions / 40 per hour
    step_minutes: int = 60
    days: int | None = None
    quiet_step_hours: int = 6
    decline_rate: float = 0.06
    timeout_rate: float = 0.01
    error_rate: float = 0.01
    webhook_duplicate_rate: float = 0.10
    latency_ms: tuple[int, int] = (2, 20)
    concurrency: int | None = None
    events: str | None = None
    quiet: bool = False
    emails: bool = True  # send a sample's emails to a Mailpit the demo starts (billing.demo.emails)

    def validate(self) -> None:
        """Fill in `hour_seconds` when not given; raise ValueError on values out of range."""
        if self.hour_seconds is None:
            self.hour_seconds = max(self.subscriptions / 40, 1) / max(self.rate, 1)
        if self.rate < 1 or self.subscriptions < 1 or self.hour_seconds <= 0 \
                or not 1 <= self.step_minutes <= 1440 or not 1 <= self.quiet_step_hours <= 24:
            raise ValueError("rate and subscriptions must be positive, hour-seconds > 0, step 1..1440 minutes, "
                             "quiet step 1..24 hours")

    @property
    def cap(self) -> int:
        """At most this many charges per simulated hour: rate x hour-seconds."""
        return round(self.rate * (self.hour_seconds or 0))


class Phases:
    """Where the run's wall clock went: seconds per phase, summed over every time the phase ran
    (`with phases("rating"): ...`), in the order the phases first ran. Printed at the end of the
    run and in the report, so that a slower demo says which part got slower."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        started = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - started)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.counts[name] = self.counts.get(name, 0) + 1

    def line(self) -> str:
        """`name seconds`, and `/calls` for a phase run more than once."""
        return ", ".join(f"{name} {s:.1f}" + (f"/{self.counts[name]}" if self.counts[name] > 1 else "")
                         for name, s in self.seconds.items())


@dataclass
class Sample:
    """The state at the end of one step."""

    at: datetime  # simulated
    real: float  # seconds since the simulation started
    backlog: int  # invoices due and not yet sent to the gateway (chargeable, or claimed and waiting)
    calls: int  # gateway calls made so far (accepted by the simulator)
    renewals: int  # subscriptions handled by the renewal pass so far
    published: int  # events published so far


@dataclass
class RunResult:
    options: Options
    database_url: str
    events_source: str
    started: datetime
    ended: datetime
    real_seconds: float
    setup_seconds: float
    simulate_seconds: float
    samples: list[Sample]
    action_counts: dict[str, int]
    action_rejections: dict[str, int]
    simulator_stats: dict
    checks: list[Check] = field(default_factory=list)
    limiter: str = ""
    stats: dict = field(default_factory=dict)  # billing.demo.figures.collect
    ledger: dict = field(default_factory=dict)  # the simulator's GET /v1/ledger at the end
    accepted_times: list[float] = field(default_factory=list)  # wall-clock instants of accepted calls
    events_path: Path | None = None  # the JSON-lines file, when no Kafka
    emails: list[dict] = field(default_factory=list)  # billing.demo.emails: the sample's messages on Mailpit
    mailpit_url: str | None = None  # Mailpit's web page, when the demo started one
    usage_sent: object = None  # billing.demo.usage.Sent: the API product's requests as the stream sent them
    usage_subscriptions: dict = field(default_factory=dict)  # API subscription id -> (customer, currency)
    phases: Phases = field(default_factory=Phases)  # the wall clock by phase (seconds)


def exit_status(checks: list[Check]) -> int:
    """0 when every invariant holds (and there was at least one to check), else 1."""
    return 0 if all_hold(checks) else 1
