"""User code cannot stop its worker: a step body or workflow code raising ``SystemExit``,
``KeyboardInterrupt``, ``GeneratorExit`` or a ``CancelledError`` of its own fails that step or run
(``UserExitError``, retried by the step's ``retries``), and the worker goes on with the others."""

from __future__ import annotations

import asyncio
import sys

import pytest

from duro import Engine, RunFailedError, UserExitError, WorkerOptions, step, workflow

ATTEMPTS: dict[str, int] = {}


def _raise(what: str) -> None:
    if what == "exit":
        sys.exit(3)
    if what == "interrupt":
        raise KeyboardInterrupt
    if what == "generator-exit":
        raise GeneratorExit
    if what == "cancelled":
        raise asyncio.CancelledError


@step
async def poison(what: str) -> str:
    _raise(what)
    return "unreachable"


@step
def sync_poison(what: str) -> str:
    _raise(what)
    return "unreachable"


@step(retries=2, retry_delay="10ms")
async def exits_once(key: str) -> str:
    ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
    if ATTEMPTS[key] == 1:
        sys.exit(1)
    return "second try"


@workflow(name="poison.step")
async def poisoned(what: str) -> str:
    return await poison(what)


@workflow(name="poison.sync_step")
async def sync_poisoned(what: str) -> str:
    return await sync_poison(what)


@workflow(name="poison.code")
async def poisoned_code(what: str) -> str:
    _raise(what)
    return "unreachable"


@workflow(name="poison.retried")
async def retried(key: str) -> str:
    return await exits_once(key)


@workflow(name="poison.healthy")
async def healthy(n: int) -> int:
    return n + 1


def _engine(url: str) -> Engine:
    return Engine(url, options=WorkerOptions(poll_interval="50ms"))


POISONS = [
    *[
        (flow, what)
        for flow in (poisoned, poisoned_code)
        for what in ("exit", "interrupt", "generator-exit", "cancelled")
    ],
    *[(sync_poisoned, what) for what in ("exit", "interrupt", "generator-exit", "cancelled")],
]


@pytest.mark.parametrize(("flow", "what"), POISONS, ids=[f"{f.name}-{w}" for f, w in POISONS])
async def test_a_poison_fails_its_run_and_the_worker_goes_on(database_url: str, flow, what: str):
    async with _engine(database_url) as engine:
        bad = await flow.start(what)
        with pytest.raises(RunFailedError) as failed:
            await bad.result(timeout="10s")
        cause = failed.value.cause
        assert isinstance(cause, UserExitError), cause
        assert cause.where.startswith("step" if flow is not poisoned_code else "workflow")
        assert (await engine.get_run(bad.id)).status == "failed"
        # the worker is still up: a healthy run started after the poison completes
        assert await (await healthy.start(1)).result(timeout="10s") == 2


async def test_a_steps_system_exit_is_retried_like_any_error(database_url: str):
    async with _engine(database_url) as engine:
        run = await retried.start("k")
        assert await run.result(timeout="10s") == "second try"
        [recorded] = [s for s in await engine.steps(run.id) if s.name == "exits_once"]
        assert recorded.status == "completed"


async def test_a_system_exit_stored_as_a_failure_is_restored_as_user_exit(database_url: str):
    """The failure's record names the code's exception; a replay (or a reader) rebuilds it as a
    UserExitError, never as a SystemExit that would stop the reader."""
    async with _engine(database_url):
        bad = await poisoned.start("exit")
        with pytest.raises(RunFailedError) as failed:
            await bad.result(timeout="10s")
        assert failed.value.cause.raised == "builtins.SystemExit"
        assert failed.value.cause.detail == "3"
        assert "SystemExit(3)" in str(failed.value.cause)
