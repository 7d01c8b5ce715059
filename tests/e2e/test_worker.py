"""``duro worker`` as a real process (SQLite and PostgreSQL): it executes runs a client starts,
``duro health`` sees it, and SIGTERM hands its in-flight runs back for the next worker."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from duro import Engine
from duro.store import SqlStore
from tests.support.devserver import stop
from tests.support.waiting import wait_until

DURO = [sys.executable, "-m", "duro_devserver"]


@contextmanager
def worker_process(project: Path, url: str, worker_id: str) -> Iterator[subprocess.Popen[bytes]]:
    log = open(project / f"{worker_id}.log", "ab")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [*DURO, "worker", str(project), "--database-url", url, "--worker-id", worker_id, "--lease", "3s"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        stop(process)
        log.close()


def health(project: Path, url: str) -> tuple[int, dict]:
    done = subprocess.run(
        [*DURO, "health", str(project), "--database-url", url, "--lease", "3s", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, json.loads(done.stdout) if done.stdout else {}


def registered(url: str) -> set[str]:
    store = SqlStore(url)
    try:
        return {worker["id"] for worker in store.workers.all()}
    finally:
        store.close()


def alive_ids(project: Path, url: str) -> set[str]:
    code, answer = health(project, url)
    return {w["id"] for w in answer.get("workers", []) if w["alive"]} if code in (0, 1) else set()


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, e2e_project: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{e2e_project / '.duro' / 'workers.db'}"
    request.applymarker(pytest.mark.postgres)
    return request.getfixturevalue("postgres_url")


def test_a_worker_runs_what_a_client_starts_and_hands_runs_back_on_sigterm(e2e_project: Path, store_url: str):
    client = Engine.from_project(e2e_project, database_url=store_url)
    try:
        code, answer = health(e2e_project, store_url)
        assert code == 1 and answer["alive"] == 0  # reachable, nobody working
        with worker_process(e2e_project, store_url, "w-one") as first:
            wait_until(lambda: "w-one" in registered(store_url), 30, "the worker to register")
            assert alive_ids(e2e_project, store_url) == {"w-one"}
            greeted = asyncio.run(_start_and_wait(client, "greet", {"name": "ops"}))
            assert greeted == "hello ops"
            held = asyncio.run(client.start("hold", {"tenant": "t", "job": "1"})).id
            wait_until(lambda: asyncio.run(client.get_run(held)).status == "suspended", 30, "the run to wait")
            stop(first)  # SIGTERM: a graceful stop
            assert "w-one" not in registered(store_url)
            assert asyncio.run(client.get_run(held)).status == "suspended"
        with worker_process(e2e_project, store_url, "w-two"):
            wait_until(lambda: "w-two" in registered(store_url), 30, "the next worker")
            asyncio.run(client.signal(held, "done"))
            wait_until(
                lambda: asyncio.run(client.get_run(held)).status == "completed", 30, "the handed-back run"
            )
            assert asyncio.run(client.get_run(held)).output == "job 1 done"
    finally:
        client.close()


def test_health_says_when_the_store_cannot_be_reached(e2e_project: Path):
    code, _ = health(e2e_project, "postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert code == 3


async def _start_and_wait(client: Engine, workflow: str, inp: object) -> object:
    run = await client.start(workflow, inp)
    return await run.result(timeout="30s")
