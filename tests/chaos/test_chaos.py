"""The chaos test of issue 7: 4 ``duro worker`` processes on a real PostgreSQL run thousands of runs
(per-tenant quotas, both limits through acquire_slot/release_slot, with_limit and limit_slot, short
durable sleeps, children, steps) while the driver SIGKILLs random workers (replacing each at once),
SIGSTOPs one past its 3 s lease and then SIGCONTs it, and restarts the PostgreSQL server.

At the end, and all along through an independent connection (``sampler.py``) and a trigger that logs
every slot change in decision order (``audit.SLOT_LOG``), it checks: every run terminal and none
failed; no quota ever exceeded; no limit ever over capacity; every slot accounted for (each held slot
<=> a recorded acquire, each release <=> a recorded release_slot, nothing waiting, reserved or busy
once the runs have ended and max_hold has taken back what was kept); FIFO per limit; no worker dying
or stalling; and every completed step executed exactly once.

"Exactly once", as docs/durability.md promises it: a step whose completion duro recorded is never
executed again (a replay returns the recorded result). Its body may have run more than once only when
the worker that ran it could not record it — it was SIGKILLed between executing and recording, or it
was stopped past its lease, the run was taken over, and its late write was refused by the ownership
fence. So every completed step ran at least once, and runs beyond the first come only from workers
that were killed or stopped (the report counts them, by cause).

Default (CI): 1,200 top-level runs (some 1,800 runs with children) in about two minutes.
``DURO_CHAOS_LONG=1``: 10,000 top-level runs over twelve minutes, more stops and restarts (some of
them ``immediate``, i.e. a crash with recovery). ``DURO_CHAOS_SEED`` replays one run's random choices.
The figures are printed on every run (docs/chaos.md).
"""

from __future__ import annotations

import os

import pytest

from tests.chaos.driver import Driver, plan_from_env

LONG = os.environ.get("DURO_CHAOS_LONG") == "1"


@pytest.mark.postgres
@pytest.mark.timeout(3600 if LONG else 600)
def test_chaos_on_postgresql(tmp_path, capsys):
    plan = plan_from_env()
    with capsys.disabled():
        print(f"\nchaos: plan {plan.name}, seed {plan.seed} "
              f"(DURO_CHAOS_SEED={plan.seed} replays its random choices)")
    report = Driver(plan, tmp_path).run()
    with capsys.disabled():
        print(f"\nchaos work files (worker logs, effect logs): {tmp_path}")
        print(report.text())
    assert report.ok, f"chaos (seed {plan.seed}) found:\n{report.failures()}"
