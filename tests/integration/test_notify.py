"""SQLite's stand-in for notices: a worker's store watches the file's ``data_version`` and says
a ``changed`` notice when another process (here: another store on the same file, with connections of
its own) committed; a worker therefore hears a cancel, a signal or a freed slot written by another
process within a poll pass of it instead of a poll interval."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from duro import Engine, WorkerOptions, wait_for_signal, workflow
from duro.store import SqlStore
from tests.support.waiting import wait_until


@workflow(name="watch.waits")
async def waits() -> object:
    return await wait_for_signal("go")


def test_a_commit_of_another_store_is_said(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'duro.db'}"
    watching, other = SqlStore(url), SqlStore(url)
    watching.create_schema()
    heard: list[dict] = []
    stopping = threading.Event()
    listener = threading.Thread(target=watching.listen, args=(heard.append, stopping), daemon=True)
    try:
        assert watching.notifies
        listener.start()
        with other.db.write() as conn:
            conn.exec_driver_sql("CREATE TABLE watch_probe (x INTEGER)")

        def commit_and_look() -> bool:  # the watch reads its first data_version when it starts
            with other.db.write() as conn:
                conn.exec_driver_sql("INSERT INTO watch_probe VALUES (1)")
            return {"kind": "changed"} in heard

        wait_until(commit_and_look, 10, "the other store's commit to be said")
    finally:
        stopping.set()
        listener.join(5)
        watching.close()
        other.close()


def test_an_in_memory_store_watches_nothing():
    assert not SqlStore("sqlite:///:memory:").notifies


async def test_a_worker_hears_a_signal_sent_from_another_process_before_its_poll(tmp_path: Path):
    """A poll interval of an hour: a signal written through another store reaches the waiting run
    through the file watch (without it, only when the run is next replayed, seconds later). The
    first run also lets the watch read its first data_version."""
    url = f"sqlite:///{tmp_path / 'duro.db'}"
    engine = Engine(url, options=WorkerOptions(poll_interval="1h"))
    sender = SqlStore(url)
    try:
        async with engine:
            for payload in ("first", "second"):
                run = await engine.start(waits)
                await asyncio.wait_for(_until_waiting(engine, run.id), 10)
                await asyncio.to_thread(sender.signals.send, run.id, "go", f'"{payload}"', 1)
                assert await run.result(timeout="10s" if payload == "first" else "2s") == payload
    finally:
        sender.close()


async def _until_waiting(engine: Engine, run_id: str) -> None:
    while (await engine.get_run(run_id)).status != "suspended":
        await asyncio.sleep(0.01)
