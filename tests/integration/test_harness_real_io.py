"""Steps that await real I/O under the harness: result(), run_until_idle() and advance() wait for the
executing step (in real time, bounded) instead of calling the run stuck."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from duro import sleep, step, workflow

PROJECT = "tests/integration/harness_project"
pytestmark = pytest.mark.duro(project=PROJECT)


@step
async def nap_for_real() -> str:
    await asyncio.sleep(0.001)
    return "awake"


@workflow
async def real_nap() -> str:
    return await nap_for_real()


@workflow
async def real_nap_then_an_hour() -> str:
    first = await nap_for_real()
    await sleep("1h")
    return first + " " + await nap_for_real()


@asynccontextmanager
async def local_http_server() -> AsyncIterator[str]:
    """A one-route HTTP server on a free port of 127.0.0.1 (asyncio streams): its base URL."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b'{"weather": "sunny"}'
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}"


async def test_result_waits_for_a_step_awaiting_a_real_sleep(duro_env):
    run = await duro_env.start(real_nap)
    assert await run.result() == "awake"


async def test_run_until_idle_waits_for_a_step_awaiting_a_real_sleep(duro_env):
    run = await duro_env.start(real_nap)
    await duro_env.run_until_idle()
    await duro_env.assert_status(run, "completed")
    assert duro_env.executing_steps() == []


async def test_advance_waits_for_steps_awaiting_a_real_sleep_on_both_sides_of_a_timer(duro_env):
    run = await duro_env.start(real_nap_then_an_hour)
    await duro_env.advance("1h")
    await duro_env.assert_status(run, "completed")
    assert await run.result() == "awake awake"
    assert await duro_env.steps(run) == [
        ("nap_for_real", "completed"),
        ("sleep", "completed"),
        ("nap_for_real", "completed"),
    ]


async def test_a_step_calling_a_local_http_server_completes_under_every_wait(duro_env):
    async with local_http_server() as base_url:

        @step
        async def forecast() -> str:
            async with httpx.AsyncClient(base_url=base_url) as client:
                return (await client.get("/forecast")).json()["weather"]

        @workflow(name="weather_report")
        async def weather_report() -> str:
            return await forecast()

        duro_env.engine.register(weather_report)
        by_result = await duro_env.start("weather_report")
        assert await by_result.result() == "sunny"
        by_idle = await duro_env.start("weather_report")
        await duro_env.run_until_idle()
        await duro_env.assert_status(by_idle, "completed")
        by_advance = await duro_env.start("weather_report")
        await duro_env.advance("1s")
        await duro_env.assert_status(by_advance, "completed")


@pytest.mark.duro(project=PROJECT, io_timeout=0.05)
async def test_a_step_that_never_ends_is_named_once_the_real_time_bound_passes(duro_env):
    never = asyncio.Event()

    @step
    async def hangs() -> None:
        await never.wait()

    @workflow(name="hanging")
    async def hanging() -> None:
        await hangs()

    duro_env.engine.register(hanging)
    run = await duro_env.start("hanging")
    with pytest.raises(AssertionError, match=rf"waited 0.05s .* step 'hangs' of run {run.id} still executes"):
        await run.result()
    await duro_env.assert_status(run, "running")
    never.set()
    assert await run.result() is None


async def test_a_step_waiting_on_the_test_itself_leaves_run_until_idle_at_once(duro_env):
    go = asyncio.Event()

    @step
    async def waits_for_the_test() -> str:
        await go.wait()
        return "went"

    @workflow(name="waiting_on_the_test")
    async def waiting_on_the_test() -> str:
        return await waits_for_the_test()

    duro_env.engine.register(waiting_on_the_test)
    run = await duro_env.start("waiting_on_the_test")
    loop = asyncio.get_running_loop()
    began = loop.time()
    await duro_env.run_until_idle()
    assert loop.time() - began < 5  # not the io_timeout: nothing real is pending
    assert duro_env.executing_steps() == [(run.id, "waits_for_the_test")]
    go.set()
    assert await run.result() == "went"
