"""Keyed limits across real processes: three ``duro worker``s share one store (a SQLite file, and a
database of the real PostgreSQL) and run 60 keyed runs over 4 keys; one is killed (SIGKILL) a
quarter of the way and another takes its place. An independent connection
samples the slots all along: no key is ever over its capacity, the limit never over its own, each
key's row (its counts, what a grant pass reads) agrees with its slots in every snapshot, and every run
completes with every slot back and no key row left."""

from __future__ import annotations

import asyncio
import textwrap
import threading
from contextlib import ExitStack
from pathlib import Path

from duro import Engine
from duro.definitions._config import LimitConfig
from duro.store import SqlStore
from tests.e2e.test_worker import registered, worker_process
from tests.support.sampling import connect
from tests.support.store_rows import run_statuses
from tests.support.waiting import wait_until

CAPACITY, PER_KEY, KEYS, RUNS = 6, 2, 4, 60
CONFIG = f"""
from duro import Limit, define_workspace

workspace = define_workspace(
    limits={{"partner-api": Limit(capacity={CAPACITY}, per_key={PER_KEY}, max_hold="1h")}}
)
"""
FLOWS = """
from duro import limit_slot, sleep, step, workflow


@step
async def call_partner(n: int) -> int:
    return n


@workflow(name="keyed_job")
async def keyed_job(job: dict) -> int:
    async with limit_slot("partner-api", key=f"account:{job['account']}", label=job["id"], timeout="5m"):
        await sleep(f"{50 + (job['n'] * 37) % 200}ms")
        return await call_partner(job["n"])
"""


# each key's slots by state, beside its row's counts: one statement, one snapshot
BY_KEY = """
SELECT s.limit_key, s.busy, s.reserved, s.waiting, k.busy, k.reserved, k.waiting
FROM (SELECT limit_key, sum(CASE WHEN state = 'busy' THEN 1 ELSE 0 END) AS busy,
             sum(CASE WHEN state = 'reserved' THEN 1 ELSE 0 END) AS reserved,
             sum(CASE WHEN state = 'waiting' THEN 1 ELSE 0 END) AS waiting
      FROM duro_slots WHERE limit_name = 'partner-api' AND state IN ('busy', 'reserved', 'waiting')
      GROUP BY limit_key) s
LEFT JOIN duro_limit_keys k ON k.limit_name = 'partner-api' AND k.limit_key = s.limit_key
"""


class Sampler(threading.Thread):
    """Reads the slots by key, and the keys' rows, over and over, through a connection of its own."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop = url, threading.Event()
        self.worst_key = self.worst_total = self.samples = 0
        self.disagreements: list[tuple] = []

    def run(self) -> None:
        conn = connect(self.url)
        try:
            while not self.stop.is_set():
                rows = conn.execute(BY_KEY).fetchall()
                held = [int(busy) + int(reserved) for _, busy, reserved, *_ in rows]
                self.worst_key = max([self.worst_key, *held])
                self.worst_total = max(self.worst_total, sum(held))
                self.disagreements += [
                    tuple(row) for row in rows if tuple(int(n) for n in row[1:4]) != tuple(row[4:])
                ][:5]
                self.samples += 1
        finally:
            conn.close()


async def _start(project: Path, url: str) -> list[str]:
    client = Engine.from_project(project, database_url=url)
    try:
        jobs = [{"id": f"j{n}", "account": f"a{n % KEYS}", "n": n} for n in range(RUNS)]
        return [(await client.start("keyed_job", job, run_id=job["id"])).id for job in jobs]
    finally:
        await client.aclose()


def _completed(url: str, run_ids: list[str]) -> int:
    return sum(1 for status in run_statuses(url, run_ids).values() if status == "completed")


def test_three_workers_one_killed_never_put_a_key_or_the_limit_over_its_capacity(
    tmp_path: Path, shared_url: str
):
    project = tmp_path / "project"
    (project / "workflows").mkdir(parents=True)
    (project / "duro.config.py").write_text(textwrap.dedent(CONFIG))
    (project / "workflows" / "keyed.py").write_text(textwrap.dedent(FLOWS))
    run_ids = asyncio.run(_start(project, shared_url))  # the schema exists before the sampler reads
    sampler = Sampler(shared_url)
    sampler.start()
    try:
        with ExitStack() as stack:
            workers = [stack.enter_context(worker_process(project, shared_url, f"k{n}")) for n in range(3)]
            wait_until(lambda: {"k0", "k1", "k2"} <= registered(shared_url), 30, "the workers to register")
            wait_until(lambda: _completed(shared_url, run_ids) >= RUNS // 4, 120, "a quarter of the runs")
            workers[0].kill()  # SIGKILL, its runs holding and waiting mid-flight; another takes its place
            workers[0].wait(timeout=10)
            workers.append(stack.enter_context(worker_process(project, shared_url, "k3")))
            wait_until(
                lambda: set(run_statuses(shared_url, run_ids).values()) == {"completed"},
                120,
                "every keyed run to complete",
            )
            assert all(worker.poll() is None for worker in workers[1:]), "a worker exited"
    finally:
        sampler.stop.set()
        sampler.join(timeout=10)
    assert sampler.samples > 20, sampler.samples
    assert sampler.worst_key <= PER_KEY, sampler.worst_key
    assert sampler.worst_total <= CAPACITY, sampler.worst_total
    assert sampler.disagreements == [], sampler.disagreements[:5]
    store = SqlStore(shared_url)
    try:
        assert store.limits.slots("partner-api") == []  # every slot back
        config = LimitConfig("partner-api", CAPACITY, 3_600_000, PER_KEY)
        assert store.limits.keys(config) == []  # and every key's row gone with its last slot
    finally:
        store.close()
