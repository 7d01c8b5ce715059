"""Progress writes of runs that are ready at the same time share one transaction (group commit)."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa

from duro import Engine, step, workflow


async def test_concurrent_runs_share_commits(database_url):
    @step
    async def bump(n: int) -> int:
        return n + 1

    @workflow
    async def one(n: int) -> int:
        return await bump(n)

    engine = Engine(database_url)
    commits = []
    sa.event.listen(engine.store._engine, "commit", lambda conn: commits.append(1))
    async with engine:
        handles = [await one.start(i) for i in range(50)]
        starts = len(commits)
        assert await asyncio.gather(*(h.result(timeout="20s") for h in handles)) == [i + 1 for i in range(50)]
        progress = len(commits) - starts
    # 100 progress writes (a step and a finish per run); far fewer transactions
    assert progress <= 20, progress
