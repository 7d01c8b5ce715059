"""A full disk under a running ``duro dev`` (SQLite on a 16 MB tmpfs of its own, room for its WAL to
checkpoint: a filesystem smaller than the WAL's 4 MB checkpoint fills with the WAL alone): while the
filesystem is full, starts are refused (503) or accepted, and writes of runs in flight fail; once
space returns, every accepted run completes, in the same server process (no restart): a run whose
write the store failed was handed back, not stranded in its live worker."""

from __future__ import annotations

import errno
import os
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.devserver import running_dev_server
from tests.support.waiting import wait_until

FLOWS = """
from duro import sleep, step, workflow


@step
async def part(n: int, i: int) -> str:
    return f"{n}-{i}-" + "x" * 400  # a few hundred bytes a step: the disk fills sooner


@workflow(name="work")
async def work(n: int) -> int:
    for i in range(4):
        await part(n, i)
        await sleep("50ms")
    return n
"""


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"mounting a small tmpfs needs root: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(path: Path) -> None:
    """Write ``path`` until the filesystem has no byte left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        size = 65536
        while size:
            try:
                os.write(fd, b"\0" * size)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
                size //= 2
    finally:
        os.close(fd)


def _start(client: httpx.Client, n: int) -> str | None:
    answer = client.post("/api/workflows/work/runs", json={"input": n})
    if answer.status_code == 201:
        return answer.json()["run"]["id"]
    assert answer.status_code == 503, answer.text  # refused while the disk is full, nothing else
    return None


def _statuses(client: httpx.Client, run_ids: list[str]) -> dict[str, str]:
    found = {}
    for run_id in run_ids:
        answer = client.get(f"/api/runs/{run_id}")
        if answer.status_code == 200:
            found[run_id] = answer.json()["run"]["status"]
    return found


def test_every_accepted_run_completes_once_space_returns(tmp_path: Path, small_fs: Path):
    project = tmp_path / "project"
    (project / "workflows").mkdir(parents=True)
    (project / "workflows" / "flows.py").write_text(textwrap.dedent(FLOWS))
    url = f"sqlite:///{small_fs / 'duro.db'}"
    with running_dev_server(project, args=("--database-url", url)) as server, server.client() as client:
        accepted = [r for r in (_start(client, n) for n in range(20)) if r is not None]
        _fill(small_fs / "filler")  # mid-traffic: runs are executing their steps and sleeps
        accepted += [r for r in (_start(client, n) for n in range(20, 40)) if r is not None]
        (small_fs / "filler").unlink()
        accepted += [r for r in (_start(client, n) for n in range(40, 50)) if r is not None]
        wait_until(
            lambda: set(_statuses(client, accepted).values()) == {"completed"},
            90,
            "every accepted run to complete",
        )
        assert server.process.poll() is None
        assert len(accepted) >= 30, len(accepted)
