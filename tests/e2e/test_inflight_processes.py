"""Waiting costs nothing, with real processes: 20,000 runs sleep for a day and 20 for 20 s under a ``duro
worker``; the worker is killed (SIGKILL) once all are asleep and a new one starts. The 20 short
sleepers complete within 5 s of their wake time, and neither worker grows by more than 60 MB over
an idle worker (its peak resident memory, VmHWM, against an idle worker's after one run)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from duro import Engine
from duro.store import SqlStore
from tests.support.devserver import stop
from tests.support.waiting import wait_until

DURO = [sys.executable, "-m", "duro_devserver"]
LONG, SHORT = 20_000, 20
SHORT_S = 20
GROWTH_MB = 60

WORKFLOWS = """
from duro import sleep, workflow


@workflow
async def nap(seconds: int) -> int:
    await sleep(seconds * 1000)
    return seconds
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "sleepers"
    (root / "workflows").mkdir(parents=True)
    (root / "workflows" / "__init__.py").write_text("")
    (root / "workflows" / "nap.py").write_text(WORKFLOWS)
    (root / ".duro").mkdir()
    return root


@contextmanager
def worker(project: Path, url: str, name: str) -> Iterator[subprocess.Popen[bytes]]:
    log = open(project / f"{name}.log", "ab")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [*DURO, "worker", str(project), "--database-url", url, "--worker-id", name],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        stop(process)
        log.close()


def memory_mb(pid: int, field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of a process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} for process {pid}")


def count(url: str, sql: str, **params) -> int:
    store = SqlStore(url)
    try:
        with store.db.read() as conn:
            return int(conn.execute(sa.text(sql), params).scalar_one())
    finally:
        store.close()


async def start_many(client: Engine, seconds: int, n: int, prefix: str) -> None:
    for first in range(0, n, 500):
        await asyncio.gather(
            *(client.start("nap", seconds, run_id=f"{prefix}-{i}") for i in range(first, min(n, first + 500)))
        )


def completed(url: str, prefix: str) -> int:
    return count(
        url, "SELECT count(*) FROM duro_runs WHERE id LIKE :p AND status = 'completed'", p=f"{prefix}-%"
    )


def suspended(url: str) -> int:
    return count(url, "SELECT count(*) FROM duro_runs WHERE status = 'suspended'")


def idle_worker_mb(project: Path) -> float:
    """An idle worker's resident memory once it has executed one run (everything imported)."""
    url = f"sqlite:///{project / '.duro' / 'idle.db'}"
    with worker(project, url, "idle") as process:
        client = Engine.from_project(project, database_url=url)
        try:
            asyncio.run(client.start("nap", 0, run_id="probe-0"))
            wait_until(lambda: completed(url, "probe") == 1, 60, "the idle worker's probe run")
        finally:
            client.close()
        return memory_mb(process.pid, "VmRSS")


def test_a_killed_worker_with_20000_sleepers_is_replaced_at_once_and_memory_stays_flat(project: Path):
    idle = idle_worker_mb(project)
    url = f"sqlite:///{project / '.duro' / 'sleepers.db'}"
    client = Engine.from_project(project, database_url=url)
    try:
        with worker(project, url, "first") as first:
            asyncio.run(start_many(client, 86_400, LONG, "long"))
            wait_until(lambda: suspended(url) == LONG, 300, "the long sleepers to be asleep")
            asyncio.run(start_many(client, SHORT_S, SHORT, "short"))
            wait_until(lambda: suspended(url) == LONG + SHORT, 60, "every run to be asleep")
            first_peak = memory_mb(first.pid, "VmHWM")
            first.send_signal(signal.SIGKILL)
            first.wait()
        with worker(project, url, "second") as second:
            wait_until(lambda: completed(url, "short") == SHORT, 60, "the short sleepers to complete")
            second_peak = memory_mb(second.pid, "VmHWM")
            late = count(
                url,
                "SELECT max(r.ended_at - s.wake_at) FROM duro_runs r JOIN duro_steps s ON s.run_id = r.id "
                "WHERE r.id LIKE 'short-%' AND s.kind = 'sleep'",
            )
            assert late <= 5000, f"a short sleeper completed {late} ms after its wake time"
            assert completed(url, "long") == 0 and suspended(url) == LONG
    finally:
        client.close()
    print(
        f"idle {idle:.0f} MB; peaks: first {first_peak:.0f} MB, second {second_peak:.0f} MB; latest {late} ms"
    )
    for name, peak in (("first", first_peak), ("second", second_peak)):
        assert peak - idle <= GROWTH_MB, f"the {name} worker peaked at {peak:.0f} MB, idle is {idle:.0f} MB"
