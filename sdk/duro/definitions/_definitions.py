"""What a workflow, a step, a quota and a limit are: plain specs, no registration, no I/O."""

from __future__ import annotations

import enum
import functools
import inspect
import json
import re
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, overload

from pydantic import ValidationError

from .._durations import Duration, to_ms
from .._errors import ConfigError, DuroError, InputError
from .._serde import Codec, hint_classes, is_structured, qualified_name
from .._states import ENDED, UNFINISHED
from .._text import NUL
from ..run import _current


class RunStatus(enum.StrEnum):
    """A run's status; a ``str`` enum, so ``status == "running"`` works."""

    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    BLOCKED = "blocked"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Whether the run has ended (completed, failed or cancelled): it never changes again."""
        return self.value in ENDED


DEFAULT_CONCURRENCY_STATUSES: tuple[RunStatus, ...] = tuple(RunStatus(status) for status in UNFINISHED)


def _status_names(statuses: Iterable[str | RunStatus]) -> tuple[str, ...]:
    names = []
    for status in statuses:
        try:
            names.append(RunStatus(status).value)
        except ValueError:
            raise ConfigError(
                f"count_statuses: {status!r} is not a run status; use some of "
                f"{', '.join(s.value for s in RunStatus)}"
            ) from None
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Concurrency:
    """A quota on starting runs: at most ``limit`` runs with the same ``key`` at once.

    On a workflow, ``key`` is a function of the input returning a string (``None``: unlimited) and
    ``limit`` an int or a sync/async function of the key. Per start both are plain values, and the
    per-start quota replaces the workflow's entirely. ``count_statuses`` names the statuses that count.
    ``retry_after`` (a duration, ``"30s"``): what a refused start tells its caller to wait before
    trying again (:attr:`ConcurrencyLimitError.retry_after`, the 429's ``Retry-After``, in whole
    seconds, at least 1); unset, duro estimates it from how long the key's runs recently lasted.
    """

    key: str | Callable[[Any], str | None] | None
    limit: int | Callable[[str], Any]
    count_statuses: Iterable[str | RunStatus] = DEFAULT_CONCURRENCY_STATUSES
    retry_after: Duration | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "count_statuses", _status_names(self.count_statuses))
        if self.retry_after is not None:
            try:
                ms = to_ms(self.retry_after, "Concurrency retry_after")
            except DuroError as err:
                raise ConfigError(str(err)) from None
            if ms <= 0:
                raise ConfigError(
                    f"Concurrency retry_after {self.retry_after!r} must be more than zero "
                    f"(a duration such as '30s'), or None to let duro estimate it"
                )
        if isinstance(self.limit, bool) or not (isinstance(self.limit, int) or callable(self.limit)):
            raise ConfigError(
                f"Concurrency limit {self.limit!r} must be an int or a function of the key returning one"
            )
        if self.key is not None and not (isinstance(self.key, str) or callable(self.key)):
            raise ConfigError(
                f"Concurrency key {self.key!r} must be a string, a function of the input, or None"
            )
        if isinstance(self.key, str) and NUL in self.key:
            raise ConfigError(
                f"Concurrency key {self.key!r} contains a NUL character (\\x00); remove it: "
                f"quota keys never hold one"
            )

    @property
    def retry_after_s(self) -> int | None:
        """``retry_after`` in whole seconds (rounded up), or ``None`` when duro estimates it."""
        if self.retry_after is None:
            return None
        return max(1, -(-to_ms(self.retry_after) // 1000))


@dataclass(frozen=True)
class Limit:
    """A named limit: ``capacity`` slots at once, each held at most ``max_hold``.

    ``per_key``: a keyed limit, at most this many slots per key (``acquire_slot(..., key=...)``),
    ``capacity`` in all; a slot goes to the oldest waiter whose key has room. Validated by
    :func:`define_workspace`, which knows the limit's name.
    """

    capacity: int
    max_hold: Duration
    per_key: int | None = None


@dataclass(frozen=True)
class Rate:
    """A named rate: at most ``limit`` granted (in costs) in any window of length ``per``.

    ``per_key``: a window per key (``acquire_rate(..., key=...)``). Validated by
    :func:`define_workspace`, which knows the rate's name.
    """

    limit: int
    per: Duration
    per_key: bool = False


@dataclass(frozen=True)
class StepSpec:
    name: str
    fn: Callable[..., Any]
    is_async: bool
    retries: int
    retry_delay_ms: int
    signature: inspect.Signature
    output: Codec
    # the one call shape that needs no Signature.bind (slow, and paid at every replay) to be known
    # good: this many positional arguments and no keywords; -1 when the signature has defaults,
    # keyword-only or variadic parameters
    arity: int = -1
    rate: str | None = None  # each attempt first takes a grant of this (unkeyed) rate

    def dump_result(self, result: Any) -> str:
        """The step's result as stored JSON, or a DuroError saying what to return instead."""
        return _stored(self.output, result, f"result of step {self.name!r}")


def _plain_arity(signature: inspect.Signature) -> int:
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = signature.parameters.values()
    if all(p.kind in plain and p.default is inspect.Parameter.empty for p in params):
        return len(signature.parameters)
    return -1


def make_step_spec(
    fn: Callable[..., Any], name: str | None, retries: int, retry_delay: Duration, rate: str | None = None
) -> StepSpec:
    if not callable(fn):
        raise ConfigError(f"@step needs a function, got {fn!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(f"step {fn.__qualname__!r}: retries must be an int >= 0, got {retries!r}")
    if rate is not None and not isinstance(rate, str):
        raise ConfigError(f"step {fn.__qualname__!r}: rate must be a rate's name (a str), got {rate!r}")
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable hints fall back to plain JSON
        hints = {}
    return StepSpec(
        name=name or fn.__name__,
        fn=fn,
        is_async=inspect.iscoroutinefunction(fn),
        retries=retries,
        retry_delay_ms=to_ms(retry_delay, f"step {fn.__qualname__!r} retry_delay"),
        signature=inspect.signature(fn),
        output=Codec(hints.get("return", inspect.Parameter.empty)),
        arity=_plain_arity(inspect.signature(fn)),
        rate=rate,
    )


@dataclass
class WorkflowSpec:
    """A workflow as the engine knows it. ``invoke`` is ``None`` for a remote workflow."""

    name: str
    version: str
    invoke: Callable[[Any, Any], Any] | None
    input: Codec
    output: Codec
    takes_input: bool = True
    concurrency: Concurrency | None = None
    on_event: str | None = None
    source: str | None = None
    serial: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def remote(self) -> bool:
        """Whether the code runs in another process (registered with ``register_remote``): never executed here."""
        return self.invoke is None

    def prepare_input(self, value: Any) -> tuple[Any, str]:
        """Validate a caller's input; returns (the validated value, its stored JSON), or raises
        :class:`InputError` naming the fields and what they should be."""
        if not self.takes_input:
            if value is not None:
                raise InputError(
                    self.name,
                    [{"type": "none_required", "loc": [], "msg": "Input should be None"}],
                    f"workflow {self.name!r} takes no input, got {value!r}; pass None",
                )
            return None, "null"
        try:
            validated = self.input.validate(value)
            return validated, self.input.dump(validated)
        except ValidationError as err:
            errors, told = json.loads(err.json(include_url=False)), _problems(err, self.input.hint)
        except Exception as err:  # noqa: BLE001 - TypeError, ValueError: not JSON, no hint to say more
            told = _one_line(err)
            errors = [{"type": "value_error", "loc": [], "msg": told}]
        raise InputError(
            self.name,
            errors,
            f"input of workflow {self.name!r} is invalid: {told}; "
            f"pass a value matching its type hint ({_hint_name(self.input.hint)})",
        )

    def dump_output(self, value: Any) -> str:
        """The workflow's result as stored JSON (validated against its return type), or a clear error."""
        return _stored(self.output, value, f"output of workflow {self.name!r}")


def _stored(codec: Codec, value: Any, what: str) -> str:
    try:
        return codec.dump(value)
    except Exception as err:  # noqa: BLE001
        raise DuroError(
            f"{what} cannot be stored: {_one_line(err)}; return a JSON value, a pydantic model or a "
            f"dataclass, and annotate the return type"
        ) from None


# pydantic's errors for "not an instance of this class": told with both classes' full names
_CLASS_ERRORS = frozenset({"model_type", "model_attributes_type", "dataclass_type", "is_instance_of"})


def _problems(err: ValidationError, hint: Any) -> str:
    """A validation error on one line, as ``field: problem`` pairs (at most five), not its
    multi-line dump with a documentation URL per problem. A value of the wrong class is told with
    the module and qualified name of the class expected and of the class given."""
    problems = err.errors(include_url=False)
    told = []
    for problem in problems[:5]:
        where = ".".join(str(part) for part in problem["loc"]) or "the value"
        message = problem["msg"]
        given = problem.get("input")
        if problem["type"] in _CLASS_ERRORS and is_structured(type(given)):
            expected = _expected_class(problem.get("ctx") or {}, hint)
            message = (
                f"expected {expected} or its dict form, got an instance of {qualified_name(type(given))}"
            )
        told.append(f"{where}: {message}")
    if len(problems) > 5:
        told.append(f"and {len(problems) - 5} more")
    return " ".join("; ".join(told).split())


def _expected_class(ctx: dict[str, Any], hint: Any) -> str:
    """The full name of the class a pydantic error expected (it says only the class's own name)."""
    name = ctx.get("class_name")
    matches = [cls for cls in hint_classes(hint).values() if cls.__name__ == name]
    return qualified_name(matches[0]) if len(matches) == 1 else f"a {name}"


def _one_line(err: BaseException) -> str:
    """``err`` on one line (a pydantic validation error told as ``field: problem`` pairs)."""
    if isinstance(err, ValidationError):
        return _problems(err, None)
    return " ".join(str(err).split())


def _hint_name(hint: Any) -> str:
    if hint is None:
        return "any JSON value"
    if is_structured(hint):
        return qualified_name(hint)
    return getattr(hint, "__name__", None) or str(hint)


def _input_hint(fn: Callable[..., Any], skip: int, where: str) -> tuple[bool, Any, Any]:
    """(takes_input, input hint, return hint) of a workflow function after ``skip`` leading params."""
    params = list(inspect.signature(fn).parameters.values())[skip:]
    try:
        hints = typing.get_type_hints(fn)
    except Exception as err:  # noqa: BLE001
        raise ConfigError(f"{where}: its type hints cannot be resolved ({err})") from None
    if len(params) > 1:
        raise ConfigError(f"{where} takes {len(params)} parameters; a workflow takes one input (or none)")
    if not params:
        return False, inspect.Parameter.empty, hints.get("return", inspect.Parameter.empty)
    return (
        True,
        hints.get(params[0].name, inspect.Parameter.empty),
        hints.get("return", inspect.Parameter.empty),
    )


def function_workflow_spec(
    fn: Callable[..., Any],
    name: str | None,
    version: str,
    concurrency: Concurrency | None,
    on_event: str | None,
) -> WorkflowSpec:
    if not inspect.iscoroutinefunction(fn):
        raise ConfigError(f"workflow {fn.__qualname__!r} must be an `async def` function")
    takes_input, in_hint, out_hint = _input_hint(fn, 0, f"workflow {fn.__qualname__!r}")

    # the workflow's own coroutine, not one wrapping it: a frame less on every resumption of a run
    if takes_input:

        def invoke(inp: Any, ctx: Any) -> Any:
            return fn(inp)
    else:

        def invoke(inp: Any, ctx: Any) -> Any:
            return fn()

    return WorkflowSpec(
        name=name or fn.__name__,
        version=str(version),
        invoke=invoke,
        input=Codec(in_hint),
        output=Codec(out_hint),
        takes_input=takes_input,
        concurrency=_check_concurrency(concurrency, name or fn.__name__),
        on_event=on_event,
        source=getattr(fn, "__module__", None),
    )


def class_workflow_spec(
    cls: type, name: str | None, version: str | None, concurrency: Concurrency | None, on_event: str | None
) -> WorkflowSpec:
    run = getattr(cls, "run", None)
    where = f"workflow class {cls.__qualname__!r}"
    if run is None or not inspect.iscoroutinefunction(run):
        raise ConfigError(f"{where} needs `async def run(self, ctx, inp)`")
    takes_input, in_hint, out_hint = _input_hint(run, 2, where)
    wf_name = name or getattr(cls, "name", None) or cls.__name__
    wf_version = version if version is not None else getattr(cls, "version", "1")

    def invoke(inp: Any, ctx: Any) -> Any:  # the run method's own coroutine, as for a function
        instance = cls()
        return instance.run(ctx, inp) if takes_input else instance.run(ctx)

    return WorkflowSpec(
        name=str(wf_name),
        version=str(wf_version),
        invoke=invoke,
        input=Codec(in_hint),
        output=Codec(out_hint),
        takes_input=takes_input,
        concurrency=_check_concurrency(concurrency or getattr(cls, "concurrency", None), str(wf_name)),
        on_event=on_event or getattr(cls, "on_event", None),
        source=getattr(cls, "__module__", None),
    )


def _check_concurrency(concurrency: Any, name: str) -> Concurrency | None:
    if concurrency is not None and not isinstance(concurrency, Concurrency):
        raise ConfigError(f"workflow {name!r}: concurrency must be a Concurrency(...), got {concurrency!r}")
    return concurrency


# -- the decorators --------------------------------------------------------------------------------
# ``@workflow`` and ``@step``: they tag and build objects and register nothing globally.

SPEC_ATTR = "__duro_workflow__"


class StartCall(Protocol):
    """``start`` / ``dispatch`` as a workflow offers them (see :class:`StartMethod`)."""

    async def __call__(
        self,
        inp: Any = None,
        run_id: str | None = None,
        concurrency: Concurrency | None = None,
        engine: Any = None,
        version: str | None = None,
    ) -> Any: ...


class StartMethod:
    """``start`` and ``dispatch``, written once for both forms of a workflow: on what ``@workflow``
    makes of a function, and on a ``Workflow`` subclass (called on the class, or on an instance of
    it: the class starts).

    ``start(inp, run_id=None, concurrency=None, engine=None, version=None)`` starts a run on the
    current engine (or ``engine=``) and returns its :class:`RunHandle`; ``version``: another
    registered version of this workflow's name to run. ``dispatch(...)`` takes the same arguments
    and returns the run id."""

    def __init__(self, *, returns_id: bool) -> None:
        self.returns_id = returns_id

    def __get__(self, obj: Any, owner: type) -> StartCall:
        target = owner if obj is None or isinstance(obj, Workflow) else obj
        returns_id = self.returns_id

        async def start(
            inp: Any = None,
            run_id: str | None = None,
            concurrency: Concurrency | None = None,
            engine: Any = None,
            version: str | None = None,
        ) -> Any:
            handle = await _current.resolve_engine(engine).start(
                target, inp, run_id=run_id, concurrency=concurrency, version=version
            )
            return handle.id if returns_id else handle

        start.__doc__ = (
            "Like ``start``, but returns the run id."
            if returns_id
            else "Start a run on the current engine (or ``engine=``); returns its ``RunHandle``. "
            "``version``: another registered version of this workflow's name to run."
        )
        start.__name__ = start.__qualname__ = "dispatch" if returns_id else "start"
        return start


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

    start = StartMethod(returns_id=False)
    dispatch = StartMethod(returns_id=True)

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

    start = StartMethod(returns_id=False)
    dispatch = StartMethod(returns_id=True)


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


# -- the registry ----------------------------------------------------------------------------------
# The workflows an engine knows: registered by name and version, each with its code (or none:
# remote). Several versions of one name coexist: a run executes on the code of its recorded version,
# and a start takes the newest version (versions compare as numbers where they are numbers: "10"
# is newer than "9", "1.10" than "1.9") unless it names one.


def version_order(version: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key of a version: runs of digits compare as numbers, the rest as text."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.findall(r"\d+|\D+", version))


class Registry:
    """Workflow specs by name and version. A later registration of a (name, version) replaces it."""

    def __init__(self) -> None:
        self._specs: dict[str, WorkflowSpec] = {}  # the newest version of each name
        self._versions: dict[str, dict[str, WorkflowSpec]] = {}
        # the workflows whose code this process has (it executes their runs) and their (workflow,
        # version) pairs (the runs it may claim); tuples, so a claim in the store thread reads a stable copy
        self.local_names: tuple[str, ...] = ()
        self.local_versions: tuple[tuple[str, str], ...] = ()

    def _put(self, spec: WorkflowSpec) -> WorkflowSpec:
        versions = self._versions.setdefault(spec.name, {})
        versions[spec.version] = spec
        self._specs[spec.name] = versions[max(versions, key=version_order)]
        if not spec.remote:
            if spec.name not in self.local_names:
                self.local_names += (spec.name,)
            if (pair := (spec.name, spec.version)) not in self.local_versions:
                self.local_versions += (pair,)
        return spec

    def register(
        self,
        name: Any,
        version: str | None = None,
        fn: Callable[..., Any] | None = None,
        *,
        concurrency: Concurrency | None = None,
        on_event: str | None = None,
    ) -> WorkflowSpec:
        """``register(decorated_workflow)``, or ``register(name, version, fn, concurrency=...)`` for a
        plain ``async def``."""
        if fn is None:
            spec = name if isinstance(name, WorkflowSpec) else workflow_spec(name)
            if spec is None:
                raise DuroError(
                    f"cannot register {name!r}: pass a @workflow, a Workflow subclass, or "
                    f"register(name, version, fn)"
                )
        else:
            if not isinstance(name, str) or not name:
                raise DuroError(f"workflow name must be a non-empty string, got {name!r}")
            target = fn._fn if isinstance(fn, WorkflowFunction) else fn
            spec = function_workflow_spec(target, name, version or "1", concurrency, on_event)
        return self._put(spec)

    def register_remote(
        self,
        name: str,
        version: str = "1",
        *,
        concurrency: Concurrency | None = None,
        on_event: str | None = None,
    ) -> WorkflowSpec:
        """A workflow whose code runs in another process sharing the store: started and read here
        (input stored as JSON), never executed."""
        if not isinstance(name, str) or not name:
            raise DuroError(f"workflow name must be a non-empty string, got {name!r}")
        spec = WorkflowSpec(
            name=name,
            version=str(version),
            invoke=None,
            input=Codec(None),
            output=Codec(None),
            concurrency=concurrency,
            on_event=on_event,
        )
        return self._put(spec)

    @property
    def specs(self) -> dict[str, WorkflowSpec]:
        return dict(self._specs)

    def get(self, name: str, version: str | None = None) -> WorkflowSpec | None:
        """The spec of ``name`` at ``version`` (``None``: its newest)."""
        if version is None:
            return self._specs.get(name)
        return self._versions.get(name, {}).get(version)

    def versions(self, name: str) -> list[str]:
        """The versions of ``name`` registered here, oldest first."""
        return sorted(self._versions.get(name, {}), key=version_order)

    def spec_for(self, wf: Any, version: str | None = None) -> WorkflowSpec:
        """The registered spec for a workflow object or name (objects register on first use), at
        ``version`` (``None``: a name's newest version, an object's own)."""
        if isinstance(wf, str):
            spec = self.get(wf, version)
            if spec is None and wf in self._specs:
                known = ", ".join(self.versions(wf))
                raise DuroError(
                    f"workflow {wf!r} has no version {version!r} here (registered versions: {known}); "
                    f"register that version's code beside the others, or start without version="
                )
            if spec is None:
                known = ", ".join(sorted(self._specs)) or "none"
                raise DuroError(
                    f"unknown workflow {wf!r} (registered: {known}); put it under workflows/, "
                    f"or call engine.register(...) / engine.register_remote(...)"
                )
            return spec
        spec = wf if isinstance(wf, WorkflowSpec) else workflow_spec(wf)
        if spec is None:
            raise DuroError(f"{wf!r} is not a workflow: decorate it with @workflow or pass its name")
        if version is not None and version != spec.version:
            return self.spec_for(spec.name, version)
        return self.get(spec.name, spec.version) or self.register(spec)

    def is_serial(self, name: str) -> bool:
        spec = self._specs.get(name)
        return spec is not None and spec.serial

    def serial_names(self) -> list[str]:
        """Workflows whose runs start one at a time, oldest first (``"serial": True`` in the config)."""
        return [name for name, spec in self._specs.items() if spec.serial]
