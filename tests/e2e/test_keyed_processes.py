"""Keyed limits across real processes: three ``duro worker``s share one store (a SQLite file, and a
database of the real PostgreSQL) and run 60 keyed runs over 4 keys. An independent connection
samples the slots all along: no key is ever over its capacity, the limit never over its own, and
every run completes with every slot back."""

from __future__ import annotations

import asyncio
import textwrap
import threading
from contextlib import ExitStack
from pathlib import Path

from duro import Engine
from duro.store import SqlStore
from tests.e2e.test_worker import registered, worker_process
from tests.support.sampling import connect
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


class Sampler(threading.Thread):
    """Reads the held slots by key, over and over, through a connection of its own."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop = url, threading.Event()
        self.worst_key = self.worst_total = self.samples = 0

    def run(self) -> None:
        conn = connect(self.url)
        try:
            while not self.stop.is_set():
                rows = conn.execute(
                    "SELECT limit_key, count(*) FROM duro_slots WHERE limit_name = 'partner-api' "
                    "AND state IN ('busy', 'reserved') GROUP BY limit_key"
                ).fetchall()
                self.worst_key = max([self.worst_key, *(int(n) for _, n in rows)])
                self.worst_total = max(self.worst_total, sum(int(n) for _, n in rows))
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


def _statuses(url: str, run_ids: list[str]) -> dict[str, str]:
    store = SqlStore(url)
    try:
        return store.run_statuses(run_ids)
    finally:
        store.close()


def test_three_workers_never_put_a_key_or_the_limit_over_its_capacity(tmp_path: Path, shared_url: str):
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
            wait_until(
                lambda: set(_statuses(shared_url, run_ids).values()) == {"completed"},
                120,
                "every keyed run to complete",
            )
            assert all(worker.poll() is None for worker in workers), "a worker exited"
    finally:
        sampler.stop.set()
        sampler.join(timeout=10)
    assert sampler.samples > 20, sampler.samples
    assert sampler.worst_key <= PER_KEY, sampler.worst_key
    assert sampler.worst_total <= CAPACITY, sampler.worst_total
    store = SqlStore(shared_url)
    try:
        assert store.limit_slots("partner-api") == []  # every slot back
    finally:
        store.close()
