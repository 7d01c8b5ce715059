"""The replay check in the harness (``env.replay``): an exported history replayed on the current
code, executing no step body, stopping where the history ends, naming the first divergence."""

from __future__ import annotations

import json

import pytest

from duro import patched, sleep, step, wait_for_signal, workflow
from duro.tooling import history_from_json, history_to_json

CODE = {"edit": "none"}
EFFECTS: list[str] = []


@step
def reserve(n: int) -> int:
    EFFECTS.append(f"reserve {n}")
    return n + 1


@step
def charge(n: int) -> int:
    EFFECTS.append(f"charge {n}")
    return n * 10


@step
def refund(n: int) -> int:
    EFFECTS.append(f"refund {n}")
    return -n


@workflow
async def order(n: int) -> int:
    held = await reserve(n)
    edit = CODE["edit"]
    if edit == "renamed":
        paid = await refund(held)  # incompatible: another step where charge was recorded
    elif edit == "patched":
        paid = await refund(held) if await patched("refunds") else await charge(held)
    else:
        paid = await charge(held)
    await sleep("1m")
    await wait_for_signal("ship", timeout="1h")
    if edit == "appended":
        await charge(0)  # compatible: after the end of every recorded history
    return paid


@pytest.fixture(autouse=True)
def fresh():
    CODE["edit"] = "none"
    EFFECTS.clear()
    yield
    CODE["edit"] = "none"


async def exported(env, run) -> str:
    store = env.engine.store
    return json.dumps(history_to_json(store.runs.get(run.id), store.steps.of(run.id)))


async def test_compatible_edits_replay_to_the_end_of_the_history_executing_nothing(duro_env):
    run = await duro_env.start(order, 1)
    await duro_env.advance("2m")  # past the sleep: waiting for "ship"
    history = await exported(duro_env, run)
    EFFECTS.clear()
    for edit in ("none", "appended", "patched"):
        CODE["edit"] = edit
        outcome = await duro_env.replay(history)
        assert (outcome.diverged, outcome.ended, outcome.replayed) == (False, "history", 3), edit
    assert EFFECTS == []  # no step body ran
    assert (await duro_env.engine.get_run(run.id)).status == "suspended"  # the live run is untouched


async def test_an_incompatible_edit_names_the_run_the_seq_and_both_calls(duro_env):
    run = await duro_env.start(order, 2)
    await duro_env.run_until_idle()
    history = await exported(duro_env, run)
    CODE["edit"] = "renamed"
    outcome = await duro_env.replay(history)
    assert outcome.diverged and outcome.ended == "diverged"
    assert (outcome.run_id, outcome.workflow, outcome.seq) == (run.id, order.name, 1)
    assert "charge" in outcome.recorded and "refund" in outcome.asked
    assert EFFECTS == ["reserve 2", "charge 3"]  # only the live run's own steps, before the replay


async def test_a_finished_history_replays_to_its_return(duro_env, tmp_path):
    run = await duro_env.start(order, 3)
    await duro_env.advance("2m")
    await run.signal("ship")
    assert await run.result() == 40
    path = tmp_path / "order.json"
    path.write_text(await exported(duro_env, run))
    outcome = await duro_env.replay(path)
    assert (outcome.diverged, outcome.ended, outcome.replayed) == (False, "returned", 4)


async def test_a_bad_history_is_a_clear_error(duro_env):
    with pytest.raises(ValueError, match="not a duro history"):
        await duro_env.replay('{"steps": []}')
    with pytest.raises(ValueError, match="incomplete or malformed"):
        history_from_json({"format": "duro.history/1", "run": {"id": "x"}, "steps": []})


async def test_a_history_of_a_workflow_with_no_code_here_is_reported(duro_env):
    run = await duro_env.start(order, 4)
    await duro_env.run_until_idle()
    data = json.loads(await exported(duro_env, run))
    data["run"]["workflow"] = "gone"
    outcome = await duro_env.replay(data)
    assert outcome.diverged and outcome.ended == "error" and "not registered" in outcome.error
