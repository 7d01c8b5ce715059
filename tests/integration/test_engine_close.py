"""``await engine.aclose()``: closing an engine from async code stops its worker and releases the
store without blocking the event loop while store calls in flight finish."""

from __future__ import annotations

import asyncio
import threading

from duro import Engine, workflow
from duro.store import store_call


@workflow
async def hello(name: str) -> str:
    return f"hello {name}"


async def test_aclose_waits_for_store_calls_in_flight_without_blocking_the_loop(sqlite_url):
    engine = Engine(sqlite_url)
    engine.register(hello)
    await engine.list_runs()
    release = threading.Event()
    safety = threading.Timer(5.0, release.set)  # a blocking aclose would hang the loop until then
    safety.start()
    executor = engine._gateway._executor_for(store_call(engine.store.runs.insert))
    in_flight = asyncio.get_running_loop().run_in_executor(executor, release.wait)
    closing = asyncio.create_task(engine.aclose())
    await asyncio.sleep(0.05)
    assert not closing.done() and not release.is_set()  # it waits for the call, the loop goes on
    release.set()
    await asyncio.wait_for(closing, 5)
    await in_flight
    safety.cancel()
    assert engine._gateway._db_executor is None  # released; a later call opens it again
    handle = await engine.start(hello, "again")
    assert (await engine.get_run(handle.id)).status == "pending"
    await engine.aclose()


async def test_aclose_of_an_entered_engine_stops_its_worker(sqlite_url):
    engine = Engine(sqlite_url)
    engine.register(hello)
    await engine.__aenter__()
    run = await engine.start(hello, "you")
    assert await engine.result(run.id, timeout="20s") == "hello you"
    await engine.aclose()
    assert engine.worker is None
    async with engine:  # it can run again
        assert await engine.result((await engine.start(hello, "twice")).id, timeout="20s") == "hello twice"


async def test_aclose_of_an_engine_never_used_does_nothing(sqlite_url):
    engine = Engine(sqlite_url)
    await engine.aclose()
    await engine.aclose()
