"""OpenTelemetry tracing (the ``duro[otel]`` extra: ``opentelemetry-api`` only; the app brings its
SDK and exporter). Without the extra installed, every function here does nothing and costs one
check. The API loads when the app uses it: a tracer provider set in code has loaded it already, one
named in the environment loads it at duro's first check; ``import duro`` loads none of it.

The spans (tracer ``duro``):

- ``duro.start <workflow>`` (PRODUCER): the start of a run, in the code that started it (a child of
  that code's current span). Its context is stored with the run (``trace_context``, W3C
  ``traceparent``/``tracestate``), so every attempt, in any process, after any crash, continues the
  same trace;
- ``duro.run <workflow>`` (CONSUMER): one attempt at a run: a worker executing it, from its claim
  (or its start here) to its end, or until it leaves memory, stops, or its worker dies; attributes
  ``duro.run_id``, ``duro.workflow``, ``duro.replayed`` (calls replayed from its history), and
  ``duro.outcome`` (completed, failed, cancelled, evicted, lost, stopped);
- ``duro.step <name>``: one execution of a step's body, with ``duro.step.attempt`` and
  ``duro.step.outcome`` (completed, failed, retrying); a step replayed from history has no span;
- ``duro.slot_wait <limit>``: a slot request that had to wait, from entering the queue to its
  outcome: ``duro.limit``, ``duro.slot.position`` (its place in the queue on entry, 1 = next) and
  ``duro.slot.outcome`` (granted, timed_out, left, cancelled).

No attribute carries a quota key, a slot label, an input or a result.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Coroutine, Iterator, Sized
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol


class _Api:
    """The parts of OpenTelemetry's API duro uses."""

    def __init__(self) -> None:
        from opentelemetry import context, propagate, trace
        from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, SpanKind, Status, StatusCode

        self.trace: Any = trace
        self.context: Any = context
        self.propagate: Any = propagate
        self.kind: Any = SpanKind
        self.off: tuple[type, ...] = (ProxyTracerProvider, NoOpTracerProvider)
        self.tracer: Any = trace.get_tracer("duro")  # a proxy: follows a provider set later
        self._status = Status
        self._error = StatusCode.ERROR

    def error_status(self, error: BaseException) -> Any:
        return self._status(self._error, type(error).__name__)


_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ  # a provider the API loads when first asked
_UNSET = object()
_api: _Api | None = None
_absent = False  # the extra is not installed


def _load() -> _Api | None:
    """The API, loaded (``active`` asks once the app uses it: no provider can be set without
    loading ``opentelemetry.trace``)."""
    global _api, _absent
    if _absent:
        return None
    try:
        _api = _Api()
    except ImportError:  # the otel extra is not installed: tracing is off
        _absent = True
    return _api


def active() -> bool:
    """Whether spans are recorded: the extra is installed and the app set a tracer provider (until
    it does, the API's provider makes spans that go nowhere, at about 30 us each: duro makes none).

    Read at every start, run and step, so it reads the API's global first (0.1 us): the API's own
    ``get_tracer_provider()`` looks the environment up at each call (2 us)."""
    api = _api
    if api is None:
        if "opentelemetry.trace" not in sys.modules and not _FROM_ENV:
            return False  # the app has not loaded the API: no provider can be set
        api = _load()
        if api is None:
            return False
    provider = getattr(api.trace, "_TRACER_PROVIDER", _UNSET)
    if provider is None and not _FROM_ENV:
        return False  # none set yet
    if provider is None or provider is _UNSET:
        provider = api.trace.get_tracer_provider()
    return not isinstance(provider, api.off)


def _on() -> _Api:
    assert _api is not None, "a span is made only while active()"
    return _api


_NOTHING: AbstractContextManager[Any] = nullcontext()


@contextmanager
def _start_span(workflow: str) -> Iterator[str | None]:
    api = _on()
    with api.tracer.start_as_current_span(f"duro.start {workflow}", kind=api.kind.PRODUCER) as span:
        span.set_attribute("duro.workflow", workflow)
        carrier: dict[str, str] = {}
        api.propagate.inject(carrier)
        yield json.dumps(carrier, sort_keys=True) if carrier else None


def start_span(workflow: str) -> AbstractContextManager[str | None]:
    """Around a start: yields the trace context to store with the run (``None`` without tracing)."""
    if not active():
        return _NOTHING
    return _start_span(workflow)


def _parent(api: _Api, stored: str | None) -> Any:
    if not stored:
        return None
    try:
        carrier = json.loads(stored)
    except ValueError:
        return None
    return api.propagate.extract(carrier) if isinstance(carrier, dict) else None


class RunSpan:
    """The span of one attempt at a run (see the module's docstring); ``end`` says how it ended."""

    __slots__ = ("_span", "_token")

    def __init__(self, run_id: str, workflow: str, stored: str | None) -> None:
        api = _on()
        span = api.tracer.start_span(
            f"duro.run {workflow}",
            context=_parent(api, stored),
            kind=api.kind.CONSUMER,
            attributes={"duro.run_id": run_id, "duro.workflow": workflow},
        )
        self._span = span
        self._token = api.context.attach(api.trace.set_span_in_context(span))

    def end(self, outcome: str, replayed: int, error: BaseException | None = None) -> None:
        api = _on()
        span = self._span
        span.set_attribute("duro.outcome", outcome)
        span.set_attribute("duro.replayed", replayed)
        if error is not None:
            span.record_exception(error)
            span.set_status(api.error_status(error))
        span.end()
        try:
            api.context.detach(self._token)
        except Exception:  # noqa: BLE001 - detached in another context (a cancelled task): harmless
            pass


class _Run(Protocol):
    """What a run attempt's span reads of its ``RunContext``."""

    @property
    def run_id(self) -> str: ...
    @property
    def workflow(self) -> str: ...
    @property
    def record(self) -> Any: ...
    @property
    def history(self) -> Sized: ...
    @property
    def fatal(self) -> BaseException | None: ...
    @property
    def cancel_reason(self) -> str | None: ...
    @property
    def ended(self) -> Any: ...  # the run as its end left it, once written (a RunRecord)


def _evicted(ctx: _Run) -> bool:
    return type(ctx.fatal).__name__ == "Evicted"


def _outcome(ctx: _Run) -> str:
    if ctx.ended is not None:
        return str(ctx.ended.status)  # completed, failed, cancelled: its end is written
    if ctx.cancel_reason == "cancelled":
        return "cancelled"
    if ctx.fatal is not None:
        return "evicted" if _evicted(ctx) else "lost"
    return "stopped"  # its worker stopped or crashed: another attempt follows


async def _traced(execute: Callable[[], Coroutine[Any, Any, None]], ctx: _Run) -> None:
    span = RunSpan(ctx.run_id, ctx.workflow, ctx.record.trace_context)
    try:
        await execute()
    except BaseException as err:
        # An eviction cancels the run's task: a wait that does not turn that into the run's fatal
        # (a slot queue's) ends the task cancelled, and the attempt still ended evicted.
        if _evicted(ctx):
            span.end("evicted", len(ctx.history))
        else:
            span.end("stopped", len(ctx.history), None if isinstance(err, asyncio.CancelledError) else err)
        raise
    span.end(_outcome(ctx), len(ctx.history))


def traced(execute: Callable[[], Coroutine[Any, Any, None]], ctx: _Run) -> Coroutine[Any, Any, None]:
    """``execute()`` (a worker executing ``ctx``'s run, in the run's own task) inside the span of
    this attempt; ``execute()`` itself without tracing. A function, not a coroutine: a task cancelled
    before its first step never makes the coroutine it would not await."""
    return _traced(execute, ctx) if active() else execute()


@contextmanager
def _step_span(name: str, attempt: int) -> Iterator[Any]:
    with _on().tracer.start_as_current_span(
        f"duro.step {name}",
        attributes={"duro.step.name": name, "duro.step.attempt": attempt},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def step_span(name: str, attempt: int) -> AbstractContextManager[Any]:
    """Around one execution of a step's body: set ``duro.step.outcome`` with :func:`step_outcome`."""
    return _step_span(name, attempt) if active() else _NOTHING


def step_outcome(span: Any, outcome: str, error: BaseException | None = None) -> None:
    if span is None:
        return
    span.set_attribute("duro.step.outcome", outcome)
    if error is not None:
        span.record_exception(error)
        if outcome == "failed":
            span.set_status(_on().error_status(error))


def slot_wait_span(limit: str, position: int | None) -> Any:
    """A slot request enters the queue: its span, ended by :func:`end_slot_wait` (``None`` if off)."""
    if not active():
        return None
    attributes: dict[str, Any] = {"duro.limit": limit}
    if position is not None:
        attributes["duro.slot.position"] = position
    return _on().tracer.start_span(f"duro.slot_wait {limit}", attributes=attributes)


def end_slot_wait(span: Any, outcome: str) -> None:
    """End a span of :func:`slot_wait_span` (its caller skips the call when there is none)."""
    span.set_attribute("duro.slot.outcome", outcome)
    span.end()
