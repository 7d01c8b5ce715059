"""OpenTelemetry tracing (duro[otel]): the span tree of a run across a restart, with the SDK's
in-memory exporter; and duro without the extra imports and runs unchanged."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from duro import acquire_slot, release_slot, step, wait_for_signal, workflow

pytestmark = pytest.mark.duro(project="tests/integration/harness_project")

EXPORTER = InMemorySpanExporter()


def _provider() -> None:
    """The process's tracer provider, set once (OpenTelemetry allows one per process)."""
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)


@pytest.fixture
def spans():
    _provider()
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


FLAKY = {"left": 1}


@step(retries=2, retry_delay="10ms")
def flaky(n: int) -> int:
    if FLAKY["left"]:
        FLAKY["left"] -= 1
        raise RuntimeError("the partner API hiccuped")
    return n + 1


@step
def fetch(n: int) -> int:
    return n * 2


@workflow
async def holder(inp: dict) -> None:
    slot = await acquire_slot("voice-calls", label="secret-customer")
    await wait_for_signal("done", timeout="1h")
    await release_slot(slot.id)


@workflow
async def call(n: int) -> int:
    first = await fetch(n)
    await wait_for_signal("go", timeout="1h")  # the box restarts while the run waits here
    slot = await acquire_slot("voice-calls", label="secret-customer", timeout="1h")
    second = await flaky(first)
    await release_slot(slot.id)
    return second


def request_id(env) -> str:
    return "evicted" if env.engine.options.max_resident_runs == 0 else "resident"


async def test_a_run_continues_its_starters_trace_across_a_restart(duro_env, spans):
    FLAKY["left"] = 1
    tracer = trace.get_tracer("app")
    busy = await duro_env.start(holder, {})
    await duro_env.run_until_idle()
    with tracer.start_as_current_span("POST /calls") as request:
        run = await duro_env.start(call, 1)
    await duro_env.run_until_idle()
    await duro_env.restart()  # a new worker replays the run: a second attempt, the same trace
    await run.signal("go")
    await duro_env.run_until_idle()
    await busy.signal("done")  # frees the slot the run queued for
    await duro_env.advance("1s")  # the retry's delay
    assert await run.result() == 3

    trace_id = request.get_span_context().trace_id
    mine = [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id]
    by_name: dict[str, list] = {}
    for span in mine:
        by_name.setdefault(span.name, []).append(span)
    (start,) = by_name[f"duro.start {call.name}"]
    assert start.parent.span_id == request.get_span_context().span_id
    attempts = by_name[f"duro.run {call.name}"]
    assert len(attempts) >= 2  # before and after the restart (and after each evict)
    assert {a.parent.span_id for a in attempts} == {start.context.span_id}
    assert attempts[-1].attributes["duro.outcome"] == "completed"
    assert attempts[-1].attributes["duro.replayed"] >= 2
    assert {a.attributes["duro.run_id"] for a in attempts} == {run.id}
    attempt_ids = {a.context.span_id for a in attempts}

    (fetched,) = by_name[f"duro.step {fetch.__duro_step__.name}"]  # executed once: replays make no step span
    assert fetched.parent.span_id in attempt_ids
    assert (fetched.attributes["duro.step.attempt"], fetched.attributes["duro.step.outcome"]) == (
        1,
        "completed",
    )
    tries = sorted(
        by_name[f"duro.step {flaky.__duro_step__.name}"], key=lambda s: s.attributes["duro.step.attempt"]
    )
    assert [(s.attributes["duro.step.attempt"], s.attributes["duro.step.outcome"]) for s in tries] == [
        (1, "retrying"),
        (2, "completed"),
    ]
    waits = by_name["duro.slot_wait voice-calls"]
    assert waits[0].attributes["duro.slot.position"] == 1
    if "evicted" in request_id(duro_env):
        # the run left memory while it waited (the wait's span ends "suspended") and was taken up
        # again holding its slot: the next attempt replays the grant
        assert waits[-1].attributes["duro.slot.outcome"] == "suspended"
    else:
        assert waits[-1].attributes["duro.slot.outcome"] == "granted"
    assert all(w.parent.span_id in attempt_ids for w in waits)
    for span in mine:
        assert "secret-customer" not in str(dict(span.attributes or {}))


async def test_a_run_started_outside_any_span_is_one_trace(duro_env, spans):
    FLAKY["left"] = 0
    run = await duro_env.start(call, 5)
    await duro_env.run_until_idle()
    await run.signal("go")
    await duro_env.run_until_idle()
    assert await run.result() == 11
    finished = spans.get_finished_spans()
    (start,) = [s for s in finished if s.name == f"duro.start {call.name}"]
    assert start.parent is None
    assert {s.context.trace_id for s in finished} == {start.context.trace_id}


def test_duro_without_the_otel_extra_imports_and_runs_unchanged(tmp_path):
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
        import duro
        from duro import _tracing

        @duro.step
        def double(n: int) -> int:
            return n * 2

        @duro.workflow
        async def twice(n: int) -> int:
            return await double(n)

        async def main():
            engine = duro.Engine("sqlite:///{tmp_path}/plain.db")
            engine.register(twice)
            async with engine:
                run = await engine.start(twice, 21)
                print(_tracing.active(), await run.result(timeout=30))
            engine.close()

        asyncio.run(main())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "42"]


def test_with_the_extra_but_no_tracer_provider_duro_makes_no_spans(tmp_path):
    """The API alone (no provider set by the app) makes spans that go nowhere at ~30 us each: duro
    skips them, and stores no trace context."""
    script = textwrap.dedent(
        f"""
        import asyncio
        import opentelemetry.trace  # the app uses the API, and sets no provider
        import duro
        from duro import _tracing

        @duro.workflow
        async def plain(n: int) -> int:
            return n

        async def main():
            engine = duro.Engine("sqlite:///{tmp_path}/api-only.db")
            engine.register(plain)
            async with engine:
                run = await engine.start(plain, 1)
                await run.result(timeout=30)
                print(_tracing._api is not None, _tracing.active(), engine.store.runs.get(run.id).trace_context)
            engine.close()

        asyncio.run(main())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "None"]


async def test_a_cancelled_run_ends_its_span_cancelled(duro_env, spans):
    busy = await duro_env.start(holder, {})
    with trace.get_tracer("app").start_as_current_span("POST /calls") as request:
        waiting = await duro_env.start(holder, {})
    await duro_env.run_until_idle()
    await waiting.cancel()
    await duro_env.run_until_idle()
    assert await waiting.status() == "cancelled"
    trace_id = request.get_span_context().trace_id
    mine = [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id]
    attempts = [s for s in mine if s.name == f"duro.run {holder.name}"]
    assert attempts[-1].attributes["duro.outcome"] == "cancelled"
    waits = [s.attributes["duro.slot.outcome"] for s in mine if s.name == "duro.slot_wait voice-calls"]
    # resident, the wait itself is cancelled; evicted, it ended "suspended" and the replay delivers
    assert waits == (["suspended"] if request_id(duro_env) == "evicted" else ["cancelled"])
    await busy.signal("done")
    await duro_env.run_until_idle()


@workflow
async def queued(n: int) -> int:
    slot = await acquire_slot("voice-calls", label="secret-customer", timeout="1h")
    await release_slot(slot.id)
    return n


async def test_a_run_that_leaves_memory_queued_for_a_slot_ends_its_attempt_evicted(duro_env, spans):
    busy = await duro_env.start(holder, {})
    await duro_env.run_until_idle()
    run = await duro_env.start(queued, 7)
    await duro_env.run_until_idle()
    await busy.signal("done")
    await duro_env.run_until_idle()
    assert await run.result() == 7
    attempts = [s for s in spans.get_finished_spans() if s.name == f"duro.run {queued.name}"]
    outcomes = [a.attributes["duro.outcome"] for a in attempts]
    if "evicted" in request_id(duro_env):  # left memory while queued, replayed holding its slot
        assert outcomes == ["evicted", "completed"]
    else:
        assert outcomes == ["completed"]
