"""`billing demo`: the first-of-the-month peak, end to end on a simulated clock, with a report.

`run(settings, subscriptions=, rate=, seed=, report=, ...)` returns the exit status: 0 when every
invariant holds. See runner.py for what runs and how the clock works (the steps of `simulate`),
model.py for the options and the result, gateway.py for the demo's gateway, worker.py for the
worker's parts, scenario.py and actions.py for the world, invariants.py for the promises checked,
figures.py, charts.py and report.py for the report.
"""

from billing.demo.model import Options
from billing.demo.runner import run

__all__ = ["Options", "run"]
