"""The chaos run (issue 6): several workers, the API and the gateway simulator on private
PostgreSQL, Redis and Kafka, under SIGKILLs and service restarts; then the independent checker.

Small by default (part of `make test`); `BILLING_CHAOS_SIZE=large` for the long run. The figures
are printed whatever the outcome. See docs/testing.md.
"""

from __future__ import annotations

import pytest

from .scenario import chaos_size, run_chaos

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(1800)]


def test_promises_hold_under_faults(capsys):
    size = chaos_size()
    with capsys.disabled():
        result = run_chaos(size, log=lambda line: print(line, flush=True))
        print("\n" + result.report, flush=True)
    assert result.ok, f"broken promises (state kept in {result.base}):\n{result.report}"
