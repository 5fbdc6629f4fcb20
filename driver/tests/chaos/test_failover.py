"""Issue 31: lose the PostgreSQL primary during the peak and lose nothing (docs/operations.md).

The chaos run (scenario.run_chaos) on a primary and a streaming standby: the primary is SIGKILLed
while charging runs at the gateway's limit, the standby promoted as Patroni would, every process
reconnects through its multi-host URL (target_session_attrs=read-write). With a synchronous standby
every invariant of the chaos checker holds and nothing the lost primary committed is missing; with an
asynchronous one the run shows what was lost and that each lost payment result comes back from the
gateway through the key look-up. The figures and the fault timeline are printed either way.
"""

from __future__ import annotations

import pytest

from .scenario import SIZES, run_chaos

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]


def _run(mode: str):
    result = run_chaos(SIZES["failover"], failover=mode, log=lambda line: print(line, flush=True))
    print("\n" + result.report, flush=True)
    return result


def test_failover_to_a_synchronous_standby_loses_nothing(capsys):
    with capsys.disabled():
        result = _run("sync")
    assert result.ok, f"broken promises (state kept in {result.base}):\n{result.report}"
