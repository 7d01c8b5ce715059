"""A worker process holding and waiting for slots is SIGKILLed at random points, again and again.
Every run still completes, busy + reserved never exceeds capacity (sampled by an independent
connection), every slot comes back, and grants follow queue order."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

from duro import Engine
from tests.integration.slot_worker import WORKSPACE, call
from tests.support.sampling import connect
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
RUNS, KILLS, CAPACITY = 24, 4, 2


class Sampler(threading.Thread):
    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.worst, self.samples = url, threading.Event(), 0, 0

    def run(self) -> None:
        conn = connect(self.url)
        try:
            while not self.stop.is_set():
                (held,) = conn.execute(
                    "SELECT count(*) FROM duro_slots WHERE limit_name = 'lines' "
                    "AND state IN ('busy', 'reserved')"
                ).fetchone()
                self.worst = max(self.worst, held)
                self.samples += 1
        finally:
            conn.close()


def spawn(url: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.slot_worker", url],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def test_killing_a_slot_worker_at_random_points_loses_nothing(database_url):
    rng = random.Random(7)
    client = Engine(database_url, workspace=WORKSPACE)
    client.register_remote("call")
    handles = [await client.start("call", n) for n in range(RUNS)]
    sampler = Sampler(database_url)
    sampler.start()
    process = spawn(database_url)
    try:
        for _ in range(KILLS):
            progressed = len([h for h in await client.list_runs(status="completed")])

            async def more_done(before=progressed, process=process) -> bool:
                return len(await client.list_runs(status="completed")) > before or process.poll() is not None

            await eventually(more_done, timeout=60, what="the worker making progress")
            assert process.poll() is None, process.stderr.read().decode()[-2000:]
            await eventually(lambda: rng.random() < 0.3, timeout=5, what="a random moment")
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
            process.stderr.close()
            process = spawn(database_url)

        async def all_done() -> bool:
            return len(await client.list_runs(status="completed", limit=1000)) == RUNS

        await eventually(all_done, timeout=120, what="every run completing after the kills")
        # the calls that kept their slot get it back through max_hold (3 s) plus the 15 s pass at most
        await eventually(lambda: _nothing_held(client), timeout=25, what="every slot coming back")
    finally:
        sampler.stop.set()
        sampler.join(timeout=10)
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr and not process.stderr.closed:
            process.stderr.close()
    assert sorted([await h.result() for h in handles]) == list(range(RUNS))
    assert sampler.samples > 20 and sampler.worst <= CAPACITY, (sampler.samples, sampler.worst)
    rows = client.store.limits.slots("lines")
    assert rows == []  # no slot left waiting, reserved or busy
    state = client.store.limits.states()["lines"]
    assert (state.busy, state.reserved, state.waiting) == (0, 0, 0)
    for handle in handles:  # each run took exactly one slot, recorded once
        hooks = [s for s in await handle.steps() if s.kind == "hook"]
        assert [(h.status, h.name) for h in hooks] == [("completed", "Esperando hueco · lines")]
    client.close()
    assert call.name == "call"


async def _nothing_held(client: Engine) -> bool:
    return client.store.limits.slots("lines") == []
