"""Context variables: the engine in use and the run (and step) being executed."""

from __future__ import annotations

from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from .._durations import Duration
from .._errors import DuroError

if TYPE_CHECKING:
    from .._states import StepKind
    from ..store._records import StepRecord


class Replayed(Protocol):
    """A run's history as the parts of its execution read it (``_context.History``)."""

    def take(self, kind: StepKind, name: str) -> tuple[int, StepRecord | None]: ...

    def peek(self) -> StepRecord | None: ...

    def recorded(self, seq: int) -> bool: ...


class CurrentRun(Protocol):
    """What the durable helpers and ``@step`` call on the run being executed (``_context.RunContext``).

    Workflows, steps and ``Concurrency`` are ``Any`` here: their types live on floors above this one.
    """

    record: Any  # the run as loaded (store.RunRecord): what duro.current_run() reads

    async def run_step(self, spec: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...

    async def sleep(self, duration: Duration) -> None: ...

    async def now(self) -> datetime: ...

    async def wait_for_signal(self, name: str, timeout: Duration | None = None) -> Any: ...

    async def child(
        self, wf: Any, inp: Any = None, *, run_id: str | None = None, concurrency: Any = None
    ) -> Any: ...

    async def start_child(
        self, wf: Any, inp: Any = None, *, run_id: str | None = None, concurrency: Any = None
    ) -> Any: ...

    async def patched(self, change_id: str) -> bool: ...

    async def deprecate_patch(self, change_id: str) -> None: ...

    async def send_signal(self, run_id: str, name: str, payload: Any = None) -> None: ...


current_engine: ContextVar[Any] = ContextVar("duro_current_engine", default=None)
current_run: ContextVar[CurrentRun | None] = ContextVar("duro_current_run", default=None)
inside_step: ContextVar[str | None] = ContextVar("duro_inside_step", default=None)

# Engines entered with ``async with``, newest last: the fallback when no context variable is set
# (a test fixture that entered the engine in another task's context, say).
_entered: list[Any] = []


def push_entered(engine: Any) -> None:
    _entered.append(engine)


def pop_entered(engine: Any) -> None:
    if engine in _entered:
        _entered.remove(engine)


def resolve_engine(explicit: Any = None) -> Any:
    """The engine a ``Workflow.start`` should use, or a clear error saying how to get one."""
    if explicit is not None:
        return explicit
    engine = current_engine.get()
    if engine is None and _entered:
        engine = _entered[-1]
    if engine is None:
        raise DuroError(
            "no duro engine is running here: enter one with `async with Engine(...) as engine:`, "
            "use the harness's `duro_env` fixture, or pass engine= explicitly"
        )
    return engine


def run_or_raise(helper: str) -> CurrentRun:
    """The current run for a durable helper; a clear error inside a step or outside any run."""
    step_name = inside_step.get()
    if step_name is not None:
        raise DuroError(
            f"{helper}() was called inside step {step_name!r}: durable helpers belong in workflow code; "
            f"call it from the workflow, before or after the step"
        )
    run = current_run.get()
    if run is None:
        raise DuroError(
            f"{helper}() was called outside any workflow run: call it from a @workflow function "
            f"started through an engine"
        )
    return run
