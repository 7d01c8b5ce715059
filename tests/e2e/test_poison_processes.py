"""A poison step against a real ``duro worker`` (SQLite and PostgreSQL): steps calling
``sys.exit(3)`` or raising ``KeyboardInterrupt`` / ``GeneratorExit`` / ``CancelledError`` fail their
runs; the worker process stays up and the healthy runs beside them complete."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from duro import Engine
from duro.store import SqlStore
from tests.e2e.test_worker import registered, worker_process
from tests.support.waiting import wait_until

FLOWS = """
import asyncio
import sys

from duro import step, workflow


@step
async def poison(what: str) -> str:
    if what == "exit":
        sys.exit(3)
    if what == "interrupt":
        raise KeyboardInterrupt
    if what == "generator-exit":
        raise GeneratorExit
    raise asyncio.CancelledError


@step
def sync_exit() -> str:
    sys.exit(4)


@workflow(name="poisoned")
async def poisoned(what: str) -> str:
    if what == "sync-exit":
        return await sync_exit()
    return await poison(what)


@workflow(name="healthy")
async def healthy(n: int) -> int:
    return n + 1
"""
POISONS = ["exit", "interrupt", "generator-exit", "cancelled", "sync-exit"]


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    request.applymarker(pytest.mark.postgres)
    return request.getfixturevalue("postgres_url")


def _statuses(url: str, run_ids: list[str]) -> dict[str, str]:
    store = SqlStore(url)
    try:
        return store.run_statuses(run_ids)
    finally:
        store.close()


async def _start_all(project: Path, url: str) -> tuple[list[str], list[str]]:
    client = Engine.from_project(project, database_url=url)
    try:
        bad = [(await client.start("poisoned", what)).id for what in POISONS]
        good = [(await client.start("healthy", n)).id for n in range(5)]
        return bad, good
    finally:
        await client.aclose()


def test_poison_steps_fail_their_runs_and_the_worker_stays_up(tmp_path: Path, shared_url: str):
    project = tmp_path / "project"
    (project / "workflows").mkdir(parents=True)
    (project / "workflows" / "flows.py").write_text(textwrap.dedent(FLOWS))
    with worker_process(project, shared_url, "w-poison") as worker:
        wait_until(lambda: "w-poison" in registered(shared_url), 30, "the worker to register")
        bad, good = asyncio.run(_start_all(project, shared_url))
        wait_until(
            lambda: set(_statuses(shared_url, bad + good).values()) <= {"failed", "completed"},
            30,
            "every run to end",
        )
        statuses = _statuses(shared_url, bad + good)
        assert [statuses[r] for r in bad] == ["failed"] * len(POISONS)
        assert [statuses[r] for r in good] == ["completed"] * 5
        assert worker.poll() is None, "the worker exited"
        assert "w-poison" in registered(shared_url)
