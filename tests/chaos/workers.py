"""The worker processes of a chaos run: ``duro worker`` subprocesses, spawned, killed (and replaced at
once), stopped and resumed, and watched for deaths and stalls of their own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.database import wall_ms

ROOT = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).resolve().parent / "project"
LEASE, LEASE_S = "3s", 3.0
POLL = "200ms"
STALL_S = 4 * LEASE_S  # a running (not stopped) worker whose heartbeat is older than this is stalled


@dataclass
class Life:
    """One worker process, from spawn to its end. ``fate``: killed (by the chaos), died (on its own),
    stalled (alive but no heartbeat: killed and replaced), exited at start (the database unreachable
    before its first heartbeat), or None (alive until the end)."""

    slot: int
    id: str
    pid: int
    log: Path
    started_ms: int
    ended_ms: int | None = None
    fate: str | None = None
    stops: list[tuple[int, int]] = field(default_factory=list)  # (SIGSTOP, SIGCONT) wall ms
    started_at: float = field(default_factory=time.perf_counter)


class WorkerPool:
    """``size`` workers at all times, in slots 0..size-1: a worker that ends is replaced in its slot."""

    def __init__(self, url: str, size: int, workdir: Path, effects: Path) -> None:
        self.url, self.size, self.workdir = url, size, workdir
        path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
        self.env = {**os.environ, "PYTHONPATH": path, "CHAOS_EFFECTS_DIR": str(effects)}
        self.procs: dict[int, tuple[subprocess.Popen, Life]] = {}
        self.lives: list[Life] = []
        self.stopped: dict[int, int] = {}  # slot -> wall ms of its SIGSTOP
        self.findings: list[str] = []
        self.startup_failures: list[str] = []  # exited before its first heartbeat: the database was down
        self.seen: set[str] = set()  # workers whose heartbeat the sampler has seen
        self._generation = 0

    def spawn(self, slot: int) -> Life:
        self._generation += 1
        worker_id = f"chaos-w{slot}-{self._generation}"
        log = self.workdir / f"{worker_id}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "duro_devserver",
                    "worker",
                    str(PROJECT),
                    "--database-url",
                    self.url,
                    "--lease",
                    LEASE,
                    "--poll-interval",
                    POLL,
                    "--worker-id",
                    worker_id,
                ],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        life = Life(slot=slot, id=worker_id, pid=process.pid, log=log, started_ms=wall_ms())
        self.procs[slot] = (process, life)
        self.lives.append(life)
        return life

    def start(self) -> None:
        for slot in range(self.size):
            self.spawn(slot)

    def running_slots(self) -> list[int]:
        return [slot for slot in self.procs if slot not in self.stopped]

    def running_slot_of(self, worker_id: str) -> int | None:
        """The slot of the running (not stopped) worker ``worker_id``, if it is one."""
        return next((slot for slot in self.running_slots() if self.procs[slot][1].id == worker_id), None)

    def _end(self, slot: int, fate: str) -> None:
        process, life = self.procs.pop(slot)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        life.ended_ms, life.fate = wall_ms(), fate
        if slot in self.stopped:  # a stopped worker killed (a stall found at SIGCONT, say)
            life.stops.append((self.stopped.pop(slot), life.ended_ms))

    def kill(self, slot: int) -> Life:
        """SIGKILL the worker in ``slot`` and start its replacement at once."""
        self._end(slot, "killed")
        return self.spawn(slot)

    def stop(self, slot: int) -> None:
        self.procs[slot][0].send_signal(signal.SIGSTOP)
        self.stopped[slot] = wall_ms()

    def cont(self, slot: int) -> None:
        process, life = self.procs[slot]
        process.send_signal(signal.SIGCONT)
        life.stops.append((self.stopped.pop(slot), wall_ms()))

    def check(self, ages: dict[str, tuple[int, int]]) -> None:
        """Replace workers that died on their own, or live on without a heartbeat: both are findings."""
        self.seen.update(ages)
        for slot, (process, life) in list(self.procs.items()):
            exited = process.poll() is not None
            if exited and life.id not in self.seen and "cannot open the database" in tail(life.log):
                self.startup_failures.append(f"{life.id} (exit code {process.returncode})")
                self._end(slot, "exited at start")
                self.spawn(slot)
                continue
            if process.poll() is not None:
                self.findings.append(
                    f"worker {life.id} (pid {life.pid}) died on its own, exit code "
                    f"{process.returncode}: {tail(life.log)}"
                )
                self._end(slot, "died")
                self.spawn(slot)
                continue
            if slot in self.stopped or life.id not in ages:
                continue
            age_s = ages[life.id][1] / 1000
            resumed = max([cont for _, cont in life.stops] + [0])
            if (
                age_s > STALL_S
                and time.perf_counter() - life.started_at > STALL_S
                and wall_ms() - resumed > STALL_S * 1000
            ):
                self.findings.append(
                    f"worker {life.id} (pid {life.pid}) is alive but its heartbeat is "
                    f"{age_s:.1f}s old (lease {LEASE}): replaced. Log: {tail(life.log)}"
                )
                self._end(slot, "stalled")
                self.spawn(slot)

    def shutdown(self) -> None:
        for slot in list(self.stopped):
            self.cont(slot)
        for process, _ in self.procs.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, life in list(self.procs.values()):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                self.findings.append(f"worker {life.id} did not stop within 20 s of SIGTERM")
            life.ended_ms = wall_ms()


def tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"
