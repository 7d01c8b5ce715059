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
from tests.support.store_rows import run_statuses
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
            lambda: set(run_statuses(shared_url, bad + good).values()) <= {"failed", "completed"},
            30,
            "every run to end",
        )
        statuses = run_statuses(shared_url, bad + good)
        assert [statuses[r] for r in bad] == ["failed"] * len(POISONS)
        assert [statuses[r] for r in good] == ["completed"] * 5
        assert worker.poll() is None, "the worker exited"
        assert "w-poison" in registered(shared_url)


CRASHER = """
import os

from duro import step, workflow


@step
async def crash() -> str:
    os._exit(1)  # the process dies at once: no exception, nothing recorded


@workflow(name="crasher")
async def crasher() -> str:
    return await crash()


@workflow(name="healthy")
async def healthy(n: int) -> int:
    return n + 1
"""


def _run(url: str, run_id: str):
    store = SqlStore(url)
    try:
        return store.runs.get(run_id)
    finally:
        store.close()


def _deaths_until_set_aside(
    project: Path, url: str, crash: str, good: list[str], tries: int, where: str, worker_id: str
) -> int:
    """Start workers one after another (``worker_id`` formatted with the attempt) until one outlives
    the crashing run (it was set aside), then wait for the healthy runs to complete on it; return
    how many workers died first."""
    deaths = 0
    for attempt in range(tries):
        with worker_process(project, url, worker_id.format(attempt=attempt)) as worker:
            wait_until(
                lambda: worker.poll() is not None or _run(url, crash).status == "failed",  # noqa: B023
                60,
                f"worker {attempt} to die {where}, or the run to be set aside",
            )
            if worker.poll() is None:  # set aside: this worker lives, and runs the rest
                wait_until(
                    lambda: set(run_statuses(url, good).values()) == {"completed"},
                    30,
                    "the healthy runs to complete",
                )
                break
            deaths += 1
    return deaths


async def _start_crasher(project: Path, url: str) -> tuple[str, list[str]]:
    client = Engine.from_project(project, database_url=url)
    try:
        crash = (await client.start("crasher")).id
        return crash, [(await client.start("healthy", n)).id for n in range(3)]
    finally:
        await client.aclose()


def test_a_step_that_kills_its_process_is_set_aside_after_max_recoveries(tmp_path: Path, shared_url: str):
    """Each ``duro worker`` that takes the run up dies in its step (``os._exit``): the first, then
    ``max_recoveries`` (5) more that executed it again at the same point. The next worker fails it
    with RunSetAsideError instead, stays up, and completes the healthy runs, which shared every
    dead worker with it and are never blamed."""
    project = tmp_path / "project"
    (project / "workflows").mkdir(parents=True)
    (project / "workflows" / "flows.py").write_text(textwrap.dedent(CRASHER))
    crash, good = asyncio.run(_start_crasher(project, shared_url))
    deaths = _deaths_until_set_aside(project, shared_url, crash, good, 8, "in the step", "w-{attempt}")
    assert deaths == 6, deaths
    run = _run(shared_url, crash)
    assert run.status == "failed" and run.recovered_steps == 0
    assert "RunSetAsideError" in run.error and "6 workers in a row died while executing it" in run.error


SHAPED_CRASHER = """
import os
from pathlib import Path

from duro import acquire_slot, child, sleep, step, wait_for_signal, workflow

FLAKED = Path(__file__).with_name("flaked")


@step
async def before() -> str:
    return "ok"


@step
async def crash() -> str:
    os._exit(1)


@step(retries=1, retry_delay="50ms")
async def flaky() -> str:
    if not FLAKED.exists():  # the first attempt fails; every later one kills its process
        FLAKED.write_text("failed once")
        raise ValueError("the first attempt fails")
    os._exit(1)


@workflow(name="healthy")
async def healthy(n: int) -> int:
    return n + 1


@workflow(name="crasher")
async def crasher(shape: str) -> str:
    await before()
    if shape == "sleep":
        await sleep("50ms")
    elif shape == "signal-timeout":
        await wait_for_signal("never", timeout="50ms")
    elif shape == "retry-delay":
        return await flaky()
    elif shape == "slot":
        await acquire_slot("lane", timeout="1m")
    elif shape == "child":
        await child(healthy, 1)
    return await crash()
"""
SHAPED_CONFIG = """
from duro import Limit, define_workspace

workspace = define_workspace(limits={"lane": Limit(capacity=5, max_hold="1h")})
"""


async def _start_shaped(project: Path, url: str, shape: str) -> tuple[str, list[str]]:
    client = Engine.from_project(project, database_url=url)
    try:
        crash = (await client.start("crasher", shape)).id
        return crash, [(await client.start("healthy", n)).id for n in range(3)]
    finally:
        await client.aclose()


@pytest.mark.parametrize("shape", ["direct", "sleep", "signal-timeout", "retry-delay", "slot", "child"])
def test_a_run_that_kills_its_worker_after_any_wait_is_set_aside(tmp_path: Path, shared_url: str, shape: str):
    """Whatever the run last waited for (nothing, a sleep, a signal's timeout, a retry delay, a slot,
    a child), when its next step kills the worker, each death counts where it happened: it is set
    aside after at most ``max_recoveries`` + 1 deaths, and three healthy runs beside it complete.
    (A run woken from a sleep is still ``suspended`` in the store when its next step kills the
    process: the hand-back counts it as executing because its wait is over.) Each new worker takes
    the dead one's id, so it hands the dead life's runs back as it registers, without a lease to wait out."""
    project = tmp_path / "project"
    (project / "workflows").mkdir(parents=True)
    (project / "workflows" / "flows.py").write_text(textwrap.dedent(SHAPED_CRASHER))
    (project / "duro.config.py").write_text(textwrap.dedent(SHAPED_CONFIG))
    crash, good = asyncio.run(_start_shaped(project, shared_url, shape))
    deaths = _deaths_until_set_aside(
        project, shared_url, crash, good, 10, f"in the step after the {shape}", "w-shaped"
    )
    run = _run(shared_url, crash)
    assert run.status == "failed", (shape, deaths, run.status)
    assert "RunSetAsideError" in (run.error or ""), run.error
    assert deaths <= 6, deaths
