"""`billing demo`: the first-of-the-month peak, end to end on a simulated clock, with a report.

`run(settings, subscriptions=, rate=, seed=, report=, ...)` returns the exit status: 0 when every
invariant holds. See runner.py for what runs and how the clock works, scenario.py for the world,
invariants.py for the promises checked and report.py for the report.
"""

from billing.demo.runner import Options, run

__all__ = ["Options", "run"]
