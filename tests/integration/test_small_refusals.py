"""Small refusals, each with a clear error naming the thing: a signal payload of NaN or Infinity
(as an input is refused), a payload nested too deeply (not a RecursionError), a run id that is not
a string (not "does not exist"), a name with a trailing newline (a regex's ``$`` let it through)."""

from __future__ import annotations

import math

import pytest

from duro import (
    DuroError,
    Engine,
    Limit,
    RunNotFoundError,
    WorkerOptions,
    define_workspace,
    wait_for_signal,
    workflow,
)


@workflow(name="refusals.waits")
async def waits() -> object:
    return await wait_for_signal("go")


def _nested(depth: int) -> list:
    top: list = []
    current = top
    for _ in range(depth):
        current.append([])
        current = current[0]
    return top


@pytest.mark.parametrize("payload", [math.nan, math.inf, -math.inf, {"a": [math.inf]}])
async def test_a_signal_payload_that_is_not_json_is_refused(database_url: str, payload):
    async with Engine(database_url, options=WorkerOptions(poll_interval="50ms")) as engine:
        run = await waits.start()
        with pytest.raises(DuroError, match="is not JSON"):
            await engine.signal(run.id, "go", payload)
        await engine.signal(run.id, "go", {"fine": 1.5})
        assert await run.result(timeout="10s") == {"fine": 1.5}  # the refused ones left nothing


async def test_a_payload_nested_too_deeply_is_a_clear_error(database_url: str):
    async with Engine(database_url, options=WorkerOptions(poll_interval="50ms")) as engine:
        run = await waits.start()
        with pytest.raises(DuroError, match="nested too deeply"):
            await engine.signal(run.id, "go", _nested(5000))
        await engine.cancel(run.id)


@pytest.mark.parametrize("run_id", [123, None, b"r1", ["r1"]])
async def test_a_run_id_that_is_not_a_string_says_so(database_url: str, run_id):
    async with Engine(database_url) as engine:
        for call in (engine.get_run, engine.cancel, engine.steps):
            with pytest.raises(DuroError, match="a run id is a string") as refused:
                await call(run_id)
            assert not isinstance(refused.value, RunNotFoundError)


@pytest.mark.parametrize("name", ["lines\n", "lines\r\n"])
def test_a_limit_name_with_a_trailing_newline_is_refused(name: str):
    with pytest.raises(DuroError, match="lines"):
        define_workspace(limits={name: Limit(capacity=1, max_hold="1m")})


def test_a_namespace_with_a_trailing_newline_is_refused():
    with pytest.raises(DuroError, match="namespace"):
        Engine("sqlite:///:memory:", namespace="tenant-a\n")
