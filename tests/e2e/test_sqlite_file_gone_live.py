"""A SQLite file deleted, or replaced by another (an older copy renamed over it), under a running
``duro dev``: the server notices at its next write, answers 503 naming the file, and writes nothing
into a file nobody will open again, instead of accepting runs that a restart would not find."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.devserver import running_dev_server
from tests.support.waiting import wait_until

PROJECT = Path(__file__).parent / "project"


def _start(client) -> int:
    return client.post("/api/workflows/greet/runs", json={"input": {"name": "ada"}}).status_code


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_deleted_or_replaced_file_takes_no_more_writes(tmp_path: Path, how: str):
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(".duro", "__pycache__"))
    db = tmp_path / "duro.db"
    with (
        running_dev_server(project, args=("--database-url", f"sqlite:///{db}")) as server,
        server.client() as client,
    ):
        assert _start(client) == 201
        if how == "deleted":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
        else:  # an older copy renamed over the file (a restore gone wrong)
            other = tmp_path / "older.db"
            shutil.copy(db, other)
            os.replace(other, db)
        wait_until(lambda: _start(client) == 503, 30, "a start to be refused")
        refused = client.post("/api/workflows/greet/runs", json={"input": {"name": "bob"}})
        assert refused.status_code == 503 and "retry-after" in refused.headers
        message = refused.json()["message"]
        assert str(db) in message and how in message, message
        assert server.process.poll() is None  # the server stays up, and says why
    if how == "replaced":  # the copy at the path holds what it held: nothing was written into it
        assert db.exists()
