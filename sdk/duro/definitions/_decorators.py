"""``@workflow`` and ``@step``: they tag and build objects and register nothing globally."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, overload

from .._durations import Duration
from .._errors import ConfigError
from ..run import _current
from ._definitions import (
    Concurrency,
    StepSpec,
    WorkflowSpec,
    class_workflow_spec,
    function_workflow_spec,
    make_step_spec,
)

SPEC_ATTR = "__duro_workflow__"


class WorkflowFunction:
    """What ``@workflow`` makes of a function: call it directly, or ``start`` / ``dispatch`` it durably."""

    def __init__(self, fn: Callable[..., Any], spec: WorkflowSpec) -> None:
        functools.update_wrapper(self, fn)
        self.__duro_workflow__ = spec
        self._fn = fn

    @property
    def name(self) -> str:
        return self.__duro_workflow__.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    async def start(
        self,
        inp: Any = None,
        run_id: str | None = None,
        concurrency: Concurrency | None = None,
        engine: Any = None,
        version: str | None = None,
    ) -> Any:
        """Start a run on the current engine (or ``engine=``); returns its :class:`RunHandle`.
        ``version``: another registered version of this workflow's name to run."""
        return await _current.resolve_engine(engine).start(
            self, inp, run_id=run_id, concurrency=concurrency, version=version
        )

    async def dispatch(
        self,
        inp: Any = None,
        run_id: str | None = None,
        concurrency: Concurrency | None = None,
        engine: Any = None,
    ) -> str:
        """Like :meth:`start`, but returns the run id."""
        handle = await self.start(inp, run_id=run_id, concurrency=concurrency, engine=engine)
        run_id_started: str = handle.id  # a RunHandle (its module sits above this one)
        return run_id_started

    def __repr__(self) -> str:
        return f"<workflow {self.name!r}>"


class Workflow:
    """Base of the class form: set ``name``, ``version``, ``concurrency`` and write ``async def run(self, ctx, inp)``.

    ``ctx`` offers the durable helpers as methods (``ctx.sleep``, ``ctx.now``, ``ctx.wait_for_signal``,
    ``ctx.child``, ``ctx.start_child``) and ``ctx.run_id``.
    """

    name: str | None = None
    version: str = "1"
    concurrency: Concurrency | None = None

    @classmethod
    async def start(
        cls,
        inp: Any = None,
        run_id: str | None = None,
        concurrency: Concurrency | None = None,
        engine: Any = None,
        version: str | None = None,
    ) -> Any:
        """Start a run on the current engine (or ``engine=``); returns its :class:`RunHandle`.
        ``version``: another registered version of this workflow's name to run."""
        return await _current.resolve_engine(engine).start(
            cls, inp, run_id=run_id, concurrency=concurrency, version=version
        )

    @classmethod
    async def dispatch(
        cls,
        inp: Any = None,
        run_id: str | None = None,
        concurrency: Concurrency | None = None,
        engine: Any = None,
    ) -> str:
        """Like :meth:`start`, but returns the run id."""
        handle = await cls.start(inp, run_id=run_id, concurrency=concurrency, engine=engine)
        run_id_started: str = handle.id  # a RunHandle (its module sits above this one)
        return run_id_started


def workflow_spec(obj: Any) -> WorkflowSpec | None:
    """The spec of a decorated workflow (function or class), or None."""
    spec = getattr(obj, SPEC_ATTR, None)
    if isinstance(spec, WorkflowSpec):
        return spec
    if isinstance(obj, type) and issubclass(obj, Workflow) and obj is not Workflow:
        spec = class_workflow_spec(obj, None, None, None, None)
        setattr(obj, SPEC_ATTR, spec)
        return spec
    return None


@overload
def workflow(fn: Callable[..., Any], /) -> Any: ...
@overload
def workflow(
    *,
    name: str | None = None,
    version: str | None = None,
    concurrency: Concurrency | None = None,
    on_event: str | None = None,
) -> Callable[[Any], Any]: ...


def workflow(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    version: str | None = None,
    concurrency: Concurrency | None = None,
    on_event: str | None = None,
) -> Any:
    """Declare a durable workflow: an ``async def`` taking one input, or a :class:`Workflow` subclass.

    Usable bare (``@workflow``) or with arguments (``@workflow(name=..., version=..., concurrency=...)``).
    The input and output are validated and stored from the type hints.
    """

    def build(target: Any) -> Any:
        if isinstance(target, type):
            if not issubclass(target, Workflow):
                raise ConfigError(f"@workflow on class {target.__qualname__!r}: subclass duro.Workflow")
            setattr(target, SPEC_ATTR, class_workflow_spec(target, name, version, concurrency, on_event))
            return target
        if not callable(target):
            raise ConfigError(f"@workflow needs an async function or a Workflow subclass, got {target!r}")
        return WorkflowFunction(
            target, function_workflow_spec(target, name, version or "1", concurrency, on_event)
        )

    if fn is not None:
        return build(fn)
    return build


class StepFunction:
    """What ``@step`` makes of a function. Inside a run, ``await`` it: the result is checkpointed.

    Outside any run (or inside another step) it is a plain call of the function.
    """

    def __init__(self, spec: StepSpec) -> None:
        functools.update_wrapper(self, spec.fn)
        self.__duro_step__ = spec

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        spec = self.__duro_step__
        run = _current.current_run.get()
        if run is None or _current.inside_step.get() is not None:
            return spec.fn(*args, **kwargs)
        return run.run_step(spec, args, kwargs)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self, instance)

    def __repr__(self) -> str:
        return f"<step {self.__duro_step__.name!r}>"


@overload
def step(fn: Callable[..., Any], /) -> StepFunction: ...
@overload
def step(
    *, name: str | None = None, retries: int = 0, retry_delay: Duration = "1s", rate: str | None = None
) -> Callable[[Any], StepFunction]: ...


def step(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    retries: int = 0,
    retry_delay: Duration = "1s",
    rate: str | None = None,
) -> Any:
    """Declare a step (sync or async): inside a workflow its result is recorded and never recomputed.

    ``retries`` extra attempts follow a failure, waiting ``retry_delay`` and doubling each time.
    ``rate``: every attempt first takes one grant of that (unkeyed) rate, waiting durably in its
    queue. A step that raises :class:`RateLimited` pauses that rate for everyone until its
    ``retry_after`` and is retried then, without spending one of its ``retries``.
    """

    def build(target: Callable[..., Any]) -> StepFunction:
        return StepFunction(make_step_spec(target, name, retries, retry_delay, rate))

    if fn is not None:
        return build(fn)
    return build
