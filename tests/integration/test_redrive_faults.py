"""A worker SIGKILLed in the middle of a bulk retry of 1,000 failed runs on a real PostgreSQL: every
run is either retried (pending again, its failed call moved to its earlier attempt) or untouched
(failed, its history whole), none half-reset and none retried twice; a second bulk retry takes up
the rest, and every run completes with its first step executed once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from duro import Engine, WorkerOptions
from tests.integration.redrive_flows import checkout
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
RUNS = 1000
pytestmark = pytest.mark.postgres


def spawn_retrier(url: str, journal: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "DURO_TEST_JOURNAL": str(journal),
        "DURO_TEST_FIXED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.redrive_worker", url],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def worker(url: str) -> Engine:
    engine = Engine(url, options=WorkerOptions(poll_interval="50ms", lease="2s", max_concurrent_runs=200))
    engine.register(checkout)
    return engine


async def test_a_worker_killed_during_a_bulk_retry_leaves_each_run_retried_or_untouched(
    postgres_url, tmp_path, monkeypatch
):
    journal = tmp_path / "journal"
    monkeypatch.setenv("DURO_TEST_JOURNAL", str(journal))
    monkeypatch.delenv("DURO_TEST_FIXED", raising=False)
    ids = [f"order-{n:04d}" for n in range(RUNS)]
    async with worker(postgres_url) as engine:  # the bug: every run fails at its charge
        for run_id in ids:
            await engine.start(checkout, run_id, run_id=run_id)

        async def all_failed() -> bool:
            runs = await engine.list_runs(workflow="faults.checkout", status="failed", limit=RUNS)
            return len(runs) == RUNS

        await eventually(all_failed, timeout=120, what=f"{RUNS} runs to fail")

    process = spawn_retrier(postgres_url, journal)
    observer = Engine(postgres_url)
    try:

        async def some_retried() -> bool:
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            runs = await observer.list_runs(workflow="faults.checkout", limit=RUNS)
            return sum(run.attempt == 2 for run in runs) >= 100

        await eventually(some_retried, timeout=120, what="the bulk retry to be under way")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

        runs = {run.id: run for run in await observer.list_runs(workflow="faults.checkout", limit=RUNS)}
        retried = [run_id for run_id in ids if runs[run_id].attempt == 2]
        untouched = [run_id for run_id in ids if runs[run_id].attempt == 1]
        assert len(retried) + len(untouched) == RUNS  # never a third attempt
        assert 100 <= len(retried) < RUNS, "the kill came after the bulk retry had finished: nothing tested"
        for run_id in untouched:  # failed, its history whole, no earlier attempt recorded
            assert runs[run_id].status.value == "failed"
            steps = [(s.seq, s.name, s.status, s.attempt) for s in await observer.steps(run_id)]
            assert steps == [(0, "reserve", "completed", 1), (1, "charge", "failed", 1)], run_id
            assert await observer.attempts(run_id) == []
        for run_id in retried:  # the charge's failure moved to attempt 1, the reserve kept
            [earlier] = await observer.attempts(run_id)
            assert (earlier.attempt, earlier.status, earlier.resume_seq) == (1, "failed", 1)
            steps = [(s.seq, s.name, s.status, s.attempt) for s in await observer.steps(run_id)]
            assert steps[:2] == [(0, "reserve", "completed", 1), (1, "charge", "failed", 1)], run_id
            assert all(attempt == 2 for *_, attempt in steps[2:]), run_id
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
        observer.close()

    monkeypatch.setenv("DURO_TEST_FIXED", "1")
    async with worker(postgres_url) as engine:  # the rest, and every run the killed worker held
        report = await engine.retry_runs(workflow="faults.checkout", limit=RUNS)
        assert sorted(report.run_ids) == sorted(untouched) and report.refused == {}

        async def all_completed() -> bool:
            runs = await engine.list_runs(workflow="faults.checkout", status="completed", limit=RUNS)
            return len(runs) == RUNS

        await eventually(all_completed, timeout=180, what=f"{RUNS} runs to complete")
        runs = await engine.list_runs(workflow="faults.checkout", limit=RUNS)
        assert {run.attempt for run in runs} == {2}  # each retried once, none twice
    calls = Counter(" ".join(line.split()[:2]) for line in journal.read_text().splitlines())
    assert all(calls[f"reserve {run_id}"] == 1 for run_id in ids)  # the kept step never ran again
    assert all(calls[f"charge {run_id}"] >= 1 for run_id in ids)
