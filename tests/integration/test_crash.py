"""A worker process is SIGKILLed mid-run; another process finishes the run, and every step that had
completed before the kill is executed exactly once (SQLite file and real PostgreSQL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from duro import Engine, WorkerOptions
from tests.integration.flows import Packed, fulfil
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]


def spawn_worker(url: str, run_id: str, tmp_path: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "DURO_TEST_JOURNAL": str(tmp_path / "journal"),
        "DURO_TEST_SLEEP": "2s",
        "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.crash_worker", url, run_id],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize("detection", ["same-host pid check", "lease expiry"])
async def test_a_killed_worker_run_completes_elsewhere_with_steps_run_once(
    database_url, tmp_path, monkeypatch, detection
):
    if detection == "lease expiry":  # as if the dead worker had been on another machine
        monkeypatch.setattr("duro.worker._heartbeat._process_alive", lambda pid: True)
    monkeypatch.setenv("DURO_TEST_JOURNAL", str(tmp_path / "journal"))
    monkeypatch.setenv("DURO_TEST_SLEEP", "2s")
    process = spawn_worker(database_url, "crash-1", tmp_path)
    observer = Engine(database_url)

    async def asleep() -> bool:
        if process.poll() is not None:
            return True
        runs = await observer.list_runs()
        return bool(runs) and runs[0].status == "suspended"

    try:
        await eventually(asleep, timeout=60, what="the worker reaching its sleep")
        assert process.poll() is None, process.stderr.read().decode()
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()
        observer.close()
    journal = (tmp_path / "journal").read_text().split("\n")
    assert sorted(line.split()[0] for line in journal if line) == ["pack", "pick"]

    async with Engine(database_url, options=WorkerOptions(poll_interval="50ms", lease="2s")) as engine:
        engine.register(fulfil)
        run = await engine.get_run("crash-1")
        assert run.status == "suspended"
        assert await engine.handle("crash-1").result(timeout="30s") == Packed(name="lamp", boxes=4)
        kinds = [(s.kind, s.name, s.status) for s in await engine.steps("crash-1")]
        assert kinds == [
            ("step", "pick", "completed"),
            ("step", "pack", "completed"),
            ("sleep", "sleep", "completed"),
        ]
    lines = [line.split() for line in (tmp_path / "journal").read_text().split("\n") if line]
    assert sorted(kind for kind, _ in lines) == ["pack", "pick"]
    assert {pid for _, pid in lines} == {str(process.pid)}
