"""Re-driving runs in the harness (resident and evicted): ``env.retry``, ``env.fork``,
``env.retry_runs`` and ``env.cancel_runs`` under simulated time, a retry across a restart, a retry
from a retry's own failure, and the metrics."""

from __future__ import annotations

import pytest

from duro import sleep, step, wait_for_signal, workflow

pytestmark = pytest.mark.duro(config={"limits": {"line": {"capacity": 1, "max_hold": "1h"}}})
calls: list[str] = []
failing: set[str] = set()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    failing.clear()


@step
async def act(name: str) -> str:
    calls.append(name)
    if name in failing:
        raise RuntimeError(f"{name} broke")
    return name


@workflow(name="redrive.steps")
async def three(_: None) -> list[str]:
    done = [await act("first")]
    await sleep("1h")
    done.append(await act("second"))
    done.append(await act("third"))
    return done


@workflow(name="redrive.waits")
async def waits(_: None) -> str:
    return await wait_for_signal("go")


async def test_retry_in_the_harness_reruns_from_the_failed_step_after_a_restart(duro_env):
    failing.add("second")
    handle = await duro_env.start(three, None, run_id="h-1")
    await duro_env.advance("1h")
    await duro_env.assert_status(handle, "failed")
    await duro_env.restart()
    failing.clear()
    retried = await duro_env.retry(handle)
    await duro_env.run_until_idle()
    assert await retried.result() == ["first", "second", "third"]
    assert calls == ["first", "second", "second", "third"]  # the sleep is over: no hour more
    info = await handle.info()
    assert info.attempt == 2


async def test_a_retry_that_fails_again_is_retried_from_its_own_failure(duro_env):
    failing.update({"second", "third"})
    handle = await duro_env.start(three, None, run_id="h-2")
    await duro_env.advance("1h")
    failing.discard("second")
    await duro_env.retry(handle)
    await duro_env.run_until_idle()
    await duro_env.assert_status(handle, "failed")  # third fails now
    failing.clear()
    await handle.retry()
    await duro_env.run_until_idle()
    assert await handle.result() == ["first", "second", "third"]
    assert calls == ["first", "second", "second", "third", "third"]
    steps = [(s.name, s.status, s.attempt) for s in await handle.steps() if s.kind == "step"]
    assert steps == [
        ("act", "completed", 1),
        ("act", "failed", 1),
        ("act", "completed", 2),
        ("act", "failed", 2),
        ("act", "completed", 3),
    ]
    assert [(a.attempt, a.resume_seq) for a in await duro_env.engine.attempts(handle.id)] == [(1, 2), (2, 3)]


async def test_fork_and_bulk_actions_in_the_harness_are_counted(duro_env):
    from prometheus_client import CollectorRegistry, generate_latest

    from duro.metrics import collector

    registry = CollectorRegistry()
    registry.register(collector(duro_env.engine))
    failing.add("third")
    runs = [await duro_env.start(three, None, run_id=f"b-{n}") for n in range(2)]
    waiting = await duro_env.start(waits, None, run_id="w-1")
    await duro_env.advance("1h")
    failing.clear()
    assert (await duro_env.retry_runs(dry_run=True)).run_ids == ["b-0", "b-1"]
    report = await duro_env.retry_runs(workflow="redrive.steps")
    assert report.run_ids == ["b-0", "b-1"] and report.refused == {}
    cancelled = await duro_env.cancel_runs(workflow="redrive.waits")
    assert cancelled.run_ids == [waiting.id]
    await duro_env.run_until_idle()
    assert [await r.result() for r in runs] == [["first", "second", "third"]] * 2
    forked = await duro_env.fork(runs[0], 2, new_run_id="b-0-fork")  # from the second act
    assert await forked.result() == ["first", "second", "third"]
    assert calls.count("first") == 2 and calls.count("second") == 3  # the fork ran the second again
    await duro_env.assert_status(waiting, "cancelled")
    text = generate_latest(registry).decode()
    assert 'duro_runs_retried_total{workflow="redrive.steps"} 2.0' in text
    assert 'duro_runs_forked_total{workflow="redrive.steps"} 1.0' in text
