"""What the benchmark scripts share: trees of other commits, scratch databases, the PostgreSQL test
server, interleaved rounds, medians and markdown tables, child processes and /proc readings."""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests.support.pgserver
    sys.path.insert(0, str(ROOT))
CLK_TCK = os.sysconf("SC_CLK_TCK")
MISSING_DBOS = "DBOS skipped: the 'dbos' package is not installed (pip install -e '.[bench]')"


# -- git -------------------------------------------------------------------------------------------


def git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def commit() -> str:
    """The checkout's short commit, ``+changes`` when sdk/ has uncommitted edits."""
    dirty = git("status", "--porcelain", "--", "sdk") not in ("", "unknown")
    return git("rev-parse", "--short", "HEAD") + ("+changes" if dirty else "")


def export_tree(rev: str, paths: list[str], dest: Path) -> None:
    """``paths`` of ``rev`` written under ``dest`` (git archive), to measure that commit's code."""
    archive = subprocess.run(["git", "archive", rev, *paths], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)


# -- databases -------------------------------------------------------------------------------------


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A temporary directory, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=f"duro-bench-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Stores:
    """A fresh database per case: a SQLite file in its own temporary directory, or a new database on
    the PostgreSQL server the script started."""

    def __init__(self, pg: Any) -> None:
        self.pg = pg

    @contextlib.contextmanager
    def database(self, store: str) -> Iterator[dict]:
        if store == "sqlite":
            with scratch("db") as tmp:
                path = str(tmp / "bench.db")
                yield {"url": f"sqlite:///{path}", "path": path}
            return
        name = self.pg.create_database()
        try:
            url = self.pg.url(name)
            yield {"url": url, "dsn": url.replace("postgresql+psycopg://", "postgresql://")}
        finally:
            self.pg.drop_database(name)


def start_postgres(skip: bool = False, **options: bool) -> Any:
    """The PostgreSQL test server (tests/support/pgserver.py: fsync, synchronous_commit and
    full_page_writes off, unless ``options`` say otherwise), or None when skipped or unavailable
    (the script then says so)."""
    if skip:
        return None
    from tests.support.pgserver import start_server

    try:
        return start_server(**options)
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        print(f"PostgreSQL unavailable ({err}); measuring SQLite only", file=sys.stderr)
        return None


def write_bulk(db: dict, batches: Iterable[tuple[str, str, dict]]) -> None:
    """duro's schema on ``db`` (made through the package's own ``SqlStore``), then each batch, a
    (SQLite statement, PostgreSQL statement, parameters), in a transaction of its own, then fresh
    planner statistics: rows as an engine leaves them, written in bulk."""
    from duro.store import SqlStore

    store = SqlStore(db["url"])
    store.create_schema()
    store.close()
    if "path" in db:
        conn = sqlite_floor_conn(db["path"])
        for sql, _, params in batches:
            conn.execute("BEGIN")
            conn.execute(sql, params)
            conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        return
    import psycopg

    with psycopg.connect(db["dsn"], autocommit=True) as conn:
        for _, sql, params in batches:
            conn.execute(sql, params)
        conn.execute("VACUUM ANALYZE duro_runs")
        conn.execute("VACUUM ANALYZE duro_steps")


def sqlite_floor_conn(path: str) -> sqlite3.Connection:
    """A bare sqlite3 connection with duro's settings (WAL, synchronous=NORMAL, busy timeout 30 s)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


# -- rounds, medians, tables -----------------------------------------------------------------------


def rotated(items: Sequence, rnd: int, rounds: int) -> list:
    """Round ``rnd``'s order: the list rotated by ceil(len / rounds) x rnd, so each case leads once
    and no case always follows the same one."""
    items = list(items)
    if not items:
        return items
    shift = (math.ceil(len(items) / max(1, rounds)) * rnd) % len(items)
    return items[shift:] + items[:shift]


def interleave(cases: Sequence, rounds: int, sample: Callable[[Any, int], dict | None]) -> dict:
    """Every case once per round, the order rotated by round: {case: [samples]} (a sample that
    returns None is left out)."""
    got: dict = {case: [] for case in cases}
    for rnd in range(rounds):
        for case in rotated(cases, rnd, rounds):
            began = time.perf_counter()
            value = sample(case, rnd)
            if value is not None:
                got[case].append(value)
                shown = {k: round(v, 3) for k, v in value.items() if isinstance(v, float)}
                took = time.perf_counter() - began
                log(f"round {rnd + 1}/{rounds} {case}: {shown} ({took:.1f} s)")
    return got


def median(values: Iterable[float]) -> float:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def handoffs(events: list[tuple[str, float]]) -> list[float]:
    """Release-to-acquire latencies (ms) on a capacity-1 limit, from ("rel", t) / ("acq", t) events
    in order; they must alternate (two grants in a row would be a slot granted twice)."""
    out = []
    for (k1, t1), (k2, t2) in zip(events, events[1:], strict=False):
        if k1 == k2:
            raise AssertionError(f"two {k1} in a row on a capacity-1 limit")
        if k1 == "rel":
            out.append((t2 - t1) * 1e3)
    return out


def latency(values: list[float]) -> dict:
    return {
        "median_ms": statistics.median(values),
        "p99_ms": percentile(values, 99),
        "max_ms": max(values),
        "n": len(values),
    }


def fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table; numbers formatted by ``fmt`` and right-aligned."""
    rows = [[fmt(c) for c in row] for row in rows]
    numeric = [
        all(r[i][:1].isdigit() or r[i] == "-" for r in rows) if rows else False for i in range(len(header))
    ]
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---:" if n else "---" for n in numeric) + " |",
    ]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def environment(pg: Any = None) -> dict:
    env = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
    }
    if pg is not None:
        import psycopg

        with psycopg.connect(pg.admin_dsn) as conn:
            env["postgresql"] = {
                k: conn.execute(f"SHOW {k}").fetchone()[0]  # type: ignore[index]
                for k in ("server_version", "fsync", "synchronous_commit", "full_page_writes")
            }
    return env


def write_json(path: Path | str | None, data: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(data, indent=1, default=str) + "\n")
        print(f"wrote {path}")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- processes -------------------------------------------------------------------------------------


def child_json(cmd: list[str], timeout: float | None = None, env: dict | None = None) -> dict:
    """Run ``cmd`` (a fresh interpreter) and return the JSON object on the last line it prints."""
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tempfile.gettempdir()
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{cmd[1:3]} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def dbos_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("dbos") is not None


def version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as found

    try:
        return found(package)
    except PackageNotFoundError:
        return None


def duro_worker(project: Path, url: str, worker_id: str, *flags: str) -> list[str]:
    """The command line of a real ``duro worker`` process."""
    return [sys.executable, "-m", "duro_devserver", "worker", str(project), "--database-url", url,
            "--worker-id", worker_id, *flags]  # fmt: skip


class Procs:
    """Worker processes, their output in log files: start, check, pause (SIGSTOP), resume, stop."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: list[subprocess.Popen] = []

    def start(self, cmd: list[str]) -> subprocess.Popen:
        with open(self.logdir / f"proc-{len(self.procs)}.log", "wb") as out:
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=self.logdir, env=env)
        self.procs.append(proc)
        return proc

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]

    def check(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc.returncode is None and proc.poll() is not None:
                tail = (self.logdir / f"proc-{i}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"process {i} exited with {proc.returncode}:\n{tail}")

    def signal(self, sig: int) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(sig)

    def kill(self, proc: subprocess.Popen) -> None:
        proc.kill()
        proc.wait()

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill(proc)

    def until(self, predicate: Callable[[], Any], what: str, timeout: float, every: float = 0.02) -> Any:
        """Poll ``predicate`` until it returns something truthy, the processes still alive."""
        deadline = time.perf_counter() + timeout
        while not (found := predicate()):
            self.check()
            if time.perf_counter() > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(every)
        return found


@contextlib.contextmanager
def procs(logdir: Path) -> Iterator[Procs]:
    group = Procs(logdir)
    try:
        yield group
    finally:
        group.stop()


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (0 = state, 1 = ppid, 11 = utime)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_seconds(pid: int, children: bool = False) -> float:
    fields = _stat(pid)
    return 0.0 if fields is None else sum(int(f) for f in fields[11 : 15 if children else 13]) / CLK_TCK


def server_cpu_seconds(postmaster: int) -> float:
    """The PostgreSQL server's CPU: the postmaster (with its reaped children) and every live child."""
    total = cpu_seconds(postmaster, children=True)
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) and fields[1] == str(postmaster):
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return (sum(values) - values[3] - values[4]) / CLK_TCK, sum(values) / CLK_TCK


def rss_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (the kernel's peak) of ``pid``, MiB; empty once it is gone."""
    out = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
    return out
