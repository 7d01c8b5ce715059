"""The chaos tests: several ``duro worker`` processes share one store — 4 on a real PostgreSQL, 3 on
one SQLite file — and run over a thousand runs (per-tenant quotas, both limits through
acquire_slot/release_slot, with_limit and limit_slot, short durable sleeps, signals, children,
steps) while the driver:

- SIGKILLs random workers (replacing each at once);
- SIGSTOPs, past the 3 s lease, a worker owning a run that sleeps, one owning a run idle on a
  signal, and one owning a run waiting in a limit's queue, then SIGCONTs each;
- PostgreSQL: restarts the server, down 0.5 s and down 6.5 s (past the lease);
  SQLite: holds the file's write lock from another connection for 6 s (past the lease), twice.

At the end, and all along through an independent connection (``sampler.py``) and a trigger that logs
every slot change in decision order (``database.py``), it checks: every run terminal and none
failed; every signal received; no quota ever exceeded; no limit ever over capacity; every slot
accounted for; FIFO per limit; no worker dying or stalling; every SIGSTOP hit a worker in its target
state; and no step body ever began after that step's completion was recorded, by any worker, stopped
or not (``audit.py``).

Each default (CI) plan takes about two minutes. ``DURO_CHAOS_LONG=1``: twelve minutes each, more
stops and outages. ``DURO_CHAOS_SEED`` replays one run's random choices. The figures are printed on
every run (docs/chaos.md).
"""

from __future__ import annotations

import os

import pytest

from tests.chaos.driver import Driver
from tests.chaos.plan import plan_from_env

LONG = os.environ.get("DURO_CHAOS_LONG") == "1"


def run_chaos(store: str, tmp_path, capsys) -> None:
    plan = plan_from_env(store)
    with capsys.disabled():
        print(
            f"\nchaos on {store}: plan {plan.name}, seed {plan.seed} "
            f"(DURO_CHAOS_SEED={plan.seed} replays its random choices)"
        )
    report = Driver(plan, tmp_path).run()
    with capsys.disabled():
        print(f"\nchaos work files (worker logs, effect logs): {tmp_path}")
        print(report.text())
    assert report.ok, f"chaos on {store} (seed {plan.seed}) found:\n{report.failures()}"


@pytest.mark.postgres
@pytest.mark.timeout(3600 if LONG else 600)
def test_chaos_on_postgresql(tmp_path, capsys):
    run_chaos("postgresql", tmp_path, capsys)


@pytest.mark.timeout(3600 if LONG else 600)
def test_chaos_on_sqlite(tmp_path, capsys):
    run_chaos("sqlite", tmp_path, capsys)
