"""replay-check and the worker read a stored error row the same way. A row naming a
``BaseException`` (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``, ...) is never rebuilt as
its class (a row must not stop the process reading it): a worker raises a ``DuroError`` in its place,
which the workflow's ``except ValueError`` does not catch, and the unfinished run fails. replay-check
says so for that run, instead of "replays on this code"."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from duro import step, wait_for_signal, workflow
from duro._serde import describe_error
from duro.store import StepRecord
from duro.tooling import history_to_json


class Stop(BaseException):
    """A BaseException of the app's own."""


@step
def risky(n: int) -> int:
    raise ValueError(f"risky {n} failed")


@workflow
async def guarded(n: int) -> str:
    try:
        await risky(n)
    except ValueError:
        pass
    await wait_for_signal("go")
    return "done"


def _stored(env, run_id: str) -> dict:
    store = env.engine.store
    return history_to_json(store.runs.get(run_id), store.steps.of(run_id))


async def test_a_recorded_exception_caught_by_the_code_replays_and_the_run_waits_on(duro_env):
    run = await duro_env.start(guarded, 1)
    await duro_env.run_until_idle()
    assert await run.status() == "suspended"
    outcome = await duro_env.replay(json.dumps(_stored(duro_env, run.id)))
    assert not outcome.diverged, outcome
    await duro_env.restart()
    await run.signal("go")
    assert await run.result() == "done"


@pytest.mark.parametrize("error", [SystemExit(3), KeyboardInterrupt(), GeneratorExit(), Stop("halt")])
async def test_a_row_naming_a_base_exception_fails_the_run_in_both(duro_env, error):
    run = await duro_env.start(guarded, 1)
    await duro_env.run_until_idle()
    history = _stored(duro_env, run.id)
    risky_step = next(s for s in history["steps"] if s["name"] == "risky")
    row = StepRecord(**{**risky_step, "error": describe_error(error)})
    history["steps"] = [row._asdict() if s["seq"] == row.seq else s for s in history["steps"]]

    outcome = await duro_env.replay(json.dumps(history))  # what replay-check says
    assert outcome.diverged and outcome.ended == "error", outcome
    assert "a worker would fail this run" in (outcome.error or "")

    # what a worker does with the same row: the run is recovered, replayed, and fails
    store = duro_env.engine.store
    with store._engine.begin() as conn:  # the row as an older version, or a hand, left it
        conn.execute(
            sa.text("UPDATE duro_steps SET error = :error WHERE run_id = :run AND seq = :seq"),
            {"error": row.error, "run": run.id, "seq": row.seq},
        )
    await duro_env.restart()
    await run.signal("go")  # the run is taken up again and replayed from its history
    await duro_env.run_until_idle()
    assert await run.status() == "failed"
    failed = store.runs.get(run.id)
    assert type(error).__qualname__ in (failed.error or "")
