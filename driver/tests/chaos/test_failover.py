"""Issue 31: lose the PostgreSQL primary during the peak and lose nothing (docs/operations.md).

The chaos run (scenario.run_chaos) on a primary and a streaming standby: the primary is SIGKILLed
while charging runs at the gateway's limit, the standby promoted as Patroni would, every process
reconnects through its multi-host URL (target_session_attrs=read-write). With a synchronous standby
every invariant of the chaos checker holds and nothing the lost primary committed is missing; with an
asynchronous one the run shows what was lost and that each lost payment result comes back from the
gateway through the key look-up. The figures and the fault timeline are printed either way.
"""

from __future__ import annotations

import shutil

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


# What an asynchronous failover must still keep. The rest of the checker's invariants are printed
# but not asserted: the lost primary had acknowledged writes the standby never received, and the
# run shows them (docs/operations.md, "Synchronous or asynchronous"): events already on Kafka whose
# outbox rows were lost (their results recorded again are announced again under new event ids),
# API creates and cancels acknowledged and gone, and a charge made for an invoice that existed only
# on the lost primary (no record left to look up).
ASYNC_MUST_HOLD = (
    "system drained after the faults",
    "no invoice charged twice",
    "every due period invoiced exactly once",
    "events of one aggregate reach Kafka in commit order",
    "asynchronous standby: the failover lost committed work",
    "each lost payment result whose attempt survived was recovered from the gateway",
    "every part back on the new primary",
    "workers stop cleanly on SIGTERM",
    "the API never answered 500",
    "harness threads ran without error",
)


def test_failover_to_an_asynchronous_standby_shows_the_loss_and_recovers_each_result(capsys):
    with capsys.disabled():
        result = _run("async")
    required = [c for c in result.checks if c.name.startswith(ASYNC_MUST_HOLD)]
    assert len(required) == len(ASYNC_MUST_HOLD), [c.name for c in result.checks]
    broken = [c.line() for c in required if not c.ok]
    assert not broken, f"broken promises (state kept in {result.base}):\n" + "\n".join(broken)
    shutil.rmtree(result.base, ignore_errors=True)  # kept by the run, as some invariants are not asserted
