"""8 processes start runs concurrently on the same keys while an independent connection samples the
active count per key continuously: it never exceeds the limit (SQLite file and real PostgreSQL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path

from duro import Engine
from tests.support.sampling import connect
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
PROCESSES, CLIENTS, STARTS, LIMIT = 8, 3, 40, 3
KEYS = ["tenant:a", "tenant:b"]
COUNT = ("SELECT concurrency_key, count(*) FROM duro_runs WHERE status IN "
         "('pending', 'running', 'suspended', 'blocked') GROUP BY concurrency_key")


class Sampler(threading.Thread):
    """Reads the active count per key in a loop through its own connection, keeping the maximum."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.maximum: dict[str, int] = defaultdict(int)
        self.samples = 0

    def run(self) -> None:
        conn = connect(self.url)
        try:
            while not self.stop.is_set():
                for key, count in conn.execute(COUNT).fetchall():
                    self.maximum[key] = max(self.maximum[key], count)
                self.samples += 1
        finally:
            conn.close()


async def test_the_quota_holds_across_processes(database_url, tmp_path):
    schema = Engine(database_url)  # the sampler needs the tables from the start
    schema.store.create_schema()
    schema.close()
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    processes = [subprocess.Popen(
        [sys.executable, "-m", "tests.integration.quota_racer", database_url, str(LIMIT), ",".join(KEYS),
         str(STARTS), str(CLIENTS), str(go)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(PROCESSES)]
    sampler = Sampler(database_url)
    sampler.start()
    try:
        go.write_text("go")
        await eventually(lambda: all(p.poll() is not None for p in processes), timeout=240,
                         what="every racing process finishing")
    finally:
        sampler.stop.set()
        sampler.join(timeout=10)
        for process in processes:
            if process.poll() is None:
                process.kill()
    outputs = [process.communicate() for process in processes]
    for process, (_out, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err.decode()[-2000:]
    counts = [json.loads(out.decode().strip().splitlines()[-1]) for out, _ in outputs]
    admitted = sum(c["admitted"] for c in counts)
    refused = sum(c["refused"] for c in counts)
    print(f"quota race: {admitted} admitted, {refused} refused, {sampler.samples} samples, "
          f"max active per key {dict(sampler.maximum)} (limit {LIMIT})")
    assert admitted + refused == PROCESSES * CLIENTS * STARTS
    assert refused > 0 and admitted > LIMIT * len(KEYS)  # real contention, and runs did finish and free keys
    assert sampler.samples > 50
    assert max(sampler.maximum.values()) <= LIMIT
    assert set(sampler.maximum) <= set(KEYS)
