"""Rates across real processes: three ``duro worker``s share one store (a SQLite file, and a
database of the real PostgreSQL) and take 30 grants of a rate of 5 per 2 s. The grants as the store
recorded them (judged by its one clock): no window of 2 s holds more than 5, and the last grant is
no earlier than 10 s after the first; every run completes."""

from __future__ import annotations

import asyncio
import textwrap
from contextlib import ExitStack
from pathlib import Path

from duro import Engine
from tests.e2e.test_worker import registered, worker_process
from tests.support.sampling import connect
from tests.support.store_rows import run_statuses
from tests.support.waiting import wait_until

LIMIT, PER_MS, RUNS = 5, 2_000, 30
CONFIG = f"""
from duro import Rate, define_workspace

workspace = define_workspace(rates={{"partner-calls": Rate(limit={LIMIT}, per="2s")}})
"""
FLOWS = """
from duro import acquire_rate, step, workflow


@step
async def call_partner(n: int) -> int:
    return n


@workflow(name="rated_job")
async def rated_job(n: int) -> int:
    await acquire_rate("partner-calls", timeout="5m")
    return await call_partner(n)
"""


async def _start(project: Path, url: str) -> list[str]:
    client = Engine.from_project(project, database_url=url)
    try:
        return [(await client.start("rated_job", n, run_id=f"r{n}")).id for n in range(RUNS)]
    finally:
        await client.aclose()


def _grants(url: str) -> list[int]:
    conn = connect(url)
    try:
        rows = conn.execute(
            "SELECT granted_at FROM duro_rate_waits WHERE rate_name = 'partner-calls' AND state = 'granted'"
        ).fetchall()
    finally:
        conn.close()
    return sorted(int(at) for (at,) in rows)


def test_three_workers_never_grant_more_than_five_in_any_two_seconds(tmp_path: Path, shared_url: str):
    project = tmp_path / "project"
    (project / "workflows").mkdir(parents=True)
    (project / "duro.config.py").write_text(textwrap.dedent(CONFIG))
    (project / "workflows" / "rated.py").write_text(textwrap.dedent(FLOWS))
    run_ids = asyncio.run(_start(project, shared_url))
    with ExitStack() as stack:
        workers = [stack.enter_context(worker_process(project, shared_url, f"r{n}")) for n in range(3)]
        wait_until(lambda: {"r0", "r1", "r2"} <= registered(shared_url), 30, "the workers to register")
        wait_until(
            lambda: set(run_statuses(shared_url, run_ids).values()) == {"completed"},
            120,
            "every rated run to complete",
        )
        assert all(worker.poll() is None for worker in workers), "a worker exited"
    grants = _grants(shared_url)
    assert len(grants) == RUNS
    for at in grants:  # every window of 2 s that starts at a grant (the fullest ones start at one)
        inside = [other for other in grants if at <= other < at + PER_MS]
        assert len(inside) <= LIMIT, (at, inside)
    assert grants[-1] - grants[0] >= (RUNS // LIMIT - 1) * PER_MS  # 6 windows: 10 s at the least
