"""Every error duro raises, rooted at :class:`DuroError`.

Each message names the run, workflow, limit or field involved and says what to do next.
"""

from __future__ import annotations

import contextlib
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)


class DuroError(Exception):
    """Root of every error duro raises on purpose."""


class ConfigError(DuroError):
    """``duro.config.py`` or a workflow definition is invalid; the message names the field."""


class ConcurrencyLimitError(DuroError):
    """A start was refused because its concurrency key is at its limit (HTTP 429).

    Nothing was created. Attributes: ``workflow``, ``key``, ``limit``, ``active``, and
    ``retry_after``: the seconds to wait before trying again (an int, at least 1; the 429's
    ``Retry-After``), the quota's own ``Concurrency(retry_after=...)`` or duro's estimate from how
    long the key's runs recently lasted (at most 5 minutes).
    """

    def __init__(self, workflow: str, key: str, limit: int, active: int, retry_after: int = 1) -> None:
        self.workflow = workflow
        self.key = key
        self.limit = limit
        self.active = active
        self.retry_after = retry_after
        super().__init__(
            f"workflow {workflow!r} refused: concurrency key {key!r} has {active} active run(s) "
            f"and its limit is {limit}; retry when one of them finishes"
        )

    def __reduce__(self) -> Any:
        return (type(self), (self.workflow, self.key, self.limit, self.active, self.retry_after))


class SlotTimeoutError(DuroError):
    """``acquire_slot`` waited longer than its timeout. Attributes: ``limiter``, ``timeout``."""

    def __init__(self, limiter: str, timeout: Any) -> None:
        self.limiter = limiter
        self.timeout = timeout
        super().__init__(f"no slot of limit {limiter!r} came free within {timeout}")

    def __reduce__(self) -> Any:
        return (type(self), (self.limiter, self.timeout))

    @staticmethod
    def is_(err: BaseException) -> bool:
        """True when ``err`` is a slot timeout, even one raised by another copy of this module."""
        return any(cls.__name__ == "SlotTimeoutError" for cls in type(err).__mro__)


class RateTimeoutError(DuroError):
    """``acquire_rate`` waited longer than its timeout. Attributes: ``rate``, ``timeout``."""

    def __init__(self, rate: str, timeout: Any) -> None:
        self.rate = rate
        self.timeout = timeout
        super().__init__(f"no grant of rate {rate!r} came within {timeout}")

    def __reduce__(self) -> Any:
        return (type(self), (self.rate, self.timeout))

    @staticmethod
    def is_(err: BaseException) -> bool:
        """True when ``err`` is a rate timeout, even one raised by another copy of this module."""
        return any(cls.__name__ == "RateTimeoutError" for cls in type(err).__mro__)


class RateLimited(DuroError):
    """Raise it in a step when the downstream refused for now (an HTTP 429 with ``Retry-After``):
    rate ``rate`` (its key ``key``, on a keyed rate) is paused for everyone until ``retry_after``
    has passed (a duration as anywhere in duro: ``"30s"``, a ``timedelta``, or milliseconds as an
    int; from a ``Retry-After`` header in seconds, ``f"{seconds}s"``), and the step is
    retried after the pause without spending one of its ``retries``."""

    def __init__(self, rate: str, retry_after: Any, key: str | None = None) -> None:
        self.rate = rate
        self.retry_after = retry_after
        self.key = key
        where = f"rate {rate!r}" if key is None else f"rate {rate!r} (key {key!r})"
        super().__init__(f"{where} is limited downstream: retry after {retry_after}")

    def __reduce__(self) -> Any:
        return (type(self), (self.rate, self.retry_after, self.key))


class RunFailedError(DuroError):
    """``RunHandle.result()`` of a run that failed or was cancelled; ``cause`` holds the reason."""

    def __init__(self, run_id: str, status: str, cause: BaseException | None, message: str) -> None:
        self.run_id = run_id
        self.status = status
        self.cause = cause
        super().__init__(message)
        self.__cause__ = cause

    def __reduce__(self) -> Any:
        return (type(self), (self.run_id, self.status, self.cause, str(self)))


class ChildWorkflowError(DuroError):
    """A child run failed, was cancelled or was refused; ``cause`` holds the reason."""

    def __init__(self, child_run_id: str, workflow: str, cause: BaseException | None, message: str) -> None:
        self.child_run_id = child_run_id
        self.workflow = workflow
        self.cause = cause
        super().__init__(message)
        self.__cause__ = cause

    def __reduce__(self) -> Any:
        return (type(self), (self.child_run_id, self.workflow, self.cause, str(self)))


class NonDeterminismError(DuroError):
    """A replay asked for a different durable call than the one recorded at a sequence number."""

    def __init__(self, run_id: str, seq: int, recorded: str, asked: str) -> None:
        self.run_id = run_id
        self.seq = seq
        self.recorded = recorded
        self.asked = asked
        super().__init__(
            f"run {run_id!r} diverged from its history at sequence number {seq}: recorded {recorded}, "
            f"but the code now asks for {asked}. Workflow code must make the same durable calls in the "
            f"same order on every replay; deploy code changes under a new workflow version"
        )

    def __reduce__(self) -> Any:
        return (type(self), (self.run_id, self.seq, self.recorded, self.asked))


class RunIdConflictError(DuroError):
    """A start named a ``run_id`` that belongs to a run of another workflow (HTTP 409).

    Nothing was created and that run is left as it is. Attributes: ``run_id``, ``workflow`` (the
    one asked for), ``existing_workflow`` (the workflow of the run that has the id).
    """

    def __init__(self, run_id: str, workflow: str, existing_workflow: str) -> None:
        self.run_id = run_id
        self.workflow = workflow
        self.existing_workflow = existing_workflow
        super().__init__(
            f"run id {run_id!r} belongs to a run of workflow {existing_workflow!r}, not {workflow!r}; "
            f"nothing was started: give this {workflow!r} run another id"
        )

    def __reduce__(self) -> Any:
        return (type(self), (self.run_id, self.workflow, self.existing_workflow))


class RunNotFoundError(DuroError):
    """No run has this id (in the engine's namespace, when its reads are fenced to it) (HTTP 404).

    Raised by a handle's reads, ``result``, ``signal`` and ``cancel``, and by ``engine.get_run``;
    nothing was changed. Attributes: ``run_id``, ``namespace`` (set when the lookup was fenced to it).
    """

    def __init__(self, run_id: str, namespace: str | None = None, reason: str | None = None) -> None:
        self.run_id = run_id
        self.namespace = namespace
        self.reason = reason
        where = f" in namespace {namespace!r}" if namespace is not None else ""
        why = f": {reason}" if reason else ""
        super().__init__(
            f"run {run_id!r} does not exist{where}{why}; check the id, or list runs with engine.list_runs()"
        )

    def __reduce__(self) -> Any:
        return (type(self), (self.run_id, self.namespace, self.reason))


class RunStatusError(DuroError):
    """A run in the wrong status for an action on it (HTTP 409): a retry of a run that has not
    ended or that completed, a fork of a run that has not ended. Nothing was changed.

    Attributes: ``run_id``, ``status`` (the run's), ``action`` (``retry``, ``fork``)."""

    def __init__(self, run_id: str, status: str, action: str, why: str | None = None) -> None:
        self.run_id = run_id
        self.status = str(status)
        self.action = action
        self.why = why
        wanted = "failed or cancelled" if action == "retry" else "completed, failed or cancelled"
        what = why or f"it is {self.status}"
        super().__init__(
            f"cannot {action} run {run_id!r}: {what}; {action} takes a run that ended {wanted}"
            + (" (a completed run can be forked: engine.fork)" if self.status == "completed" else "")
        )

    def __reduce__(self) -> Any:
        return (type(self), (self.run_id, self.status, self.action, self.why))


class RunEndedError(DuroError):
    """A signal was sent to a run that has ended (HTTP 409); nothing was sent.

    Attributes: ``run_id``, ``status`` (``completed``, ``failed`` or ``cancelled``), ``signal`` (the
    signal's name, when known). (Cancelling an ended run is no error: it leaves the run as it is.)
    """

    def __init__(self, run_id: str, status: str, signal: str | None = None) -> None:
        self.run_id = run_id
        self.status = str(status)
        self.signal = signal
        what = f"signal {signal!r}" if signal is not None else "a signal"
        super().__init__(
            f"cannot send {what} to run {run_id!r}: the run has ended ({self.status}); signals reach "
            f"only runs that have not finished: start a new run to act on it"
        )

    def __reduce__(self) -> Any:
        return (type(self), (self.run_id, self.status, self.signal))


class InputError(DuroError):
    """An input does not match the workflow's type hint (HTTP 422); nothing was started.

    Attributes: ``workflow``, ``errors`` (pydantic's ``errors()`` list as JSON values: each with
    ``type``, ``loc``, ``msg`` and ``input``). The message names the fields and what they should be.
    """

    def __init__(self, workflow: str, errors: list[dict[str, Any]], message: str) -> None:
        self.workflow = workflow
        self.errors = errors
        super().__init__(message)

    def __reduce__(self) -> Any:
        return (type(self), (self.workflow, self.errors, str(self)))


class StoreUnavailable(DuroError):
    """The store did not answer in time: SQLite locked by another process past its busy timeout, or
    PostgreSQL unreachable past the retry window. Nothing was changed by the call that raised it;
    try again later."""

    def __init__(self, message: str, retry_after_s: int = 5) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RunSetAsideError(DuroError):
    """A run was failed instead of being executed again: ``deaths`` workers in a row died while
    executing it with its history at the same point (the first, then ``WorkerOptions.max_recoveries``
    that took it up again), most likely in a step that crashes the process (``os._exit``, a segfault,
    running out of memory).

    Attributes: ``run_id``, ``deaths``, ``steps`` (how many calls its history had recorded)."""

    def __init__(self, run_id: str, deaths: int, steps: int) -> None:
        self.run_id, self.deaths, self.steps = run_id, deaths, steps
        super().__init__(
            f"run {run_id!r} was set aside: {deaths} workers in a row died while executing it, each "
            f"after its first {steps} recorded call(s), so its next call most likely crashes the "
            f"process (os._exit, a segfault, out of memory): fix that step, then start the run again"
        )

    def __reduce__(self) -> Any:
        return (type(self), (self.run_id, self.deaths, self.steps))


class DuroInterrupt(BaseException):
    """Internal: the base of duro's own ``BaseException``s, raised through user code on purpose (a
    cancel, a lost run, a simulated crash); any other ``BaseException`` from user code is the code's
    failure (see :func:`user_exit`)."""


class RunCancelled(DuroInterrupt):
    """Raised inside a run's code when the run is cancelled: at its current durable await, or its
    next one. ``finally`` blocks and ``except RunCancelled`` run, and may make durable calls that do
    not wait (steps, ``release_slot``); one that would wait raises ``RunCancelled`` again at once.

    A ``BaseException`` on purpose: ``except Exception`` in workflow code cannot swallow it.
    """


class EngineCrash(DuroInterrupt):
    """Raised at an engine checkpoint to simulate the machine dying there (the harness does this).

    The run being executed stops at once and writes nothing more, as if the process had died.
    """


class UserExitError(DuroError):
    """A step body or workflow code raised a ``BaseException`` that is not an ``Exception``
    (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``, a ``CancelledError`` nobody asked
    for): it fails that step (retried by the step's ``retries`` like any error) or that run, and
    never stops the worker that executes it.

    Attributes: ``raised`` (the exception's type, module and qualified name), ``where`` (``step
    'NAME'`` or ``workflow 'NAME'``), ``detail`` (its message: a ``SystemExit``'s code, say)."""

    def __init__(self, raised: str, where: str, detail: str = "") -> None:
        self.raised, self.where, self.detail = raised, where, detail
        said = f"{raised}({detail})" if detail else raised
        super().__init__(
            f"{where} raised {said}: duro fails the step or run instead of stopping the worker; "
            f"raise an Exception to fail it, or return"
        )

    def __reduce__(self) -> Any:
        return (type(self), (self.raised, self.where, self.detail))


def user_exit(err: BaseException, where: str) -> BaseException:
    """What ``err``, raised by user code (``where``), stands for: itself if it is an ``Exception``
    or duro's own (a cancel, a lost run, the engine stopping); else a :class:`UserExitError`.

    A ``CancelledError`` is duro's own when the task running the code is being cancelled (an engine
    shutdown cancels it: ``Task.cancelling()``); one the code raised by itself is not, nor one raised
    in a sync step's thread, where no event loop runs."""
    if isinstance(err, Exception):
        return err
    import asyncio  # loaded already: user code runs on it (here, so that ``import duro`` loads none of it)

    if isinstance(err, asyncio.CancelledError):
        try:
            task = asyncio.current_task()
        except RuntimeError:  # a sync step's thread: no event loop there cancels anything
            task = None
        else:
            if task is None or task.cancelling():
                return err
    elif isinstance(err, DuroInterrupt):
        return err
    kind = type(err)
    return UserExitError(f"{kind.__module__}.{kind.__qualname__}", where, " ".join(str(err).split())[:200])


def raise_user_exit(err: BaseException, where: str) -> NoReturn:
    """Raise ``err``, caught around user code (a step's body, a run's workflow code: ``where`` names
    it), again: a ``BaseException`` that is not duro's own comes out as a :class:`UserExitError`
    (a ``SystemExit`` in a step fails the step, never the worker)."""
    if (failure := user_exit(err, where)) is err:
        raise err
    raise failure from None


def retried(err: Exception) -> bool:
    """Whether a step's ``retries`` apply to ``err``: the code's errors, its ``SystemExit`` and the
    like included; not duro's own refusals (a result that cannot be stored, say)."""
    return not isinstance(err, DuroError) or isinstance(err, UserExitError)


CALL_SEQ = "_duro_call_seq"  # the attribute that marks an error raised by a durable call


def raised_at(err: E, seq: int) -> E:
    """``err``, marked as raised by the run's durable call at ``seq``: a run that fails with it (or
    with an error it caused) is retried from that call (see ``duro.rules._resume``)."""
    with contextlib.suppress(AttributeError, TypeError):  # an error that takes no attribute: unmarked
        setattr(err, CALL_SEQ, seq)
    return err


def call_seq(err: BaseException) -> int | None:
    """The seq of the durable call that raised ``err``, or the error it came from (its cause or
    context, the nearest first); ``None`` when no durable call did (the workflow code raised)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        seq = getattr(current, CALL_SEQ, None)
        if isinstance(seq, int):
            return seq
        current = current.__cause__ or current.__context__
    return None
