"""Scale-out on PostgreSQL: 1, 2 and 4 worker processes, duro vs DBOS Transact, and release-to-resume
across workers.

Run it from the repo root:

    .venv/bin/python bench/scale.py                          # defaults, about 5 minutes
    .venv/bin/python bench/scale.py --at 2705f28,5de7604,6d3be49 --json bench/results/scale.json
    .venv/bin/python bench/scale.py --runs 1000 --repeats 1 --workers 1,2 --no-dbos
    .venv/bin/python bench/scale.py --only latency           # release-to-resume alone
    .venv/bin/python bench/scale.py --workers 4 --no-dbos --profile-worker 4 --profile-gil
    .venv/bin/python bench/scale.py --workers 1,4 --repeats 1 --count-statements --sample-sessions

``--at A,B`` measures those commits' sdk/ and devserver/ (exported with git archive), each duro case
in a fresh interpreter on that code, the commits' cases interleaved in every round, so they share
the machine's noise and work in progress in the checkout does not leak into the figures.

One PostgreSQL server for the run (tests/support/pgserver.py: fsync=off, synchronous_commit=off,
full_page_writes=off), a fresh database per case. Worker processes are real: ``python -m
duro_devserver worker PROJECT --database-url URL --poll-interval P --worker-id ID`` on a scratch
project with a one-step workflow, and for DBOS this script itself (``--dbos-worker``) running
``DBOS.launch()`` with a queue from ``DBOS.register_queue`` (polling interval P,
``worker_concurrency`` 100, a distinct ``executor_id`` per process, the workflow and step as plain
``def``: DBOS's faster form here).

Throughput (runs/s of one-step workflows), per system and worker count N, cases interleaved:

1. backlog  the N workers are up (warmed with a few runs), then stopped with SIGSTOP; a client
            enqueues --runs runs (duro: ``Engine(url)`` never entered, ``register_remote`` +
            ``start``; DBOS: ``DBOSClient.enqueue`` on the queue); then SIGCONT to every worker at
            t0. Rate = runs / (the last run's end, read from the database - t0): the workers and
            the server, without the client.
2. live     the same workers and database, the client starting --runs more runs one after
            another while the workers run; rate = runs / (last end - the first start).

Over each timed window the script reads CPU time from /proc: each worker process (utime+stime), the
PostgreSQL server (the postmaster with cutime/cstime, plus every child), this script, and the
machine (/proc/stat), as a percentage of one core (processes) and of all cores (machine); "others"
is the machine's busy time not spent by those (other work on a shared box). CPU ms per run (workers
+ server) and the ceiling it implies on this machine's cores are less sensitive to that noise.

Release-to-resume: a capacity-1 limit; worker A executes only ``ping``, worker B only ``pong``
(two scratch projects with the same duro.config.py). ping takes the slot and keeps it until pong
waits in the queue; then each run loops acquire_slot / hold for a random part of P / release_slot,
recording ``time.time_ns()`` just after acquire returns and just before and after release_slot (no
replay happens, so reading the clock in the workflow is safe here). Every grant then crosses from
one process to the other; latency = the next acquire returning in the other process - the release
returning (the commit is done by then: a lower bound), and - the release being called (an upper
bound, with the release transaction inside).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _support
from _support import scratch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402

import duro  # noqa: E402
from duro import Engine  # noqa: E402

WORKFLOW = "one_step"
QUEUE = "bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")
TARGET_TWO_OVER_ONE = 1.6
TARGET_FOUR_OVER_TWO = 1.0
TARGET_OVER_DBOS = 3.0
MISSING_PEER = (
    "peer missing: the 'dbos' package (DBOS Transact) is not importable; "
    "install it with `pip install -e '.[bench]'` to compare (duro's figures follow)"
)

CONFIG_PY = '''"""bench/scale.py's scratch project."""
from duro import Limit, define_workspace

workspace = define_workspace(limits={"handoff": Limit(capacity=1, max_hold="1h")})
'''

ONE_STEP_PY = """
from duro import step, workflow


@step
async def add_one(x: int) -> int:
    return x + 1


@workflow(name="one_step")
async def one_step(x: int) -> int:
    return await add_one(x)
"""

HANDOFF_PY = """
import asyncio
import random
import time

from duro import acquire_slot, release_slot, wait_for_signal, workflow


@workflow(name="{name}")
async def {name}(inp: dict) -> list:
    marks = []
    for i in range(inp["n"]):
        slot = await acquire_slot("handoff", label="{name} " + str(i))
        marks.append(["acq", time.time_ns()])
        if i == 0 and inp["hold_first"]:
            await wait_for_signal("go")  # until the other run waits in the queue
        # hold for a random part of a poll interval, so releases do not lock step with the pollers
        await asyncio.sleep(random.uniform(0, inp["hold_ms"]) / 1000)
        before = time.time_ns()
        released = await release_slot(slot.id)
        marks.append(["rel", before, time.time_ns()])
        if not released.released:
            raise AssertionError("release_slot returned released=False")
    return marks
"""


def write_project(root: Path, files: dict[str, str]) -> Path:
    (root / "workflows").mkdir(parents=True)
    (root / "duro.config.py").write_text(CONFIG_PY)
    for name, text in files.items():
        (root / "workflows" / name).write_text(text)
    return root


# -- CPU time from /proc ---------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (index 0 = state, 1 = ppid, 11 = utime)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_ticks(pid: int) -> int:
    fields = _stat(pid)
    return 0 if fields is None else int(fields[11]) + int(fields[12])


def postmaster_pid(pg: Any) -> int:
    return int((Path(pg.base) / "data" / "postmaster.pid").read_text().split()[0])


def server_ticks(postmaster: int) -> int:
    """CPU ticks of the PostgreSQL server: the postmaster (with its reaped children's time) and every
    live child (backends, writers, autovacuum). Other servers on the machine are not counted."""
    fields = _stat(postmaster)
    if fields is None:
        return 0
    total = sum(int(f) for f in fields[11:15])
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            child = _stat(int(entry.name))
            if child is not None and child[1] == str(postmaster):
                total += int(child[11]) + int(child[12])
    return total


def machine_ticks() -> tuple[int, int, int]:
    """(busy, total, steal) jiffies of all CPUs from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return total - values[3] - values[4], total, values[7]


class CpuWindow:
    """CPU time over a timed window, as % of one core per process and % of the whole machine."""

    def __init__(self, workers: list[int], postmaster: int) -> None:
        self.workers, self.postmaster = workers, postmaster
        self.begin = self._snap()

    def _snap(self) -> dict[str, Any]:
        return {
            "t": time.perf_counter(),
            "workers": [process_ticks(p) for p in self.workers],
            "server": server_ticks(self.postmaster),
            "script": process_ticks(os.getpid()),
            "machine": machine_ticks(),
        }

    def stop(self) -> dict[str, Any]:
        end, begin = self._snap(), self.begin
        wall = end["t"] - begin["t"]

        def pct(ticks: int) -> float:
            return 100.0 * ticks / CLK_TCK / wall

        workers = [pct(b - a) for a, b in zip(begin["workers"], end["workers"], strict=True)]
        busy = end["machine"][0] - begin["machine"][0]
        total = max(1, end["machine"][1] - begin["machine"][1])
        steal = end["machine"][2] - begin["machine"][2]
        return {
            "wall_s": wall,
            "workers_pct": workers,
            "workers_sum_pct": sum(workers),
            "server_pct": pct(end["server"] - begin["server"]),
            "script_pct": pct(end["script"] - begin["script"]),
            "machine_busy_pct": 100.0 * busy / total,
            "machine_steal_pct": 100.0 * steal / total,
            "cores": os.cpu_count(),
            # the rest of the machine's busy time (other work on the shared box), % of one core
            "others_pct": 100.0 * busy / total * (os.cpu_count() or 1)
            - sum(workers)
            - pct(end["server"] - begin["server"])
            - pct(end["script"] - begin["script"]),
        }


# -- statements per run (diagnostic: the server logs every statement of the case's database) --------

LOGGED = re.compile(r"LOG:  duration: ([0-9.]+) ms  (statement|execute|parse|bind)[^:]*: (.*)")


def log_statements(pg: Any, database: str) -> None:
    """Make the server log every statement of ``database`` with the time it took (sessions opened
    from now on)."""
    with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{database}" SET log_min_duration_statement = 0')


def log_offset(pg: Any) -> int:
    return (Path(pg.base) / "log").stat().st_size


def count_statements(pg: Any, offset: int, runs: int, top: int = 20) -> dict[str, Any]:
    """Statements the server logged since ``offset``, per run, by kind (their first words), with the
    server's time for them (parse, bind and execute of the extended protocol summed)."""
    with open(Path(pg.base) / "log", "rb") as log:
        log.seek(offset)
        text = log.read().decode(errors="replace")
    kinds: dict[str, list[float]] = {}  # kind -> [statements, ms]
    for match in LOGGED.finditer(text):
        words = re.sub(r"\s+", " ", match.group(3)).strip()
        kind = " ".join(re.sub(r"[0-9a-f]{8,}|\$\d+|\d+", "?", words).split()[:7])[:70]
        entry = kinds.setdefault(kind, [0, 0.0])
        entry[0] += match.group(2) in ("statement", "execute")
        entry[1] += float(match.group(1))
    total = sum(n for n, _ in kinds.values())
    ordered = sorted(kinds.items(), key=lambda kv: -kv[1][1])[:top]
    return {
        "per_run": total / runs,
        "server_ms_per_run": sum(ms for _, ms in kinds.values()) / runs,
        "by_kind_per_run": [(k, n / runs, ms / runs) for k, (n, ms) in ordered],
    }


# -- worker processes ------------------------------------------------------------------------------


class WorkerGroup:
    """N worker processes; output in log files; pause (SIGSTOP), resume (SIGCONT), stop (SIGTERM)."""

    def __init__(self, commands: list[list[str]], logdir: Path) -> None:
        self.commands, self.logdir = commands, logdir
        self.procs: list[subprocess.Popen] = []

    def start(self, indexes: range | None = None) -> None:
        for i in indexes if indexes is not None else range(len(self.commands)):
            log = open(self.logdir / f"worker-{i}.log", "wb")  # noqa: SIM115 - closed by the child's exit
            self.procs.append(
                subprocess.Popen(
                    self.commands[i],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.logdir,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )
            )
            log.close()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def check(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                tail = (self.logdir / f"worker-{i}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"worker {i} exited with {proc.returncode}:\n{tail}")

    def pause(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def worker_group(commands: list[list[str]], logdir: Path) -> Iterator[WorkerGroup]:
    group = WorkerGroup(commands, logdir)
    try:
        yield group
    finally:
        group.stop()


def until(predicate: Any, what: str, group: WorkerGroup, timeout: float, every: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.perf_counter() + timeout
    while True:
        found = predicate()
        if found:
            return found
        group.check()
        if time.perf_counter() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def done_timeout(runs: int) -> float:
    return max(120.0, runs / 20)


def duro_worker_command(project: Path, url: str, poll: str, worker_id: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "duro_devserver",
        "worker",
        str(project),
        "--database-url",
        url,
        "--poll-interval",
        poll,
        "--worker-id",
        worker_id,
    ]


# -- duro throughput -------------------------------------------------------------------------------


def _duro_batch(conn: psycopg.Connection, since_ms: int) -> tuple[int, int, int | None]:
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'completed'), "
        "count(*) FILTER (WHERE status IN ('failed', 'cancelled')), max(ended_at) "
        "FROM duro_runs WHERE created_at >= %s",
        (since_ms,),
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def _wait_batch(
    read: Any,
    runs: int,
    group: WorkerGroup,
    what: str,
    sessions: tuple[psycopg.Connection, dict[str, float]] | None = None,
) -> int:
    """Wait until ``runs`` runs of the batch completed; the last one's end (epoch ms). With
    ``sessions``, every poll also counts the database's other sessions by state and wait event."""

    def finished() -> int | None:
        if sessions is not None:
            sample_sessions(*sessions)
        completed, failed, last = read()
        if failed:
            raise RuntimeError(f"{failed} runs of {what} failed")
        return last if completed >= runs else None

    return until(finished, f"{runs} runs of {what}", group, done_timeout(runs))


def sample_sessions(conn: psycopg.Connection, counts: dict[str, float]) -> None:
    rows = conn.execute(
        "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchall()
    counts["_samples"] = counts.get("_samples", 0) + 1
    for state, wait_type, wait_event in rows:
        key = f"{state}" + (f" / {wait_type}:{wait_event}" if wait_type and state != "idle" else "")
        counts[key] = counts.get(key, 0) + 1


def session_summary(counts: dict[str, float]) -> dict[str, float]:
    """Average number of sessions per state over the samples."""
    samples = counts.pop("_samples", 0) or 1
    return dict(sorted(((k, v / samples) for k, v in counts.items()), key=lambda kv: -kv[1]))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def duro_case(pg: Any, n: int, args: argparse.Namespace) -> dict[str, Any]:
    name = pg.create_database()
    if args.count_statements:
        log_statements(pg, name)
    url = pg.url(name)
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    client = Engine(url)
    client.register_remote(WORKFLOW)
    out: dict[str, Any] = {}
    try:
        with scratch("scale-duro") as tmp, psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET log_min_duration_statement = -1")  # the script's own reads are not logged
            project = write_project(tmp / "project", {"bench.py": ONE_STEP_PY})
            await client.start(WORKFLOW, -1)  # the schema, before any worker
            ids = [f"bench-{n}w-{i}" for i in range(n)]
            commands = [duro_worker_command(project, url, args.poll_interval, wid) for wid in ids]
            with worker_group(commands, tmp) as group:
                group.start()
                until(
                    lambda: (
                        conn.execute(
                            "SELECT count(*) FROM duro_workers WHERE id = ANY(%s)", (ids,)
                        ).fetchone()[0]
                        == n
                    ),
                    "the workers to register",
                    group,
                    120,
                )
                since = now_ms()
                for i in range(args.warmup * n):
                    await client.start(WORKFLOW, i)
                _wait_batch(lambda s=since: _duro_batch(conn, s), args.warmup * n, group, "the warm-up")
                time.sleep(0.2)  # setup only: let every worker finish its pass before it is paused

                # 1. backlog: the runs wait in the store while the workers are stopped
                group.pause()
                since = now_ms()
                begin = time.perf_counter()
                for i in range(args.runs):
                    await client.start(WORKFLOW, i)
                enqueue_s = time.perf_counter() - begin
                offset = log_offset(pg)
                cpu = CpuWindow(group.pids, postmaster_pid(pg))
                t0 = time.time()
                group.resume()
                profiling = args.profile_worker == n and args.profile_case == "backlog"
                profiler = _start_profiler(group.pids[0], tmp, args) if profiling else None
                watch = (conn, {}) if args.sample_sessions else None
                last = _wait_batch(
                    lambda s=since: _duro_batch(conn, s), args.runs, group, "the backlog", watch
                )
                out["backlog"] = {
                    "rate": args.runs / (last / 1000 - t0),
                    "wall_s": last / 1000 - t0,
                    "enqueue_s": enqueue_s,
                    "cpu": cpu.stop(),
                    "per_worker": _duro_owners(conn, since),
                }
                if args.count_statements:
                    out["backlog"]["statements"] = count_statements(pg, offset, args.runs)
                if watch is not None:
                    out["backlog"]["sessions"] = session_summary(watch[1])
                if profiler is not None:
                    out["profile"] = _stop_profiler(profiler, tmp)

                # 2. live: the client starts runs while the workers run
                since = now_ms()
                offset = log_offset(pg)
                cpu = CpuWindow(group.pids, postmaster_pid(pg))
                profiling = args.profile_worker == n and args.profile_case == "live"
                profiler = _start_profiler(group.pids[0], tmp, args) if profiling else None
                t0 = time.time()
                for i in range(args.runs):
                    await client.start(WORKFLOW, i)
                starts_done = time.time()
                watch = (conn, {}) if args.sample_sessions else None
                last = _wait_batch(
                    lambda s=since: _duro_batch(conn, s), args.runs, group, "the live batch", watch
                )
                out["live"] = {
                    "rate": args.runs / (last / 1000 - t0),
                    "wall_s": last / 1000 - t0,
                    "client_starts_per_s": args.runs / (starts_done - t0),
                    "cpu": cpu.stop(),
                    "per_worker": _duro_owners(conn, since),
                }
                if args.count_statements:  # the client's starts included
                    out["live"]["statements"] = count_statements(pg, offset, args.runs)
                if profiler is not None:
                    out["profile"] = _stop_profiler(profiler, tmp)
    finally:
        client.close()
        pg.drop_database(name)
    return out


def _duro_owners(conn: psycopg.Connection, since_ms: int) -> list[int]:
    rows = conn.execute(
        "SELECT owner, count(*) FROM duro_runs WHERE created_at >= %s GROUP BY owner ORDER BY 2 DESC",
        (since_ms,),
    ).fetchall()
    return [count for _, count in rows]


# -- profiling a worker (py-spy) -------------------------------------------------------------------


def _start_profiler(pid: int, tmp: Path, args: argparse.Namespace) -> subprocess.Popen | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy is not installed (pip install py-spy); not profiling", file=sys.stderr)
        return None
    mode = ["--gil"] if args.profile_gil else ["--idle"]
    return subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "--rate",
            "200",
            *mode,
            "--output",
            str(tmp / "profile.txt"),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop_profiler(proc: subprocess.Popen, tmp: Path) -> dict[str, Any]:
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    raw = (tmp / "profile.txt").read_text() if (tmp / "profile.txt").exists() else ""
    kept = Path(tempfile.gettempdir()) / f"duro-scale-profile-{os.getpid()}.txt"
    if raw:
        Path(tmp / "profile.txt").replace(kept)
    return {**summarize_stacks(raw), "raw": str(kept) if raw else None}


def _frame(text: str) -> str:
    """``func (path/to/file.py:12)`` -> ``func (file.py)``."""
    func, _, where = text.partition(" (")
    return f"{func} ({where.split(':')[0].rsplit('/', 1)[-1]})" if where else func


def _call(frames: list[str]) -> str:
    """What a sample was doing: the outermost public store call, else the event loop or a thread."""
    names = [f.split(" (")[0] for f in frames]
    ping = " (pool pre-ping)" if any("do_ping" in n for n in names) else ""
    for name in names:
        cls, _, method = name.partition(".")
        if cls == "SqlStore" and method and not method.startswith("_"):
            return f"store.{method}{ping}"
    for name in names:
        if name.startswith(("Worker.", "RunContext.", "GroupCommit.")):
            return f"loop: {name}"
    return "loop: asyncio" if any("run_forever" in n for n in names) else f"other: {names[-1]}{ping}"


def summarize_stacks(raw: str, top: int = 25) -> dict[str, Any]:
    """Shares of the samples by store call, and per function (self and inclusive), from py-spy's raw
    (collapsed) stacks."""
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    calls: dict[str, int] = {}
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [_frame(f) for f in stack.split(";")]
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            incl[frame] = incl.get(frame, 0) + count
        call = _call(frames)
        calls[call] = calls.get(call, 0) + count

    def share(table: dict[str, int]) -> list[tuple[str, float]]:
        return (
            [(k, v / total) for k, v in sorted(table.items(), key=lambda kv: -kv[1])[:top]] if total else []
        )

    return {"samples": total, "by_call": share(calls), "self": share(own), "inclusive": share(incl)}


# -- DBOS throughput (workers are this script with --dbos-worker) ----------------------------------


def dbos_worker(spec: dict) -> None:
    """One DBOS worker process: launch, register the queue, wait for SIGTERM."""
    import logging
    import threading

    from dbos import DBOS

    logging.getLogger("dbos").setLevel(logging.WARNING)
    if spec["form"] == "async":

        @DBOS.step()
        async def add_one(x: int) -> int:
            return x + 1

        @DBOS.workflow(name=WORKFLOW)
        async def one_step(x: int) -> int:
            return await add_one(x)
    else:

        @DBOS.step()
        def add_one_sync(x: int) -> int:
            return x + 1

        @DBOS.workflow(name=WORKFLOW)
        def one_step_sync(x: int) -> int:
            return add_one_sync(x)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    DBOS(
        config={
            "name": "duro-scale",
            "system_database_url": spec["dsn"],
            "executor_id": spec["executor_id"],
            "application_version": "bench",
            "log_level": "WARNING",
            "console_log_level": "WARNING",
        }
    )
    DBOS.launch()
    DBOS.register_queue(
        QUEUE, worker_concurrency=spec["worker_concurrency"], polling_interval_sec=spec["poll_s"]
    )
    Path(spec["ready"]).write_text("ready")
    stop.wait()
    DBOS.destroy()


def _dbos_batch(conn: psycopg.Connection, since_ms: int) -> tuple[int, int, int | None]:
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'SUCCESS'), "
        "count(*) FILTER (WHERE status IN ('ERROR', 'CANCELLED', "
        "'MAX_RECOVERY_ATTEMPTS_EXCEEDED')), max(completed_at) "
        "FROM dbos.workflow_status WHERE queue_name = %s AND created_at >= %s",
        (QUEUE, since_ms),
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def dbos_case(pg: Any, n: int, args: argparse.Namespace) -> dict[str, Any]:
    from dbos import DBOSClient

    name = pg.create_database()
    if args.count_statements:
        log_statements(pg, name)
    dsn = pg.url(name).replace("postgresql+psycopg://", "postgresql://")
    out: dict[str, Any] = {}
    client = None
    try:
        with scratch("scale-dbos") as tmp:
            commands = []
            for i in range(n):
                spec = {
                    "dsn": dsn,
                    "executor_id": f"bench-{n}w-{i}",
                    "poll_s": args.poll_s,
                    "worker_concurrency": args.dbos_worker_concurrency or None,
                    "form": args.dbos_form,
                    "ready": str(tmp / f"ready-{i}"),
                }
                commands.append(
                    [sys.executable, str(Path(__file__).resolve()), "--dbos-worker", json.dumps(spec)]
                )
            with worker_group(commands, tmp) as group:
                group.start(range(1))  # the first one creates the schema and the queue
                until(lambda: (tmp / "ready-0").exists(), "the first DBOS worker", group, 120)
                group.start(range(1, n))
                until(
                    lambda: all((tmp / f"ready-{i}").exists() for i in range(n)),
                    "the DBOS workers",
                    group,
                    120,
                )
                client = DBOSClient(system_database_url=dsn)
                options = {"queue_name": QUEUE, "workflow_name": WORKFLOW}
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("SET log_min_duration_statement = -1")
                    since = now_ms()
                    for i in range(args.warmup * n):
                        client.enqueue(options, i)
                    _wait_batch(
                        lambda s=since: _dbos_batch(conn, s), args.warmup * n, group, "the DBOS warm-up"
                    )
                    time.sleep(0.2)  # setup only

                    group.pause()
                    since = now_ms()
                    begin = time.perf_counter()
                    for i in range(args.runs):
                        client.enqueue(options, i)
                    enqueue_s = time.perf_counter() - begin
                    offset = log_offset(pg)
                    cpu = CpuWindow(group.pids, postmaster_pid(pg))
                    t0 = time.time()
                    group.resume()
                    watch = (conn, {}) if args.sample_sessions else None
                    last = _wait_batch(
                        lambda s=since: _dbos_batch(conn, s), args.runs, group, "the DBOS backlog", watch
                    )
                    out["backlog"] = {
                        "rate": args.runs / (last / 1000 - t0),
                        "wall_s": last / 1000 - t0,
                        "enqueue_s": enqueue_s,
                        "cpu": cpu.stop(),
                        "per_worker": _dbos_executors(conn, since),
                    }
                    if args.count_statements:
                        out["backlog"]["statements"] = count_statements(pg, offset, args.runs)
                    if watch is not None:
                        out["backlog"]["sessions"] = session_summary(watch[1])

                    since = now_ms()
                    cpu = CpuWindow(group.pids, postmaster_pid(pg))
                    t0 = time.time()
                    for i in range(args.runs):
                        client.enqueue(options, i)
                    starts_done = time.time()
                    last = _wait_batch(
                        lambda s=since: _dbos_batch(conn, s), args.runs, group, "the DBOS live batch"
                    )
                    out["live"] = {
                        "rate": args.runs / (last / 1000 - t0),
                        "wall_s": last / 1000 - t0,
                        "client_starts_per_s": args.runs / (starts_done - t0),
                        "cpu": cpu.stop(),
                        "per_worker": _dbos_executors(conn, since),
                    }
    finally:
        if client is not None:
            client.destroy()
        pg.drop_database(name)
    return out


def _dbos_executors(conn: psycopg.Connection, since_ms: int) -> list[int]:
    rows = conn.execute(
        "SELECT executor_id, count(*) FROM dbos.workflow_status WHERE queue_name = %s AND "
        "created_at >= %s GROUP BY executor_id ORDER BY 2 DESC",
        (QUEUE, since_ms),
    ).fetchall()
    return [count for _, count in rows]


# -- release-to-resume across workers --------------------------------------------------------------


async def latency_case(pg: Any, args: argparse.Namespace) -> dict[str, Any]:
    from duro import Limit, define_workspace

    name = pg.create_database()
    url = pg.url(name)
    client = Engine(url, workspace=define_workspace(limits={"handoff": Limit(capacity=1, max_hold="1h")}))
    for wf in ("ping", "pong"):
        client.register_remote(wf)

    async def counts() -> tuple[int, int, int]:
        info = next(i for i in await client.limits.list() if i.name == "handoff")
        return info.busy, info.reserved, info.waiting

    async def until_counts(expected: tuple[int, int, int], group: WorkerGroup) -> None:
        deadline = time.perf_counter() + 120
        while await counts() != expected:
            group.check()
            if time.perf_counter() > deadline:
                raise RuntimeError(f"limit 'handoff' never showed busy, reserved, waiting = {expected}")
            await asyncio.sleep(0.02)

    try:
        with scratch("scale-latency") as tmp:
            projects = [
                write_project(tmp / wf, {f"{wf}.py": HANDOFF_PY.format(name=wf)}) for wf in ("ping", "pong")
            ]
            commands = [
                duro_worker_command(p, url, args.poll_interval, f"handoff-{p.name}") for p in projects
            ]
            await client.list_runs(limit=1)  # the schema, before the two workers
            with worker_group(commands, tmp) as group:
                group.start()
                loops, hold = args.handoffs // 2, args.poll_s * 1000
                # ping takes the slot and holds it until pong waits behind it; from then on every grant
                # crosses from one worker process to the other.
                ping = await client.start("ping", {"n": loops, "hold_first": True, "hold_ms": hold})
                await until_counts((1, 0, 0), group)
                pong = await client.start("pong", {"n": loops, "hold_first": False, "hold_ms": hold})
                await until_counts((1, 0, 1), group)
                await ping.signal("go")
                timeout = f"{max(300, args.handoffs)}s"
                marks = {
                    "ping": await ping.result(timeout=timeout),
                    "pong": await pong.result(timeout=timeout),
                }
                group.check()
                if await counts() != (0, 0, 0):
                    raise AssertionError(f"limit 'handoff' not idle after the case: {await counts()}")
    finally:
        client.close()
        pg.drop_database(name)
    return handoff_latencies(marks)


def handoff_latencies(marks: dict[str, list]) -> dict[str, Any]:
    """Cross-worker hand-offs: each acquire whose slot was last released by the other process."""
    events = []
    for who, rows in marks.items():
        for row in rows:
            if row[0] == "acq":
                events.append((row[1], "acq", who, row[1]))
            else:
                events.append((row[1], "rel", who, row[2]))
    events.sort()
    after, before, same = [], [], 0
    last_rel: tuple[str, int, int] | None = None
    holder: str | None = None
    for t, kind, who, t_after in events:
        if kind == "acq":
            if holder is not None:
                raise AssertionError(f"{who} acquired while {holder} held the capacity-1 slot")
            holder = who
            if last_rel is not None:
                if last_rel[0] == who:
                    same += 1
                else:
                    after.append((t - last_rel[2]) / 1e6)
                    before.append((t - last_rel[1]) / 1e6)
        else:
            if holder != who:
                raise AssertionError(f"{who} released a slot it did not hold")
            holder, last_rel = None, (who, t, t_after)
    return {
        "from_release_returned_ms": after,
        "from_release_called_ms": before,
        "same_process": same,
        "handoffs": len(after),
    }


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))]


# -- driver: which code runs duro's cases ---------------------------------------------------------


def targets(at: str | None, tmp: Path) -> list[dict[str, Any]]:
    """The duro trees to measure: the checkout, or each commit of ``--at A,B`` exported with git
    archive (sdk/ and devserver/ first on PYTHONPATH of that case's processes)."""
    if not at:
        head = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--", "sdk", "devserver"))
        return [
            {
                "label": head[:7] + ("+wip" if dirty else ""),
                "commit": head,
                "dirty": dirty,
                "pythonpath": None,
            }
        ]
    found = []
    for ref in at.split(","):
        full = git("rev-parse", "--verify", f"{ref}^{{commit}}")
        if full == "unknown":
            raise SystemExit(f"--at: {ref!r} is not a commit")
        dest = tmp / full[:12]
        dest.mkdir()
        _support.export_tree(full, ["sdk", "devserver"], dest)
        path = os.pathsep.join([str(dest / "sdk"), str(dest / "devserver"), os.environ.get("PYTHONPATH", "")])
        found.append(
            {"label": full[:7], "commit": full, "dirty": False, "pythonpath": path.rstrip(os.pathsep)}
        )
    return found


def run_duro_case(
    target: dict[str, Any], pg: Any, kind: str, n: int, args: argparse.Namespace
) -> dict[str, Any]:
    """One duro case in a fresh interpreter on the target's code (the client engine too)."""
    spec = {
        "pg": {"bindir": str(pg.bindir), "base": str(pg.base), "port": pg.port, "as_user": pg.as_user},
        "kind": kind,
        "n": n,
        "args": {k: v for k, v in vars(args).items()},
    }
    env = dict(os.environ)
    if target["pythonpath"] is not None:
        env["PYTHONPATH"] = target["pythonpath"]
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--duro-case", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    marker = [line for line in proc.stdout.splitlines() if line.startswith("CASE-RESULT ")]
    if proc.returncode != 0 or not marker:
        raise RuntimeError(
            f"duro case {kind}/{n} at {target['label']} failed (exit {proc.returncode}):\n"
            f"{proc.stderr[-4000:]}"
        )
    return json.loads(marker[-1].removeprefix("CASE-RESULT "))


def duro_case_main(spec: dict[str, Any]) -> None:
    from tests.support.pgserver import PgServer

    info = spec["pg"]
    pg = PgServer(
        bindir=Path(info["bindir"]), base=Path(info["base"]), port=info["port"], as_user=info["as_user"]
    )
    args = argparse.Namespace(**spec["args"])
    if spec["kind"] == "latency":
        result = asyncio.run(latency_case(pg, args))
    else:
        result = asyncio.run(duro_case(pg, spec["n"], args))
    result["source"] = str(Path(duro.__file__).resolve().parent)
    print("CASE-RESULT " + json.dumps(result), flush=True)


# -- report ----------------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def git(*argv: str) -> str:
    try:
        return subprocess.run(
            ["git", *argv], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _peer_available() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("dbos") is not None
    except (ImportError, ValueError):
        return False


def _versions() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, Any] = {"python": platform.python_version(), "psycopg": psycopg.__version__}
    for pkg in ("dbos", "sqlalchemy"):
        try:
            found[pkg] = version(pkg)
        except PackageNotFoundError:
            found[pkg] = None
    return found


def _server_settings(pg: Any) -> dict[str, str]:
    with psycopg.connect(pg.admin_dsn, autocommit=True) as conn:
        rows = {
            k: conn.execute(f"SHOW {k}").fetchone()[0]  # type: ignore[index]
            for k in ("server_version", "fsync", "synchronous_commit", "full_page_writes")
        }
    return rows


def summarize(
    samples: dict[str, list[dict]],
    latency: dict[str, list[dict]],
    args: argparse.Namespace,
    systems: list[str],
) -> dict[str, Any]:
    med: dict[str, Any] = {}
    for case, rows in samples.items():
        entry: dict[str, Any] = {
            "rate": median([r["rate"] for r in rows]),
            "samples": [r["rate"] for r in rows],
        }
        for key in (
            "workers_sum_pct",
            "server_pct",
            "script_pct",
            "machine_busy_pct",
            "machine_steal_pct",
            "others_pct",
        ):
            entry[key] = median([r["cpu"][key] for r in rows])
        entry["worker_max_pct"] = median([max(r["cpu"]["workers_pct"]) for r in rows])
        # CPU time per run (ms): less sensitive to other work on the box than runs/s
        for key, field in (("workers_ms_per_run", "workers_sum_pct"), ("server_ms_per_run", "server_pct")):
            entry[key] = median([r["cpu"][field] * 10 * r["cpu"]["wall_s"] / args.runs for r in rows])
        entry["cores_ceiling"] = (
            (os.cpu_count() or 1) * 1000 / (entry["workers_ms_per_run"] + entry["server_ms_per_run"])
        )
        entry["split"] = [r["per_worker"] for r in rows]
        if "client_starts_per_s" in rows[0]:
            entry["client_starts_per_s"] = median([r["client_starts_per_s"] for r in rows])
        med[case] = entry
    ratios: dict[str, float] = {}
    for system in systems:
        for mode in ("backlog", "live"):

            def rate(n: int, s: str = system, m: str = mode) -> float | None:
                found = med.get(f"{s}/{m}/{n}")
                return None if found is None else found["rate"]

            for a, b in ((2, 1), (4, 2), (4, 1)):
                if rate(a) and rate(b):
                    ratios[f"{system}/{mode}/{a}_over_{b}"] = rate(a) / rate(b)  # type: ignore[operator]
    for system in (s for s in systems if s != "dbos"):
        for mode in ("backlog", "live"):
            for n in args.worker_counts:
                d, p = med.get(f"{system}/{mode}/{n}"), med.get(f"dbos/{mode}/{n}")
                if d and p:
                    ratios[f"{system}_over_dbos/{mode}/{n}"] = d["rate"] / p["rate"]
    lat: dict[str, Any] = {}
    for label, found in latency.items():
        lat[label] = {"handoffs_per_sample": [s["handoffs"] for s in found]}
        for key in ("from_release_returned_ms", "from_release_called_ms"):
            lat[label][key] = {
                "median": median([median(s[key]) for s in found]),
                "p99": median([pct(s[key], 99) for s in found]),
                "max": max(max(s[key]) for s in found),
                "samples": [(median(s[key]), pct(s[key], 99)) for s in found],
            }
    return {"medians": med, "ratios": ratios, "latency": lat}


def rounded(value: Any) -> Any:
    """Floats to 3 decimals (ms to the µs, rates and percentages more than precise enough)."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def print_report(report: dict) -> None:
    print(
        f"\n{report['date']}  duro {', '.join(t['label'] for t in report['targets'])}  {report['versions']}  "
        f"server {report['server']}"
    )
    p = report["params"]
    print(
        f"runs={p['runs']} repeats={p['repeats']} workers={p['workers']} poll={p['poll_interval']} "
        f"DBOS: {p['dbos_form']}, worker_concurrency={p['dbos_worker_concurrency']}  "
        f"(wall {report['wall_seconds']:.0f} s)\n"
    )
    med = report["summary"]["medians"]
    rows = [
        (
            "case",
            "N",
            "runs/s",
            "samples",
            "workers %core",
            "max worker",
            "server %core",
            "script",
            "others",
            "machine %",
            "steal %",
            "cpu ms/run w+s",
            "cores/cpu",
            "runs per worker",
        )
    ]
    for case in sorted(med, key=lambda c: (c.split("/")[1], c.split("/")[0], int(c.split("/")[2]))):
        e = med[case]
        system, mode, n = case.split("/")
        rows.append(
            (
                f"{system} {mode}",
                n,
                f"{e['rate']:,.0f}",
                " ".join(f"{v:,.0f}" for v in e["samples"]),
                f"{e['workers_sum_pct']:.0f}",
                f"{e['worker_max_pct']:.0f}",
                f"{e['server_pct']:.0f}",
                f"{e['script_pct']:.0f}",
                f"{e['others_pct']:.0f}",
                f"{e['machine_busy_pct']:.0f}",
                f"{e['machine_steal_pct']:.0f}",
                f"{e['workers_ms_per_run']:.2f}+{e['server_ms_per_run']:.2f}",
                f"{e['cores_ceiling']:,.0f}",
                " ".join("/".join(map(str, split)) for split in e["split"]),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print(
            "  ".join(
                c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print("\nratios:")
    for key, value in report["summary"]["ratios"].items():
        print(f"  {key:<34} {value:6.2f}x")
    for label, lat in report["summary"]["latency"].items():
        for key in ("from_release_returned_ms", "from_release_called_ms"):
            e = lat[key]
            print(
                f"\nrelease-to-resume across workers, duro {label} ({key}): median {e['median']:.2f} ms, "
                f"p99 {e['p99']:.2f} ms, max {e['max']:.2f} ms; per sample (median/p99): "
                + " ".join(f"{m:.1f}/{q:.1f}" for m, q in e["samples"])
            )
        print(f"hand-offs per sample: {lat['handoffs_per_sample']}")
    for case, rows in report["samples"].items():
        found = [r["statements"] for r in rows if "statements" in r]
        if found:
            last = found[-1]
            print(
                f"\nstatements per run, {case} (server log, last sample): {last['per_run']:.1f}, "
                f"{last['server_ms_per_run']:.3f} ms of server time per run; by server time:"
            )
            for kind, count, ms in last["by_kind_per_run"]:
                print(f"  {count:6.2f}  {ms:7.3f} ms  {kind}")
    for case, rows in report["samples"].items():
        found = [r["sessions"] for r in rows if "sessions" in r]
        if found:
            print(f"\nsessions of the database during {case} (mean count per state, last sample):")
            for state, count in list(found[-1].items())[:10]:
                print(f"  {count:6.2f}  {state}")
    for case, prof in report.get("profiles", {}).items():
        print(
            f"\npy-spy of one worker during {case} ({prof['samples']} samples; raw stacks: {prof['raw']}), "
            f"by call:"
        )
        for frame, share in prof["by_call"][:20]:
            print(f"  {share:6.1%}  {frame}")
        print("top self:")
        for frame, share in prof["self"][:15]:
            print(f"  {share:6.1%}  {frame}")
        print("top inclusive:")
        for frame, share in prof["inclusive"][:25]:
            print(f"  {share:6.1%}  {frame}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="runs per timed batch (default 2000)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per case; medians (default 3)")
    parser.add_argument("--workers", default="1,2,4", help="worker counts (default 1,2,4)")
    parser.add_argument(
        "--poll-interval",
        default="100ms",
        help="duro workers' --poll-interval and DBOS's queue polling interval (default 100ms)",
    )
    parser.add_argument(
        "--warmup", type=int, default=10, help="untimed runs per worker before a case (default 10)"
    )
    parser.add_argument(
        "--handoffs", type=int, default=200, help="slot acquisitions per latency sample (default 200)"
    )
    parser.add_argument("--no-dbos", action="store_true", help="skip the DBOS peer")
    parser.add_argument(
        "--no-duro", action="store_true", help="skip duro's throughput cases (DBOS settings alone)"
    )
    parser.add_argument(
        "--dbos-form",
        choices=("async", "sync"),
        default="sync",
        help="DBOS workflow and step as def (default: its faster form here) or async def",
    )
    parser.add_argument(
        "--dbos-worker-concurrency",
        type=int,
        default=100,
        help="DBOS queue worker_concurrency (default 100; 0: unset, DBOS's own default, where "
        "the first worker to poll takes the whole backlog)",
    )
    parser.add_argument("--only", choices=("throughput", "latency"), default=None)
    parser.add_argument(
        "--profile-worker",
        type=int,
        metavar="N",
        default=None,
        help="py-spy one duro worker during the backlog drain with N workers",
    )
    parser.add_argument(
        "--profile-case",
        choices=("backlog", "live"),
        default="backlog",
        help="with --profile-worker: the window to profile (default backlog)",
    )
    parser.add_argument(
        "--profile-gil",
        action="store_true",
        help="with --profile-worker: sample only the thread holding the GIL (Python CPU), "
        "instead of every thread, idle or not",
    )
    parser.add_argument(
        "--count-statements",
        action="store_true",
        help="diagnostic: the server logs every statement with its duration; print statements "
        "and server time per run of each drain by kind (slows the server: not a throughput "
        "figure; the live windows include the client's starts)",
    )
    parser.add_argument(
        "--sample-sessions",
        action="store_true",
        help="diagnostic: during each backlog drain, count the database's sessions by state and "
        "wait event (pg_stat_activity) at every completion poll",
    )
    parser.add_argument(
        "--at",
        metavar="COMMIT[,COMMIT]",
        help="measure these commits' sdk/ and devserver/ (git archive), not the checkout; with "
        "two or more, their cases are interleaved in every round (same noise for each)",
    )
    parser.add_argument("--json", metavar="PATH", help="write every sample and the medians as JSON to PATH")
    parser.add_argument(
        "--json-key",
        metavar="KEY",
        help="with --json: keep the file's other keys and write this run under KEY",
    )
    parser.add_argument("--dbos-worker", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--duro-case", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dbos_worker:
        dbos_worker(json.loads(args.dbos_worker))
        return 0
    if args.duro_case:
        duro_case_main(json.loads(args.duro_case))
        return 0
    from duro._durations import to_ms

    args.poll_s = to_ms(args.poll_interval, "poll interval") / 1000
    args.worker_counts = [int(x) for x in args.workers.split(",") if x]
    have_dbos = not args.no_dbos and _peer_available()
    if not args.no_dbos and not have_dbos:
        print(MISSING_PEER, file=sys.stderr)

    samples: dict[str, list[dict]] = {}
    latency: dict[str, list[dict]] = {}
    profiles: dict[str, Any] = {}
    sources: dict[str, str] = {}
    started = time.perf_counter()
    with scratch("scale-trees") as trees:
        duros = targets(args.at, trees)
        pg = _support.start_postgres(False)
        if pg is None:
            print("this benchmark needs PostgreSQL (tests/support/pgserver.py)", file=sys.stderr)
            return 1
        try:
            server = _server_settings(pg)
            for rep in range(args.repeats):

                def say(what: str, r: int = rep) -> None:
                    print(f"round {r + 1}/{args.repeats}: {what} ...", file=sys.stderr, flush=True)

                if args.only != "latency":
                    for n in args.worker_counts:
                        for target in [] if args.no_duro else duros:
                            say(f"duro {target['label']}, {n} worker(s)")
                            result = run_duro_case(target, pg, "throughput", n, args)
                            sources[target["label"]] = result.pop("source")
                            if "profile" in result:
                                profiles[
                                    f"duro {target['label']} {args.profile_case}, {n} workers, round {rep + 1}"
                                ] = result.pop("profile")
                            for mode, row in result.items():
                                samples.setdefault(f"duro@{target['label']}/{mode}/{n}", []).append(row)
                        if have_dbos:
                            say(f"DBOS, {n} worker(s)")
                            for mode, row in dbos_case(pg, n, args).items():
                                samples.setdefault(f"dbos/{mode}/{n}", []).append(row)
                if args.only != "throughput":
                    for target in duros:
                        say(f"release-to-resume, duro {target['label']}")
                        result = run_duro_case(target, pg, "latency", 0, args)
                        sources[target["label"]] = result.pop("source")
                        latency.setdefault(target["label"], []).append(result)
        finally:
            pg.destroy()
    wall = time.perf_counter() - started
    systems = [f"duro@{t['label']}" for t in duros] + ["dbos"]
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "targets": [
            {**{k: v for k, v in t.items() if k != "pythonpath"}, "source": sources.get(t["label"])}
            for t in duros
        ],
        "versions": _versions(),
        "server": server,
        "params": {
            "runs": args.runs,
            "repeats": args.repeats,
            "workers": args.worker_counts,
            "poll_interval": args.poll_interval,
            "warmup_per_worker": args.warmup,
            "handoffs": args.handoffs,
            "dbos_form": args.dbos_form,
            "dbos_worker_concurrency": args.dbos_worker_concurrency,
            "dbos": have_dbos,
        },
        "wall_seconds": wall,
        "samples": samples,
        "latency_samples": latency,
        "profiles": profiles,
        "summary": summarize(samples, latency, args, systems),
    }
    print_report(report)
    if args.json:
        out: Any = rounded(report)
        if args.json_key:  # several runs in one file, one key each
            path = Path(args.json)
            out = json.loads(path.read_text()) if path.exists() else {}
            out[args.json_key] = rounded(report)
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
