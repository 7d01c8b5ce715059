"""Progress writes of runs that are ready at the same time share one transaction (group commit)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from duro import Engine, Limit, acquire_slot, define_workspace, release_slot, step, workflow
from duro.definitions._config import LimitConfig
from duro.store import Fenced, NewRun, OwnStep, RecordStep, RequestSlot, SqlStore, StepRecord
from duro.worker._gateway import GroupCommit


def _commits(engine: Engine) -> Callable[[], int]:
    """The transactions the engine's store committed so far: SQLAlchemy's count on SQLite, the
    store's own on PostgreSQL (where it begins and commits its transactions itself)."""
    if engine.store.dialect == "postgresql":
        return lambda: engine.store.db.server_commits
    commits = []
    sa.event.listen(engine.store._engine, "commit", lambda conn: commits.append(1))
    return lambda: len(commits)


async def test_concurrent_runs_share_commits(database_url):
    @step
    async def bump(n: int) -> int:
        return n + 1

    @workflow
    async def one(n: int) -> int:
        return await bump(n)

    engine = Engine(database_url)
    commits = _commits(engine)
    async with engine:
        handles = [await one.start(i) for i in range(50)]
        starts = commits()
        assert await asyncio.gather(*(h.result(timeout="20s") for h in handles)) == [i + 1 for i in range(50)]
        progress = commits() - starts
    # 100 progress writes (a step and a finish per run); far fewer transactions
    assert progress <= 20, progress


async def test_slot_decisions_of_concurrent_runs_share_commits(database_url):
    """On SQLite the slot requests and releases of runs ready together go in one transaction too
    (PostgreSQL keeps one per decision: a batch must not hold several limits' locks at once)."""

    @workflow
    async def cycle(n: int) -> int:
        for i in range(n):
            slot = await acquire_slot("phones", label=f"call {i}")
            assert (await release_slot(slot.id)).released
        return n

    engine = Engine(
        database_url, workspace=define_workspace(limits={"phones": Limit(capacity=8, max_hold="1h")})
    )
    commits = _commits(engine)
    async with engine:
        before = commits()
        handles = [await cycle.start(10) for _ in range(8)]
        # SQLite's bound is an upper one: its starts' commits left out. PostgreSQL's is a lower one,
        # so it counts from before the starts: the first runs may begin cycling before the last start
        starts = commits() if engine.store.dialect == "sqlite" else before
        assert await asyncio.gather(*(h.result(timeout="30s") for h in handles)) == [10] * 8
        progress = commits() - starts
        (phones,) = await engine.limits.list()
        assert (phones.busy, phones.reserved, phones.waiting) == (0, 0, 0)
    decisions = 8 * 10 * 2  # each its own transaction without the group commit
    if engine.store.dialect == "sqlite":
        assert progress <= decisions // 3, progress
    else:
        assert progress >= decisions, progress


def _owned_run(store: SqlStore, run_id: str) -> None:
    store.runs.insert(
        NewRun(
            id=run_id, namespace="default", workflow="w", version="1", input=None, owner="me", created_at=1
        ),
        None,
    )


def _hook(run_id: str, owner: str) -> OwnStep:
    return OwnStep(run_id, owner, StepRecord(0, "hook", "Esperando hueco · phones", "waiting", 1))


async def test_a_fenced_slot_request_in_a_batch_fails_alone(sqlite_url):
    """A batch whose one slot request is fenced (its run is not the writer's any more) is applied
    again write by write: the others take, the fenced one raises and changes nothing."""
    store = SqlStore(sqlite_url, decisions_clock="caller")
    store.create_schema()
    try:
        for run_id in ("mine", "lost"):
            _owned_run(store, run_id)
        batches = []
        apply_batch = store.steps.apply_batch
        store.steps.apply_batch = lambda ops: batches.append(len(ops)) or apply_batch(ops)  # type: ignore[method-assign]
        progress = GroupCommit(store, _inline)
        config = LimitConfig("phones", capacity=2, max_hold_ms=3_600_000)
        mine = progress.write(RequestSlot(config, "mine.0", "mine", None, None, 5, _hook("mine", "me")))
        lost = progress.write(RequestSlot(config, "lost.0", "lost", None, None, 5, _hook("lost", "not me")))
        results = await asyncio.gather(mine, lost, return_exceptions=True)
        assert batches == [2]  # tried together first
        assert results[0].row.state == "busy" and isinstance(
            results[1], Fenced
        )  # a SlotOutcome, and the fence
        assert store.slots.get("lost.0") is None
        assert [s.status for s in store.steps.of("mine")] == ["completed"]
        assert store.steps.of("lost") == []
        assert (store.limits.states()["phones"].busy, store.limits.states()["phones"].waiting) == (1, 0)
    finally:
        store.close()


async def test_the_only_run_in_flight_writes_without_waiting_for_a_batch(sqlite_url):
    store = SqlStore(sqlite_url)
    store.create_schema()
    try:
        _owned_run(store, "solo")
        store.steps.apply_batch = lambda ops: pytest.fail("batched")  # type: ignore[method-assign]
        progress = GroupCommit(store, _inline, alone=lambda: True)
        step = StepRecord(0, "step", "s", "completed", 1, 1, result="1")
        assert await progress.write(RecordStep("solo", "me", step, None, None, 2)) is True
        assert [s.result for s in store.steps.of("solo")] == ["1"]
    finally:
        store.close()


async def _inline(fn, *args):
    return fn(*args)
