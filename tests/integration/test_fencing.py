"""Ownership is fenced on execution, shown with real ``duro worker`` / ``duro serve`` processes
and an effect log the step bodies write (``fence_project/workflows/effects.py``):

- a worker frozen (SIGSTOP) past its lease while its run sleeps, the run completed by another worker,
  then continued (SIGCONT): every step body ran exactly once (SQLite file and real PostgreSQL);
- another process holds SQLite's write lock longer than the lease while three workers run 50 runs:
  no step body runs twice, and ``GET /api/health`` keeps answering in well under a second.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

from duro import Engine
from tests.support.devserver import running_dev_server
from tests.support.sampling import connect
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).resolve().parent / "fence_project"
EFFECTS_DIR = "FENCE_EFFECTS_DIR"  # read by fence_project/workflows/effects.py
STEPS = ("a", "b", "c")


# -- plumbing --------------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh copy of fence_project (``duro serve`` writes its ``.duro/`` there) and its effects dir."""
    target = tmp_path / "project"
    shutil.copytree(PROJECT, target, ignore=shutil.ignore_patterns(".duro", "__pycache__"))
    (tmp_path / "effects").mkdir()
    return target


def process_env(tmp_path: Path) -> dict[str, str]:
    """What the spawned processes run with: this tree's packages first (PYTHONPATH kept, so a run
    against another checkout spawns that checkout's code), the effects directory, and faulthandler
    (a process that ignores SIGTERM shows its stacks on SIGABRT: see ``finish``)."""
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
    return {
        **os.environ,
        "PYTHONPATH": path,
        EFFECTS_DIR: str(tmp_path / "effects"),
        "PYTHONFAULTHANDLER": "1",
    }


@dataclass
class Worker:
    """A ``duro worker`` process and the file its output goes to."""

    id: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return f"--- {self.id} (pid {self.process.pid}) ---\n{self.log_path.read_text(errors='replace')}"

    def exited(self) -> bool:
        return self.process.poll() is not None


@contextmanager
def duro_worker(project: Path, url: str, worker_id: str, env: dict[str, str], lease: str) -> Iterator[Worker]:
    """``duro worker PROJECT`` as a real process (poll 200 ms); continued if stopped and SIGTERMed
    afterwards (see ``finish``)."""
    log_path = project.parent / f"{worker_id}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "duro_devserver",
                "worker",
                str(project),
                "--database-url",
                url,
                "--lease",
                lease,
                "--poll-interval",
                "200ms",
                "--worker-id",
                worker_id,
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield Worker(worker_id, process, log_path)
    finally:
        finish(process)


class Peek:
    """Reads the store through a connection of its own (not through duro); ``?`` placeholders."""

    def __init__(self, url: str) -> None:
        self.sqlite = make_url(url).get_backend_name() == "sqlite"
        self.conn = connect(url)

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql if self.sqlite else sql.replace("?", "%s"), params).fetchall()

    def run(self, run_id: str) -> tuple[str, str | None] | None:
        found = self.rows("SELECT status, owner FROM duro_runs WHERE id = ?", run_id)
        return (found[0][0], found[0][1]) if found else None

    def error(self, run_id: str) -> str | None:
        return self.rows("SELECT error FROM duro_runs WHERE id = ?", run_id)[0][0]

    def heartbeat(self, worker_id: str) -> int | None:
        found = self.rows("SELECT heartbeat_at FROM duro_workers WHERE id = ?", worker_id)
        return found[0][0] if found else None

    def close(self) -> None:
        self.conn.close()


def effects(tmp_path: Path) -> list[tuple[str, str, int]]:
    """Every step execution so far: (run id, step, pid), in the order they were written."""
    path = tmp_path / "effects" / "effects.log"
    if not path.exists():
        return []
    return [
        (run, step, int(pid))
        for run, step, pid in (line.split() for line in path.read_text().splitlines() if line)
    ]


def start_runs(project: Path, url: str, workflow: str, jobs: list[dict[str, str]]) -> None:
    """Start runs from a client engine (never entered: it executes nothing), ``run_id == job["id"]``."""
    client = Engine.from_project(project, database_url=url)

    async def start_all() -> None:
        for job in jobs:
            await client.start(workflow, job, run_id=job["id"])

    try:
        asyncio.run(start_all())
    finally:
        client.close()


def finish(*processes: subprocess.Popen[bytes], grace: float = 15.0) -> list[int]:
    """Continue (if stopped) and SIGTERM each process; their exit codes. One still running ``grace``
    seconds later gets SIGABRT (faulthandler writes every thread's stack to its log; exit code -6),
    then SIGKILL."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
    deadline = time.perf_counter() + grace
    for process in processes:
        try:
            process.wait(max(0.1, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return [process.returncode for process in processes]


@contextmanager
def write_lock_holder(
    db_path: str, seconds: float, env: dict[str, str], out: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``tests.support.write_lock`` started and connected, waiting for a line on its stdin to lock."""
    with open(out, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.write_lock", db_path, str(seconds)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield process
    finally:
        assert process.stdin is not None
        process.stdin.close()
        if process.poll() is None:
            process.kill()
        process.wait()


def alive(*workers: Worker) -> None:
    for worker in workers:
        if worker.exited():
            raise AssertionError(f"{worker.id} exited with {worker.process.returncode}:\n{worker.log()}")


# -- a worker frozen past its lease mid-sleep ------------------------------------------------------


@pytest.mark.timeout(180)
def test_a_worker_frozen_past_its_lease_mid_sleep_runs_no_step_again(
    database_url: str, project: Path, tmp_path: Path
):
    """w1 runs ``a`` and sleeps 3 s; frozen past its 2 s lease, w2 takes the run over and completes
    it; w1, continued, may beat its heartbeat again, but executes neither ``b`` nor ``c``."""
    env = process_env(tmp_path)
    run_id = "nap-1"
    start_runs(project, database_url, "fence.nap", [{"id": run_id, "nap": "3s"}])
    peek = Peek(database_url)
    with ExitStack() as stack:
        stack.callback(peek.close)
        w1 = stack.enter_context(duro_worker(project, database_url, "fence-w1", env, lease="2s"))
        logs = [w1]
        try:

            def asleep_at_w1() -> bool:
                alive(w1)
                state = peek.run(run_id)
                if state is not None and state[0] in ("completed", "failed", "cancelled"):
                    raise AssertionError(f"the run ended {state[0]} before it slept: {peek.error(run_id)}")
                return state == ("suspended", "fence-w1")

            wait_until(asleep_at_w1, 60, "the run asleep and owned by fence-w1")
            assert [(s, p) for _, s, p in effects(tmp_path)] == [("a", w1.process.pid)]
            w1.process.send_signal(signal.SIGSTOP)
            frozen_at = time.perf_counter()

            w2 = stack.enter_context(duro_worker(project, database_url, "fence-w2", env, lease="2s"))
            logs.append(w2)

            def completed() -> bool:
                alive(w2)
                state = peek.run(run_id)
                return state is not None and state[0] == "completed"

            wait_until(completed, 60, "fence-w2 completing the run")
            frozen_for = time.perf_counter() - frozen_at
            assert frozen_for > 2.0, f"the run completed {frozen_for:.1f}s after the freeze, within the lease"

            # w1's sleep was due while it was frozen: once continued, give it time to come back and
            # act (two heartbeats written after the SIGCONT, whether its row survived or was re-added)
            before = peek.heartbeat("fence-w1") or 0
            w1.process.send_signal(signal.SIGCONT)
            beats: set[int] = set()

            def beat_twice() -> bool:
                alive(w1)
                now = peek.heartbeat("fence-w1")
                if now is not None and now > before:
                    beats.add(now)
                return len(beats) >= 2

            continued_at = time.perf_counter()
            wait_until(beat_twice, 30, "two heartbeats of fence-w1 after its SIGCONT")
            print(
                f"\nfence-w1 frozen {frozen_for:.1f}s (lease 2s, the run completed by fence-w2 meanwhile); "
                f"two heartbeats {time.perf_counter() - continued_at:.1f}s after its SIGCONT"
            )
        except BaseException:
            finish(*(worker.process for worker in logs))
            print("\n".join(worker.log() for worker in logs), file=sys.stderr)
            print(f"effects: {effects(tmp_path)}", file=sys.stderr)
            raise
        codes = dict(zip(("fence-w1", "fence-w2"), finish(w1.process, w2.process), strict=True))
        done = effects(tmp_path)
        counts = Counter(step for run, step, _ in done if run == run_id)
        executed = [(step, pid) for run, step, pid in done if run == run_id]
        failure = "\n".join(worker.log() for worker in logs)
        assert counts == dict.fromkeys(STEPS, 1), f"step bodies executed {dict(counts)}: {done}\n{failure}"
        assert executed == [("a", w1.process.pid), ("b", w2.process.pid), ("c", w2.process.pid)], (
            f"{done}\n{failure}"
        )
        assert codes == {"fence-w1": 0, "fence-w2": 0}, f"exit codes {codes}\n{failure}"


# -- SQLite's write lock held past the lease -------------------------------------------------------

RUNS = 50
LOCK_S = 8.0  # more than twice the workers' 3 s lease
HEALTH_S = 1.0  # "well under a second"


@dataclass
class Sample:
    """One ``GET /api/health`` sent while the write lock was held."""

    took: float
    status: int | None
    error: str | None = None


def completed_runs(peek: Peek) -> int:
    return peek.rows("SELECT count(*) FROM duro_runs WHERE status = 'completed'")[0][0]


def sample_health(http: httpx.Client, until: Callable[[], bool], bound: float) -> list[Sample]:
    """``GET /api/health`` one after the other (50 ms apart) until ``until()`` or ``bound`` seconds."""
    samples: list[Sample] = []
    pause = threading.Event()
    deadline = time.perf_counter() + bound
    while not until() and time.perf_counter() < deadline:
        began = time.perf_counter()
        try:
            status, error = http.get("/api/health").status_code, None
        except httpx.HTTPError as err:
            status, error = None, f"{type(err).__name__}: {err}"
        samples.append(Sample(time.perf_counter() - began, status, error))
        pause.wait(0.05)
    return samples


def executed_twice(done: list[tuple[str, str, int]]) -> dict[tuple[str, str], list[int]]:
    """(run, step) executed more than once, with the pids that executed it."""
    pids: dict[tuple[str, str], list[int]] = {}
    for run, step, pid in done:
        pids.setdefault((run, step), []).append(pid)
    return {key: found for key, found in pids.items() if len(found) > 1}


@pytest.mark.timeout(180)
def test_the_sqlite_write_lock_held_past_the_lease_runs_no_step_twice_and_health_answers(
    sqlite_url: str, project: Path, tmp_path: Path
):
    """Two ``duro worker`` and one ``duro serve --worker`` (lease 3 s each) on one SQLite file run 50
    runs; meanwhile another process holds the write lock 8 s."""
    env = process_env(tmp_path)
    db_path = make_url(sqlite_url).database
    assert db_path is not None
    client = Engine.from_project(project, database_url=sqlite_url)
    client.store.create_schema()  # before three processes race to create it
    client.close()
    peek = Peek(sqlite_url)
    said = tmp_path / "write-lock.out"
    with ExitStack() as stack:
        stack.callback(peek.close)
        holder = stack.enter_context(write_lock_holder(db_path, LOCK_S, env, said))
        server = stack.enter_context(
            running_dev_server(  # first: it starts slowest, and within 30 s
                project,
                command="serve",
                args=("--database-url", sqlite_url, "--worker", "--lease", "3s", "--poll-interval", "200ms"),
                env=env,
            )
        )
        workers = [
            stack.enter_context(duro_worker(project, sqlite_url, f"fence-w{i}", env, lease="3s"))
            for i in (1, 2)
        ]
        http = stack.enter_context(httpx.Client(base_url=server.url, timeout=30.0))

        def logs() -> str:
            return "\n".join(
                [
                    *(worker.log() for worker in workers),
                    f"--- duro serve ---\n{server.log()}",
                    f"--- write lock ---\n{said.read_text()}",
                ]
            )

        def released() -> bool:
            return "released" in said.read_text() or holder.poll() is not None

        problems: list[str] = []
        try:

            def three_workers() -> bool:
                alive(*workers)
                return peek.rows("SELECT count(*) FROM duro_workers")[0][0] == 3

            wait_until(three_workers, 60, "three workers registered")
            jobs = [{"id": f"hop-{n:02d}", "nap": "300ms"} for n in range(RUNS)]
            start_runs(project, sqlite_url, "fence.hop", jobs)
            wait_until(lambda: len(effects(tmp_path)) >= 10, 60, "runs in flight (10 step bodies executed)")
            assert holder.stdin is not None
            holder.stdin.write(b"go\n")
            holder.stdin.flush()
            wait_until(lambda: "locked" in said.read_text(), 30, "the other process holding the write lock")
            in_flight = RUNS - completed_runs(peek)
            samples = sample_health(http, released, LOCK_S + 60)
            holder.wait(timeout=30)
            try:
                wait_until(lambda: completed_runs(peek) == RUNS, 120, f"all {RUNS} runs completed")
            except AssertionError as err:
                statuses = peek.rows("SELECT status, count(*) FROM duro_runs GROUP BY status")
                problems.append(f"{err}: {statuses}")
        except BaseException:
            finish(*(worker.process for worker in workers), server.process)
            print(logs(), file=sys.stderr)
            raise
        codes = dict(
            zip(
                ["fence-w1", "fence-w2", "serve"],
                finish(*(worker.process for worker in workers), server.process),
                strict=True,
            )
        )

        done = effects(tmp_path)
        twice = executed_twice(done)
        if twice:
            problems.append(f"{len(twice)} step bodies ran more than once, (run, step): pids {twice}")
        completed = [run for (run,) in peek.rows("SELECT id FROM duro_runs WHERE status = 'completed'")]
        ran = {(run, step) for run, step, _ in done}
        missing = [(run, step) for run in completed for step in STEPS if (run, step) not in ran]
        if missing:
            problems.append(f"completed steps with no execution in the effect log: {missing}")
        if not samples:
            problems.append("no GET /api/health was answered while the lock was held")
        slow = [
            (round(s.took, 2), s.status, s.error) for s in samples if s.status != 200 or s.took >= HEALTH_S
        ]
        if slow:
            problems.append(
                f"{len(slow)} of {len(samples)} GET /api/health during the lock took >= "
                f"{HEALTH_S}s or failed: {slow}"
            )
        # uvicorn raises the SIGTERM it caught again once it has shut down gracefully: serve ends -15
        if codes != {"fence-w1": 0, "fence-w2": 0, "serve": -signal.SIGTERM}:
            problems.append(f"exit codes {codes}")
        worst = max((s.took for s in samples), default=0.0)
        print(
            f"\nwrite lock held {LOCK_S}s with {in_flight} of {RUNS} runs in flight; {len(samples)} health "
            f"answers during it, slowest {worst:.3f}s; {len(done)} step executions, {len(completed)} runs "
            f"completed; exit codes {codes}"
        )
        assert not problems, "\n".join(problems) + "\n" + logs()
